//! Storm mode, simulated (BENCHMARKS.md section 9): a deterministic discrete-event simulation, on
//! a simulated clock in milliseconds, of the sender during an incident storm, with storm mode off
//! and on. The decisions are the domain core's own (`tocsin::domain::storm::plan`, and through it
//! `build_digest`); what is modelled around them is the queue, the sender instances, the send rate
//! and the carrier's delivery time. Compared with `storm::edf_schedule`, the earliest-deadline-first
//! schedule of the same work.
//!
//! The model (`functions/intake/src/lib.rs` and `functions/sender/src/` are what it follows):
//! - intake at each arrival: `ahead` = the send queue's visible messages, exact (the real intake
//!   reads SQS's approximate count at most every 5 s); the wait, a lower bound, `ahead` × 1 part at
//!   the account's rate (storm off) or none (storm on); storm off, late said early when arrival +
//!   wait is past the deadline (counted; the alert stays eligible); with the urgent lane, behind a
//!   backlog (`ahead` ≥ [`URGENT_MIN_BACKLOG`]) and under `URGENT_SLACK` of slack after the wait
//!   (`Lane::of`), a second message on the urgent lane;
//! - one standard SQS queue, taken in enqueue order among the visible messages; a message can be
//!   hidden until an instant (the sender's visibility delay on a held alert); the urgent lane the
//!   same, its messages expiring [`URGENT_RETENTION_MS`] after enqueue;
//! - [`INSTANCES`] sender instances; a free instance takes the next ≤ [`BATCH`] visible messages
//!   (and before them, when the oldest waited ≥ [`URGENT_POLL_AFTER_MS`], ≤ [`URGENT_TAKE`] urgent
//!   ones) and sends at its share of the account's rate (parts serialised: an SMS of p parts takes
//!   p × [`ms_per_part`] of its time; nothing else takes time); a message whose alert is already
//!   claimed, sent or escalated does nothing;
//! - storm off: per message in order (urgent first), already sent → nothing; past its deadline →
//!   stale (escalated, not sent); else the alert alone;
//! - storm on: the messages' alerts claimed first, grouped by recipient, the groups in order of their
//!   earliest deadline; per group, up to `BACKLOG_PULL` of the recipient's pending alerts pulled in
//!   (earliest deadline first, ≤ `MAX_DIGEST_MEMBERS` in all), then `plan` with the instants of the
//!   SMS already sent to that recipient; held alerts of the batch are hidden until the budget
//!   frees, pulled ones released (their own message is still queued); stale ones escalated;
//! - every SMS delivered [`CARRIER_LATENCY_MS`] after its last part leaves.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, TimeZone, Utc};
use tocsin::domain::intent::MessageBody;
use tocsin::domain::segments::measure;
use tocsin::domain::storm::{
    self, BACKLOG_PULL, DigestPolicy, HoldReason, Job, Lane, MAX_DIGEST_MEMBERS, Merge, PendingAlert, Send, SendRate,
};
use tocsin::domain::{IdempotencyKey, PhoneNumber};

use crate::error::{BenchError, Result};

/// The workload's seed unless `TOCSIN_BENCH_STORM_SEED` says otherwise.
pub const DEFAULT_SEED: u64 = 2026;
pub const ALERTS: usize = 2_000;
/// Alerts arrive uniformly within this span.
pub const ARRIVAL_SPAN_MS: i64 = 10_000;
pub const RECIPIENTS: usize = 20;
/// Deadline classes (minutes after arrival) and their share of the alerts, in per cent.
pub const DEADLINES: [(i64, usize); 3] = [(2, 10), (15, 60), (60, 30)];
/// The account's SNS SMS rate, parts per second.
pub const ACCOUNT_PARTS_PER_S: f64 = 20.0;
/// The template's `SenderMaxConcurrency` default.
pub const INSTANCES: usize = 2;
/// The event source mapping's batch size.
pub const BATCH: usize = 10;
/// Last part out → delivered, for every SMS.
pub const CARRIER_LATENCY_MS: i64 = 3_000;
/// The deployment's `MaxSegments` (and the digest-merging reference's).
pub const MAX_SEGMENTS: u8 = 3;
/// Targets (storm mode on).
pub const PARTS_TARGET_RATIO: f64 = 0.10;
pub const P95_TWO_MIN_TARGET_MS: i64 = 15_000;
/// Misses allowed beyond the EDF bound, per cent of the alerts.
pub const MISS_SLACK_PERCENT: usize = 1;

/// Intake's `URGENT_MIN_BACKLOG` (`functions/intake/src/lib.rs`): visible send-queue messages
/// from which an urgent alert also goes on the urgent lane.
pub const URGENT_MIN_BACKLOG: u64 = 10;
/// The sender's `URGENT_POLL_AFTER`: a batch whose oldest message waited this long takes the
/// urgent lane first.
pub const URGENT_POLL_AFTER_MS: i64 = 5_000;
/// The sender's `URGENT_TAKE`: urgent messages taken before one batch.
pub const URGENT_TAKE: usize = 10;
/// `UrgentSendQueue`'s `MessageRetentionPeriod` (template.yaml): an urgent message expires this
/// long after it was sent.
pub const URGENT_RETENTION_MS: i64 = 300_000;
/// The sweep's `requeue_after` default: an alert still queued this long after intake is
/// re-enqueued (not modelled; counted).
pub const REQUEUE_AFTER_MS: i64 = 600_000;

/// One instance's time per SMS part: its share of the account's rate.
pub fn ms_per_part() -> i64 {
    (1000.0 * INSTANCES as f64 / ACCOUNT_PARTS_PER_S).round() as i64
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 22, 4, 0).single().unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::milliseconds(ms)
}

fn ms_of(t: DateTime<Utc>) -> i64 {
    t.signed_duration_since(t0()).num_milliseconds()
}

/// SplitMix64: small, seeded, the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

const SERVICES: [&str; 8] = [
    "orders-api",
    "payments-worker",
    "checkout-web",
    "db-primary",
    "search-indexer",
    "auth-gateway",
    "inventory-sync",
    "kafka-broker",
];

