//! Claiming: a record's intent (the conditional claim with its lease), what a record that finds its
//! intent not claimable does, and in storm mode a recipient's backlog. Sends nothing.

use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use chrono::{DateTime, Utc};
use futures::StreamExt;

use crate::storm::Slot;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::adapters::sqs::SendRequest;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::storm::{self, Lane};
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{ClaimOutcome, RecipientRegistry, RecipientRoster, SmsGateway, StatusPatch, new_id};

/// An intent whose claim this invocation holds, with the SQS message that brought it (none for
/// one pulled from the recipient's backlog: its own message is still on the queue).
pub(crate) struct Claimed<'m> {
    pub(crate) record: IntentRecord,
    pub(crate) attempt_id: String,
    /// The message and the lane it came from (to hand it back on the right queue).
    pub(crate) msg: Option<Via<'m>>,
    pub(crate) started: DateTime<Utc>,
}

/// A queue message and its lane.
pub(crate) type Via<'m> = (&'m SqsMessage, Lane);

/// Claims made at once when pulling a backlog.
const PULL_CONCURRENCY: usize = 8;

/// A record after its claim: held (to be sent), or already finished.
pub(crate) enum Claim<'m> {
    Held(Box<Claimed<'m>>),
    Done(Outcome),
}

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Storm mode: the recipient's other pending alerts (keys and deadlines, earliest deadline
    /// first, from the backlog index), beyond those `group` holds, as many as a digest has room
    /// for. Unreadable: none (a failure here only means a smaller digest).
    pub(crate) async fn backlog_of(
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
    pub(crate) async fn claim_backlog<'m>(
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
        // The claim itself leaves each in the sweep's index by its lease's end at the latest.
        for (record, attempt_id) in claims.into_iter().flatten() {
            group.push((None, Claimed { record, attempt_id, msg: None, started: self.clock.now() }));
        }
    }

    /// Claims the intent a record names. Held: this invocation must now send it or hand it back.
    pub(crate) async fn claim_message<'m>(&self, msg: &'m SqsMessage, lane: Lane) -> Claim<'m> {
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
        let record = match self.store.claim(&key, &attempt_id, now, lease_until).await {
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
        // The sweep looks at a claimed intent by the lease's end at the latest (a sender that
        // died holding it): the claim's own write keeps its due-index entry no later than that
        // (`IntentStore::claim`), so no second write is left for a dying sender to skip.
        Claim::Held(Box::new(Claimed { record, attempt_id, msg: Some((msg, lane)), started }))
    }

    pub(crate) async fn not_claimable(
        &self,
        current: IntentRecord,
        (msg, lane): Via<'_>,
        now: DateTime<Utc>,
    ) -> Outcome {
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
}
