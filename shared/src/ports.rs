//! Ports: the small capability traits the handlers depend on. The AWS adapters implement them;
//! a handler names only the capabilities it uses, so its code is as narrow as its IAM policy.

use std::future::Future;

pub mod carriers;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::acknowledgement::Acknowledgement;
use crate::domain::chain_policy::ChainPolicies;
use crate::domain::escalation_cap::EscalationCount;
use crate::domain::intent::{Escalation, IntentRecord, SmsOptions};
use crate::domain::observation::Observation;
use crate::domain::producer::{ProducerName, RateWindow};
use crate::domain::reconcile::{Found, ReconcileState, Window};
pub use crate::domain::refusal::Refusal;
use crate::domain::reply::{AckSubject, HeldCode, ReplyCode};
use crate::domain::roster::Roster;
use crate::domain::send_context::SendContext;
use crate::domain::spend::{Spend, SpendCeiling};
use crate::domain::storm::{DigestId, Lane};
use crate::domain::{IdempotencyKey, PhoneNumber, State};

/// A dependency (DynamoDB, SQS, SNS, CloudWatch Logs) failed or answered something unreadable.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("{operation} failed: {message}")]
    Unavailable { operation: &'static str, message: String },
    #[error("stored item {what} is unreadable: {message}")]
    Corrupt { what: String, message: String },
}

pub type PortResult<T> = Result<T, PortError>;

/// Time as a handler sees it: the instant it stamps facts with, and every wait it makes. The
/// handlers' deadlines are instants of this clock too (Lambda gives an invocation's deadline as
/// wall-clock time), so a handler runs the same on AWS, on the emulator and in the deterministic
/// simulation (`tests/sim`), where time is simulated.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Resolves once [`Self::now`] has reached `at` (at once when it has).
    fn sleep_until(&self, at: DateTime<Utc>) -> impl Future<Output = ()> + Send;
}

/// Where the handlers' randomness comes from: attempt and run ids, retry jitter.
pub trait Entropy: Send + Sync {
    fn next_u64(&self) -> u64;
}

/// The wall clock and the operating system's randomness: what every deployed function uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Clock for System {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn sleep_until(&self, at: DateTime<Utc>) {
        if let Ok(left) = at.signed_duration_since(Utc::now()).to_std() {
            tokio::time::sleep(left).await;
        }
    }
}

impl Entropy for System {
    fn next_u64(&self) -> u64 {
        rand::random()
    }
}

/// The instant Lambda ends an invocation: its context's deadline, epoch milliseconds.
pub fn invocation_deadline(deadline_ms: u64) -> DateTime<Utc> {
    i64::try_from(deadline_ms).ok().and_then(DateTime::from_timestamp_millis).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at + d`, saturating at the calendar's end (a configured duration never overflows it).
pub fn after(at: DateTime<Utc>, d: std::time::Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d).ok().and_then(|d| at.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at - d`, saturating at the calendar's start.
pub fn before(at: DateTime<Utc>, d: std::time::Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d).ok().and_then(|d| at.checked_sub_signed(d)).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The time from `clock`'s now until `deadline` (zero once it has passed).
pub fn time_left<C: Clock + ?Sized>(clock: &C, deadline: DateTime<Utc>) -> std::time::Duration {
    deadline.signed_duration_since(clock.now()).to_std().unwrap_or_default()
}

/// Waits `d` on `clock`.
pub async fn sleep<C: Clock + ?Sized>(clock: &C, d: std::time::Duration) {
    clock.sleep_until(after(clock.now(), d)).await
}

/// `work`'s output if it finishes before `clock` reaches `until`; `None` (and `work` dropped)
/// otherwise.
pub async fn within<C: Clock + ?Sized, F: Future>(clock: &C, until: DateTime<Utc>, work: F) -> Option<F::Output> {
    let work = std::pin::pin!(work);
    let timer = std::pin::pin!(clock.sleep_until(until));
    match futures::future::select(work, timer).await {
        futures::future::Either::Left((out, _)) => Some(out),
        futures::future::Either::Right(((), _)) => None,
    }
}

/// A random (version 4) UUID drawn from `entropy`: attempt and run ids.
pub fn new_id<E: Entropy + ?Sized>(entropy: &E) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&entropy.next_u64().to_le_bytes());
    bytes[8..].copy_from_slice(&entropy.next_u64().to_le_bytes());
    uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
}

/// A number drawn uniformly from `lo..=hi` (`lo` when the range is empty): retry jitter.
pub fn between<E: Entropy + ?Sized>(entropy: &E, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        return lo;
    }
    let span = u128::from(hi - lo) + 1;
    // Multiply-shift: uniform enough for jitter, and without a rejection loop.
    lo + ((u128::from(entropy.next_u64()) * span) >> 64) as u64
}