const SYMPTOMS: [&str; 4] = [
    "is down since 22:{mm}",
    "error rate above 30% since 22:{mm}",
    "p99 latency over 4 s since 22:{mm}",
    "has no healthy hosts since 22:{mm}",
];

/// Each under 146 characters, so one sentence can never skip a whole SMS part.
const DETAILS: [&str; 8] = [
    "Error rate 37% on /v1/orders over the last 5 min, threshold 5%.",
    "Last deploy 41 min ago by ci-bot (build 8812), no rollback yet.",
    "3 of 6 pods in CrashLoopBackOff in eu-west-1, restarts climbing.",
    "Upstream db-primary reports replication lag of 12 s and rising.",
    "Dashboard: https://grafana.example.com/d/svc-health?from=now-1h.",
    "Paged because severity is critical and the service is tier 1.",
    "Synthetic checks fail from 4 of 5 regions since the first alert.",
    "Owner: team-checkout; the secondary on-call is paged after 10 min.",
];

/// Realistic alert text of exactly `parts` SMS parts (checked with `measure`).
fn alert_text(rng: &mut Rng, parts: u32) -> Result<String> {
    let svc = SERVICES[rng.below(SERVICES.len())];
    let symptom = SYMPTOMS[rng.below(SYMPTOMS.len())].replace("{mm}", &format!("{:02}", rng.below(5)));
    let mut text =
        format!("ALERT: {svc}-{} {symptom}. Runbook: https://runbooks.example.com/{svc}.", rng.below(40) + 1);
    while measure(&text).segments < parts {
        text.push(' ');
        text.push_str(DETAILS[rng.below(DETAILS.len())]);
    }
    let got = measure(&text).segments;
    if got != parts {
        return Err(BenchError::Process(format!("alert text of {got} parts, wanted {parts}: {text}")));
    }
    Ok(text)
}

/// One alert of the workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub arrival_ms: i64,
    pub deadline_ms: i64,
    /// Its deadline class, minutes after arrival.
    pub class_min: i64,
    pub recipient: usize,
    /// The SMS parts of its own text.
    pub parts: u32,
    pub pending: PendingAlert,
}

/// The seeded workload: the alerts (index = key number) and, per recipient, their alerts
/// earliest deadline first (the pending index's order).
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub seed: u64,
    pub alerts: Vec<Alert>,
    by_recipient: Vec<Vec<usize>>,
}

impl Workload {
    /// `n` alerts: two recipients get a quarter each, the other 18 share the rest evenly; 10 % have
    /// a 2-minute deadline, 60 % 15 minutes, 30 % 60 minutes; each text is 1–3 parts (uniform).
    pub fn generate(seed: u64, n: usize) -> Result<Self> {
        let mut rng = Rng(seed);
        let quarter = n / 4;
        let mut recipients: Vec<usize> = (0..n)
            .map(|i| {
                if i < quarter {
                    0
                } else if i < 2 * quarter {
                    1
                } else {
                    2 + (i - 2 * quarter) % (RECIPIENTS - 2)
                }
            })
            .collect();
        rng.shuffle(&mut recipients);
        let mut classes: Vec<i64> = Vec::with_capacity(n);
        for (minutes, percent) in DEADLINES {
            classes.extend(std::iter::repeat_n(minutes, n * percent / 100));
        }
        classes.resize(n, DEADLINES[1].0);
        rng.shuffle(&mut classes);
        let mut alerts = Vec::with_capacity(n);
        for (i, (recipient, class_min)) in recipients.into_iter().zip(classes).enumerate() {
            let arrival_ms = rng.below(ARRIVAL_SPAN_MS as usize) as i64;
            let parts = 1 + rng.below(3) as u32;
            let text = alert_text(&mut rng, parts)?;
            let deadline_ms = arrival_ms + class_min * 60_000;
            let key = IdempotencyKey::parse(&format!("{i:064x}"))
                .map_err(|e| BenchError::Process(format!("key {i}: {e:?}")))?;
            let recipient_phone = PhoneNumber::parse(&format!("+1415555{:04}", 100 + recipient))
                .map_err(|e| BenchError::Process(format!("phone {recipient}: {e:?}")))?;
            alerts.push(Alert {
                arrival_ms,
                deadline_ms,
                class_min,
                recipient,
                parts,
                pending: PendingAlert {
                    key,
                    recipient: recipient_phone,
                    deadline: at(deadline_ms),
                    created_at: at(arrival_ms),
                    body: MessageBody::new(text),
                },
            });
        }
        let mut by_recipient = vec![Vec::new(); RECIPIENTS];
        for (i, a) in alerts.iter().enumerate() {
            by_recipient[a.recipient].push(i);
        }
        for list in &mut by_recipient {
            list.sort_by(|&a, &b| storm::edf_cmp(&alerts[a].pending, &alerts[b].pending));
        }
        Ok(Self { seed, alerts, by_recipient })
    }

    pub fn total_parts(&self) -> u64 {
        self.alerts.iter().map(|a| u64::from(a.parts)).sum()
    }

    /// Alerts per recipient, most first.
    pub fn per_recipient(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.by_recipient.iter().map(Vec::len).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }

    fn index_of(&self, key: &IdempotencyKey) -> Result<usize> {
        usize::from_str_radix(key.as_str(), 16)
            .ok()
            .filter(|&i| i < self.alerts.len())
            .ok_or_else(|| BenchError::Process(format!("unknown key {}", key.as_str())))
    }
}

/// The sender's configuration in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every alert alone (the policy disabled).
    Off,
    /// Storm mode with the per-recipient budget (the instants of the SMS sent to the recipient).
    On,
    /// Storm mode with `plan` given no send instants: digests and backlog pull, no budget.
    OnWithoutBudget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Claimed,
    Sent(usize),
    Stale,
}

#[derive(Debug, Clone)]
struct Sms {
    members: Vec<usize>,
    parts: u32,
    recipient: usize,
    out_ms: i64,
}

