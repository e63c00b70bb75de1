//! Storm mode, the pure part (issue 18; design in docs/storm-mode.md): what the sender decides
//! when many alerts go to one person at once. No AWS, no I/O; time is passed in.
//!
//! - [`plan`]: per recipient, a send budget (at most N SMS per window); one claimable alert goes
//!   out alone, several go out as one [`Digest`]; with the budget used up they are held until it
//!   frees, unless holding would cost a deadline.
//! - [`build_digest`]: the digest's text within `max_segments` and its identity ([`DigestId`]),
//!   derived from the member keys so that a retried invocation builds the same digest.
//! - [`sort_edf`], [`Lane`]: earliest deadline first, and the lane an alert belongs in by slack.
//! - [`expected_send_at`], [`late_verdict`]: late is said early.
//! - [`edf_schedule`]: the reference schedule the storm benchmark compares against.
//! - [`AccountSpendExhausted`]: the account's spend limit is the account's failure.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

// `DigestId` lives in `digest_id` so that intent (which records it) does not import storm mode.
pub use super::digest_id::DigestId;
use super::intent::{Intent, IntentRecord, MessageBody};
use super::key::IdempotencyKey;
use super::phone::PhoneNumber;
use super::provider::FailureClass;
use super::reply::ReplyCode;
use super::reply::prompt::digest_prompt;
use super::segments::{SegmentCount, measure};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StormError {
    #[error("storm policy: max_sms_per_window must be at least 1")]
    ZeroBudget,
    #[error("storm policy: the window must be longer than zero")]
    ZeroWindow,
    #[error("storm policy: max_segments must be at least 1")]
    ZeroSegments,
    #[error("a plan covers one recipient; the claimable alerts name several")]
    MixedRecipients,
    #[error("a digest needs at least two distinct members, got {0}")]
    TooFewMembers(usize),
    #[error("send rate must be a finite number of parts per second above zero, got {0}")]
    BadRate(f64),
}

/// Converts a configured duration; capped at a century so adding it to an instant cannot overflow.
fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX).min(chrono::Duration::days(36_500))
}

fn plus(t: DateTime<Utc>, d: chrono::Duration) -> DateTime<Utc> {
    t.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn minus(t: DateTime<Utc>, d: chrono::Duration) -> DateTime<Utc> {
    t.checked_sub_signed(d).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `22:41`: the UTC wall-clock minute on-call reads.
fn hhmm(t: DateTime<Utc>) -> impl fmt::Display {
    t.format("%H:%M")
}

// ---------------------------------------------------------------------------------------------
// 3. Earliest deadline first
// ---------------------------------------------------------------------------------------------

/// Anything that can be ordered earliest deadline first.
pub trait Deadlined {
    fn deadline(&self) -> DateTime<Utc>;
    fn created_at(&self) -> DateTime<Utc>;
    fn key(&self) -> &IdempotencyKey;
}

/// Earliest deadline first; ties by created time, then by key (a total, deterministic order).
pub fn edf_cmp<T: Deadlined>(a: &T, b: &T) -> Ordering {
    (a.deadline(), a.created_at(), a.key()).cmp(&(b.deadline(), b.created_at(), b.key()))
}

/// Sorts a backlog earliest deadline first ([`edf_cmp`]).
pub fn sort_edf<T: Deadlined>(items: &mut [T]) {
    items.sort_by(edf_cmp);
}

impl Deadlined for Intent {
    fn deadline(&self) -> DateTime<Utc> {
        self.deadline
    }
    fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }
    fn key(&self) -> &IdempotencyKey {
        &self.key
    }
}

impl Deadlined for IntentRecord {
    fn deadline(&self) -> DateTime<Utc> {
        self.intent.deadline
    }
    fn created_at(&self) -> DateTime<Utc> {
        self.intent.created_at
    }
    fn key(&self) -> &IdempotencyKey {
        &self.intent.key
    }
}

/// Below this slack an alert is urgent. Five minutes: a 2-minute alert is urgent from intake on;
/// a 15-minute alert becomes urgent once the backlog ahead of it would take 10 minutes; and it
/// leaves room for one sender invocation (≤ 1 min), the SNS hand-off and a carrier's usual
/// delivery time before the deadline.
pub const URGENT_SLACK: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// Drained before the normal lane.
    Urgent,
    Normal,
}

/// deadline − now − expected wait; negative when the alert is already expected to be late.
pub fn slack(now: DateTime<Utc>, deadline: DateTime<Utc>, expected_wait: Duration) -> chrono::Duration {
    deadline.signed_duration_since(now) - chrono_of(expected_wait)
}

impl Lane {
    /// [`Lane::Urgent`] when the slack is below [`URGENT_SLACK`].
    pub fn of(now: DateTime<Utc>, deadline: DateTime<Utc>, expected_wait: Duration) -> Lane {
        if slack(now, deadline, expected_wait) < chrono_of(URGENT_SLACK) { Lane::Urgent } else { Lane::Normal }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Late is said early
// ---------------------------------------------------------------------------------------------

/// A send rate in SMS parts per second (the account's, or one sender instance's share of it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SendRate(f64);

impl SendRate {
    pub fn per_second(parts_per_s: f64) -> Result<Self, StormError> {
        if parts_per_s.is_finite() && parts_per_s > 0.0 {
            Ok(Self(parts_per_s))
        } else {
            Err(StormError::BadRate(parts_per_s))
        }
    }

    pub fn parts_per_second(self) -> f64 {
        self.0
    }

    /// How long `parts` parts take at this rate, rounded up to the millisecond.
    pub fn time_for(self, parts: u64) -> chrono::Duration {
        let ms = (parts as f64 * 1000.0 / self.0).ceil();
        // Capped at a century (as configured durations are): no overflow, whatever the input.
        chrono::Duration::milliseconds(ms.min(3_153_600_000_000.0) as i64)
    }
}

/// When an alert with `parts_ahead` SMS parts queued before it is expected to go out.
pub fn expected_send_at(now: DateTime<Utc>, parts_ahead: u64, rate: SendRate) -> DateTime<Utc> {
    plus(now, rate.time_for(parts_ahead))
}

/// Why an alert is escalated before its deadline: the backlog will not let it out in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateReason {
    pub expected: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
}

impl fmt::Display for LateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SMS backlog: expected {}, deadline {} (UTC)", hhmm(self.expected), hhmm(self.deadline))
    }
}

