//! Sender: publishes each intent at most once under at-least-once delivery, and records an honest
//! "unknown" when it cannot know.
//!
//! Per SQS record: claim (conditional write, with a lease) → stale? → suppressed? → rate limit →
//! publish → record the outcome with a write conditioned on still holding the claim. Redeliveries
//! and concurrent copies find the intent claimed, accepted or final, and do nothing.
//!
//! Storm mode (`TOCSIN_STORM_MODE=on`): the batch's records are claimed first, then grouped by
//! recipient; a recipient with two or more claimed intents gets one digest SMS covering them all
//! (`tocsin::domain::storm`), recorded (`DIGEST#`) before it is published and indexed under its
//! SNS message id after, and every member records the outcome as if it had been sent alone. The
//! claims are what make it safe: a digest holds only intents whose claim this invocation holds,
//! so an intent is never in two digests, nor sent both alone and in a digest.
//!
//! Every wait is bounded by the invocation's deadline: a claim is never held across a wait that
//! could outlast the invocation (the intent goes back to `queued` unsent instead), and the write
//! after a successful publish is retried with backoff until shortly before the deadline, because
//! giving up on it turns an SMS that went out into an "outcome unknown" page.

use std::time::Duration;

use futures::StreamExt;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// The send-rate limiter on the handler's own [`Clock`] (time since the epoch): the same limiter
/// runs on the wall clock in Lambda and on simulated time in the simulation. (governor's default
/// clock, quanta, also calibrates itself at start-up by spinning the CPU, ~0.6 ms measured.)
type PartLimiter<C> = RateLimiter<NotKeyed, InMemoryState, RateClock<C>, NoOpMiddleware<Duration>>;

/// A [`Clock`] as governor reads one: the time since the Unix epoch.
pub struct RateClock<C>(C);

impl<C: Clock> governor::clock::Clock for RateClock<C> {
    type Instant = Duration;
    fn now(&self) -> Duration {
        since_epoch(self.0.now())
    }
}

fn since_epoch(t: DateTime<Utc>) -> Duration {
    t.signed_duration_since(DateTime::UNIX_EPOCH).to_std().unwrap_or_default()
}

/// Kept back from the invocation's deadline, after the publish itself, for recording its outcome.
const RECORD_RESERVE: Duration = Duration::from_secs(3);
/// First wait before retrying a failed write of a publish's outcome (doubles, with jitter).
const RECORD_RETRY_BASE: Duration = Duration::from_millis(100);
const RECORD_RETRY_MAX: Duration = Duration::from_secs(4);
use std::collections::BTreeMap;

use tocsin::adapters::sqs::SendRequest;
use tocsin::config::SenderConfig;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::storm::{self, Digest, DigestId, Lane, PendingAlert};
use tocsin::domain::sweep::next_check;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{
    Backlog, ClaimOutcome, Clock, Commit, DigestRecord, DigestStore, DueIndex, Entropy, IntentStore, NextCheck,
    PortError, PublishOutcome, RecipientRegistry, SendBudget, SendQueue, SmsGateway, SmsMessage, Standing, StatusPatch,
    Suppression, Transition, TransitionOutcome, UrgentLane, after, between, new_id, time_left,
};
use tocsin::telemetry::{Metrics, Unit};

/// How one record ended; `Retry` reports it as a batch item failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Published {
        sns_message_id: String,
    },
    /// Redelivered or concurrent copy: the intent was already accepted or final.
    Duplicate(State),
    /// Another attempt holds the claim right now: the message is kept (hidden until that claim's
    /// lease ends), since the holder may still hand the intent back and then needs it.
    HeldElsewhere,
    LeaseExpiredUnknown,
    Stale,
    Suppressed,
    Rejected,
    RetriesExhausted,
    Unknown,
    Malformed,
    Missing,
    Retry,
    /// Claimed, then put back unsent: the send rate left no time to publish in this invocation.
    Deferred,
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Published { .. } => "published",
            Outcome::Duplicate(_) => "duplicate",
            Outcome::HeldElsewhere => "held_elsewhere",
            Outcome::LeaseExpiredUnknown => "lease_expired_unknown",
            Outcome::Stale => "stale",
            Outcome::Suppressed => "suppressed",
            Outcome::Rejected => "rejected",
            Outcome::RetriesExhausted => "retries_exhausted",
            Outcome::Unknown => "unknown",
            Outcome::Malformed => "malformed",
            Outcome::Missing => "missing",
            Outcome::Retry => "throttled_or_retry",
            Outcome::Deferred => "deferred_rate",
        }
    }
}

/// An intent whose claim this invocation holds, with the SQS message that brought it (none for
/// one pulled from the recipient's backlog: its own message is still on the queue).
struct Claimed<'m> {
    record: IntentRecord,
    attempt_id: String,
    /// The message and the lane it came from (to hand it back on the right queue).
    msg: Option<Via<'m>>,
    started: DateTime<Utc>,
}

/// A queue message and its lane.
type Via<'m> = (&'m SqsMessage, Lane);

/// Urgent messages taken before a batch: SQS's most per call.
const URGENT_TAKE: i32 = 10;
/// A batch whose oldest message waited this long on the queue shows a backlog: the sender takes
/// the urgent lane first. A batch without a wait leaves it alone (no call): urgent alerts also sit
/// on the send queue, and come through it at once when there is no backlog.
pub const URGENT_POLL_AFTER: Duration = Duration::from_secs(5);

/// Claims made at once when pulling a backlog.
const PULL_CONCURRENCY: usize = 8;

/// Where a storm-mode send's outcome goes: a record of the batch, or a pulled intent (whose own
/// queue message, delivered later, finds it sent and does nothing).
type Slot = Option<usize>;

/// A record after its claim: held (to be sent), or already finished.
enum Claim<'m> {
    Held(Box<Claimed<'m>>),
    Done(Outcome),
}

pub struct Sender<S, R, G, Q, C: Clock> {
    pub store: S,
    pub registry: R,
    pub gateway: G,
    pub queue: Q,
    pub clock: C,
    pub config: SenderConfig,
    limiter: PartLimiter<C>,
}