/// A message an instance took: the alert and the lane it came from.
type Msg = (usize, Lane);

enum Work {
    Message(Msg),
    Group(Vec<Msg>),
}

struct Instance {
    free_at: i64,
    work: VecDeque<Work>,
    /// Idle, waiting for a message to become visible.
    waiting: bool,
}

/// Nearest-rank percentile of intake-to-delivered times, an undelivered alert counting as
/// slower than any delivered one (`None` when the rank falls on one).
fn percentile(values: &[Option<i64>], q: f64) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by_key(|x| (x.is_none(), *x));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// One mode's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeRun {
    pub mode: Mode,
    /// Intake and the sender with the urgent lane (earliest deadline first across recipients).
    pub urgent_lane: bool,
    pub sms: usize,
    pub parts: u64,
    pub digests: usize,
    pub largest_digest: usize,
    /// Alerts brought into a group by the backlog pull (counted each time).
    pub pulled: usize,
    /// Delivered at or before the deadline.
    pub covered: usize,
    /// Delivered after the deadline (escalated by the deadline sweep).
    pub late: usize,
    /// Found past the deadline: not sent, escalated.
    pub stale: usize,
    /// Misses per deadline class, in [`DEADLINES`] order.
    pub misses_by_class: [usize; 3],
    /// Distinct alerts held at least once because the recipient's budget was used up.
    pub budget_held: usize,
    /// Of those, how many then missed their deadline.
    pub budget_held_missed: usize,
    /// SMS that went out over budget (a deadline would not wait).
    pub over_budget: usize,
    /// Most SMS one recipient received within any 5 minutes.
    pub max_sms_per_window: usize,
    pub p50_two_min_ms: Option<i64>,
    pub p95_two_min_ms: Option<i64>,
    /// The 15- and 60-minute alerts' p95 intake → delivered (what holding for the budget costs).
    pub p95_longer_ms: Option<i64>,
    /// The last delivery.
    pub finished_ms: i64,
    /// Alerts neither in an SMS nor escalated, and alerts in more than one place.
    pub lost: usize,
    pub twice: usize,
    /// Storm off: escalated at intake because the lower-bound wait ahead already passed the
    /// deadline (late is said early); they stay eligible to be sent.
    pub said_early: usize,
    /// Of those, delivered by their deadline after all.
    pub said_early_covered: usize,
    /// The longest wait ahead intake estimated (storm off; the lower bound).
    pub max_wait_ms: i64,
    /// Alerts intake also put on the urgent lane.
    pub urgent_enqueued: usize,
    /// Urgent messages the sender instances took.
    pub urgent_taken: usize,
    /// Distinct alerts claimed from an urgent message.
    pub urgent_claimed: usize,
    /// Urgent messages that expired unread (retention) or would be visible again only after it.
    pub urgent_expired: usize,
    /// Alerts left unclaimed with no message on either queue (the deadline sweep escalates them
    /// unsent; counted in `stale`).
    pub stranded: usize,
    /// Alerts first claimed more than [`REQUEUE_AFTER_MS`] after intake, before their deadline:
    /// where the sweep's re-enqueue (not modelled) would have added a message.
    pub requeue_due: usize,
}

impl ModeRun {
    pub fn misses(&self) -> usize {
        self.late + self.stale
    }

    /// Stale (escalated unsent) plus delivered late (escalated by the deadline sweep).
    pub fn escalations(&self) -> usize {
        self.late + self.stale
    }
}

struct Sim<'w> {
    w: &'w Workload,
    mode: Mode,
    lane: bool,
    /// Alerts in arrival order, and how many of them intake has taken.
    arrivals: Vec<usize>,
    arrived: usize,
    policy: DigestPolicy,
    status: Vec<Status>,
    /// Waiting messages: (enqueued at, alert) → visible from.
    queue: BTreeMap<(i64, usize), i64>,
    /// The urgent lane, the same way (a message expires [`URGENT_RETENTION_MS`] after enqueue).
    urgent: BTreeMap<(i64, usize), i64>,
    said_early: Vec<bool>,
    max_wait_ms: i64,
    urgent_enqueued: usize,
    urgent_taken: usize,
    via_urgent: Vec<bool>,
    urgent_expired: usize,
    first_claim: Vec<Option<i64>>,
    instances: Vec<Instance>,
    sms: Vec<Sms>,
    stale: Vec<usize>,
    sent_at: Vec<Vec<i64>>,
    pulled: usize,
    held_for_budget: Vec<bool>,
    over_budget: usize,
}

fn invariant(what: String) -> BenchError {
    BenchError::Process(format!("storm-mode simulation invariant broken: {what}"))
}

impl<'w> Sim<'w> {
    fn new(w: &'w Workload, mode: Mode, lane: bool) -> Result<Self> {
        let mut policy = DigestPolicy::new(MAX_SEGMENTS).map_err(|e| invariant(e.to_string()))?;
        policy.enabled = mode != Mode::Off;
        let n = w.alerts.len();
        let mut arrivals: Vec<usize> = (0..n).collect();
        arrivals.sort_by_key(|&a| (w.alerts[a].arrival_ms, a));
        Ok(Self {
            w,
            mode,
            lane,
            arrivals,
            arrived: 0,
            policy,
            status: vec![Status::Pending; n],
            queue: BTreeMap::new(),
            urgent: BTreeMap::new(),
            said_early: vec![false; n],
            max_wait_ms: 0,
            urgent_enqueued: 0,
            urgent_taken: 0,
            via_urgent: vec![false; n],
            urgent_expired: 0,
            first_claim: vec![None; n],
            instances: (0..INSTANCES).map(|_| Instance { free_at: 0, work: VecDeque::new(), waiting: false }).collect(),
            sms: Vec::new(),
            stale: Vec::new(),
            sent_at: vec![Vec::new(); RECIPIENTS],
            pulled: 0,
            held_for_budget: vec![false; n],
            over_budget: 0,
        })
    }