/// `Some` when the alert is expected to go out after its deadline: escalate now, keep it eligible.
/// Going out exactly at the deadline is on time. An estimate earlier than `now` counts as `now`,
/// so a deadline already passed is late whatever the estimate says.
pub fn late_verdict(
    now: DateTime<Utc>,
    expected_send_at: DateTime<Utc>,
    deadline: DateTime<Utc>,
) -> Option<LateReason> {
    let expected = expected_send_at.max(now);
    (expected > deadline).then_some(LateReason { expected, deadline })
}

// ---------------------------------------------------------------------------------------------
// 1. Per-recipient budget
// ---------------------------------------------------------------------------------------------

/// How storm mode treats one recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestPolicy {
    /// Off: every alert is its own SMS, as before storm mode (no budget, no digest).
    pub enabled: bool,
    pub max_sms_per_window: u32,
    pub window: Duration,
    /// The deployment's `MaxSegments`: a digest's text fits in this many parts.
    pub max_segments: u8,
    /// Whether the sender adds the reply prompt (`TOCSIN_REPLIES`): the digest's text then fits
    /// with the longest (" - Reply 999 to ack all N").
    pub reply_prompt: bool,
}

impl DigestPolicy {
    pub const DEFAULT_MAX_SMS_PER_WINDOW: u32 = 3;
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(5 * 60);

    /// Enabled, with the default budget (3 SMS per 5 minutes) and the deployment's `max_segments`.
    pub fn new(max_segments: u8) -> Result<Self, StormError> {
        let p = Self {
            enabled: true,
            max_sms_per_window: Self::DEFAULT_MAX_SMS_PER_WINDOW,
            window: Self::DEFAULT_WINDOW,
            max_segments,
            reply_prompt: false,
        };
        p.validate()?;
        Ok(p)
    }

    pub fn validate(&self) -> Result<(), StormError> {
        if self.max_sms_per_window == 0 {
            return Err(StormError::ZeroBudget);
        }
        if self.window.is_zero() {
            return Err(StormError::ZeroWindow);
        }
        if self.max_segments == 0 {
            return Err(StormError::ZeroSegments);
        }
        Ok(())
    }
}

/// What is left of a recipient's budget at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Available {
        remaining: u32,
    },
    /// No SMS may go out before `until` (when the oldest counted send leaves the window).
    Exhausted {
        until: DateTime<Utc>,
    },
}

/// The budget at `now`, given the instants of the SMS sent to this recipient. A send counts while
/// `now − window < sent_at` (a send stamped in the future by clock skew counts too).
pub fn budget(now: DateTime<Utc>, sent: &[DateTime<Utc>], policy: &DigestPolicy) -> Budget {
    let window = chrono_of(policy.window);
    let start = minus(now, window);
    let mut counted: Vec<DateTime<Utc>> = sent.iter().copied().filter(|t| *t > start).collect();
    counted.sort();
    let used = u32::try_from(counted.len()).unwrap_or(u32::MAX);
    let remaining = policy.max_sms_per_window.saturating_sub(used);
    if remaining > 0 {
        return Budget::Available { remaining };
    }
    // Below the cap again once the (used − max + 1) oldest sends have left the window.
    let index = usize::try_from(used - policy.max_sms_per_window.min(used)).unwrap_or(usize::MAX);
    match counted.get(index) {
        Some(t) => Budget::Exhausted { until: plus(*t, window) },
        // Only with a zero budget, which `validate` refuses: never frees.
        None => Budget::Exhausted { until: DateTime::<Utc>::MAX_UTC },
    }
}

/// An exhausted budget is not held against an alert whose deadline falls before it frees plus
/// this margin (time for the sender to run and the SMS to go out): the budget protects the phone,
/// the deadline is the contract. Such an alert goes out at once, with everything else claimable.
pub const BUDGET_DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// When storm mode would hold every one of a recipient's alerts with these `deadlines` (the
/// budget is used up and none falls before it frees + [`BUDGET_DEADLINE_MARGIN`]): until when.
/// `None`: something goes out now (storm mode off, budget left, or a deadline at stake). What
/// [`plan`] decides for the budget, asked before claiming (the sender skips pulling a backlog it
/// would only hand back).
pub fn holds_all_until(
    now: DateTime<Utc>,
    sent: &[DateTime<Utc>],
    deadlines: impl IntoIterator<Item = DateTime<Utc>>,
    policy: &DigestPolicy,
) -> Option<DateTime<Utc>> {
    if !policy.enabled {
        return None;
    }
    let Budget::Exhausted { until } = budget(now, sent, policy) else { return None };
    let latest_hold = plus(until, chrono_of(BUDGET_DEADLINE_MARGIN));
    (!deadlines.into_iter().any(|d| d < latest_hold)).then_some(until)
}

/// One claimable alert of the recipient: its claim is held by this invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingAlert {
    pub key: IdempotencyKey,
    pub recipient: PhoneNumber,
    pub deadline: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// The rendered alert text (its summary goes into a digest).
    pub body: MessageBody,
}

impl PendingAlert {
    pub fn from_intent(intent: &Intent) -> Self {
        Self {
            key: intent.key.clone(),
            recipient: intent.recipient.clone(),
            deadline: intent.deadline,
            created_at: intent.created_at,
            body: intent.body.clone(),
        }
    }
}

impl Deadlined for PendingAlert {
    fn deadline(&self) -> DateTime<Utc> {
        self.deadline
    }
    fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }
    fn key(&self) -> &IdempotencyKey {
        &self.key
    }
}

/// One SMS the plan sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Send {
    /// The alert's own text, as without storm mode.
    Alone {
        key: IdempotencyKey,
    },
    Digest(Digest),
}

impl Send {
    /// The alerts this SMS covers.
    pub fn keys(&self) -> Vec<&IdempotencyKey> {
        match self {
            Send::Alone { key } => vec![key],
            Send::Digest(d) => d.members.iter().collect(),
        }
    }
}

/// A digest holds at most this many members: its record and one write per member fit in one
/// DynamoDB transaction (100 items), so the members are marked all-or-nothing.
pub const MAX_DIGEST_MEMBERS: usize = 99;