/// What to do with the intent's place in the sweep index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextCheck {
    Keep,
    At(DateTime<Utc>),
    Remove,
}

/// Changes to an intent's status, applied with one observation (how: [`Commit`]).
#[derive(Debug, Clone, Default)]
pub struct StatusPatch {
    pub state: Option<State>,
    pub increment_attempts: bool,
    /// Set a new claim (attempt id, claimed at, lease until).
    pub claim: Option<(String, DateTime<Utc>, DateTime<Utc>)>,
    /// Remove the lease (the attempt is over). The attempt id stays, naming the last attempt: a
    /// keyed delivery event is matched against it.
    pub clear_claim: bool,
    pub sns_message_id: Option<String>,
    pub accepted_at: Option<DateTime<Utc>>,
    pub final_at: Option<DateTime<Utc>>,
    pub escalation: Option<Escalation>,
    pub add_conflict: bool,
    pub last_error: Option<String>,
    /// The intent went (back) on the send queue at this time.
    pub enqueued_at: Option<DateTime<Utc>>,
    /// Reconciliation bookkeeping: (searches so far, next search, state).
    pub reconcile: Option<(u32, Option<DateTime<Utc>>, ReconcileState)>,
    /// A move from a settled state back into a pending one (an operator's resend of a failed
    /// intent): the recipient and deadline under which it re-enters the pending-index.
    pub pending_again: Option<(PhoneNumber, DateTime<Utc>)>,
    /// The storm-mode digest the intent's SMS was (set with the digest's outcome).
    pub digest_id: Option<DigestId>,
    /// The intent is expected to go out after its deadline (late is said early: the sweep
    /// escalates it at once).
    pub late_expected: Option<DateTime<Utc>>,
    /// Someone took the alert (written with `Expect::not_acknowledged`: once).
    pub acknowledgement: Option<Acknowledgement>,
}

/// A conditional status change: applied only if the intent is in one of `from` (and, when given,
/// still held by `attempt_id`), with its observation, stored once whatever the retries ([`Commit`]).
#[derive(Debug, Clone)]
pub struct Transition {
    pub key: IdempotencyKey,
    /// Empty: any state.
    pub from: Vec<State>,
    pub attempt_id: Option<String>,
    pub patch: StatusPatch,
    pub observation: Observation,
    pub next_check: NextCheck,
    /// Write the SNS message id → intent index with the change.
    pub index_message: Option<(String, PhoneNumber)>,
    /// Further facts the change was decided on; the write is refused if one no longer holds.
    pub expect: Expect,
    /// When the intent's data expires ([`crate::domain::intent::Intent::expires_at`]): the
    /// observation and the message-index entry written here expire with it. `None` (a change
    /// decided without reading the intent) lets the store derive it from the observation's time.
    pub retain_until: Option<DateTime<Utc>>,
    /// How the writes reach the store (one transaction, or in an order that a retry completes).
    pub commit: Commit,
    /// Observations carried along in the same write when the observation is carried
    /// ([`Commit::Carried`]; ignored otherwise): earlier events of the same SMS that change
    /// nothing, decided on the state this change starts from — End User Messaging's progress
    /// (the carrier's acceptance) logged before its delivery in one batch. Each is kept unless the
    /// intent carries it already (an earlier try's, then, which stays): no condition of its own.
    pub carried_along: Vec<Observation>,
}

impl Transition {
    /// Whether the transition writes anything on the intent item (else it is an observation
    /// under a condition: the condition alone is checked).
    pub fn changes_intent(&self) -> bool {
        let p = &self.patch;
        p.state.is_some()
            || p.increment_attempts
            || p.claim.is_some()
            || p.clear_claim
            || p.sns_message_id.is_some()
            || p.accepted_at.is_some()
            || p.final_at.is_some()
            || p.escalation.is_some()
            || p.add_conflict
            || p.last_error.is_some()
            || p.enqueued_at.is_some()
            || p.digest_id.is_some()
            || p.late_expected.is_some()
            || p.acknowledgement.is_some()
            || p.reconcile.is_some()
            || self.next_check != NextCheck::Keep
    }
}