    fn run(mut self) -> Result<ModeRun> {
        let mut steps = 0usize;
        while let Some(i) = (0..self.instances.len())
            .filter(|&i| self.instances[i].free_at < i64::MAX)
            .min_by_key(|&i| (self.instances[i].free_at, i))
        {
            steps += 1;
            if steps > 50 * self.w.alerts.len() + 10_000 {
                return Err(invariant("the simulation does not finish".into()));
            }
            let now = self.instances[i].free_at;
            self.intake(now)?;
            if let Some(work) = self.instances[i].work.pop_front() {
                self.instances[i].free_at = match work {
                    Work::Message(m) => self.message(now, m)?,
                    Work::Group(own) => self.group(now, own)?,
                };
                continue;
            }
            let batch = self.take_batch(now);
            if batch.is_empty() {
                let next_arrival = self.arrivals.get(self.arrived).map(|&a| self.w.alerts[a].arrival_ms);
                let next = self.queue.values().copied().chain(next_arrival).min();
                self.instances[i].waiting = true;
                self.instances[i].free_at = next.map_or(i64::MAX, |t| t.max(now + 1));
                continue;
            }
            self.instances[i].waiting = false;
            let work = self.claim_batch(now, batch)?;
            self.instances[i].work = work;
        }
        self.finish()
    }

    /// Intake, for every alert arrived by `now` (in arrival order): the send queue's visible
    /// messages at its arrival (exact), the lower-bound wait (storm off: one part each at the
    /// account's rate; storm on: none), the urgent lane too when behind a backlog with less than
    /// `URGENT_SLACK` left after the wait (`Lane::of`), and late said early (storm off) on the
    /// wait of the lane it overtakes on: the urgent lane's backlog for an urgent alert.
    fn intake(&mut self, now: i64) -> Result<()> {
        let rate = SendRate::per_second(ACCOUNT_PARTS_PER_S).map_err(|e| invariant(e.to_string()))?;
        while let Some(&a) = self.arrivals.get(self.arrived) {
            let alert = &self.w.alerts[a];
            let t = alert.arrival_ms;
            if t > now {
                break;
            }
            self.arrived += 1;
            let ahead = self.queue.values().filter(|&&visible| visible <= t).count() as u64;
            let wait = if self.mode == Mode::Off { rate.time_for(ahead) } else { chrono::Duration::zero() };
            let urgent = self.lane
                && ahead >= URGENT_MIN_BACKLOG
                && Lane::of(at(t), alert.pending.deadline, wait.to_std().unwrap_or_default()) == Lane::Urgent;
            // An alert on the urgent lane overtakes the send queue: its lower-bound wait is the
            // urgent lane's own backlog (intake's `late_wait`).
            let late_wait = if urgent && self.mode == Mode::Off {
                rate.time_for(self.urgent.values().filter(|&&visible| visible <= t).count() as u64)
            } else {
                wait
            };
            self.max_wait_ms = self.max_wait_ms.max(late_wait.num_milliseconds());
            if self.mode == Mode::Off && storm::late_verdict(at(t), at(t) + late_wait, alert.pending.deadline).is_some()
            {
                self.said_early[a] = true;
            }
            self.queue.insert((t, a), t);
            if urgent {
                self.urgent.insert((t, a), t);
                self.urgent_enqueued += 1;
            }
        }
        Ok(())
    }

    /// The next ≤ `BATCH` visible messages, in enqueue order (taken off the queue); before them,
    /// when the oldest waited [`URGENT_POLL_AFTER_MS`] or more, up to [`URGENT_TAKE`] visible
    /// urgent messages (the expired ones dropped first).
    fn take_batch(&mut self, now: i64) -> Vec<Msg> {
        let keys: Vec<(i64, usize)> =
            self.queue.iter().filter(|(_, visible)| **visible <= now).map(|(k, _)| *k).take(BATCH).collect();
        for k in &keys {
            self.queue.remove(k);
        }
        let mut taken = Vec::new();
        let waited = keys.iter().map(|(enqueued, _)| now - enqueued).max();
        if self.lane && waited.is_some_and(|w| w >= URGENT_POLL_AFTER_MS) {
            let before = self.urgent.len();
            self.urgent.retain(|(enqueued, _), _| now < enqueued + URGENT_RETENTION_MS);
            self.urgent_expired += before - self.urgent.len();
            let urgent: Vec<(i64, usize)> =
                self.urgent.iter().filter(|(_, visible)| **visible <= now).map(|(k, _)| *k).take(URGENT_TAKE).collect();
            for k in &urgent {
                self.urgent.remove(k);
            }
            self.urgent_taken += urgent.len();
            taken.extend(urgent.into_iter().map(|(_, a)| (a, Lane::Urgent)));
        }
        taken.extend(keys.into_iter().map(|(_, a)| (a, Lane::Normal)));
        taken
    }

    fn claimed(&mut self, now: i64, (a, lane): Msg) {
        self.status[a] = Status::Claimed;
        self.first_claim[a].get_or_insert(now);
        if lane == Lane::Urgent {
            self.via_urgent[a] = true;
        }
    }

    fn claim_batch(&mut self, now: i64, batch: Vec<Msg>) -> Result<VecDeque<Work>> {
        if self.mode == Mode::Off {
            return Ok(batch.into_iter().map(Work::Message).collect());
        }
        let mut groups: BTreeMap<usize, Vec<Msg>> = BTreeMap::new();
        for (a, lane) in batch {
            match self.status[a] {
                Status::Pending => {
                    self.claimed(now, (a, lane));
                    groups.entry(self.w.alerts[a].recipient).or_default().push((a, lane));
                }
                // Sent in another's digest, escalated, or claimed through its other message (the
                // other lane, in this batch or another instance's): not claimable, the message is
                // deleted.
                Status::Sent(_) | Status::Stale | Status::Claimed => {}
            }
        }
        let mut groups: Vec<Vec<Msg>> = groups.into_values().collect();
        let earliest =
            |g: &Vec<Msg>| g.iter().map(|&(a, _)| (self.w.alerts[a].deadline_ms, self.w.alerts[a].arrival_ms, a)).min();
        groups.sort_by_key(earliest);
        Ok(groups.into_iter().map(Work::Group).collect())
    }

