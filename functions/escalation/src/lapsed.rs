//! A lapsed claim whose attempt had recorded the provider's acceptance: the sender stores what
//! the provider answered first (its observation, facts first), then the state — and when the
//! state write never lands (a partition failing every try until the invocation ended), the claim
//! lapses with the answer already on record. The sweep completes that write instead of calling
//! the outcome unknown: the message id is the alert's by key, so its delivery records (kept as
//! orphans while no index named it) settle it, and a permanent failure suppresses the number.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::reconcile::Window;
use tocsin::ports::{
    Commit, DeliveryLogSearch, EscalationQueue, NextCheck, PortError, SendQueue, StatusPatch, Transition,
};

use crate::{Escalator, RunSummary, SweepClock, SweepRegistry, SweepStore};

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// An intent still `sending` under a lapsed claim whose attempt recorded the provider's
    /// acceptance, for an alert sent alone: moved to `accepted` as that attempt would have moved it
    /// (its observation, its message id, the provider's time), then any orphaned record of its SMS
    /// applied. `None`: no lapsed claim, no acceptance on record, or a digest's member (the lapse
    /// is an unknown outcome, as before). One read of the intent's observations per lapsed claim,
    /// and for one with an acceptance on record, the index entry and the recipient's digests.
    pub(crate) async fn lapsed_but_accepted(
        &self,
        record: &IntentRecord,
        now: DateTime<Utc>,
        summary: &mut RunSummary,
    ) -> Result<Option<IntentRecord>, PortError> {
        let s = &record.status;
        let (Some(attempt_id), Some(lease_until)) = (s.attempt_id.as_deref(), s.lease_until) else { return Ok(None) };
        if s.state != State::Sending || lease_until > now {
            return Ok(None);
        }
        let key = &record.intent.key;
        let observations = self.store.observations(key).await?;
        let Some((accepted, message_id)) = observations.into_iter().find_map(|o| match &o.kind {
            ObservationKind::Accepted { attempt_id: a, sns_message_id } if a == attempt_id => {
                let id = sns_message_id.clone();
                Some((o, id))
            }
            _ => None,
        }) else {
            return Ok(None);
        };
        if self.went_out_in_a_digest(record, &message_id).await? {
            return Ok(None);
        }
        let t = completed_acceptance(record, attempt_id, accepted, message_id.clone());
        match self.store.transition(t).await? {
            tocsin::ports::TransitionOutcome::Applied | tocsin::ports::TransitionOutcome::AlreadyApplied => {}
            // The claim moved on since it was read (its sender, or another run, wrote first).
            tocsin::ports::TransitionOutcome::Refused(current) => return Ok(Some(*current)),
        }
        summary.lease_expired_accepted += 1;
        tracing::warn!(
            key = key.short(),
            sns_message_id = %message_id,
            "a lapsed claim had recorded the provider's acceptance: accepted, not unknown"
        );
        let Some(current) = self.store.get(key).await? else { return Ok(None) };
        // A record of its SMS that came while no index named the message id waits as an orphan.
        Ok(Some(self.orphaned_fate(&current, now).await?.unwrap_or(current)))
    }

    /// Whether the attempt's SMS may have been a storm-mode digest: its message id indexed as a
    /// digest's, or a digest made for the recipient at or after the claim that holds the alert.
    /// A digest's members learn its fate together (its index entry, its outcome, a sibling's
    /// answer); one member moved alone would disagree with the rest, so those are left to that
    /// machinery, as every lapsed claim was before.
    async fn went_out_in_a_digest(&self, record: &IntentRecord, message_id: &str) -> Result<bool, PortError> {
        let s = &record.status;
        if s.digest_id.is_some() {
            return Ok(true);
        }
        if self.store.lookup(message_id).await?.is_some_and(|entry| entry.digest.is_some()) {
            return Ok(true);
        }
        let Some(claimed_at) = s.claimed_at else { return Ok(false) };
        let window = Window::of_attempt(claimed_at, self.config.reconcile_margin);
        let key = &record.intent.key;
        Ok(self
            .store
            .digests_to(&record.intent.recipient, window.from, window.to)
            .await?
            .iter()
            .any(|d| d.members.contains(key) && d.created_at >= claimed_at))
    }
}

/// The sender's own transition for an accepted publish, as it would have written it: the same
/// observation (stored already: facts first), the state under the same claim. No message-index
/// entry: a digest's SMS is indexed for all its members, and this member's entry cannot be told
/// from a lone alert's here — its records reach it as orphans, by its message id.
fn completed_acceptance(
    record: &IntentRecord,
    attempt_id: &str,
    accepted: Observation,
    message_id: String,
) -> Transition {
    Transition {
        key: record.intent.key.clone(),
        from: vec![State::Sending],
        attempt_id: Some(attempt_id.to_owned()),
        patch: StatusPatch {
            state: Some(State::Accepted),
            clear_claim: true,
            increment_attempts: true,
            sns_message_id: Some(message_id),
            accepted_at: Some(accepted.at),
            ..Default::default()
        },
        observation: accepted,
        // The sweep writes the next check from the accepted intent once this run has looked at it.
        next_check: NextCheck::Keep,
        index_message: None,
        expect: Default::default(),
        retain_until: Some(record.intent.expires_at()),
        commit: Commit::FactsFirst,
        carried_along: Vec::new(),
    }
}