/// How a transition's writes reach the store. Every mode keeps the transition's contract: the
/// state changes only if its conditions hold, the observation is stored once (its id is the
/// de-duplication key), and a retry of the same transition after a crash at any point ends with
/// both written. The two single-write modes save DynamoDB's transactional surcharge (a transaction
/// costs twice the write units) on the writes every delivered alert makes; a transition that
/// opens an escalation is always atomic (its open-escalations entry must exist exactly when the
/// escalation does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Commit {
    /// The state change, its observation and the index entries in one transaction.
    #[default]
    Atomic,
    /// The facts first — the observation and the message index, true whatever the intent's state
    /// now is (SNS answered this attempt) — then the conditional state change. A crash between
    /// them leaves the fact stored and the state behind, which the retry (or the lease's lapse,
    /// then reconciliation) catches up. For observations that do not depend on the state they are
    /// applied to: the sender's publish outcomes.
    FactsFirst,
    /// The observation carried on the intent item (an attribute named after its id, `obs#<id>`)
    /// in the conditional write that makes the change it describes: one single-item write, all or
    /// nothing, and no observation item of its own ([`IntentStore::observations`] reads it from
    /// the intent). For an observation whose content is decided on the intent's state (a delivery
    /// record's effect, or its progress), written once per intent and id: the write is refused
    /// when the intent already carries it, so a retry after a lost answer or a crash finds its own
    /// earlier try's change and counts it as applied. The message-index entry, when the
    /// transition has one, is written first (idempotent). Not for observations that can recur
    /// without bound on one intent (conflicting or late records): they would grow the item.
    Carried,
}