    /// Puts a held alert's message back on its lane, hidden until `visible`; wakes idle instances
    /// for the send queue. An urgent message that would be visible again only after its
    /// retention is gone.
    fn hide(&mut self, (a, lane): Msg, visible: i64) {
        let enqueued = self.w.alerts[a].arrival_ms;
        if lane == Lane::Urgent {
            if visible < enqueued + URGENT_RETENTION_MS {
                self.urgent.insert((enqueued, a), visible);
            } else {
                self.urgent_expired += 1;
            }
            return;
        }
        self.queue.insert((enqueued, a), visible);
        for inst in &mut self.instances {
            if inst.waiting && inst.work.is_empty() {
                inst.free_at = inst.free_at.min(visible);
            }
        }
    }

    fn record_sms(&mut self, members: Vec<usize>, parts: u32, out_ms: i64) -> Result<()> {
        let id = self.sms.len();
        let recipient = self.w.alerts[members[0]].recipient;
        for &a in &members {
            if self.status[a] != Status::Claimed {
                return Err(invariant(format!("alert {a} sent while {:?}", self.status[a])));
            }
            if self.w.alerts[a].recipient != recipient {
                return Err(invariant(format!("SMS {id} mixes recipients")));
            }
            self.status[a] = Status::Sent(id);
        }
        self.sent_at[recipient].push(out_ms);
        self.sms.push(Sms { members, parts, recipient, out_ms });
        Ok(())
    }

    /// Storm off: one message; returns when the instance is free again.
    fn message(&mut self, now: i64, (a, lane): Msg) -> Result<i64> {
        if self.status[a] != Status::Pending {
            return Ok(now);
        }
        self.claimed(now, (a, lane));
        let plan = storm::plan(at(now), &[], std::slice::from_ref(&self.w.alerts[a].pending), &self.policy)
            .map_err(|e| invariant(e.to_string()))?;
        if !plan.stale.is_empty() {
            self.status[a] = Status::Stale;
            self.stale.push(a);
            return Ok(now);
        }
        let parts = self.w.alerts[a].parts;
        let out = now + i64::from(parts) * ms_per_part();
        self.record_sms(vec![a], parts, out)?;
        Ok(out)
    }

    /// Storm on: one recipient's claimed alerts of a batch, with their backlog pulled in.
    fn group(&mut self, now: i64, own: Vec<Msg>) -> Result<i64> {
        let recipient = self.w.alerts[own[0].0].recipient;
        let room = BACKLOG_PULL.min(MAX_DIGEST_MEMBERS.saturating_sub(own.len()));
        let backlog: Vec<usize> = self.w.by_recipient[recipient]
            .iter()
            .copied()
            .filter(|&b| {
                let x = &self.w.alerts[b];
                self.status[b] == Status::Pending && x.arrival_ms <= now && x.deadline_ms > now
            })
            .take(room)
            .collect();
        let sent: Vec<DateTime<Utc>> =
            if self.mode == Mode::On { self.sent_at[recipient].iter().map(|&t| at(t)).collect() } else { Vec::new() };
        // The sender reads the backlog's deadlines first and claims it only when something goes
        // out now (`storm::holds_all_until`): a used-up budget with no deadline at stake claims
        // nothing it would only hand back.
        let deadlines =
            own.iter().map(|&(a, _)| a).chain(backlog.iter().copied()).map(|a| self.w.alerts[a].pending.deadline);
        let pulled = if storm::holds_all_until(at(now), &sent, deadlines, &self.policy).is_some() {
            Vec::new()
        } else {
            backlog
        };
        for &b in &pulled {
            self.claimed(now, (b, Lane::Normal));
        }
        self.pulled += pulled.len();
        let members: Vec<usize> = own.iter().map(|&(a, _)| a).chain(pulled.iter().copied()).collect();
        let alerts: Vec<PendingAlert> = members.iter().map(|&a| self.w.alerts[a].pending.clone()).collect();
        let plan = storm::plan(at(now), &sent, &alerts, &self.policy).map_err(|e| invariant(e.to_string()))?;
        let mentions = plan.mentions();
        if mentions.len() != members.len() || mentions.values().any(|&c| c != 1) {
            return Err(invariant(format!("plan mentions {} of {} alerts", mentions.len(), members.len())));
        }
        if plan.over_budget {
            self.over_budget += 1;
        }
        let mut t = now;
        for send in &plan.sends {
            let (keys, parts) = match send {
                Send::Alone { key } => {
                    let a = self.w.index_of(key)?;
                    (vec![a], self.w.alerts[a].parts)
                }
                Send::Digest(d) => {
                    let keys = d.members.iter().map(|k| self.w.index_of(k)).collect::<Result<Vec<_>>>()?;
                    (keys, d.segments.segments)
                }
            };
            t += i64::from(parts) * ms_per_part();
            self.record_sms(keys, parts, t)?;
        }
        for h in &plan.held {
            let a = self.w.index_of(&h.key)?;
            self.status[a] = Status::Pending;
            let visible = match h.reason {
                HoldReason::BudgetExhausted { until } => {
                    self.held_for_budget[a] = true;
                    ms_of(until)
                }
                HoldReason::DigestFull => now,
            };
            if let Some(&m) = own.iter().find(|(x, _)| *x == a) {
                self.hide(m, visible.max(now));
            }
        }
        for k in &plan.stale {
            let a = self.w.index_of(k)?;
            self.status[a] = Status::Stale;
            self.stale.push(a);
        }
        Ok(t)
    }

