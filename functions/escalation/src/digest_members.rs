//! A digest's members: its recorded fate applied to a member the status function never reached,
//! and a member whose own record of the shared SMS never landed settled from a sibling's.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::reconcile::Window;
use tocsin::ports::{
    Commit, DeliveryLogSearch, DigestRecord, EscalationQueue, PortError, SendQueue, StatusPatch, Transition,
};
use tocsin::services::receipts::{self, Link, LogEvent};

use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// A digest member still waiting for its SMS's delivery record, whose digest has one recorded
    /// (the status function records it on the digest before applying it to each member): it is
    /// applied here, so a member the status function never reached still learns its digest's
    /// fate. Returns the member as it is then.
    pub(crate) async fn digest_fate(
        &self,
        record: &IntentRecord,
        now: DateTime<Utc>,
    ) -> Result<Option<IntentRecord>, PortError> {
        let s = &record.status;
        let waiting = matches!(s.state, State::Accepted | State::DelaySuspected | State::SendUnknown);
        let Some(digest_id) = s.digest_id.as_ref().filter(|_| waiting) else { return Ok(None) };
        let Some(claimed_at) = s.claimed_at else { return Ok(None) };
        let window = Window::of_attempt(claimed_at, self.config.reconcile_margin);
        // Only the current attempt's digest (an operator may have resent the member alone since).
        let Some(outcome) =
            self.store.get_digest(digest_id).await?.filter(|d| window.contains(d.created_at)).and_then(|d| d.outcome)
        else {
            return Ok(None);
        };
        let Ok(delivery) = tocsin::domain::delivery::parse_record(&outcome.message) else { return Ok(None) };
        let link = if s.sns_message_id.as_deref() == Some(delivery.message_id.as_str()) {
            Link::Indexed
        } else {
            Link::ReconciledDigest
        };
        let event = LogEvent { id: &outcome.log_event_id, timestamp_ms: outcome.timestamp_ms };
        let key = &record.intent.key;
        receipts::apply(&self.store, &self.registry, key, &record.intent.recipient, event, &delivery, link, now)
            .await?;
        tracing::info!(
            key = key.short(),
            digest = digest_id.short(),
            "digest's delivery record applied to a member it had not reached"
        );
        self.store.get(key).await
    }

    /// The message id of a digest's SMS as a sibling member recorded it (what SNS answered for
    /// the one SMS they all share), and when SNS accepted it, for a member whose own record of it
    /// never landed.
    pub(crate) async fn sibling_knows(
        &self,
        record: &IntentRecord,
        digest: &DigestRecord,
    ) -> Result<Option<(String, Option<DateTime<Utc>>)>, PortError> {
        let key = &record.intent.key;
        for sibling in digest.members.iter().filter(|m| *m != key) {
            let Some(s) = self.store.get(sibling).await? else { continue };
            if s.status.digest_id.as_ref() != Some(&digest.id) {
                continue;
            }
            // The sibling's message id is the digest's SMS if it is indexed as the digest's (an
            // operator may have resent the sibling alone since: then it is indexed as that SMS's).
            // Never indexed at all — the sender's index write gave up — it is the digest's when
            // the sibling was not claimed again after the digest was made: a resend or a later
            // claim, whose SMS this id would be, claims after it (simulation seed 1411).
            let Some(message_id) = s.status.sns_message_id else { continue };
            let digests_sms = match self.store.lookup(&message_id).await? {
                Some(entry) => entry.digest.is_some_and(|(id, _)| id == digest.id),
                None => s.status.claimed_at.is_some_and(|claimed| claimed <= digest.created_at),
            };
            if digests_sms {
                return Ok(Some((message_id, s.status.accepted_at)));
            }
        }
        Ok(None)
    }

    /// A digest member whose own record of the SMS never landed, whose sibling recorded that SNS
    /// accepted it (message `message_id`, at `accepted_at`) and for which no delivery record has
    /// come yet: accepted, like its siblings — the same SMS, accepted when they say, so the
    /// member's receipt clock (delay suspected, expired unknown) is theirs, not the search's.
    pub(crate) async fn accepted_as_sibling(
        &self,
        record: &IntentRecord,
        digest: &DigestRecord,
        message_id: &str,
        accepted_at: Option<DateTime<Utc>>,
    ) -> Result<(), PortError> {
        let key = &record.intent.key;
        let now = self.clock.now();
        self.store.index_digest_message(message_id, digest).await?;
        let mut after = record.clone();
        after.status.state = State::Accepted;
        after.status.accepted_at = Some(accepted_at.unwrap_or(now));
        let next = self.next_check_from(&after, now);
        let t = Transition {
            key: key.clone(),
            from: vec![State::SendUnknown, State::Sending],
            attempt_id: None,
            patch: StatusPatch {
                state: Some(State::Accepted),
                clear_claim: true,
                sns_message_id: Some(message_id.to_owned()),
                accepted_at: after.status.accepted_at,
                digest_id: Some(digest.id.clone()),
                ..Default::default()
            },
            observation: Observation::new(
                format!("reconcile:digest:{message_id}"),
                now,
                ObservationKind::Reconciliation {
                    outcome: format!(
                        "its digest {}'s SMS was accepted by the SMS provider (message id {message_id}, recorded by a sibling)",
                        digest.id.short()
                    ),
                    search: record.status.reconcile_attempts + 1,
                    candidates: vec![],
                },
            )
            .with_state(State::Accepted),
            next_check: next,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
            carried_along: Vec::new(),
        };
        self.store.transition(t).await?;
        tracing::info!(key = key.short(), digest = digest.id.short(), sns_message_id = %message_id, "unknown outcome settled from its digest's sibling");
        Ok(())
    }
}