impl<
    S: IntentStore + DueIndex + DigestStore + Backlog + SendBudget,
    R: RecipientRegistry,
    G: SmsGateway,
    Q: SendQueue + UrgentLane,
    C: Clock + Entropy + Clone,
> Sender<S, R, G, Q, C>
{
    pub fn new(store: S, registry: R, gateway: G, queue: Q, clock: C, config: SenderConfig) -> Self {
        // One part at a time at this instance's share of the account rate (burst 1).
        let quota = Quota::with_period(config.instance_part_interval()).unwrap_or(Quota::per_second(NON_ZERO_ONE));
        let limiter = RateLimiter::direct_with_clock(quota, RateClock(clock.clone()));
        Sender { store, registry, gateway, queue, clock, config, limiter }
    }

    /// Processes a batch concurrently; failed records are reported alone. `deadline` is when Lambda
    /// ends the invocation (its context deadline).
    pub async fn handle(&self, event: SqsEvent, deadline: DateTime<Utc>) -> SqsBatchResponse {
        // Earliest deadline first: behind a backlog, the urgent lane goes before the batch (and
        // first to the rate limiter).
        let urgent = self.take_urgent(&event.records).await;
        let records: Vec<Via<'_>> =
            urgent.iter().map(|m| (m, Lane::Urgent)).chain(event.records.iter().map(|m| (m, Lane::Normal))).collect();
        let outcomes = if self.config.storm.enabled {
            self.handle_storm(&records, deadline).await
        } else {
            futures::future::join_all(records.iter().map(|(m, lane)| self.process_from(m, *lane, deadline))).await
        };
        let mut metrics = Metrics::new("sender");
        let mut response = SqsBatchResponse::default();
        let mut urgent_done = Vec::new();
        for ((msg, lane), outcome) in records.iter().zip(outcomes) {
            metrics.count(outcome.name(), 1);
            let unfinished =
                matches!(outcome, Outcome::Retry | Outcome::Malformed | Outcome::Deferred | Outcome::HeldElsewhere);
            match lane {
                Lane::Normal if unfinished => {
                    if let Some(id) = &msg.message_id {
                        let mut f = BatchItemFailure::default();
                        f.item_identifier = id.clone();
                        response.batch_item_failures.push(f);
                    }
                }
                // The urgent lane has no event source mapping: what is finished is deleted here;
                // the rest comes back after its delay or visibility timeout.
                Lane::Urgent if !unfinished => urgent_done.extend(msg.receipt_handle.clone()),
                _ => {}
            }
        }
        if !urgent.is_empty() {
            metrics.count("urgent_taken", urgent.len() as u64);
        }
        metrics.flush();
        if !urgent_done.is_empty()
            && let Err(e) = self.queue.urgent_done(&urgent_done).await
        {
            tracing::warn!(error = %e, "urgent messages not deleted; they come back and find their intents sent");
        }
        response
    }

    /// Up to [`URGENT_TAKE`] messages of the urgent lane, when this batch shows a backlog (its
    /// oldest message waited [`URGENT_POLL_AFTER`] or more); none otherwise, and none when the
    /// lane cannot be read (its alerts also sit on the send queue).
    async fn take_urgent(&self, batch: &[SqsMessage]) -> Vec<SqsMessage> {
        let now_ms = self.clock.now().timestamp_millis();
        let waited_ms = batch
            .iter()
            .filter_map(|m| m.attributes.get("SentTimestamp").and_then(|t| t.parse::<i64>().ok()))
            .map(|sent| now_ms.saturating_sub(sent))
            .max();
        if waited_ms.is_none_or(|w| w < URGENT_POLL_AFTER.as_millis() as i64) {
            return Vec::new();
        }
        match self.queue.take_urgent(URGENT_TAKE).await {
            Ok(taken) => taken
                .into_iter()
                .map(|m| {
                    let mut msg = SqsMessage::default();
                    msg.message_id = Some(m.message_id);
                    msg.receipt_handle = Some(m.receipt_handle);
                    msg.body = Some(m.body);
                    msg
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "urgent lane not read; its alerts also wait on the send queue");
                Vec::new()
            }
        }
    }

    /// One record of the send queue on its own: claim, then send.
    pub async fn process(&self, msg: &SqsMessage, deadline: DateTime<Utc>) -> Outcome {
        self.process_from(msg, Lane::Normal, deadline).await
    }

    async fn process_from(&self, msg: &SqsMessage, lane: Lane, deadline: DateTime<Utc>) -> Outcome {
        match self.claim_message(msg, lane).await {
            Claim::Done(outcome) => outcome,
            Claim::Held(c) => {
                let outcome = self.send_claimed(&c, deadline).await;
                self.log_attempt(&c, &outcome, None);
                outcome
            }
        }
    }

    /// Storm mode: every record claimed first, then one send per recipient — the intent alone, or
    /// one digest of all the recipient's intents claimed here. Outcomes in the records' order.
    async fn handle_storm(&self, records: &[Via<'_>], deadline: DateTime<Utc>) -> Vec<Outcome> {
        let claims = futures::future::join_all(records.iter().map(|(m, lane)| self.claim_message(m, *lane))).await;
        let mut outcomes: Vec<Option<Outcome>> = vec![None; records.len()];
        let mut by_recipient: BTreeMap<String, Vec<(Slot, Claimed<'_>)>> = BTreeMap::new();
        for (i, claim) in claims.into_iter().enumerate() {
            match claim {
                Claim::Done(outcome) => outcomes[i] = Some(outcome),
                Claim::Held(c) => {
                    by_recipient.entry(c.record.intent.recipient.expose().to_owned()).or_default().push((Some(i), *c))
                }
            }
        }
        // Earliest deadline first: the group with the earliest deadline is started first (and so
        // reaches the rate limiter first).
        let mut groups: Vec<_> = by_recipient.into_values().collect();
        groups.sort_by_key(|g| g.iter().map(|(_, c)| c.record.intent.deadline).min());
        let sent = futures::future::join_all(groups.into_iter().map(|group| self.send_group(group, deadline)));
        let mut pulled = Metrics::new("sender");
        for (slot, outcome) in sent.await.into_iter().flatten() {
            match slot {
                Some(i) => outcomes[i] = Some(outcome),
                // A pulled intent has no record in this batch: counted apart, by how it ended.
                None => pulled.count(
                    if matches!(outcome, Outcome::Published { .. }) { "pulled_sent" } else { "pulled_other" },
                    1,
                ),
            }
        }
        pulled.flush();
        outcomes.into_iter().map(|o| o.unwrap_or(Outcome::Retry)).collect()
    }

    /// Storm mode: the recipient's other pending alerts (keys and deadlines, earliest deadline
    /// first, from the backlog index), beyond those `group` holds, as many as a digest has room
    /// for. Unreadable: none (a failure here only means a smaller digest).
    async fn backlog_of(
        &self,
        recipient: &PhoneNumber,
        group: &[(Slot, Claimed<'_>)],
        now: DateTime<Utc>,
    ) -> Vec<(IdempotencyKey, DateTime<Utc>)> {
        let room = storm::BACKLOG_PULL.min(storm::MAX_DIGEST_MEMBERS.saturating_sub(group.len()));
        if room == 0 {
            return Vec::new();
        }
        let held: std::collections::HashSet<&IdempotencyKey> =
            group.iter().map(|(_, c)| &c.record.intent.key).collect();
        // Asked for `room` beyond the group's own, which the index may list too.
        match self.store.pending_for(recipient, now, room + group.len()).await {
            Ok(found) => found.into_iter().filter(|(k, _)| !held.contains(k)).take(room).collect(),
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "backlog not read; sending what this batch holds");
                Vec::new()
            }
        }
    }

    /// Claims `backlog` (conditionally, [`PULL_CONCURRENCY`] at once) and adds what this
    /// invocation wins to `group`; their own queue messages, delivered later, find them sent.
    async fn claim_backlog<'m>(
        &self,
        group: &mut Vec<(Slot, Claimed<'m>)>,
        backlog: Vec<(IdempotencyKey, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) {
        let lease_until =
            now + chrono::Duration::from_std(self.config.claim_lease).unwrap_or(chrono::Duration::minutes(5));
        let claims = futures::stream::iter(backlog)
            .map(|(key, _)| async move {
                let attempt_id = new_id(&self.clock);
                match self.store.claim(&key, &attempt_id, now, lease_until).await {
                    Ok(ClaimOutcome::Claimed(record)) => Some((*record, attempt_id)),
                    // Claimed or sent by someone else meanwhile, or gone: not ours.
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(key = key.short(), error = %e, "backlog claim failed; its own message will bring it");
                        None
                    }
                }
            })
            .buffer_unordered(PULL_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        for (mut record, attempt_id) in claims.into_iter().flatten() {
            if record.status.next_check.is_none_or(|c| c > lease_until) {
                let key = record.intent.key.clone();
                match self.store.set_next_check(&key, NextCheck::At(lease_until), Some(State::Sending)).await {
                    Ok(()) => record.status.next_check = Some(lease_until),
                    Err(e) => tracing::warn!(key = key.short(), error = %e, "lease check not indexed"),
                }
            }
            group.push((None, Claimed { record, attempt_id, msg: None, started: self.clock.now() }));
        }
    }

    /// Claims the intent a record names. Held: this invocation must now send it or hand it back.
    async fn claim_message<'m>(&self, msg: &'m SqsMessage, lane: Lane) -> Claim<'m> {
        let started = self.clock.now();
        let Some(req) = msg.body.as_deref().and_then(|b| serde_json::from_str::<SendRequest>(b).ok()) else {
            tracing::warn!(
                sqs_message_id = msg.message_id.as_deref().unwrap_or("?"),
                "malformed send request; left for the dead-letter queue"
            );
            return Claim::Done(Outcome::Malformed);
        };
        let key = req.key;
        let attempt_id = new_id(&self.clock);
        let now = self.clock.now();
        let lease_until =
            now + chrono::Duration::from_std(self.config.claim_lease).unwrap_or(chrono::Duration::minutes(5));
        let mut record = match self.store.claim(&key, &attempt_id, now, lease_until).await {
            Ok(ClaimOutcome::Claimed(r)) => *r,
            Ok(ClaimOutcome::NotClaimable(current)) => {
                return Claim::Done(self.not_claimable(*current, (msg, lane), now).await);
            }
            Ok(ClaimOutcome::Missing) => {
                tracing::warn!(key = key.short(), "send request for an intent that does not exist; dropped");
                return Claim::Done(Outcome::Missing);
            }
            Err(e) => {
                tracing::warn!(key = key.short(), error = %e, "claim failed; will retry");
                return Claim::Done(Outcome::Retry);
            }
        };
        // The sweep must look at a claimed intent by the lease's end at the latest (a sender that
        // died holding it). The claim kept the due-index entry, which is nearly always earlier;
        // when it is later (an intent re-enqueued a while ago) or absent, it is moved here.
        if record.status.next_check.is_none_or(|c| c > lease_until) {
            match self.store.set_next_check(&key, NextCheck::At(lease_until), Some(State::Sending)).await {
                Ok(()) => record.status.next_check = Some(lease_until),
                // The send goes on: SQS redelivers the message of a sender that dies, and the
                // claim's lease still marks the outcome unknown then.
                Err(e) => tracing::warn!(key = key.short(), error = %e, "lease check not indexed"),
            }
        }
        Claim::Held(Box::new(Claimed { record, attempt_id, msg: Some((msg, lane)), started }))
    }

    fn log_attempt(&self, c: &Claimed<'_>, outcome: &Outcome, digest: Option<&DigestId>) {
        let sns_id = match outcome {
            Outcome::Published { sns_message_id } => sns_message_id.as_str(),
            _ => "",
        };
        tracing::info!(
            key = c.record.intent.key.short(),
            recipient = %c.record.intent.recipient.masked(),
            sns_message_id = sns_id,
            outcome = outcome.name(),
            attempt = c.record.status.attempts + 1,
            digest = digest.map_or("", DigestId::short),
            duration_ms = self.clock.now().signed_duration_since(c.started).num_milliseconds().max(0) as u64,
            "send attempt finished"
        );
    }

    async fn not_claimable(&self, current: IntentRecord, (msg, lane): Via<'_>, now: DateTime<Utc>) -> Outcome {
        let s = &current.status;
        if s.state == State::Sending
            && let Some(lease_until) = s.lease_until.filter(|l| *l > now)
        {
            // Another attempt holds it (a concurrent copy of this message, or a digest that pulled
            // it from the backlog). Its outcome is not known yet: if the holder hands the intent
            // back unsent, this message is what brings it round again. Keep it, hidden until the
            // holder's lease ends; by then the intent is accepted (and the message is deleted as
            // a duplicate) or claimable again.
            let wait = lease_until.signed_duration_since(now).to_std().unwrap_or_default();
            if let Some(handle) = msg.receipt_handle.as_deref() {
                let delay = wait.max(Duration::from_secs(1)).min(Duration::from_secs(12 * 3600));
                if let Err(e) = self.queue.delay_retry(handle, delay.as_secs() as i32, lane).await {
                    tracing::warn!(error = %e, "could not hide the message until the claim's lease ends; the visibility timeout applies");
                }
            }
            return Outcome::HeldElsewhere;
        }
        if s.state == State::Sending && s.lease_until.is_some_and(|l| l <= now) {
            // The attempt that holds the claim never reported back: it may have published.
            let aid = s.attempt_id.clone().unwrap_or_default();
            let mut t = self.settle(
                &current,
                &aid,
                State::SendUnknown,
                ObservationKind::SendUnknown {
                    attempt_id: aid.clone(),
                    cause: "claim lease expired with no recorded result".into(),
                },
                StatusPatch { clear_claim: true, ..Default::default() },
                now,
            );
            // Its own fact, not the attempt's: the attempt may have stored its outcome already
            // (then its state write is what never landed).
            t.observation.id = tocsin::domain::observation::lease_expired_id(&aid);
            return match self.store.transition(t).await {
                Ok(_) => Outcome::LeaseExpiredUnknown,
                Err(_) => Outcome::Retry,
            };
        }
        Outcome::Duplicate(s.state)
    }

    /// A transition out of `sending` held by `attempt_id`, with its observation.
    fn settle(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        to: State,
        kind: ObservationKind,
        mut patch: StatusPatch,
        now: DateTime<Utc>,
    ) -> Transition {
        patch.state = Some(to);
        if to.is_final() {
            patch.final_at = Some(now);
        }
        let mut after = record.clone();
        after.status.state = to;
        if let Some(a) = patch.accepted_at {
            after.status.accepted_at = Some(a);
        }
        if let Some(late) = patch.late_expected {
            after.status.late_expected = Some(late);
        }
        // Written only when it must move earlier or out: an indexed check earlier than needed
        // stays (the sweep reads the intent then and moves it on), which saves the due-index a
        // delete and a put on the happy path.
        let next = match next_check(&after, now, &self.config.sweep) {
            None => NextCheck::Remove,
            Some(t) if record.status.next_check.is_some_and(|current| current <= t) => NextCheck::Keep,
            Some(t) => NextCheck::At(t),
        };
        let tag = match &kind {
            ObservationKind::Accepted { .. } => "accepted",
            ObservationKind::PublishRetryable { .. } => "retryable",
            ObservationKind::PublishRejected { .. } => "rejected",
            ObservationKind::SendUnknown { .. } => "unknown",
            ObservationKind::Deferred { .. } => "deferred",
            ObservationKind::Suppressed { .. } => "suppressed",
            ObservationKind::Stale { .. } => "stale",
            _ => "other",
        };
        Transition {
            key: record.intent.key.clone(),
            from: vec![State::Sending],
            attempt_id: Some(attempt_id.to_owned()),
            patch,
            observation: Observation::new(format!("attempt:{attempt_id}:{tag}"), now, kind).with_state(to),
            next_check: next,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            // What SNS answered is a fact whatever the intent's state now is: it is stored (with
            // the message index) before the state changes, so a crash between them never loses
            // the MessageId, and a delivery record can find the intent while it is still `sending`.
            commit: Commit::FactsFirst,
        }
    }

    async fn record(&self, t: Transition) -> Result<(), PortError> {
        self.record_until(t, None).await
    }

    /// Writes an attempt's outcome; with a deadline, a failed write (throttled beyond the SDK's own
    /// retries, a 5xx, a transaction conflict) is tried again with backoff while time is left.
    async fn record_until(&self, t: Transition, deadline: Option<DateTime<Utc>>) -> Result<(), PortError> {
        match self.transition_until(t, deadline).await? {
            TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied => Ok(()),
            TransitionOutcome::Refused(current) => {
                tracing::warn!(key = current.intent.key.short(), state = %current.status.state, "claim lost before the outcome was recorded");
                Ok(())
            }
        }
    }

    /// `store.transition`, tried again on failure with backoff until `deadline` (if any).
    async fn transition_until(
        &self,
        t: Transition,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<TransitionOutcome, PortError> {
        let key = t.key.short().to_owned();
        retry_until(&self.clock, deadline, &key, "recording the attempt's outcome", || self.store.transition(t.clone()))
            .await
    }

    /// Waits for the send rate to allow `parts` SMS parts, unless that would take longer than
    /// `budget`. False: out of time (the parts taken so far are simply not used).
    async fn wait_for_rate(&self, parts: u32, budget: Duration) -> bool {
        let give_up_at = after(self.clock.now(), budget);
        for _ in 0..parts.max(1) {
            loop {
                let not_until = match self.limiter.check() {
                    Ok(()) => break,
                    Err(not_until) => not_until,
                };
                let free_at = after(self.clock.now(), not_until.wait_time_from(since_epoch(self.clock.now())));
                if free_at > give_up_at {
                    return false;
                }
                self.clock.sleep_until(free_at).await;
            }
        }
        true
    }

    /// Sends one claimed intent alone.
    async fn send_claimed(&self, c: &Claimed<'_>, deadline: DateTime<Utc>) -> Outcome {
        let (record, attempt_id, msg) = (&c.record, c.attempt_id.as_str(), c.msg);
        let intent = &record.intent;
        let now = self.clock.now();
        // Stale: a late SMS about something already handled is worse than none.
        if now >= intent.deadline {
            return self.stale(c, now).await;
        }
        match self.standing(&intent.recipient, now).await {
            Ok(Standing::Suppressed(s)) => return self.suppressed(c, s, now).await,
            Ok(Standing::Clear | Standing::ReEnabledUnchecked) => {}
            Err(e) => {
                tracing::warn!(key = intent.key.short(), error = %e, "registry or opt-out check unavailable; releasing the claim");
                return self.release(record, attempt_id, &e.to_string(), msg, now, false).await;
            }
        }
        self.publish_alone(c, deadline).await
    }

    /// Publishes a claimed intent's own text (its recipient already checked) and records it.
    async fn publish_alone(&self, c: &Claimed<'_>, deadline: DateTime<Utc>) -> Outcome {
        let intent = &c.record.intent;
        // The rate wait must leave time to publish and to record the outcome before the
        // invocation ends; otherwise the claim goes back unsent, never held past the deadline.
        let parts = intent.segments.segments;
        if !self.wait_for_rate(parts, self.rate_budget(deadline)).await {
            return self.defer(&c.record, &c.attempt_id, parts, c.msg).await;
        }
        let options = intent.sms.or_defaults(&self.config.sms_defaults);
        let outcome = self
            .gateway
            .publish(SmsMessage { to: &intent.recipient, body: intent.body.expose(), options: &options })
            .await;
        self.record_publish(c, &outcome, None, deadline).await
    }

    /// How long a rate wait may last: what leaves time to publish and record before `deadline`.
    fn rate_budget(&self, deadline: DateTime<Utc>) -> Duration {
        time_left(&self.clock, deadline).saturating_sub(self.config.publish_timeout + RECORD_RESERVE)
    }

    /// Past its deadline: not sent (the sweep escalates it).
    async fn stale(&self, c: &Claimed<'_>, now: DateTime<Utc>) -> Outcome {
        let t = self.settle(
            &c.record,
            &c.attempt_id,
            State::Stale,
            ObservationKind::Stale { deadline: c.record.intent.deadline },
            StatusPatch { clear_claim: true, ..Default::default() },
            now,
        );
        self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Stale)
    }

    async fn suppressed(&self, c: &Claimed<'_>, s: Suppression, now: DateTime<Utc>) -> Outcome {
        let t = self.settle(
            &c.record,
            &c.attempt_id,
            State::Suppressed,
            ObservationKind::Suppressed { registry_reason: s.reason },
            StatusPatch { clear_claim: true, ..Default::default() },
            now,
        );
        self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Suppressed)
    }

    /// The recipient's standing in the registry. Re-enabled by an operator: SNS may still hold the
    /// number as opted out, and would accept the publish and drop it — asked once, before the
    /// first send after re-enabling.
    async fn standing(&self, recipient: &PhoneNumber, now: DateTime<Utc>) -> Result<Standing, PortError> {
        match self.registry.standing(recipient).await? {
            Standing::ReEnabledUnchecked => {
                if self.gateway.is_opted_out(recipient).await? {
                    Ok(Standing::Suppressed(Suppression {
                        since: now,
                        reason:
                            "re-enabled, but SNS still holds the number as opted out: the person must reply START, \
                                 or re-enable with --opt-in"
                                .into(),
                    }))
                } else {
                    self.registry.opt_out_checked(recipient).await.map(|()| Standing::Clear)
                }
            }
            other => Ok(other),
        }
    }

    /// Records what SNS answered for the SMS that covered `c` (alone, or as a member of `digest`).
    async fn record_publish(
        &self,
        c: &Claimed<'_>,
        outcome: &PublishOutcome,
        digest: Option<&DigestId>,
        deadline: DateTime<Utc>,
    ) -> Outcome {
        let (record, attempt_id, msg) = (&c.record, c.attempt_id.as_str(), c.msg);
        let intent = &record.intent;
        let now = self.clock.now();
        match outcome {
            PublishOutcome::Accepted { message_id } => {
                let mut t = self.settle(
                    record,
                    attempt_id,
                    State::Accepted,
                    ObservationKind::Accepted { attempt_id: attempt_id.into(), sns_message_id: message_id.clone() },
                    StatusPatch {
                        clear_claim: true,
                        increment_attempts: true,
                        sns_message_id: Some(message_id.clone()),
                        accepted_at: Some(now),
                        digest_id: digest.cloned(),
                        ..Default::default()
                    },
                    now,
                );
                // A digest's message id is indexed once, for all its members, before this.
                if digest.is_none() {
                    t.index_message = Some((message_id.clone(), intent.recipient.clone()));
                }
                match self.transition_until(t.clone(), Some(deadline)).await {
                    Ok(TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied) => {}
                    Ok(TransitionOutcome::Refused(current)) if current.status.state == State::SendUnknown => {
                        // The sweep gave up on our lease while we waited; we know better now.
                        t.from = vec![State::SendUnknown];
                        t.attempt_id = None;
                        let _ = self.transition_until(t, Some(deadline)).await;
                    }
                    Ok(TransitionOutcome::Refused(_)) => {}
                    Err(e) => {
                        // Published but not recorded, after retrying until the invocation's end:
                        // keep the claim; its lease expiry makes the intent send_unknown, and its
                        // delivery record (found by number and claim time) still settles it.
                        tracing::error!(key = intent.key.short(), sns_message_id = %message_id, error = %e, "published but could not record the MessageId");
                    }
                }
                Outcome::Published { sns_message_id: message_id.clone() }
            }
            PublishOutcome::Rejected { error } => {
                let t = self.settle(
                    record,
                    attempt_id,
                    State::Failed,
                    ObservationKind::PublishRejected { attempt_id: attempt_id.into(), error: error.clone() },
                    StatusPatch {
                        clear_claim: true,
                        increment_attempts: true,
                        last_error: Some(format!("SNS rejected the publish: {error}")),
                        digest_id: digest.cloned(),
                        ..Default::default()
                    },
                    now,
                );
                self.record_until(t, Some(deadline)).await.map_or(Outcome::Retry, |()| Outcome::Rejected)
            }
            PublishOutcome::Unknown { error } => {
                let t = self.settle(
                    record,
                    attempt_id,
                    State::SendUnknown,
                    ObservationKind::SendUnknown { attempt_id: attempt_id.into(), cause: error.clone() },
                    StatusPatch {
                        clear_claim: true,
                        increment_attempts: true,
                        last_error: Some(error.clone()),
                        digest_id: digest.cloned(),
                        ..Default::default()
                    },
                    now,
                );
                // Whether or not this write lands, the message is acknowledged: never re-send.
                let _ = self.record_until(t, Some(deadline)).await;
                Outcome::Unknown
            }
            PublishOutcome::Retryable { error } => self.release(record, attempt_id, error, msg, now, true).await,
        }
    }

    /// Storm mode: one recipient's claimed intents (the batch's and those pulled from the backlog).
    /// Stale ones are settled as stale and a suppressed number settles them all; the rest are
    /// planned against the recipient's send log (`storm::plan`): one SMS — the alert alone, or a
    /// digest of all of them — or, with the budget used up and no deadline at stake, none (each
    /// handed back until the budget frees). Appending the send to the log, conditioned on the log
    /// read, comes before the publish: of two senders for the same person, one sends.
    async fn send_group(&self, group: Vec<(Slot, Claimed<'_>)>, deadline: DateTime<Utc>) -> Vec<(Slot, Outcome)> {
        let now = self.clock.now();
        let Some(recipient) = group.first().map(|(_, c)| c.record.intent.recipient.clone()) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(group.len());
        let (stale, mut live): (Vec<_>, Vec<_>) = group.into_iter().partition(|(_, c)| now >= c.record.intent.deadline);
        for (i, c) in &stale {
            out.push((*i, self.stale(c, now).await));
        }
        if live.is_empty() {
            return out;
        }
        match self.standing(&recipient, now).await {
            Ok(Standing::Suppressed(s)) => {
                for (i, c) in &live {
                    out.push((*i, self.suppressed(c, s.clone(), now).await));
                }
                return out;
            }
            Ok(Standing::Clear | Standing::ReEnabledUnchecked) => {}
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "registry or opt-out check unavailable; releasing the claims");
                out.extend(self.release_each(&live, &e.to_string(), now).await);
                return out;
            }
        }
        let log = match self.store.send_log(&recipient).await {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "send log unavailable; releasing the claims");
                out.extend(self.release_each(&live, &e.to_string(), now).await);
                return out;
            }
        };
        // The rest of the person's backlog joins the plan — unless the budget would only hand it
        // back (used up, no deadline at stake, as the index's deadlines already tell): then it is
        // not claimed at all, and only what this batch holds is handed back.
        let backlog = self.backlog_of(&recipient, &live, now).await;
        let deadlines = live.iter().map(|(_, c)| c.record.intent.deadline).chain(backlog.iter().map(|(_, d)| *d));
        if storm::holds_all_until(now, &log.sent, deadlines, &self.config.storm).is_none() {
            self.claim_backlog(&mut live, backlog, now).await;
        }
        let alerts: Vec<PendingAlert> = live.iter().map(|(_, c)| PendingAlert::from_intent(&c.record.intent)).collect();
        let plan = match storm::plan(now, &log.sent, &alerts, &self.config.storm) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(recipient = %recipient.masked(), error = %e, "storm plan refused; releasing the claims");
                out.extend(self.release_each(&live, &e.to_string(), now).await);
                return out;
            }
        };
        let claimed = |key: &IdempotencyKey| live.iter().find(|(_, c)| &c.record.intent.key == key);
        for key in &plan.stale {
            if let Some((i, c)) = claimed(key) {
                out.push((*i, self.stale(c, now).await));
            }
        }
        for held in &plan.held {
            if let Some((i, c)) = claimed(&held.key) {
                let until = match held.reason {
                    storm::HoldReason::BudgetExhausted { until } => until,
                    storm::HoldReason::DigestFull => now,
                };
                let wait = until.signed_duration_since(now).to_std().unwrap_or_default();
                out.push((*i, self.hand_back(&c.record, &c.attempt_id, held.reason.to_string(), wait, c.msg).await));
            }
        }
        let Some(send) = plan.sends.into_iter().next() else { return out };
        let keys = send.keys().into_iter().cloned().collect::<Vec<_>>();
        let members: Vec<&(Slot, Claimed<'_>)> = keys.iter().filter_map(claimed).collect();
        let window = chrono::Duration::from_std(self.config.storm.window).unwrap_or(chrono::Duration::minutes(5));
        let keep = usize::try_from(self.config.storm.max_sms_per_window).unwrap_or(usize::MAX);
        match self.store.record_send(&recipient, &log, now, keep, now + window).await {
            Ok(true) => {}
            Ok(false) => {
                // Another sender is sending to this person at this moment: its SMS covers what
                // it holds; these go back unsent and come round again shortly.
                for (i, c) in members {
                    let why = "another sender is sending to this recipient right now".to_owned();
                    out.push((
                        *i,
                        self.hand_back(&c.record, &c.attempt_id, why, self.config.retry_base_delay, c.msg).await,
                    ));
                }
                return out;
            }
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "send log not written; releasing the claims");
                out.extend(self.release_each(members, &e.to_string(), now).await);
                return out;
            }
        }
        if plan.over_budget {
            tracing::info!(recipient = %recipient.masked(), members = members.len(), "sent over the recipient's budget: holding would miss a deadline");
            let mut m = Metrics::new("sender");
            m.count("over_budget", 1);
            m.flush();
        }
        match send {
            storm::Send::Alone { .. } => {
                for (i, c) in members {
                    let outcome = self.publish_alone(c, deadline).await;
                    self.log_attempt(c, &outcome, None);
                    out.push((*i, outcome));
                }
            }
            storm::Send::Digest(digest) => {
                out.extend(self.send_digest(&recipient, &members, digest, now, deadline).await)
            }
        }
        out
    }

    /// Releases every claim of `members` unsent (proven not sent: a dependency failed first).
    async fn release_each<'a, 'm: 'a>(
        &self,
        members: impl IntoIterator<Item = &'a (Slot, Claimed<'m>)>,
        why: &str,
        now: DateTime<Utc>,
    ) -> Vec<(Slot, Outcome)> {
        let mut out = Vec::new();
        for (i, c) in members {
            out.push((*i, self.release(&c.record, &c.attempt_id, why, c.msg, now, false).await));
        }
        out
    }

    /// Records the digest, publishes it once, and records the outcome on every member.
    async fn send_digest(
        &self,
        recipient: &PhoneNumber,
        members: &[&(Slot, Claimed<'_>)],
        digest: Digest,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Vec<(Slot, Outcome)> {
        let stored = DigestRecord {
            id: digest.id.clone(),
            recipient: recipient.clone(),
            members: digest.members.clone(),
            segments: digest.segments.segments,
            created_at: now,
            expires_at: members.iter().map(|(_, c)| c.record.intent.expires_at()).max().unwrap_or(now),
            outcome: None,
        };
        if let Err(e) = self.store.put_digest(&stored).await {
            tracing::warn!(digest = digest.id.short(), error = %e, "digest not recorded; releasing the claims unsent");
            return self.release_each(members.iter().copied(), &e.to_string(), now).await;
        }
        let parts = digest.segments.segments;
        if !self.wait_for_rate(parts, self.rate_budget(deadline)).await {
            let mut out = Vec::with_capacity(members.len());
            for (i, c) in members.iter().copied() {
                out.push((*i, self.defer(&c.record, &c.attempt_id, parts, c.msg).await));
            }
            return out;
        }
        // The earliest-deadline member's SMS options (sender id, origination number, price cap).
        let Some(lead) =
            members.iter().find(|(_, c)| digest.members.first() == Some(&c.record.intent.key)).or(members.first())
        else {
            return Vec::new();
        };
        let options = lead.1.record.intent.sms.or_defaults(&self.config.sms_defaults);
        let outcome =
            self.gateway.publish(SmsMessage { to: recipient, body: digest.text.expose(), options: &options }).await;
        if let PublishOutcome::Accepted { message_id } = &outcome {
            // The message id → members entry first: a delivery record that arrives before the
            // members' writes still finds them all.
            let indexed =
                retry_until(&self.clock, Some(deadline), digest.id.short(), "indexing the digest's message id", || {
                    self.store.index_digest_message(message_id, &stored)
                })
                .await;
            if let Err(e) = indexed {
                tracing::error!(digest = digest.id.short(), sns_message_id = %message_id, error = %e, "digest published but its message id not indexed");
            }
        }
        let outcomes = futures::future::join_all(
            members.iter().map(|(_, c)| self.record_publish(c, &outcome, Some(&digest.id), deadline)),
        )
        .await;
        let published = match &outcome {
            PublishOutcome::Accepted { .. } => "accepted",
            PublishOutcome::Rejected { .. } => "rejected",
            PublishOutcome::Unknown { .. } => "unknown",
            PublishOutcome::Retryable { .. } => "retryable",
        };
        let mut m = Metrics::new("sender");
        m.count("digest_sms", 1);
        m.count("digest_members", members.len() as u64);
        m.flush();
        tracing::info!(
            digest = digest.id.short(),
            recipient = %recipient.masked(),
            members = members.len(),
            listed = digest.listed,
            parts,
            publish = published,
            "digest attempt finished for the recipient's claimed alerts"
        );
        members
            .iter()
            .zip(outcomes)
            .map(|((i, c), outcome)| {
                self.log_attempt(c, &outcome, Some(&digest.id));
                (*i, outcome)
            })
            .collect()
    }

    /// Claimed but not published (the rate left no time in this invocation): back to `queued`,
    /// no attempt counted, the message hidden for about as long as the parts would have waited.
    async fn defer(&self, record: &IntentRecord, attempt_id: &str, parts: u32, msg: Option<Via<'_>>) -> Outcome {
        let reason = format!("send rate: {parts} part(s) would not go out before this invocation ends");
        let wait = self.config.instance_part_interval().saturating_mul(parts.max(1));
        self.hand_back(record, attempt_id, reason, wait, msg).await
    }

    /// Claimed but deliberately not published (`reason`): back to `queued`, no attempt counted,
    /// its message hidden for `wait` (at least the retry base delay). An intent pulled from the
    /// backlog has no message here: its own is still on the queue.
    async fn hand_back(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        reason: String,
        wait: Duration,
        msg: Option<Via<'_>>,
    ) -> Outcome {
        let now = self.clock.now();
        // Late is said early: handed back for longer than its deadline allows, the alert is due
        // for escalation at once (the sweep escalates it, and it stays eligible to be sent).
        let back_at = chrono::Duration::from_std(wait.max(self.config.retry_base_delay))
            .ok()
            .and_then(|w| now.checked_add_signed(w))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let late = storm::late_verdict(now, back_at, record.intent.deadline).map(|l| l.expected);
        if late.is_some() {
            tracing::warn!(key = record.intent.key.short(), reason = %reason, "handed back past its deadline: escalating early");
        }
        let wait = wait.max(self.config.retry_base_delay);
        if msg.is_none() && !self.requeue_pulled(record, now, wait).await {
            // Left claimed: its lease lapses to `send_unknown` rather than `queued` with no message.
            return Outcome::Retry;
        }
        let mut t = self.settle(
            record,
            attempt_id,
            State::Queued,
            ObservationKind::Deferred { attempt_id: attempt_id.into(), reason: reason.clone() },
            StatusPatch { clear_claim: true, enqueued_at: Some(now), late_expected: late, ..Default::default() },
            now,
        );
        t.patch.final_at = None;
        if let Err(e) = self.record(t).await {
            tracing::warn!(key = record.intent.key.short(), error = %e, "could not hand the claim back; its lease will expire");
        }
        if let Some((handle, lane)) = msg.and_then(|(m, lane)| m.receipt_handle.as_ref().map(|h| (h, lane))) {
            // SQS hides a message for at most 12 hours.
            let delay = wait.min(Duration::from_secs(12 * 3600));
            if let Err(e) = self.queue.delay_retry(handle, delay.as_secs().max(1) as i32, lane).await {
                tracing::warn!(error = %e, "could not set the retry delay; the queue's visibility timeout applies");
            }
        }
        tracing::info!(key = record.intent.key.short(), reason = %reason, "handed back unsent");
        Outcome::Deferred
    }

    /// A member pulled from the recipient's backlog is handed back without a message of this
    /// invocation's: its own may never have been sent (intake's enqueue failed) or be gone. So it
    /// gets a new one, hidden for `wait`, *before* it goes back to `queued` (a duplicate is
    /// harmless: the claim): a queued intent always has a message, never only the sweep's late
    /// re-enqueue. False: no message could be written (tried three times); the claim is kept.
    async fn requeue_pulled(&self, record: &IntentRecord, now: DateTime<Utc>, wait: Duration) -> bool {
        let lane = Lane::of(now, record.intent.deadline, Duration::ZERO);
        for attempt in 1..=3 {
            match self.queue.enqueue(&record.intent.key, lane, wait).await {
                Ok(()) => return true,
                Err(e) if attempt < 3 => {
                    tracing::warn!(key = record.intent.key.short(), error = %e, "message for a handed-back alert not written; trying again");
                    tocsin::ports::sleep(
                        &self.clock,
                        backoff(&self.clock, attempt, RECORD_RETRY_BASE, RECORD_RETRY_MAX),
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!(key = record.intent.key.short(), error = %e, "no message for a handed-back alert; its claim is kept until its lease lapses");
                }
            }
        }
        false
    }

    /// Proven not sent: back to `queued` for a later retry, or `failed` once attempts run out.
    async fn release(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        error: &str,
        msg: Option<Via<'_>>,
        now: DateTime<Utc>,
        counts: bool,
    ) -> Outcome {
        let attempts = record.status.attempts + u32::from(counts);
        if counts && attempts >= self.config.max_attempts {
            let t = self.settle(
                record,
                attempt_id,
                State::Failed,
                ObservationKind::PublishRejected {
                    attempt_id: attempt_id.into(),
                    error: format!("gave up after {attempts} attempts: {error}"),
                },
                StatusPatch {
                    clear_claim: true,
                    increment_attempts: true,
                    last_error: Some(format!("SNS did not accept after {attempts} attempts: {error}")),
                    ..Default::default()
                },
                now,
            );
            return self.record(t).await.map_or(Outcome::Retry, |()| Outcome::RetriesExhausted);
        }
        let delay = backoff(&self.clock, attempts.max(1), self.config.retry_base_delay, self.config.retry_max_delay);
        if msg.is_none() && !self.requeue_pulled(record, now, delay).await {
            // Left claimed: its lease lapses to `send_unknown` rather than `queued` with no message.
            return Outcome::Retry;
        }
        let mut t = self.settle(
            record,
            attempt_id,
            State::Queued,
            ObservationKind::PublishRetryable { attempt_id: attempt_id.into(), error: error.into() },
            StatusPatch {
                clear_claim: true,
                increment_attempts: counts,
                last_error: Some(error.into()),
                enqueued_at: Some(now),
                ..Default::default()
            },
            now,
        );
        t.patch.final_at = None;
        if let Err(e) = self.record(t).await {
            tracing::warn!(key = record.intent.key.short(), error = %e, "could not release the claim; its lease will expire");
        }
        if let Some((handle, lane)) = msg.and_then(|(m, lane)| m.receipt_handle.as_ref().map(|h| (h, lane)))
            && let Err(e) = self.queue.delay_retry(handle, delay.as_secs() as i32, lane).await
        {
            tracing::warn!(error = %e, "could not set the retry delay; the queue's visibility timeout applies");
        }
        let mut m = Metrics::new("sender");
        m.add("retry_attempt", f64::from(attempts), Unit::Count);
        if error.contains("Throttl") {
            // SNS said "Rate exceeded": the flow-control signal the dashboard graphs.
            m.count("throttled", 1);
        }
        m.flush();
        Outcome::Retry
    }
}

const NON_ZERO_ONE: std::num::NonZeroU32 = std::num::NonZeroU32::MIN;

/// `op`, tried again on failure with backoff while `deadline` leaves time (never without one):
/// for the writes after a publish, whose loss would turn an SMS that went out into an unknown.
async fn retry_until<C, T, F, Fut>(
    clock: &C,
    deadline: Option<DateTime<Utc>>,
    subject: &str,
    what: &str,
    mut op: F,
) -> Result<T, PortError>
where
    C: Clock + Entropy,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, PortError>>,
{
    let mut failures = 0u32;
    loop {
        let error = match op().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        failures += 1;
        let wait = backoff(clock, failures, RECORD_RETRY_BASE, RECORD_RETRY_MAX);
        match deadline {
            Some(d) if after(clock.now(), wait + RECORD_RESERVE / 3) < d => {
                tracing::warn!(subject, failures, wait_ms = wait.as_millis() as u64, error = %error, "{what} failed; trying again");
                tocsin::ports::sleep(clock, wait).await;
            }
            _ => return Err(error),
        }
    }
}

/// Exponential backoff with full jitter: uniform in [base, min(max, base·2^(attempt-1))].
pub fn backoff<E: Entropy + ?Sized>(entropy: &E, attempt: u32, base: Duration, max: Duration) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
    let cap = exp.min(max).max(base);
    Duration::from_millis(between(entropy, base.as_millis() as u64, cap.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_within_its_bounds() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(60);
        let entropy = tocsin::ports::System;
        for attempt in 1..12 {
            let d = backoff(&entropy, attempt, base, max);
            let cap = (base * 2u32.pow(attempt - 1)).min(max);
            assert!(d >= base && d <= cap, "attempt {attempt}: {d:?}");
        }
        assert_eq!(backoff(&entropy, 1, base, max), base);
    }
}