/// At most this many of a recipient's pending alerts are pulled from their backlog (beyond the
/// sender batch's own) into one digest; with the batch's, a digest still holds at most
/// [`MAX_DIGEST_MEMBERS`]. Each pulled alert costs the sender one conditional claim.
pub const BACKLOG_PULL: usize = MAX_DIGEST_MEMBERS - 1;

/// Why an alert is left pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// The recipient's budget is used up until this instant.
    BudgetExhausted { until: DateTime<Utc> },
    /// The digest already has [`MAX_DIGEST_MEMBERS`] members with earlier deadlines.
    DigestFull,
}

/// An alert left pending (its claim released unsent) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub key: IdempotencyKey,
    pub reason: HoldReason,
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::BudgetExhausted { until } => {
                write!(f, "recipient's SMS budget used up until {} (UTC)", hhmm(*until))
            }
            HoldReason::DigestFull => write!(f, "digest full ({MAX_DIGEST_MEMBERS} members with earlier deadlines)"),
        }
    }
}

/// What to do with one recipient's claimable alerts. Every distinct claimable alert is in exactly
/// one of `sends` (in one SMS), `held` or `stale`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Storm mode on: at most one SMS. Off: one per alert, earliest deadline first.
    pub sends: Vec<Send>,
    pub held: Vec<Held>,
    /// Past their deadline: not sent, escalated (invariant 8), as without storm mode.
    pub stale: Vec<IdempotencyKey>,
    /// The SMS goes out although the budget is used up: holding would have cost a deadline.
    pub over_budget: bool,
}

impl Plan {
    /// Every alert the plan mentions, with how often (each must be exactly once).
    pub fn mentions(&self) -> BTreeMap<&IdempotencyKey, usize> {
        let mut m = BTreeMap::new();
        let keys =
            self.sends.iter().flat_map(Send::keys).chain(self.held.iter().map(|h| &h.key)).chain(self.stale.iter());
        for k in keys {
            *m.entry(k).or_insert(0) += 1;
        }
        m
    }
}

/// Decides, at `now`, what happens to one recipient's claimable alerts given the instants of the
/// SMS already sent to them. Duplicate keys (a message delivered twice) count once. Storm mode on:
/// one alert and budget left → alone; two or more → one digest of all of them (the
/// [`MAX_DIGEST_MEMBERS`] earliest deadlines; the rest held); budget used up →
/// all held until it frees, unless one's deadline falls before that (+ [`BUDGET_DEADLINE_MARGIN`]):
/// then the same single SMS goes out over budget.
pub fn plan(
    now: DateTime<Utc>,
    sent: &[DateTime<Utc>],
    claimable: &[PendingAlert],
    policy: &DigestPolicy,
) -> Result<Plan, StormError> {
    policy.validate()?;
    if let Some(first) = claimable.first()
        && claimable.iter().any(|a| a.recipient != first.recipient)
    {
        return Err(StormError::MixedRecipients);
    }
    let mut seen = BTreeSet::new();
    let mut out = Plan::default();
    let mut live: Vec<&PendingAlert> = Vec::new();
    for a in claimable {
        if !seen.insert(&a.key) {
            continue;
        }
        if a.deadline <= now { out.stale.push(a.key.clone()) } else { live.push(a) }
    }
    live.sort_by(|a, b| edf_cmp(*a, *b));
    if !policy.enabled {
        out.sends = live.iter().map(|a| Send::Alone { key: a.key.clone() }).collect();
        return Ok(out);
    }
    if let Some(until) = holds_all_until(now, sent, live.iter().map(|a| a.deadline), policy) {
        let reason = HoldReason::BudgetExhausted { until };
        out.held = live.iter().map(|a| Held { key: a.key.clone(), reason }).collect();
        return Ok(out);
    }
    out.over_budget = !live.is_empty() && matches!(budget(now, sent, policy), Budget::Exhausted { .. });
    if live.len() > MAX_DIGEST_MEMBERS {
        let rest = live.split_off(MAX_DIGEST_MEMBERS);
        out.held = rest.iter().map(|a| Held { key: a.key.clone(), reason: HoldReason::DigestFull }).collect();
    }
    match live.as_slice() {
        [] => {}
        [one] => out.sends.push(Send::Alone { key: one.key.clone() }),
        _ => {
            let members: Vec<PendingAlert> = live.into_iter().cloned().collect();
            out.sends.push(Send::Digest(build_digest(&members, policy.max_segments, policy.reply_prompt)?));
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// 2. The digest
// ---------------------------------------------------------------------------------------------

/// One SMS covering several alerts of one recipient.
#[derive(Debug, Clone, PartialEq)]
pub struct Digest {
    pub id: DigestId,
    /// Earliest deadline first; distinct.
    pub members: Vec<IdempotencyKey>,
    pub text: MessageBody,
    pub segments: SegmentCount,
    /// How many members have a summary in the text (the first ones); the rest are "+N more".
    pub listed: usize,
}

/// A member's summary never exceeds this many characters (so two or three fit in one part).
pub const SUMMARY_MAX_CHARS: usize = 48;
/// A summary is shortened down to this many characters to fit; below it the member is "+N more".
pub const SUMMARY_MIN_CHARS: usize = 12;
const ELLIPSIS: &str = "...";

/// The alert text as a digest line: whitespace collapsed, a leading `ALERT:` label dropped (the
/// digest already says these are alerts), cut after the first sentence when there is more, and
/// cut at a word boundary with `...` if still longer than `max_chars` (ASCII dots: a `…` is not
/// GSM-7 and would turn the whole SMS into UCS-2, halving its room).
pub fn summary(body: &str, max_chars: usize) -> String {
    let text = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.strip_prefix("ALERT:").map_or(text.as_str(), str::trim_start);
    let first = text.find(". ").map_or(text, |i| &text[..i]);
    let first = if first.trim().is_empty() { text } else { first };
    let first = first.strip_suffix('.').unwrap_or(first);
    if first.chars().count() <= max_chars {
        return first.to_owned();
    }
    if max_chars <= ELLIPSIS.len() {
        return first.chars().take(max_chars).collect();
    }
    let room = max_chars - ELLIPSIS.len();
    // One character more than fits: a space there means the cut falls between two words.
    let probe: String = first.chars().take(room + 1).collect();
    // Back to the last space when that keeps at least half: no word cut in two if avoidable.
    let cut: String = match probe.rfind(' ') {
        Some(i) if probe[..i].chars().count() >= room / 2 => probe[..i].to_owned(),
        _ => first.chars().take(room).collect(),
    };
    format!("{}{ELLIPSIS}", cut.trim_end())
}

fn digest_text(count: usize, listed: &[String], more: usize, reference: &str) -> String {
    if listed.is_empty() {
        return format!("tocsin: {count} alerts (ref {reference})");
    }
    let mut t = format!("tocsin: {count} alerts. {}", listed.join("; "));
    if more > 0 {
        t.push_str(&format!("; +{more} more"));
    }
    t.push_str(&format!(" (ref {reference})"));
    t
}

/// Builds the digest of `members` (distinct keys, at least two) within `max_segments` parts:
/// `tocsin: 7 alerts. orders-api down since 22:00; db-1 disk 95%; +5 more (ref 3f9a0c12)`.
/// Members are listed earliest deadline first, each by its [`summary`], for as long as the text
/// fits (a summary is shortened to fit, down to [`SUMMARY_MIN_CHARS`]); the rest are counted.
pub fn build_digest(members: &[PendingAlert], max_segments: u8, reply_prompt: bool) -> Result<Digest, StormError> {
    if max_segments == 0 {
        return Err(StormError::ZeroSegments);
    }
    let mut seen = BTreeSet::new();
    let mut ordered: Vec<&PendingAlert> = members.iter().filter(|m| seen.insert(&m.key)).collect();
    if ordered.len() < 2 {
        return Err(StormError::TooFewMembers(ordered.len()));
    }
    ordered.sort_by(|a, b| edf_cmp(*a, *b));
    let id = DigestId::derive(ordered.iter().map(|m| &m.key));
    let count = ordered.len();
    // Room for the prompt the sender adds: the parts counted are the SMS's as sent.
    let room = if reply_prompt { digest_prompt(ReplyCode::HIGHEST, count) } else { String::new() };
    let fits = |t: &str| measure(&format!("{t}{room}")).segments <= u32::from(max_segments);
    let mut listed: Vec<String> = Vec::new();
    for m in &ordered {
        let more = count - listed.len() - 1;
        let longest = summary(m.body.expose(), SUMMARY_MAX_CHARS).chars().count();
        let found = (SUMMARY_MIN_CHARS.min(longest)..=longest).rev().find_map(|n| {
            let s = summary(m.body.expose(), n);
            let mut trial = listed.clone();
            trial.push(s.clone());
            fits(&digest_text(count, &trial, more, id.short())).then_some(s)
        });
        match found {
            Some(s) if !s.is_empty() => listed.push(s),
            _ => break,
        }
    }
    let text = digest_text(count, &listed, count - listed.len(), id.short());
    Ok(Digest {
        segments: measure(&format!("{text}{room}")),
        id,
        members: ordered.iter().map(|m| m.key.clone()).collect(),
        text: MessageBody::new(text),
        listed: listed.len(),
    })
}

// ---------------------------------------------------------------------------------------------
// 5. The EDF reference schedule
// ---------------------------------------------------------------------------------------------

/// One alert of the benchmark's workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub arrival: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
    pub parts: u32,
    pub recipient: u32,
}

/// Whether the reference schedule may merge a recipient's waiting jobs into one digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The plain EDF schedule of the same work: one SMS per job.
    None,
    /// When a job is picked, every waiting job of its recipient goes in the same SMS, costing
    /// min(their parts, `max_segments`) parts (no budget: a relaxation of storm mode).
    Digests { max_segments: u8 },
}

/// The outcome of a reference schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Per job (same index as the input): when its SMS's last part went out; `None` when the job
    /// was still waiting at its deadline and so was not sent (stale, as tocsin does).
    pub completed: Vec<Option<DateTime<Utc>>>,
    /// Jobs not completed by their deadline (completed late, or never sent).
    pub misses: usize,
    pub sms: usize,
    pub parts: u64,
}