/// Conditions on the intent beyond its state, for a change decided on a presumed record (one not
/// read first): if the intent differs, the transition is refused with the current record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// The intent's current SNS message id is this one.
    pub sns_message_id: Option<String>,
    /// The intent has not been escalated.
    pub not_escalated: bool,
    /// Nobody has acknowledged the intent yet.
    pub not_acknowledged: bool,
    /// The intent is no level of an escalation chain (a presumed record assumes so: a chained
    /// intent's delivery keeps it due for its wait, which only a read record tells).
    pub unchained: bool,
    /// No escalation run holds the intent's lease at this moment (`SweepStore::lease_escalation`,
    /// released when the run marks it escalated): a change that must not slip between a sweep's
    /// decision, made on the intent as its lease read it, and the page or the chain's next level
    /// that follows it (an operator's resend).
    pub no_escalation_run_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TransitionOutcome {
    Applied,
    /// The observation is already stored: this exact transition happened before (a retry).
    AlreadyApplied,
    /// The intent was not in an allowed state; here is what it is now.
    Refused(Box<IntentRecord>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum PutOutcome {
    Created,
    /// An intent with this key exists already: the stored one.
    Exists(Box<IntentRecord>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    Claimed(Box<IntentRecord>),
    /// Not claimable (already claimed, accepted or final): the current record.
    NotClaimable(Box<IntentRecord>),
    Missing,
}

/// The ledger of intents and their observations.
pub trait IntentStore: Send + Sync {
    fn put_new(
        &self,
        record: &IntentRecord,
        next_check: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<PutOutcome>> + Send;
    fn get(&self, key: &IdempotencyKey) -> impl Future<Output = PortResult<Option<IntentRecord>>> + Send;
    fn transition(&self, t: Transition) -> impl Future<Output = PortResult<TransitionOutcome>> + Send;
    /// Conditionally moves a claimable intent to `sending` with a new attempt. The claimed
    /// intent's next check (the sweep's due-index entry) is no later than `lease_until`: the
    /// sweep finds a sender that died holding it by the lease's end, whatever the entry was.
    fn claim(
        &self,
        key: &IdempotencyKey,
        attempt_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<ClaimOutcome>> + Send;
    fn observations(&self, key: &IdempotencyKey) -> impl Future<Output = PortResult<Vec<Observation>>> + Send;
}

/// The SNS message id → intent index the sender writes and the status function reads.
pub trait MessageIndex: Send + Sync {
    fn lookup(&self, sns_message_id: &str) -> impl Future<Output = PortResult<Option<IndexEntry>>> + Send;
    /// Keeps delivery records whose message ids match no intent (yet), as few calls as the store
    /// allows. Idempotent: a record kept twice (a redelivered log event) is one item.
    fn keep_orphans(&self, orphans: &[OrphanRecord]) -> impl Future<Output = PortResult<()>> + Send;
    /// Looks many message ids up at once (the store splits them into as few calls as it can).
    /// An id in no index is absent from the answer; an unreadable entry fails that id alone.
    fn lookup_many(&self, sns_message_ids: &[String]) -> impl Future<Output = PortResult<IndexEntries>> + Send;
    /// The records kept as orphans under one message id, strongly consistent: a record that
    /// overtook the sender's MessageId write (it reached the status function first, too old to be
    /// waited for) is found here by the intent it belongs to. Expired items DynamoDB has not yet
    /// deleted may be among them (a record is a fact whatever its item's age).
    fn orphans_of(&self, sns_message_id: &str) -> impl Future<Output = PortResult<Vec<OrphanRecord>>> + Send;
}

/// Message id → the intent(s) it belongs to, as [`MessageIndex::lookup_many`] finds them.
pub type IndexEntries = std::collections::HashMap<String, PortResult<IndexEntry>>;

/// What an SNS message id is tied to: one intent, or a storm-mode digest and all its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The intent; for a digest, its first member (earliest deadline).
    pub key: IdempotencyKey,
    pub recipient: PhoneNumber,
    /// The digest the SMS was, with every member (`key` among them); `None`: a single alert.
    pub digest: Option<(DigestId, Vec<IdempotencyKey>)>,
}

impl IndexEntry {
    pub fn single(key: IdempotencyKey, recipient: PhoneNumber) -> Self {
        IndexEntry { key, recipient, digest: None }
    }

    /// Every intent the SMS covers: the digest's members, or the one intent.
    pub fn intents(&self) -> Vec<&IdempotencyKey> {
        match &self.digest {
            Some((_, members)) => members.iter().collect(),
            None => vec![&self.key],
        }
    }

    /// Whether the SMS covers intent `key`.
    pub fn covers(&self, key: &IdempotencyKey) -> bool {
        self.intents().contains(&key)
    }
}

/// One storm-mode digest as stored: a single SMS covering several claimed intents of one
/// recipient, recorded before it is published (so an operator can see it even if the sender dies
/// mid-publish), and indexed under its SNS message id once SNS accepts it.
#[derive(Debug, Clone, PartialEq)]
pub struct DigestRecord {
    pub id: DigestId,
    pub recipient: PhoneNumber,
    /// Earliest deadline first.
    pub members: Vec<IdempotencyKey>,
    pub segments: u32,
    pub created_at: DateTime<Utc>,
    /// When the store may forget it: the latest member's expiry.
    pub expires_at: DateTime<Utc>,
    /// The first delivery record of its SMS, as the status function received it: recorded once on
    /// the digest before it is applied to the members, so a member it never reached (the
    /// function ended half way and Lambda gave up on the batch) still learns it from the sweep.
    pub outcome: Option<LoggedRecord>,
}

/// A delivery-status log event as it was received: enough to apply it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedRecord {
    pub log_event_id: String,
    /// Epoch milliseconds of the log event.
    pub timestamp_ms: i64,
    /// The log message (holds a phone number: stored encrypted, never logged).
    pub message: String,
}

/// A recipient's pending alerts, earliest deadline first: what storm mode pulls into one digest
/// when the person's alerts are spread over the send queue. Eventually consistent (a GSI): an
/// entry may already be claimed or sent (its claim is then refused) and the newest may be missing
/// (its own queue message still brings it).
pub trait Backlog: Send + Sync {
    /// At most `limit` of `recipient`'s pending intents whose deadline is after `due_after`: each
    /// key with its deadline.
    fn pending_for(
        &self,
        recipient: &PhoneNumber,
        due_after: DateTime<Utc>,
        limit: usize,
    ) -> impl Future<Output = PortResult<Vec<(IdempotencyKey, DateTime<Utc>)>>> + Send;
}

/// The SMS recently sent to one recipient (storm mode's per-recipient budget), as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendLog {
    /// When each counted SMS went out (the newest `max_sms_per_window`).
    pub sent: Vec<DateTime<Utc>>,
    /// The version read; `None`: no log yet.
    pub version: Option<u64>,
}

/// The per-producer escalation cap's counter ([`crate::domain::escalation_cap`]): one per
/// producer and UTC hour.
pub trait EscalationQuota: Send + Sync {
    /// Counts one escalation of `producer` in the hour of `now`: its number in the hour, and
    /// whether the cap's notice was recorded as sent.
    fn count_escalation(
        &self,
        producer: &ProducerName,
        now: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<EscalationCount>> + Send;
    /// Records that the cap's notice for `producer` in the hour of `now` was sent.
    fn escalation_notice_sent(
        &self,
        producer: &ProducerName,
        now: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<()>> + Send;
}

/// Per-producer admission (`ProducerRate`): one counter per producer and window.
pub trait ProducerQuota: Send + Sync {
    /// Counts one request of `producer` in `window` unless `limit` are counted there already;
    /// whether it was admitted. One conditional write; nothing read.
    fn admit(
        &self,
        producer: &ProducerName,
        window: &RateWindow,
        limit: u32,
    ) -> impl Future<Output = PortResult<bool>> + Send;
}

/// The stack's SMS spend breaker ([`crate::domain::spend`]): one meter for the whole stack.
pub trait SpendMeter: Send + Sync {
    /// Counts `parts` in the UTC hour of `now` unless the breaker is open, or unless the hour's
    /// count would pass `ceiling` — then opens it (once: of two sends that would pass it, one
    /// opens it and both are withheld) and counts nothing.
    fn spend(
        &self,
        parts: u32,
        now: DateTime<Utc>,
        ceiling: SpendCeiling,
    ) -> impl Future<Output = PortResult<Spend>> + Send;
}

/// Storm mode's per-recipient send log. Its conditional append is also the per-recipient lock: of
/// two senders planning an SMS to the same person at the same moment, one wins the append and
/// sends; the other hands its claims back unsent.
pub trait SendBudget: Send + Sync {
    fn send_log(&self, recipient: &PhoneNumber) -> impl Future<Output = PortResult<SendLog>> + Send;
    /// Appends `at` to the log as `read` was, keeping the newest `keep` instants; false (nothing
    /// written) when another writer changed the log since it was read.
    fn record_send(
        &self,
        recipient: &PhoneNumber,
        read: &SendLog,
        at: DateTime<Utc>,
        keep: usize,
        expires_at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<bool>> + Send;
}

/// A phone's reply codes (issue 37, `domain::reply::code`): what each code it holds stands for,
/// since when, whether the SMS showing it was sent, and when its alert closed. The sender gives a
/// code before it sends; the replies function reads them and closes the one acknowledged.
pub trait ReplyCodes: Send + Sync {
    /// The codes `phone` holds, open or closed (read consistently: a code given a moment ago is
    /// there).
    fn held_codes(&self, phone: &PhoneNumber) -> impl Future<Output = PortResult<Vec<HeldCode>>> + Send;
    /// Gives `code` to `subject` at `at`: true when written; false (nothing written) when an open
    /// alert holds the code, or its alert closed less than `REUSE_AFTER` before `at` — another
    /// sender took it first, so the caller reads again and tries the next. The phone's codes are
    /// kept until `expires_at` (each write moves it).
    fn give_code(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<bool>> + Send;
    /// Records that the provider accepted the SMS showing `code` at `at`; false when the code is no
    /// longer `subject`'s open code (nothing written).
    fn code_sent(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<bool>> + Send;
    /// Closes `subject`'s code at `at`; false when it was closed already or is not `subject`'s.
    fn close_code(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<bool>> + Send;
}

/// What became of claiming a reply's confirmation SMS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmationClaim {
    /// This call took it: send the confirmation, once.
    Claimed,
    /// A copy of the same reply took it before: send nothing.
    AlreadyClaimed,
    /// The phone had its hour's confirmations already: send nothing (a reply loop stops here).
    Capped,
}

/// The confirmations answering replies (issue 37): at most one per reply, at most a cap per phone
/// per hour.
pub trait ReplyConfirmations: Send + Sync {
    /// Claims the confirmation of reply `inbound` from `phone`, counted in the UTC hour of
    /// `arrived` (the reply's arrival: the same for every copy of it), unless the phone has `cap`
    /// confirmations in that hour. Kept until `expires_at`.
    fn claim_confirmation(
        &self,
        phone: &PhoneNumber,
        inbound: &str,
        arrived: DateTime<Utc>,
        cap: u32,
        expires_at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<ConfirmationClaim>> + Send;
}

/// How starting a chain's level ended (`ChainLedger::start_level`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelStart {
    /// This call started the level: text its person (or page on-call), once.
    Started,
    /// A run before this one started it (and may have died before finishing): finish it — every
    /// step after the start is idempotent — with the reason that run started it for (`None`
    /// when it never started, only a later level did): the level moved on then, for that reason.
    StartedBefore { reason: Option<String> },
    /// Someone acknowledged the chain first: start nothing, at this level or any later.
    Acknowledged(crate::domain::acknowledgement::Acknowledgement),
    /// The root is gone (past its retention): nothing arbitrates any more.
    Missing,
}

/// Escalation chains (issue 37, `domain::chain`): the root intent's item arbitrates between an
/// acknowledgement and the start of the next level.
pub trait ChainLedger: Send + Sync {
    /// Starts `level` of the chain whose root is `root` for `reason` (kept with it): one
    /// conditional write on the root that an acknowledgement refuses, so of the two exactly one
    /// comes first.
    fn start_level(
        &self,
        root: &IdempotencyKey,
        level: u8,
        now: DateTime<Utc>,
        reason: &str,
    ) -> impl Future<Output = PortResult<LevelStart>> + Send;
}

/// The store of storm-mode digests.
pub trait DigestStore: Send + Sync {
    /// Records the digest before its SMS is published. Idempotent (the id is derived from the
    /// members, so a retried invocation with the same members writes the same record).
    fn put_digest(&self, digest: &DigestRecord) -> impl Future<Output = PortResult<()>> + Send;
    /// Ties SNS message `sns_message_id` to the digest and every member (one index entry, not one
    /// per member): the status function finds the members of a delivery record through it.
    fn index_digest_message(
        &self,
        sns_message_id: &str,
        digest: &DigestRecord,
    ) -> impl Future<Output = PortResult<()>> + Send;
    fn get_digest(&self, id: &DigestId) -> impl Future<Output = PortResult<Option<DigestRecord>>> + Send;
    /// Records the digest SMS's first delivery record (a later one changes nothing; idempotent).
    fn record_digest_outcome(
        &self,
        id: &DigestId,
        outcome: &LoggedRecord,
    ) -> impl Future<Output = PortResult<()>> + Send;
    /// The digests recorded for `recipient` between `from` and `to` (by their creation time):
    /// how reconciliation finds the digest an unknown outcome's SMS was when its sender ended
    /// before recording it on the members. Eventually consistent (an index): one recorded a
    /// moment ago may be missing.
    fn digests_to(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<Vec<DigestRecord>>> + Send;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrphanRecord {
    pub log_event_id: String,
    pub sns_message_id: String,
    pub log_group: String,
    /// The raw log message (contains a phone number: stored encrypted, never logged).
    pub message: String,
    pub received_at: DateTime<Utc>,
    /// When the store may forget it (hours, not the intents' 30 days: most orphans are other
    /// applications' SMS, and each holds someone's phone number).
    pub expires_at: DateTime<Utc>,
}

/// The escalations nobody has acknowledged yet (an operator's `ack` takes one off): the sweep
/// reports the oldest one's age every run, which the unacknowledged-escalation alarm reads.
pub trait EscalationBacklog: Send + Sync {
    /// When the oldest unacknowledged escalation was made; `None` when there is none.
    fn oldest_open_escalation(&self) -> impl Future<Output = PortResult<Option<DateTime<Utc>>>> + Send;
    /// Takes `key`'s escalation off the open list (an operator acknowledged it). Idempotent.
    fn close_escalation(&self, key: &IdempotencyKey) -> impl Future<Output = PortResult<()>> + Send;
}

/// Intents whose `next_check` has passed, oldest first within a partition, at most `limit` per
/// page: their keys (the index is eventually consistent and projects keys only; the caller reads
/// each intent from the table). The index is spread over partitions (so no one partition takes
/// every write); the sweep reads them all.
pub trait DueIndex: Send + Sync {
    /// Every partition of the index.
    fn due_shards(&self) -> Vec<String>;
    fn due(
        &self,
        shard: &str,
        now: DateTime<Utc>,
        limit: i32,
        after: Option<String>,
    ) -> impl Future<Output = PortResult<(Vec<IdempotencyKey>, Option<String>)>> + Send;
    /// Takes an escalation lease so overlapping runs do not both send, and returns the intent as
    /// it is now (read in the same write, never from the lagging index). `None`: another run holds
    /// the lease, the intent is escalated already, or it is delivered.
    fn lease_escalation(
        &self,
        key: &IdempotencyKey,
        run_id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<Option<IntentRecord>>> + Send;
    /// Sets the intent's place in the index; with `in_state`, only while the intent is still in
    /// that state (the caller decided on a record that may be older than the table).
    fn set_next_check(
        &self,
        key: &IdempotencyKey,
        next: NextCheck,
        in_state: Option<State>,
    ) -> impl Future<Output = PortResult<()>> + Send;
    /// Brings the intent's next check forward to `by` while it is in one of `while_in`: never
    /// later than the check it has (so no deadline's escalation waits for it), and never for an
    /// intent that has left those states (a settled intent is not put back in the index).
    /// A storm-mode digest's members are brought forward before its fate is applied to them, so
    /// a member the fan-out never reaches (a crash, a parked batch) learns it at the next sweep.
    fn bring_check_forward(
        &self,
        key: &IdempotencyKey,
        by: DateTime<Utc>,
        while_in: &[State],
    ) -> impl Future<Output = PortResult<()>> + Send;
}

/// The SQS send queue (intake → sender).
pub trait SendQueue: Send + Sync {
    /// Puts the intent on the send queue; an urgent one also on the urgent lane, which senders
    /// drain before their own batch (the normal message still wakes a sender when none runs).
    /// `delay`: hidden that long first (SQS's DelaySeconds, at most 15 minutes).
    fn enqueue(
        &self,
        key: &IdempotencyKey,
        lane: Lane,
        delay: std::time::Duration,
    ) -> impl Future<Output = PortResult<()>> + Send;
    /// Hides a received message of `lane` for `seconds` more (backoff before the next retry).
    fn delay_retry(
        &self,
        receipt_handle: &str,
        seconds: i32,
        lane: Lane,
    ) -> impl Future<Output = PortResult<()>> + Send;
    /// How many messages wait on `lane`'s queue, visible (SQS's approximate count): the work
    /// ahead of a new one there.
    fn backlog(&self, lane: Lane) -> impl Future<Output = PortResult<u64>> + Send;
}

/// A message taken from the urgent lane by a sender itself (no event source mapping drains it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
}

/// The urgent lane, as the sender drains it: alerts whose deadline leaves less than
/// [`crate::domain::storm::URGENT_SLACK`], taken before the invocation's own batch.
pub trait UrgentLane: Send + Sync {
    /// Up to `max` (≤ 10) visible urgent messages, without waiting.
    fn take_urgent(&self, max: i32) -> impl Future<Output = PortResult<Vec<LaneMessage>>> + Send;
    /// Deletes urgent messages that are finished with.
    fn urgent_done(&self, receipt_handles: &[String]) -> impl Future<Output = PortResult<()>> + Send;
}

/// What on-call receives for one escalated intent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EscalationMessage {
    pub idempotency_key: String,
    pub event_id: String,
    pub template: String,
    pub recipient_masked: String,
    pub deadline: DateTime<Utc>,
    pub state: State,
    pub reason: String,
    pub escalated_at: DateTime<Utc>,
    pub sns_message_id: Option<String>,
    /// One line per observation, oldest first.
    pub history: Vec<String>,
    /// The producer that submitted the alert (its name); absent for alerts from before producers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// This message also tells on-call that its producer reached its escalation cap for the hour
    /// (the reason says so): the producer's further escalations that hour are folded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub producer_cap_reached: bool,
}

pub trait EscalationQueue: Send + Sync {
    fn escalate(&self, message: &EscalationMessage) -> impl Future<Output = PortResult<()>> + Send;
}

/// A message ready for the SMS provider.
#[derive(Debug, Clone)]
pub struct SmsMessage<'a> {
    pub to: &'a PhoneNumber,
    pub body: &'a str,
    pub options: &'a SmsOptions,
    /// What the SMS carries, by key. A provider that echoes a context in its delivery events (End
    /// User Messaging) sends it, and every event of this SMS then names its alert and attempt; SNS
    /// has nowhere to put it.
    pub context: &'a SendContext,
    /// When the SMS stops being worth delivering. A provider that can (End User Messaging's
    /// `TimeToLive`) tells the carrier to give up then, and says so with an event.
    pub worth_until: DateTime<Utc>,
}

/// How a publish ended, in the only classes that matter for "at most once".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    Accepted {
        message_id: String,
    },
    /// The provider proved it did not accept (throttled, 5xx, connection refused): safe to retry.
    Retryable {
        error: String,
    },
    /// The provider refused for good; `refusal` says whose problem it is.
    Rejected {
        error: String,
        refusal: Refusal,
    },
    /// The request may have reached the provider (timeout or connection loss after sending).
    Unknown {
        error: String,
    },
}

pub trait SmsGateway: Send + Sync {
    fn publish(&self, message: SmsMessage<'_>) -> impl Future<Output = PublishOutcome> + Send;
    /// Whether this provider's delivery records name their SMS's context (End User Messaging
    /// echoes it in every event): then nothing needs the message-id index to find an SMS's
    /// alert, and the sender writes none. SNS's records carry only the message id.
    fn records_name_their_alert(&self) -> bool;
    /// Whether the provider holds the number as opted out (SNS then accepts a publish and drops
    /// it; End User Messaging refuses it).
    fn is_opted_out(&self, recipient: &PhoneNumber) -> impl Future<Output = PortResult<bool>> + Send;
    /// Takes the number off the provider's opt-out list (SNS OptInPhoneNumber, End User Messaging
    /// DeleteOptedOutNumber), which AWS allows once per 30 days per number. Called only by the
    /// sender, only for a number an operator re-enabled with `--opt-in` (audited): no operator
    /// role may call either API.
    fn opt_in(&self, recipient: &PhoneNumber) -> impl Future<Output = PortResult<OptIn>> + Send;
}

/// What the provider answered to an opt-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptIn {
    /// Off the list (or it was not on it).
    Done,
    /// The provider refused (typically: opted in once already within 30 days); its words, masked.
    Refused(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuppressionEvidence {
    pub log_event_id: String,
    pub provider_response: Option<String>,
    pub at: DateTime<Utc>,
    pub intent_key: String,
    pub table_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suppression {
    pub since: DateTime<Utc>,
    pub reason: String,
}

/// Where a recipient stands before a send, in one read of the registry.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    Clear,
    Suppressed(Suppression),
    /// Re-enabled by an operator and not yet checked against the provider's opt-out list: a
    /// number that opted out stays opted out there until it is opted back in or the person
    /// replies START. `opt_in`: the operator asked (audited) for the sender to opt it back in.
    ReEnabledUnchecked {
        opt_in: bool,
    },
}

/// The recipient registry: who must not be sent to.
pub trait RecipientRegistry: Send + Sync {
    fn suppression(&self, recipient: &PhoneNumber) -> impl Future<Output = PortResult<Option<Suppression>>> + Send;
    /// [`Self::suppression`] and the re-enabled-but-unchecked mark, from the same read.
    fn standing(&self, recipient: &PhoneNumber) -> impl Future<Output = PortResult<Standing>> + Send;
    /// The provider says the re-enabled number is not opted out (or the sender opted it back in):
    /// clears the mark and the opt-in request.
    fn opt_out_checked(&self, recipient: &PhoneNumber) -> impl Future<Output = PortResult<()>> + Send;
    fn suppress(
        &self,
        recipient: &PhoneNumber,
        evidence: &SuppressionEvidence,
    ) -> impl Future<Output = PortResult<()>> + Send;
    /// The audited way back: who, why and when are recorded with the change.
    fn re_enable(
        &self,
        recipient: &PhoneNumber,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<bool>> + Send;
}

/// The recipients roster (`domain::roster`): whom tocsin may text. Read whole (it is short: the
/// people and prefixes an on-call tool pages).
pub trait RecipientRoster: Send + Sync {
    fn roster(&self) -> impl Future<Output = PortResult<Roster>> + Send;
}

/// Every template's chain policy (`domain::chain_policy`): the chain an alert gets when its
/// request names none. Read whole (one per template at most).
pub trait ChainPolicySource: Send + Sync {
    fn chain_policies(&self) -> impl Future<Output = PortResult<ChainPolicies>> + Send;
}

/// A rejected event that has no caller to answer (EventBridge): kept for a human, never dropped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectedEvent {
    pub reason: String,
    pub errors: serde_json::Value,
    /// The original event as received (may hold a phone number: the queue is encrypted).
    pub event: serde_json::Value,
    pub at: DateTime<Utc>,
}

pub trait RejectSink: Send + Sync {
    fn reject(&self, event: &RejectedEvent) -> impl Future<Output = PortResult<()>> + Send;
}

/// Why a log search did not answer.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("the log search was throttled")]
    Throttled,
    #[error(transparent)]
    Failed(#[from] PortError),
}

/// What a log search looks for: the records of one attempt's SMS.
#[derive(Debug, Clone, Copy)]
pub struct SearchFor<'a> {
    pub recipient: &'a PhoneNumber,
    /// The alert; its events name it when it went out alone (End User Messaging).
    pub key: &'a IdempotencyKey,
    /// The storm-mode digest its SMS was, when known; its events name the digest.
    pub digest: Option<&'a DigestId>,
}

impl SearchFor<'_> {
    /// Whether an event's context is this search's: it names `stack` (the stack searching) and
    /// the alert, or its digest. Any other context — another stack's, though it derived the same
    /// key from the same business event — is not.
    pub fn named_by(&self, stack: &str, context: Option<&SendContext>) -> bool {
        use crate::domain::send_context::Subject;
        let Some(context) = context.filter(|c| c.stack == stack) else { return false };
        match &context.subject {
            Subject::Alert { key, .. } => key == self.key,
            Subject::Digest { id } => self.digest == Some(id),
            Subject::Reply { .. } => false,
        }
    }
}

/// Searches the delivery logs for the records of one attempt's SMS: under SNS the account's two
/// delivery-status groups, for records to the recipient (the only thing an SNS record shows);
/// under End User Messaging the stack's own event group, for events whose context names the
/// alert or its digest.
pub trait DeliveryLogSearch: Send + Sync {
    fn records_for(
        &self,
        what: SearchFor<'_>,
        window: Window,
        max: usize,
    ) -> impl Future<Output = Result<Vec<Found>, SearchError>> + Send;
}