    fn finish(mut self) -> Result<ModeRun> {
        let n = self.w.alerts.len();
        if !self.queue.is_empty() || self.arrived != n {
            return Err(invariant(format!("{} messages left on the queue", self.queue.len())));
        }
        // Whatever is left on the urgent lane expires unread.
        self.urgent_expired += self.urgent.len();
        // Unclaimed with no message left (its urgent message expired while held, its send-queue
        // copy deleted as a duplicate meanwhile): the deadline sweep escalates it, unsent.
        let mut stranded = 0;
        for a in 0..n {
            if self.status[a] == Status::Pending {
                self.status[a] = Status::Stale;
                self.stale.push(a);
                stranded += 1;
            }
        }
        let mut places = vec![0usize; n];
        for s in &self.sms {
            for &a in &s.members {
                places[a] += 1;
            }
        }
        for &a in &self.stale {
            places[a] += 1;
        }
        let lost = places.iter().filter(|&&c| c == 0).count();
        let twice = places.iter().filter(|&&c| c > 1).count();
        let mut run = ModeRun {
            mode: self.mode,
            urgent_lane: self.lane,
            sms: self.sms.len(),
            parts: self.sms.iter().map(|s| u64::from(s.parts)).sum(),
            digests: self.sms.iter().filter(|s| s.members.len() > 1).count(),
            largest_digest: self.sms.iter().map(|s| s.members.len()).max().unwrap_or(0),
            pulled: self.pulled,
            covered: 0,
            late: 0,
            stale: 0,
            misses_by_class: [0; 3],
            budget_held: self.held_for_budget.iter().filter(|&&h| h).count(),
            budget_held_missed: 0,
            over_budget: self.over_budget,
            max_sms_per_window: 0,
            p50_two_min_ms: None,
            p95_two_min_ms: None,
            p95_longer_ms: None,
            finished_ms: self.sms.iter().map(|s| s.out_ms + CARRIER_LATENCY_MS).max().unwrap_or(0),
            lost,
            twice,
            said_early: self.said_early.iter().filter(|&&s| s).count(),
            said_early_covered: 0,
            max_wait_ms: self.max_wait_ms,
            urgent_enqueued: self.urgent_enqueued,
            urgent_taken: self.urgent_taken,
            urgent_claimed: self.via_urgent.iter().filter(|&&v| v).count(),
            urgent_expired: self.urgent_expired,
            stranded,
            requeue_due: self
                .w
                .alerts
                .iter()
                .zip(&self.first_claim)
                .filter(|(x, c)| {
                    let due = x.arrival_ms + REQUEUE_AFTER_MS;
                    x.deadline_ms > due && c.is_none_or(|c| c > due)
                })
                .count(),
        };
        let mut two_min = Vec::new();
        let mut longer = Vec::new();
        for (a, alert) in self.w.alerts.iter().enumerate() {
            let delivered = match self.status[a] {
                Status::Sent(s) => Some(self.sms[s].out_ms + CARRIER_LATENCY_MS),
                Status::Stale => None,
                other => return Err(invariant(format!("alert {a} ended {other:?}"))),
            };
            let missed = match delivered {
                Some(d) if d <= alert.deadline_ms => {
                    run.covered += 1;
                    if self.said_early[a] {
                        run.said_early_covered += 1;
                    }
                    false
                }
                Some(_) => {
                    run.late += 1;
                    true
                }
                None => {
                    run.stale += 1;
                    true
                }
            };
            if missed {
                if let Some(c) = DEADLINES.iter().position(|(m, _)| *m == alert.class_min) {
                    run.misses_by_class[c] += 1;
                }
                if self.held_for_budget[a] {
                    run.budget_held_missed += 1;
                }
            }
            let took = delivered.map(|d| d - alert.arrival_ms);
            if alert.class_min == DEADLINES[0].0 { two_min.push(took) } else { longer.push(took) }
        }
        run.p50_two_min_ms = percentile(&two_min, 0.50);
        run.p95_two_min_ms = percentile(&two_min, 0.95);
        run.p95_longer_ms = percentile(&longer, 0.95);
        let window = DigestPolicy::DEFAULT_WINDOW.as_millis() as i64;
        for r in 0..RECIPIENTS {
            let mut times: Vec<i64> = self.sms.iter().filter(|s| s.recipient == r).map(|s| s.out_ms).collect();
            times.sort_unstable();
            let mut lo = 0;
            for hi in 0..times.len() {
                while times[hi] - times[lo] >= window {
                    lo += 1;
                }
                run.max_sms_per_window = run.max_sms_per_window.max(hi - lo + 1);
            }
        }
        Ok(run)
    }
}

/// The earliest-deadline-first schedule of the same work at the account's rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub misses: usize,
    pub sms: usize,
    pub parts: u64,
    pub p50_two_min_ms: Option<i64>,
    pub p95_two_min_ms: Option<i64>,
    pub p95_longer_ms: Option<i64>,
}

fn reference(w: &Workload, merge: Merge) -> Result<Reference> {
    // Deadlines moved earlier by the carrier's latency: a job done by then is delivered in time.
    let jobs: Vec<Job> = w
        .alerts
        .iter()
        .map(|a| Job {
            arrival: at(a.arrival_ms),
            deadline: at(a.deadline_ms - CARRIER_LATENCY_MS),
            parts: a.parts,
            recipient: a.recipient as u32,
        })
        .collect();
    let rate = SendRate::per_second(ACCOUNT_PARTS_PER_S).map_err(|e| invariant(e.to_string()))?;
    let s = storm::edf_schedule(&jobs, rate, merge);
    let took = |two: bool| -> Vec<Option<i64>> {
        w.alerts
            .iter()
            .zip(&s.completed)
            .filter(|(a, _)| (a.class_min == DEADLINES[0].0) == two)
            .map(|(a, c)| c.map(|c| ms_of(c) + CARRIER_LATENCY_MS - a.arrival_ms))
            .collect()
    };
    let two_min = took(true);
    Ok(Reference {
        misses: s.misses,
        sms: s.sms,
        parts: s.parts,
        p50_two_min_ms: percentile(&two_min, 0.50),
        p95_two_min_ms: percentile(&two_min, 0.95),
        p95_longer_ms: percentile(&took(false), 0.95),
    })
}