/// Simulates one sender at `rate`, earliest deadline first, non-preemptive per SMS (what SNS
/// does: a publish is not interrupted; the next choice is made when the previous SMS has gone
/// out). A job whose deadline has passed when it would start is not sent (tocsin's stale rule)
/// and counts as a miss; time is spent only on jobs that can still make it. Ties: deadline,
/// then arrival, then input index. Deterministic; O(n log n).
///
/// This is the "earliest-deadline-first schedule of the same work": a reference, not a
/// proven minimum — with non-preemption and overload no polynomial schedule minimises misses in
/// general — but EDF meets every deadline whenever any preemptive schedule does.
pub fn edf_schedule(jobs: &[Job], rate: SendRate, merge: Merge) -> Schedule {
    type Ready = (DateTime<Utc>, DateTime<Utc>, usize);
    let n = jobs.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (jobs[i].arrival, i));
    let mut ready: BTreeSet<Ready> = BTreeSet::new();
    let mut by_recipient: BTreeMap<u32, BTreeSet<Ready>> = BTreeMap::new();
    let mut out = Schedule { completed: vec![None; n], misses: 0, sms: 0, parts: 0 };
    let mut next = 0;
    let mut t = DateTime::<Utc>::MIN_UTC;
    loop {
        if ready.is_empty() {
            match order.get(next) {
                Some(&i) => t = t.max(jobs[i].arrival),
                None => break,
            }
        }
        while let Some(&i) = order.get(next).filter(|&&i| jobs[i].arrival <= t) {
            let r = (jobs[i].deadline, jobs[i].arrival, i);
            ready.insert(r);
            by_recipient.entry(jobs[i].recipient).or_default().insert(r);
            next += 1;
        }
        let Some(head) = ready.pop_first() else { continue };
        let head_recipient = jobs[head.2].recipient;
        let mut taken = vec![head];
        if let Merge::Digests { .. } = merge
            && let Some(set) = by_recipient.remove(&head_recipient)
        {
            taken.extend(set.into_iter().filter(|r| *r != head));
            for r in &taken {
                ready.remove(r);
            }
        } else if let Some(set) = by_recipient.get_mut(&head_recipient) {
            set.remove(&head);
        }
        let (sendable, stale): (Vec<Ready>, Vec<Ready>) = taken.into_iter().partition(|r| r.0 > t);
        out.misses += stale.len();
        if sendable.is_empty() {
            continue;
        }
        let sum: u64 = sendable.iter().map(|r| u64::from(jobs[r.2].parts)).sum();
        let parts = match merge {
            Merge::Digests { max_segments } if sendable.len() > 1 => sum.min(u64::from(max_segments)),
            _ => sum,
        };
        t = plus(t, rate.time_for(parts));
        out.sms += 1;
        out.parts += parts;
        for r in sendable {
            out.completed[r.2] = Some(t);
            if t > r.0 {
                out.misses += 1;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 6. Spend exhaustion
// ---------------------------------------------------------------------------------------------

/// The account's SMS spend limit is reached: SNS sends no SMS for anyone. The account's failure,
/// never the recipient's: no number is suppressed for it; the affected alerts escalate at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountSpendExhausted {
    pub since: DateTime<Utc>,
}

impl AccountSpendExhausted {
    pub const REASON: &'static str = "SMS spend limit reached for the account: not the recipient's fault";

    /// From a classified delivery failure observed at `at`; `None` unless it is the account limit.
    pub fn from_failure(class: FailureClass, at: DateTime<Utc>) -> Option<Self> {
        (class == FailureClass::AccountLimit).then_some(Self { since: at })
    }

    /// The one line on-call reads in the escalation message.
    pub fn escalation_reason(&self) -> String {
        format!(
            "{} (since {} UTC); SNS sends no SMS until the limit is raised: reach them another way",
            Self::REASON,
            self.since.format("%Y-%m-%d %H:%M")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::template::TemplateRef;
    use proptest::prelude::*;
    use sha2::{Digest as _, Sha256};

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T22:00:00Z").map(|d| d.with_timezone(&Utc)).expect("instant")
    }

    fn secs(s: i64) -> chrono::Duration {
        chrono::Duration::seconds(s)
    }

    fn mins(m: i64) -> chrono::Duration {
        chrono::Duration::minutes(m)
    }

    fn key(i: usize) -> IdempotencyKey {
        IdempotencyKey::derive(
            &crate::domain::producer::ProducerName::parse("monitoring").expect("producer"),
            &format!("evt-{i}"),
            &TemplateRef { name: "service_down".into(), version: 1 },
        )
    }

    fn phone() -> PhoneNumber {
        PhoneNumber::parse("+14155550100").expect("phone")
    }

    fn alert(i: usize, deadline_min: i64, body: &str) -> PendingAlert {
        PendingAlert {
            key: key(i),
            recipient: phone(),
            deadline: t0() + mins(deadline_min),
            created_at: t0(),
            body: MessageBody::new(body.into()),
        }
    }

    fn policy() -> DigestPolicy {
        DigestPolicy::new(1).expect("policy")
    }

    // --- policy and budget ---

    #[test]
    fn the_default_policy_is_three_sms_per_five_minutes() {
        let p = policy();
        assert_eq!((p.enabled, p.max_sms_per_window, p.window, p.max_segments), (true, 3, Duration::from_secs(300), 1));
    }

    #[test]
    fn a_policy_that_could_never_send_is_refused() {
        assert_eq!(DigestPolicy::new(0), Err(StormError::ZeroSegments));
        let mut p = policy();
        p.max_sms_per_window = 0;
        assert_eq!(plan(t0(), &[], &[alert(1, 15, "x")], &p), Err(StormError::ZeroBudget));
        p.max_sms_per_window = 3;
        p.window = Duration::ZERO;
        assert_eq!(p.validate(), Err(StormError::ZeroWindow));
    }

    #[test]
    fn sends_older_than_the_window_do_not_count() {
        let sent = [t0() - mins(6), t0() - mins(5), t0() - mins(4)];
        assert_eq!(budget(t0(), &sent, &policy()), Budget::Available { remaining: 2 });
    }

    #[test]
    fn an_exhausted_budget_frees_when_the_oldest_counted_send_leaves_the_window() {
        let sent = [t0() - secs(10), t0() - mins(4), t0() - mins(2)];
        assert_eq!(budget(t0(), &sent, &policy()), Budget::Exhausted { until: t0() + mins(1) });
        // Five sends in the window (over the cap by two): three must leave before one may go.
        let sent = [t0() - mins(1), t0() - mins(2), t0() - mins(3), t0() - mins(4), t0() - secs(1)];
        assert_eq!(budget(t0(), &sent, &policy()), Budget::Exhausted { until: t0() + mins(3) });
    }

    // --- plan ---

    #[test]
    fn one_alert_with_budget_left_goes_alone() {
        let p = plan(t0(), &[t0() - mins(1)], &[alert(1, 15, "ALERT: a is down")], &policy()).expect("plan");
        assert_eq!(p.sends, vec![Send::Alone { key: key(1) }]);
        assert!(p.held.is_empty() && p.stale.is_empty() && !p.over_budget);
    }

    #[test]
    fn several_claimable_at_once_go_as_one_digest_even_with_budget_left() {
        let alerts = [alert(1, 15, "a down"), alert(2, 15, "b down")];
        let p = plan(t0(), &[], &alerts, &policy()).expect("plan");
        let [Send::Digest(d)] = p.sends.as_slice() else { panic!("one digest expected: {p:?}") };
        assert_eq!(d.members.len(), 2);
    }

    #[test]
    fn with_the_budget_used_up_alerts_are_held_until_it_frees() {
        let sent = [t0() - mins(4), t0() - mins(3), t0() - mins(2)];
        let p = plan(t0(), &sent, &[alert(1, 60, "a"), alert(2, 60, "b")], &policy()).expect("plan");
        assert!(p.sends.is_empty());
        let reason = HoldReason::BudgetExhausted { until: t0() + mins(1) };
        assert_eq!(p.held, vec![Held { key: key(1), reason }, Held { key: key(2), reason }]);
        assert_eq!(reason.to_string(), "recipient's SMS budget used up until 22:01 (UTC)");
    }

    #[test]
    fn a_deadline_before_the_budget_frees_sends_everything_claimable_over_budget() {
        let sent = [t0() - mins(1), t0() - mins(1), t0() - mins(1)];
        // The budget frees at 22:04; alert 1 is due at 22:02.
        let p = plan(t0(), &sent, &[alert(1, 2, "urgent"), alert(2, 60, "later")], &policy()).expect("plan");
        assert!(p.over_budget);
        assert!(p.held.is_empty());
        let [Send::Digest(d)] = p.sends.as_slice() else { panic!("one digest expected: {p:?}") };
        assert_eq!(d.members, vec![key(1), key(2)]);
    }

    #[test]
    fn whether_everything_would_be_held_is_known_from_the_deadlines_alone() {
        let sent = [t0() - mins(1), t0() - mins(1), t0() - mins(1)];
        let deadline = |m: i64| t0() + mins(m);
        // The budget frees at 22:04: a deadline at 22:02 is at stake, none at 22:30 is.
        assert_eq!(holds_all_until(t0(), &sent, [deadline(30), deadline(60)], &policy()), Some(t0() + mins(4)));
        assert_eq!(holds_all_until(t0(), &sent, [deadline(2), deadline(60)], &policy()), None);
        assert_eq!(holds_all_until(t0(), &sent[..2], [deadline(60)], &policy()), None, "budget left");
        let off = DigestPolicy { enabled: false, ..policy() };
        assert_eq!(holds_all_until(t0(), &sent, [deadline(60)], &off), None, "storm mode off holds nothing");
        // The same verdict as the plan's.
        let p = plan(t0(), &sent, &[alert(1, 30, "a"), alert(2, 60, "b")], &policy()).expect("plan");
        assert!(p.sends.is_empty() && p.held.len() == 2);
    }

    #[test]
    fn a_digest_takes_the_earliest_99_and_holds_the_rest_as_digest_full() {
        let alerts: Vec<PendingAlert> = (0..101).map(|i| alert(i, 10 + i as i64, "x is down")).collect();
        let p = plan(t0(), &[], &alerts, &policy()).expect("plan");
        let [Send::Digest(d)] = p.sends.as_slice() else { panic!("one digest expected") };
        assert_eq!(d.members, (0..99).map(key).collect::<Vec<_>>());
        assert_eq!(
            p.held,
            vec![
                Held { key: key(99), reason: HoldReason::DigestFull },
                Held { key: key(100), reason: HoldReason::DigestFull }
            ]
        );
    }

    #[test]
    fn alerts_past_their_deadline_are_stale_never_sent_or_digested() {
        let p = plan(t0(), &[], &[alert(1, 0, "gone"), alert(2, 15, "live")], &policy()).expect("plan");
        assert_eq!(p.stale, vec![key(1)]);
        assert_eq!(p.sends, vec![Send::Alone { key: key(2) }]);
    }

    #[test]
    fn the_same_alert_delivered_twice_is_planned_once() {
        let a = alert(1, 15, "a");
        let p = plan(t0(), &[], &[a.clone(), a], &policy()).expect("plan");
        assert_eq!(p.sends, vec![Send::Alone { key: key(1) }]);
    }

    #[test]
    fn alerts_of_two_recipients_are_never_planned_together() {
        let mut b = alert(2, 15, "b");
        b.recipient = PhoneNumber::parse("+14155550101").expect("phone");
        assert_eq!(plan(t0(), &[], &[alert(1, 15, "a"), b], &policy()), Err(StormError::MixedRecipients));
    }

    #[test]
    fn storm_mode_off_sends_each_alert_alone_earliest_deadline_first_ignoring_the_budget() {
        let mut p = policy();
        p.enabled = false;
        let sent = [t0(), t0(), t0()];
        let plan = plan(t0(), &sent, &[alert(1, 30, "a"), alert(2, 5, "b")], &p).expect("plan");
        assert_eq!(plan.sends, vec![Send::Alone { key: key(2) }, Send::Alone { key: key(1) }]);
    }

    // --- digest ---

    #[test]
    fn with_replies_on_a_digest_leaves_room_for_its_longest_prompt_and_counts_it() {
        let alerts: Vec<PendingAlert> = (0..7)
            .map(|n| alert(n, 60, &format!("ALERT: svc-{n} is down since 21:5{n}. Runbook: https://wiki/y")))
            .collect();
        let plain = build_digest(&alerts, 1, false).expect("digest");
        let prompted = build_digest(&alerts, 1, true).expect("digest");
        let room = digest_prompt(ReplyCode::HIGHEST, 7);
        assert!(measure(&format!("{}{room}", plain.text.expose())).segments > 1, "the plain digest fills its part");
        let sent = format!("{}{room}", prompted.text.expose());
        assert_eq!(measure(&sent).segments, 1, "{sent:?}");
        assert_eq!(prompted.segments, measure(&sent), "the parts counted are the SMS's with its prompt");
        assert_eq!(prompted.id, plain.id, "the same members: the same digest");
    }

    #[test]
    fn a_digest_lists_earliest_deadlines_first_then_counts_the_rest() {
        let alerts: Vec<PendingAlert> = (0..7)
            .map(|i| match i {
                0 => alert(0, 30, "ALERT: db-1 volume / is 95% full."),
                1 => alert(1, 10, "ALERT: orders-api is down since 22:00. Runbook: https://wiki/x"),
                n => alert(n, 60, &format!("ALERT: svc-{n} is down since 21:5{n}. Runbook: https://wiki/y")),
            })
            .collect();
        let d = build_digest(&alerts, 1, false).expect("digest");
        let text = d.text.expose();
        assert!(
            text.starts_with("tocsin: 7 alerts. orders-api is down since 22:00; db-1 volume / is 95% full; "),
            "{text}"
        );
        assert!(text.ends_with(&format!("; +{} more (ref {})", 7 - d.listed, d.id.short())), "{text}");
        assert_eq!(d.segments.segments, 1);
        assert_eq!((d.members[0].clone(), d.members[1].clone()), (key(1), key(0)));
    }

    #[test]
    fn the_digest_id_depends_on_the_members_not_their_order() {
        let a = [alert(1, 15, "a"), alert(2, 20, "b"), alert(3, 25, "c")];
        let b = [a[2].clone(), a[0].clone(), a[1].clone()];
        assert_eq!(build_digest(&a, 1, false).expect("a").id, build_digest(&b, 1, false).expect("b").id);
        assert_ne!(build_digest(&a, 1, false).expect("a").id, build_digest(&a[..2], 1, false).expect("a2").id);
    }

    #[test]
    fn the_digest_id_matches_its_documented_layout() {
        let (k1, k2) = (key(1), key(2));
        let (lo, hi) = if k1 < k2 { (&k1, &k2) } else { (&k2, &k1) };
        let mut bytes = b"tocsin/digest/v1\0".to_vec();
        bytes.extend(lo.as_str().as_bytes());
        bytes.extend(hi.as_str().as_bytes());
        assert_eq!(DigestId::derive([&k2, &k1]).as_str(), hex::encode(Sha256::digest(&bytes)));
    }

    #[test]
    fn a_digest_needs_two_distinct_members() {
        assert_eq!(build_digest(&[alert(1, 15, "a")], 1, false), Err(StormError::TooFewMembers(1)));
        assert_eq!(build_digest(&[alert(1, 15, "a"), alert(1, 15, "a")], 1, false), Err(StormError::TooFewMembers(1)));
    }

    #[test]
    fn a_summary_keeps_the_first_sentence_and_cuts_long_text_at_a_word() {
        assert_eq!(summary("ALERT: orders-api is down since 22:00. Runbook: x", 48), "orders-api is down since 22:00");
        assert_eq!(summary("payment   run 7 failed", 48), "payment run 7 failed");
        assert_eq!(summary("one two three four five six", 16), "one two three...");
        assert_eq!(summary("one two three four five six", 15), "one two...");
        assert_eq!(summary("abcdefghijklmnopqrstuvwxyz", 10), "abcdefg...");
        assert_eq!(summary("abcdef", 2), "ab");
        assert_eq!(summary(". starts with a stop", 48), ". starts with a stop");
    }

    #[test]
    fn a_non_gsm_member_text_is_counted_as_ucs2_and_still_fits() {
        let alerts = [alert(1, 15, "zażółć gęślą jaźń on db-1"), alert(2, 15, "b is down"), alert(3, 16, "c is down")];
        let d = build_digest(&alerts, 1, false).expect("digest");
        assert_eq!(d.segments.segments, 1, "{}", d.text.expose());
        assert!(d.listed >= 1);
    }

    // --- EDF and lanes ---

    #[test]
    fn a_backlog_sorts_by_deadline_then_created_time_then_key() {
        let mut a = alert(1, 10, "a");
        a.created_at = t0() + secs(5);
        let b = alert(2, 10, "b");
        let c = alert(3, 5, "c");
        let mut d = alert(4, 10, "d");
        d.created_at = t0() + secs(5);
        let mut backlog = vec![a.clone(), b.clone(), d.clone(), c.clone()];
        sort_edf(&mut backlog);
        let (first_of_ad, second_of_ad) = if a.key < d.key { (a, d) } else { (d, a) };
        assert_eq!(backlog, vec![c, b, first_of_ad, second_of_ad]);
    }

    #[test]
    fn an_alert_is_urgent_when_its_slack_is_under_five_minutes() {
        let wait = Duration::from_secs(60);
        assert_eq!(Lane::of(t0(), t0() + mins(2), Duration::ZERO), Lane::Urgent);
        assert_eq!(Lane::of(t0(), t0() + mins(6) - secs(1), wait), Lane::Urgent);
        assert_eq!(Lane::of(t0(), t0() + mins(6), wait), Lane::Normal);
        assert_eq!(Lane::of(t0(), t0() + mins(15), Duration::from_secs(11 * 60)), Lane::Urgent);
    }

    // --- late is said early ---

    #[test]
    fn the_expected_send_time_is_the_work_ahead_over_the_rate() {
        let rate = SendRate::per_second(20.0).expect("rate");
        assert_eq!(expected_send_at(t0(), 0, rate), t0());
        assert_eq!(expected_send_at(t0(), 4_000, rate), t0() + secs(200));
        assert_eq!(
            expected_send_at(t0(), 1, SendRate::per_second(3.0).expect("rate")),
            t0() + chrono::Duration::milliseconds(334)
        );
    }

    #[test]
    fn a_send_rate_must_be_positive_and_finite() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(SendRate::per_second(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_alert_expected_after_its_deadline_is_late_and_says_when() {
        let v = late_verdict(t0(), t0() + mins(41), t0() + mins(30)).expect("late");
        assert_eq!(v.to_string(), "SMS backlog: expected 22:41, deadline 22:30 (UTC)");
        assert_eq!(late_verdict(t0(), t0() + mins(30), t0() + mins(30)), None, "exactly on the deadline is on time");
        assert_eq!(late_verdict(t0(), t0() + mins(29), t0() + mins(30)), None);
    }

    // --- EDF reference schedule ---

    fn job(arrival_s: i64, deadline_s: i64, parts: u32, recipient: u32) -> Job {
        Job { arrival: t0() + secs(arrival_s), deadline: t0() + secs(deadline_s), parts, recipient }
    }

    #[test]
    fn edf_sends_the_earliest_deadline_first_and_never_preempts() {
        // At 1 part/s: job 0 (3 parts) starts alone at 0; job 1 (deadline 10) and job 2 (deadline 5)
        // arrive at 1 and wait for it; job 2 goes first.
        let jobs = [job(0, 100, 3, 0), job(1, 10, 2, 1), job(1, 5, 1, 2)];
        let s = edf_schedule(&jobs, SendRate::per_second(1.0).expect("rate"), Merge::None);
        assert_eq!(s.completed, vec![Some(t0() + secs(3)), Some(t0() + secs(6)), Some(t0() + secs(4))]);
        assert_eq!((s.misses, s.sms, s.parts), (0, 3, 6));
    }

    #[test]
    fn edf_counts_late_completions_and_does_not_send_jobs_already_past_their_deadline() {
        let jobs = [job(0, 100, 5, 0), job(0, 4, 1, 1), job(0, 6, 2, 2)];
        // EDF: job 1 done at 1, job 2 done at 3, job 0 done at 8: no miss.
        let s = edf_schedule(&jobs, SendRate::per_second(1.0).expect("rate"), Merge::None);
        assert_eq!(s.misses, 0);
        // Job 1 at deadline 4 waits behind job 0 (5 parts, arrived first, alone): stale at 5.
        let jobs = [job(0, 100, 5, 0), job(1, 4, 1, 1), job(1, 7, 2, 2)];
        let s = edf_schedule(&jobs, SendRate::per_second(1.0).expect("rate"), Merge::None);
        assert_eq!(s.completed, vec![Some(t0() + secs(5)), None, Some(t0() + secs(7))]);
        assert_eq!((s.misses, s.sms), (1, 2));
    }

    #[test]
    fn the_digest_variant_merges_a_recipients_waiting_jobs_into_one_sms() {
        let jobs = [job(0, 100, 1, 9), job(0, 10, 3, 7), job(0, 20, 3, 7), job(0, 30, 2, 7)];
        let s = edf_schedule(&jobs, SendRate::per_second(1.0).expect("rate"), Merge::Digests { max_segments: 2 });
        // Recipient 7's three jobs (deadline 10 first) go together at 2 parts; then recipient 9's.
        assert_eq!(
            s.completed,
            vec![Some(t0() + secs(3)), Some(t0() + secs(2)), Some(t0() + secs(2)), Some(t0() + secs(2))]
        );
        assert_eq!((s.sms, s.parts, s.misses), (2, 3, 0));
        let plain = edf_schedule(&jobs, SendRate::per_second(1.0).expect("rate"), Merge::None);
        assert_eq!((plain.sms, plain.parts), (4, 9));
    }

    // --- spend ---

    #[test]
    fn only_the_account_limit_is_spend_exhaustion_and_its_reason_blames_the_account() {
        assert_eq!(AccountSpendExhausted::from_failure(FailureClass::PermanentRecipient, t0()), None);
        let s = AccountSpendExhausted::from_failure(FailureClass::AccountLimit, t0()).expect("spend");
        assert_eq!(s.since, t0());
        let reason = s.escalation_reason();
        assert!(
            reason.starts_with(
                "SMS spend limit reached for the account: not the recipient's fault (since 2026-11-30 22:00 UTC)"
            ),
            "{reason}"
        );
    }

    // --- properties ---

    fn body() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9 .:/%-]{0,120}",
            "[a-zA-Z0-9 ]{0,40}[{}€\\[\\]]{0,3}[a-z ]{0,40}",
            "[a-z ]{0,30}[ążśłń🚨]{1,5}[a-z ]{0,30}",
        ]
    }

    fn alerts(max: usize) -> impl Strategy<Value = Vec<PendingAlert>> {
        proptest::collection::vec((0usize..60, -5i64..90, 0i64..60, body()), 0..max).prop_map(|v| {
            v.into_iter()
                .map(|(i, dl, created, b)| {
                    let mut a = alert(i, dl, &b);
                    a.created_at = t0() - secs(created);
                    a
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn a_digest_always_fits_counts_right_and_never_repeats_a_member(all in alerts(40), max_segments in 1u8..5) {
            let distinct: BTreeSet<&IdempotencyKey> = all.iter().map(|a| &a.key).collect();
            prop_assume!(distinct.len() >= 2);
            let d = build_digest(&all, max_segments, false).expect("digest");
            prop_assert!(d.segments.segments <= u32::from(max_segments));
            prop_assert_eq!(measure(d.text.expose()), d.segments);
            let n = distinct.len();
            prop_assert!(d.text.expose().starts_with(&format!("tocsin: {n} alerts")), "{}", d.text.expose());
            let more = n - d.listed;
            if d.listed > 0 && more > 0 {
                let tail = format!("; +{more} more (ref {})", d.id.short());
                prop_assert!(d.text.expose().ends_with(&tail), "{}", d.text.expose());
            }
            prop_assert_eq!(d.members.len(), n);
            prop_assert_eq!(d.members.iter().collect::<BTreeSet<_>>(), distinct);
            prop_assert!(d.members.windows(2).all(|w| w[0] != w[1]));
            prop_assert_eq!(d.id.clone(), DigestId::derive(&d.members));
        }

        #[test]
        fn a_summary_never_exceeds_its_length(b in body(), max in 0usize..60) {
            prop_assert!(summary(&b, max).chars().count() <= max);
        }

        #[test]
        fn every_claimable_alert_is_in_exactly_one_plan_entry(
            all in alerts(20),
            sent in proptest::collection::vec(-600i64..0, 0..6),
            enabled in any::<bool>(),
        ) {
            let mut p = policy();
            p.enabled = enabled;
            let sent: Vec<DateTime<Utc>> = sent.into_iter().map(|s| t0() + secs(s)).collect();
            let plan = plan(t0(), &sent, &all, &p).expect("plan");
            let distinct: BTreeSet<&IdempotencyKey> = all.iter().map(|a| &a.key).collect();
            let mentions = plan.mentions();
            prop_assert_eq!(mentions.keys().copied().collect::<BTreeSet<_>>(), distinct);
            prop_assert!(mentions.values().all(|&c| c == 1), "{:?}", mentions);
            if enabled {
                prop_assert!(plan.sends.len() <= 1);
                let exhausted = matches!(budget(t0(), &sent, &p), Budget::Exhausted { .. });
                prop_assert_eq!(plan.over_budget, exhausted && !plan.sends.is_empty());
                for h in &plan.held {
                    let a = all.iter().find(|a| a.key == h.key).expect("held alert");
                    let HoldReason::BudgetExhausted { until } = h.reason else { panic!("only 20 alerts: {h:?}") };
                    prop_assert!(a.deadline >= until + chrono_of(BUDGET_DEADLINE_MARGIN), "held past its deadline");
                }
            }
        }

        #[test]
        fn the_edf_schedule_never_overlaps_sms_and_counts_every_miss(
            raw in proptest::collection::vec((0i64..20, 1i64..120, 1u32..4, 0u32..4), 0..40),
            rate in 1u32..30,
        ) {
            let jobs: Vec<Job> = raw.iter().map(|&(a, d, p, r)| job(a, a + d, p, r)).collect();
            let rate = SendRate::per_second(f64::from(rate)).expect("rate");
            let plain = edf_schedule(&jobs, rate, Merge::None);
            let merged = edf_schedule(&jobs, rate, Merge::Digests { max_segments: 3 });
            for s in [&plain, &merged] {
                let late_or_unsent = jobs.iter().zip(&s.completed).filter(|(j, c)| c.is_none_or(|c| c > j.deadline)).count();
                prop_assert_eq!(s.misses, late_or_unsent);
                for (j, c) in jobs.iter().zip(&s.completed) {
                    if let Some(c) = c { prop_assert!(*c >= j.arrival + rate.time_for(1)); }
                }
            }
            // One server: plain SMS finish at distinct instants at least one SMS's time apart.
            let mut done: Vec<DateTime<Utc>> = plain.completed.iter().flatten().copied().collect();
            done.sort();
            prop_assert!(done.windows(2).all(|w| w[1] - w[0] >= rate.time_for(1)));
            prop_assert_eq!(plain.sms, plain.completed.iter().flatten().count());
            prop_assert!(merged.sms <= jobs.len());
        }
    }
}
