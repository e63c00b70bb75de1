//! Sender: publishes each intent at most once under at-least-once delivery, and records an honest
//! "unknown" when it cannot know.
//!
//! Per SQS record: claim (conditional write, with a lease) → stale? → suppressed? → rate limit →
//! publish → record the outcome with a write conditioned on still holding the claim. Redeliveries
//! and concurrent copies find the intent claimed, accepted or final, and do nothing.
//!
//! Every wait is bounded by the invocation's deadline: a claim is never held across a wait that
//! could outlast the invocation (the intent goes back to `queued` unsent instead), and the write
//! after a successful publish is retried with backoff until shortly before the deadline, because
//! giving up on it turns an SMS that went out into an "outcome unknown" page.

use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use governor::clock::MonotonicClock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// The send-rate limiter on `std::time::Instant`: governor's default clock (quanta) calibrates
/// itself at start-up by spinning the CPU (~0.6 ms measured, in every cold start), which the
/// rate of a few parts per second does not need.
type PartLimiter = RateLimiter<NotKeyed, InMemoryState, MonotonicClock, NoOpMiddleware<std::time::Instant>>;

/// Kept back from the invocation's deadline, after the publish itself, for recording its outcome.
const RECORD_RESERVE: Duration = Duration::from_secs(3);
/// First wait before retrying a failed write of a publish's outcome (doubles, with jitter).
const RECORD_RETRY_BASE: Duration = Duration::from_millis(100);
const RECORD_RETRY_MAX: Duration = Duration::from_secs(4);
use tocsin::adapters::sqs::SendRequest;
use tocsin::config::SenderConfig;
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::sweep::next_check;
use tocsin::ports::{
    ClaimOutcome, Clock, Commit, DueIndex, IntentStore, NextCheck, PortError, PublishOutcome, RecipientRegistry,
    SendQueue, SmsGateway, SmsMessage, Standing, StatusPatch, Suppression, Transition, TransitionOutcome,
};
use tocsin::telemetry::{Metrics, Unit};

/// How one record ended; `Retry` reports it as a batch item failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Published {
        sns_message_id: String,
    },
    /// Redelivered or concurrent copy: the intent was already claimed, accepted or final.
    Duplicate(State),
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

pub struct Sender<S, R, G, Q, C> {
    pub store: S,
    pub registry: R,
    pub gateway: G,
    pub queue: Q,
    pub clock: C,
    pub config: SenderConfig,
    limiter: PartLimiter,
}

impl<S: IntentStore + DueIndex, R: RecipientRegistry, G: SmsGateway, Q: SendQueue, C: Clock> Sender<S, R, G, Q, C> {
    pub fn new(store: S, registry: R, gateway: G, queue: Q, clock: C, config: SenderConfig) -> Self {
        // One part at a time at this instance's share of the account rate (burst 1).
        let quota = Quota::with_period(config.instance_part_interval()).unwrap_or(Quota::per_second(NON_ZERO_ONE));
        let limiter = RateLimiter::direct_with_clock(quota, MonotonicClock);
        Sender { store, registry, gateway, queue, clock, config, limiter }
    }

    /// Processes a batch concurrently; failed records are reported alone. `deadline` is when Lambda
    /// ends the invocation (its context deadline).
    pub async fn handle(&self, event: SqsEvent, deadline: Instant) -> SqsBatchResponse {
        let outcomes = futures::future::join_all(event.records.iter().map(|m| self.process(m, deadline))).await;
        let mut metrics = Metrics::new("sender");
        let mut response = SqsBatchResponse::default();
        for (msg, outcome) in event.records.iter().zip(outcomes) {
            metrics.count(outcome.name(), 1);
            if matches!(outcome, Outcome::Retry | Outcome::Malformed | Outcome::Deferred)
                && let Some(id) = &msg.message_id
            {
                let mut f = BatchItemFailure::default();
                f.item_identifier = id.clone();
                response.batch_item_failures.push(f);
            }
        }
        metrics.flush();
        response
    }