/// Everything the section reports.
#[derive(Debug, Clone, PartialEq)]
pub struct StormMode {
    pub seed: u64,
    pub alerts: usize,
    pub two_min_alerts: usize,
    pub total_parts: u64,
    /// Alerts per recipient, most first.
    pub per_recipient: Vec<usize>,
    /// Storm off as before the urgent lane (the previous behaviour, for comparison).
    pub off_without_lane: ModeRun,
    /// Storm off, storm on and storm on without the budget: all with the urgent lane.
    pub off: ModeRun,
    pub on: ModeRun,
    pub on_without_budget: ModeRun,
    pub edf: Reference,
    pub edf_digests: Reference,
    /// The same workload shape from the next [`OTHER_SEEDS`] seeds (storm on against the bound).
    pub other_seeds: Vec<SeedFigures>,
    /// Storm off without and with the urgent lane on [`HEAVY_ALERTS`] alerts from the same seed,
    /// where the lower-bound wait outlasts the 2-minute deadline (late said early).
    pub heavy: Option<(ModeRun, ModeRun)>,
}

/// The heavier storm for late said early: more alerts in the same 10 s.
pub const HEAVY_ALERTS: usize = 6_000;

/// How many further seeds the section runs, for the spread of the figures.
pub const OTHER_SEEDS: u64 = 10;

/// Storm mode on, one further seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedFigures {
    pub seed: u64,
    pub on_misses: usize,
    pub edf_misses: usize,
    pub off_misses: usize,
    pub off_without_lane_misses: usize,
    /// Storm off's 2-minute alerts' misses, with the urgent lane and without.
    pub off_two_min_misses: usize,
    pub off_without_lane_two_min_misses: usize,
    pub on_p95_two_min_ms: Option<i64>,
    pub parts_ratio: f64,
    pub max_sms_per_window: usize,
    pub lost_or_twice: usize,
}

impl StormMode {
    /// Every simulated run.
    pub fn runs(&self) -> [&ModeRun; 4] {
        [&self.off_without_lane, &self.off, &self.on, &self.on_without_budget]
    }

    pub fn parts_ratio(&self) -> f64 {
        self.on.parts as f64 / self.off.parts.max(1) as f64
    }

    pub fn parts_met(&self) -> bool {
        self.parts_ratio() <= PARTS_TARGET_RATIO
    }

    /// Every alert in exactly one delivered SMS or escalated: none lost, none sent twice, and
    /// every one either covered before its deadline or counted as escalated.
    pub fn conservation_met(&self) -> bool {
        self.runs().iter().all(|r| r.lost == 0 && r.twice == 0 && r.covered + r.escalations() == self.alerts)
    }

    pub fn miss_allowance(&self) -> usize {
        self.alerts * MISS_SLACK_PERCENT / 100
    }

    pub fn misses_met(&self) -> bool {
        self.on.misses() <= self.edf.misses + self.miss_allowance()
    }

    pub fn p95_met(&self) -> bool {
        self.on.p95_two_min_ms.is_some_and(|p| p <= P95_TWO_MIN_TARGET_MS)
    }
}

/// The workload of `n` alerts from `seed`, simulated storm off without the urgent lane, and with
/// it storm off, on, and on without the budget.
pub fn simulate(seed: u64, n: usize) -> Result<StormMode> {
    let w = Workload::generate(seed, n)?;
    Ok(StormMode {
        seed,
        alerts: n,
        two_min_alerts: w.alerts.iter().filter(|a| a.class_min == DEADLINES[0].0).count(),
        total_parts: w.total_parts(),
        per_recipient: w.per_recipient(),
        off_without_lane: Sim::new(&w, Mode::Off, false)?.run()?,
        off: Sim::new(&w, Mode::Off, true)?.run()?,
        on: Sim::new(&w, Mode::On, true)?.run()?,
        on_without_budget: Sim::new(&w, Mode::OnWithoutBudget, true)?.run()?,
        edf: reference(&w, Merge::None)?,
        edf_digests: reference(&w, Merge::Digests { max_segments: MAX_SEGMENTS })?,
        other_seeds: Vec::new(),
        heavy: None,
    })
}

