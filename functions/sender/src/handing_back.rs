//! Handing back a claimed intent unsent: deferred by the rate or the budget, released after a
//! failure proven not to have sent (or failed once attempts run out), with its message delayed.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::claiming::{Claimed, Via};
use crate::retries::{RECORD_RETRY_BASE, RECORD_RETRY_MAX, backoff};
use crate::storm::Slot;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::storm::{self, Lane};
use tocsin::ports::{RecipientRegistry, RecipientRoster, SmsGateway, StatusPatch};
use tocsin::telemetry::{Metrics, Unit};

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Releases every claim of `members` unsent (proven not sent: a dependency failed first).
    pub(crate) async fn release_each<'a, 'm: 'a>(
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

    /// Claimed but not published (the rate left no time in this invocation): back to `queued`,
    /// no attempt counted, the message hidden for about as long as the parts would have waited.
    pub(crate) async fn defer(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        parts: u32,
        msg: Option<Via<'_>>,
    ) -> Outcome {
        let reason = format!("send rate: {parts} part(s) would not go out before this invocation ends");
        let wait = self.config.instance_part_interval().saturating_mul(parts.max(1));
        self.hand_back(record, attempt_id, reason, wait, msg).await
    }

    /// Claimed but deliberately not published (`reason`): back to `queued`, no attempt counted,
    /// its message hidden for `wait` (at least the retry base delay). An intent pulled from the
    /// backlog has no message here: its own is still on the queue.
    pub(crate) async fn hand_back(
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
    pub(crate) async fn requeue_pulled(&self, record: &IntentRecord, now: DateTime<Utc>, wait: Duration) -> bool {
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
    pub(crate) async fn release(
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