    pub async fn process(&self, msg: &SqsMessage, deadline: Instant) -> Outcome {
        let started = Instant::now();
        let Some(req) = msg.body.as_deref().and_then(|b| serde_json::from_str::<SendRequest>(b).ok()) else {
            tracing::warn!(
                sqs_message_id = msg.message_id.as_deref().unwrap_or("?"),
                "malformed send request; left for the dead-letter queue"
            );
            return Outcome::Malformed;
        };
        let key = req.key;
        let attempt_id = uuid::Uuid::new_v4().to_string();
        let now = self.clock.now();
        let lease_until =
            now + chrono::Duration::from_std(self.config.claim_lease).unwrap_or(chrono::Duration::minutes(5));
        let mut record = match self.store.claim(&key, &attempt_id, now, lease_until).await {
            Ok(ClaimOutcome::Claimed(r)) => *r,
            Ok(ClaimOutcome::NotClaimable(current)) => return self.not_claimable(*current, now).await,
            Ok(ClaimOutcome::Missing) => {
                tracing::warn!(key = key.short(), "send request for an intent that does not exist; dropped");
                return Outcome::Missing;
            }
            Err(e) => {
                tracing::warn!(key = key.short(), error = %e, "claim failed; will retry");
                return Outcome::Retry;
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
        let outcome = self.send_claimed(&record, &attempt_id, msg, now, deadline).await;
        let (sns_id, recipient) = (
            match &outcome {
                Outcome::Published { sns_message_id } => sns_message_id.as_str(),
                _ => "",
            },
            record.intent.recipient.masked(),
        );
        tracing::info!(
            key = key.short(),
            recipient = %recipient,
            sns_message_id = sns_id,
            outcome = outcome.name(),
            attempt = record.status.attempts + 1,
            duration_ms = started.elapsed().as_millis() as u64,
            "send attempt finished"
        );
        outcome
    }

    async fn not_claimable(&self, current: IntentRecord, now: DateTime<Utc>) -> Outcome {
        let s = &current.status;
        if s.state == State::Sending && s.lease_until.is_some_and(|l| l <= now) {
            // The attempt that holds the claim never reported back: it may have published.
            let aid = s.attempt_id.clone().unwrap_or_default();
            let t = self.settle(
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
    async fn record_until(&self, t: Transition, deadline: Option<Instant>) -> Result<(), PortError> {
        match self.transition_until(t, deadline).await? {
            TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied => Ok(()),
            TransitionOutcome::Refused(current) => {
                tracing::warn!(key = current.intent.key.short(), state = %current.status.state, "claim lost before the outcome was recorded");
                Ok(())
            }
        }
    }

    /// `store.transition`, tried again on failure with backoff until `deadline` (if any).
    async fn transition_until(&self, t: Transition, deadline: Option<Instant>) -> Result<TransitionOutcome, PortError> {
        let mut failures = 0u32;
        loop {
            let error = match self.store.transition(t.clone()).await {
                Ok(o) => return Ok(o),
                Err(e) => e,
            };
            failures += 1;
            let wait = backoff(failures, RECORD_RETRY_BASE, RECORD_RETRY_MAX);
            match deadline {
                Some(d) if Instant::now() + wait + RECORD_RESERVE / 3 < d => {
                    tracing::warn!(key = t.key.short(), failures, wait_ms = wait.as_millis() as u64, error = %error, "recording the attempt's outcome failed; trying again");
                    tokio::time::sleep(wait).await;
                }
                _ => return Err(error),
            }
        }
    }

    /// Waits for the send rate to allow `parts` SMS parts, unless that would take longer than
    /// `budget`. False: out of time (the parts taken so far are simply not used).
    async fn wait_for_rate(&self, parts: u32, budget: Duration) -> bool {
        let wait = async {
            for _ in 0..parts.max(1) {
                self.limiter.until_ready().await;
            }
        };
        tokio::time::timeout(budget, wait).await.is_ok()
    }

    async fn send_claimed(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        msg: &SqsMessage,
        now: DateTime<Utc>,
        deadline: Instant,
    ) -> Outcome {
        let intent = &record.intent;
        // Stale: a late SMS about something already handled is worse than none.
        if now >= intent.deadline {
            let t = self.settle(
                record,
                attempt_id,
                State::Stale,
                ObservationKind::Stale { deadline: intent.deadline },
                StatusPatch { clear_claim: true, ..Default::default() },
                now,
            );
            return self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Stale);
        }
        let standing = match self.registry.standing(&intent.recipient).await {
            // Re-enabled by an operator: SNS may still hold the number as opted out, and would
            // accept the publish and drop it. Ask once, before the first send after re-enabling.
            Ok(Standing::ReEnabledUnchecked) => match self.gateway.is_opted_out(&intent.recipient).await {
                Ok(true) => Ok(Standing::Suppressed(Suppression {
                    since: now,
                    reason: "re-enabled, but SNS still holds the number as opted out: the person must reply START, \
                             or re-enable with --opt-in"
                        .into(),
                })),
                Ok(false) => self.registry.opt_out_checked(&intent.recipient).await.map(|()| Standing::Clear),
                Err(e) => Err(e),
            },
            other => other,
        };
        match standing {
            Ok(Standing::Suppressed(s)) => {
                let t = self.settle(
                    record,
                    attempt_id,
                    State::Suppressed,
                    ObservationKind::Suppressed { registry_reason: s.reason },
                    StatusPatch { clear_claim: true, ..Default::default() },
                    now,
                );
                return self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Suppressed);
            }
            Ok(Standing::Clear | Standing::ReEnabledUnchecked) => {}
            Err(e) => {
                tracing::warn!(key = intent.key.short(), error = %e, "registry or opt-out check unavailable; releasing the claim");
                return self.release(record, attempt_id, &e.to_string(), msg, now, false).await;
            }
        }

        // The rate wait must leave time to publish and to record the outcome before the
        // invocation ends; otherwise the claim goes back unsent, never held past the deadline.
        let parts = intent.segments.segments;
        let budget = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(self.config.publish_timeout + RECORD_RESERVE);
        if !self.wait_for_rate(parts, budget).await {
            return self.defer(record, attempt_id, parts, msg).await;
        }
        let options = intent.sms.or_defaults(&self.config.sms_defaults);
        let outcome = self
            .gateway
            .publish(SmsMessage { to: &intent.recipient, body: intent.body.expose(), options: &options })
            .await;
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
                        ..Default::default()
                    },
                    now,
                );
                t.index_message = Some((message_id.clone(), intent.recipient.clone()));
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
                Outcome::Published { sns_message_id: message_id }
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
                        last_error: Some(error),
                        ..Default::default()
                    },
                    now,
                );
                // Whether or not this write lands, the message is acknowledged: never re-send.
                let _ = self.record_until(t, Some(deadline)).await;
                Outcome::Unknown
            }
            PublishOutcome::Retryable { error } => self.release(record, attempt_id, &error, msg, now, true).await,
        }
    }

    /// Claimed but not published (the rate left no time in this invocation): back to `queued`,
    /// no attempt counted, the message hidden for about as long as the parts would have waited.
    async fn defer(&self, record: &IntentRecord, attempt_id: &str, parts: u32, msg: &SqsMessage) -> Outcome {
        let now = self.clock.now();
        let reason = format!("send rate: {parts} part(s) would not go out before this invocation ends");
        let mut t = self.settle(
            record,
            attempt_id,
            State::Queued,
            ObservationKind::Deferred { attempt_id: attempt_id.into(), reason: reason.clone() },
            StatusPatch { clear_claim: true, enqueued_at: Some(now), ..Default::default() },
            now,
        );
        t.patch.final_at = None;
        if let Err(e) = self.record(t).await {
            tracing::warn!(key = record.intent.key.short(), error = %e, "could not hand the claim back; its lease will expire");
        }
        if let Some(handle) = &msg.receipt_handle {
            let delay =
                self.config.instance_part_interval().saturating_mul(parts.max(1)).max(self.config.retry_base_delay);
            if let Err(e) = self.queue.delay_retry(handle, delay.as_secs().max(1) as i32).await {
                tracing::warn!(error = %e, "could not set the retry delay; the queue's visibility timeout applies");
            }
        }
        tracing::info!(
            key = record.intent.key.short(),
            parts,
            "deferred: the send rate leaves no time in this invocation"
        );
        Outcome::Deferred
    }

    /// Proven not sent: back to `queued` for a later retry, or `failed` once attempts run out.
    async fn release(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        error: &str,
        msg: &SqsMessage,
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
        if let Some(handle) = &msg.receipt_handle {
            let delay = backoff(attempts.max(1), self.config.retry_base_delay, self.config.retry_max_delay);
            if let Err(e) = self.queue.delay_retry(handle, delay.as_secs() as i32).await {
                tracing::warn!(error = %e, "could not set the retry delay; the queue's visibility timeout applies");
            }
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

/// Exponential backoff with full jitter: uniform in [base, min(max, base·2^(attempt-1))].
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
    let cap = exp.min(max).max(base);
    let lo = base.as_millis() as u64;
    let hi = cap.as_millis() as u64;
    Duration::from_millis(if hi > lo { rand::random_range(lo..=hi) } else { lo })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_within_its_bounds() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(60);
        for attempt in 1..12 {
            let d = backoff(attempt, base, max);
            let cap = (base * 2u32.pow(attempt - 1)).min(max);
            assert!(d >= base && d <= cap, "attempt {attempt}: {d:?}");
        }
        assert_eq!(backoff(1, base, max), base);
    }
}