/// The section: [`ALERTS`] alerts from `seed`, and the next [`OTHER_SEEDS`] seeds' key figures.
pub fn run(seed: u64) -> Result<StormMode> {
    let mut s = simulate(seed, ALERTS)?;
    let heavy = Workload::generate(seed, HEAVY_ALERTS)?;
    s.heavy = Some((Sim::new(&heavy, Mode::Off, false)?.run()?, Sim::new(&heavy, Mode::Off, true)?.run()?));
    for other in (1..=OTHER_SEEDS).map(|i| seed.wrapping_add(i)) {
        let o = simulate(other, ALERTS)?;
        s.other_seeds.push(SeedFigures {
            seed: other,
            on_misses: o.on.misses(),
            edf_misses: o.edf.misses,
            off_misses: o.off.misses(),
            off_without_lane_misses: o.off_without_lane.misses(),
            off_two_min_misses: o.off.misses_by_class[0],
            off_without_lane_two_min_misses: o.off_without_lane.misses_by_class[0],
            on_p95_two_min_ms: o.on.p95_two_min_ms,
            parts_ratio: o.parts_ratio(),
            max_sms_per_window: o.on.max_sms_per_window,
            lost_or_twice: o.runs().iter().map(|r| r.lost + r.twice).sum(),
        });
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alert_ends_in_exactly_one_sms_or_escalated_in_every_mode() {
        let s = run(DEFAULT_SEED).expect("simulation");
        for r in s.runs() {
            assert_eq!((r.lost, r.twice), (0, 0), "{r:?}");
            assert_eq!(r.covered + r.late + r.stale, ALERTS, "{r:?}");
        }
        assert!(s.conservation_met());
        assert_eq!(s.other_seeds.len() as u64, OTHER_SEEDS);
        assert!(s.other_seeds.iter().all(|o| o.lost_or_twice == 0), "{:?}", s.other_seeds);
        let (heavy_before, heavy_lane) = s.heavy.as_ref().expect("heavy runs");
        for r in [heavy_before, heavy_lane] {
            assert_eq!((r.lost, r.twice, r.covered + r.escalations()), (0, 0, HEAVY_ALERTS), "{r:?}");
        }
        // Storm mode on never sends more SMS than alerts, and its digests are real digests.
        assert!(s.on.sms < s.off.sms && s.on.digests > 0 && s.on.largest_digest <= MAX_DIGEST_MEMBERS);
    }

    #[test]
    fn the_same_seed_gives_the_same_figures_and_another_seed_another_workload() {
        assert_eq!(simulate(7, 300).expect("a"), simulate(7, 300).expect("b"));
        assert_eq!(Workload::generate(7, 300).expect("a"), Workload::generate(7, 300).expect("b"));
        assert_ne!(Workload::generate(7, 300).expect("a"), Workload::generate(8, 300).expect("b"));
    }

    #[test]
    fn storm_off_sends_each_alert_alone_at_its_own_parts() {
        // 100 alerts, ~200 parts at 20/s: nothing goes stale, so every alert is sent alone.
        let s = simulate(DEFAULT_SEED, 100).expect("simulation");
        assert_eq!(s.off.stale, 0);
        assert_eq!((s.off.sms, s.off.parts, s.off.digests), (100, s.total_parts, 0));
        // At full size, without the urgent lane, some go stale: the parts are those of the alerts
        // sent. With the lane, still one SMS or one escalation per alert.
        let w = Workload::generate(DEFAULT_SEED, ALERTS).expect("workload");
        let off = Sim::new(&w, Mode::Off, false).expect("sim").run().expect("run");
        assert!(off.stale > 0);
        assert!(off.parts < w.total_parts());
        assert_eq!(off.sms + off.stale, ALERTS);
        let lane = Sim::new(&w, Mode::Off, true).expect("sim").run().expect("run");
        assert_eq!((lane.sms + lane.stale, lane.digests), (ALERTS, 0));
        if lane.stale == 0 {
            assert_eq!(lane.parts, w.total_parts());
        }
    }

    #[test]
    fn the_workload_has_the_stated_shape_and_each_text_its_parts() {
        let w = Workload::generate(DEFAULT_SEED, ALERTS).expect("workload");
        assert_eq!(w.per_recipient()[..3], [500, 500, 56]);
        assert_eq!(w.alerts.iter().filter(|a| a.class_min == 2).count(), 200);
        assert_eq!(w.alerts.iter().filter(|a| a.class_min == 60).count(), 600);
        for a in &w.alerts {
            assert_eq!(measure(a.pending.body.expose()).segments, a.parts);
            assert!((1..=3).contains(&a.parts) && (0..ARRIVAL_SPAN_MS).contains(&a.arrival_ms));
            assert!(a.pending.body.expose().starts_with("ALERT: "));
        }
    }

    #[test]
    fn the_urgent_lane_misses_no_more_two_minute_alerts_with_storm_mode_off() {
        let s = simulate(DEFAULT_SEED, ALERTS).expect("simulation");
        let (with, without) = (&s.off, &s.off_without_lane);
        eprintln!(
            "2-min misses: with the lane {} / without {}; all misses {} / {}; said early {} ({} covered); \
             urgent {} enqueued, {} claimed, {} expired; stranded {}; p95 {:?} / {:?}",
            with.misses_by_class[0],
            without.misses_by_class[0],
            with.misses(),
            without.misses(),
            with.said_early,
            with.said_early_covered,
            with.urgent_enqueued,
            with.urgent_claimed,
            with.urgent_expired,
            with.stranded,
            with.p95_two_min_ms,
            without.p95_two_min_ms
        );
        assert!(with.urgent_lane && !without.urgent_lane);
        assert_eq!((without.urgent_enqueued, without.urgent_claimed), (0, 0));
        assert!(with.urgent_enqueued > 0 && with.urgent_claimed > 0, "{with:?}");
        assert!(with.misses_by_class[0] <= without.misses_by_class[0], "{with:?}\n{without:?}");
        // The lower-bound wait (one part per message ahead, at the account's whole rate) of this
        // storm is under 2 minutes: nothing is said early; what is, is never covered without the
        // lane (a lower bound).
        assert!(without.said_early_covered == 0, "{without:?}");
        assert_eq!((s.on.said_early, s.on_without_budget.said_early), (0, 0));
    }

    #[test]
    fn late_is_said_early_when_the_lower_bound_wait_outlasts_a_deadline() {
        // 6,000 alerts in 10 s: thousands of messages ahead, over 2 minutes at one part each.
        let w = Workload::generate(DEFAULT_SEED, 6_000).expect("workload");
        let run = Sim::new(&w, Mode::Off, false).expect("sim").run().expect("run");
        eprintln!(
            "said early {} ({} covered), longest wait {} ms",
            run.said_early, run.said_early_covered, run.max_wait_ms
        );
        assert!(run.max_wait_ms > 120_000 && run.said_early > 0, "{run:?}");
        // A lower bound: without the lane nothing said early makes its deadline.
        assert_eq!(run.said_early_covered, 0);
        assert!(run.said_early <= run.misses());
        // With the lane an urgent alert overtakes the send queue, so its estimate is the urgent
        // lane's own backlog: still a lower bound, so nothing said early makes its deadline.
        let lane = Sim::new(&w, Mode::Off, true).expect("sim").run().expect("run");
        eprintln!(
            "with the lane: said early {} ({} covered), misses {} (without {})",
            lane.said_early,
            lane.said_early_covered,
            lane.misses(),
            run.misses()
        );
        assert_eq!((lane.lost, lane.twice), (0, 0));
        assert_eq!(lane.said_early_covered, 0, "never a false early page: {lane:?}");
    }

    #[test]
    fn percentiles_count_undelivered_alerts_as_slowest() {
        assert_eq!(percentile(&[Some(3), Some(1), Some(2), None], 0.5), Some(2));
        assert_eq!(percentile(&[Some(3), Some(1), Some(2), None], 0.95), None);
        assert_eq!(percentile(&[], 0.5), None);
    }
}
