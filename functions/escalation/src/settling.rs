//! Settling what a log search found: the alert's own SMS applied to the intent (or to every member
//! of its digest), or the search's bookkeeping (records nothing ties to it, kept for a human;
//! searched again later). Searches nothing.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::reconcile::{Candidate, Found, ReconcileState, Verdict, next_attempt};
use tocsin::ports::{
    Commit, DeliveryLogSearch, DigestRecord, EscalationQueue, LoggedRecord, NextCheck, PortError, SendQueue,
    StatusPatch, Transition,
};
use tocsin::services::receipts::{self, Link, LogEvent};

use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// Writes what the search of `record`'s unknown outcome found (`digest`: the digest of its
    /// current attempt, when it has one), then its next check from where it stands now.
    pub(crate) async fn settle(
        &self,
        record: &IntentRecord,
        verdict: &Verdict,
        digest: Option<DigestRecord>,
    ) -> Result<(), PortError> {
        let key = &record.intent.key;
        let now = self.clock.now();
        let search = record.status.reconcile_attempts + 1;
        // The intent as it stands after the settling, when a step read it after its last write.
        let read = match &verdict {
            Verdict::Link { sns_message_id, records } => {
                self.apply_link(record, sns_message_id, records, digest, now).await?;
                self.searched_again_later_if_still_unknown(record, now).await?
            }
            Verdict::Unattributed(candidates) => {
                let outcome = if candidates.len() == 1 {
                    "a record of one SMS to this number in the window, which nothing ties to this alert (it may be another sender's): kept for a human, never taken for its own"
                } else {
                    "records of several SMS to this number in the window, which nothing ties to this alert (they may be other senders'): kept for a human, never taken for its own"
                };
                self.search_again_later(record, search, outcome, candidates.clone(), now).await?;
                tracing::info!(
                    key = key.short(),
                    candidates = candidates.len(),
                    "records to the number that nothing ties to this alert; kept for a human, searched again later"
                );
                None
            }
            Verdict::NoMatch => {
                self.search_again_later(record, search, "no delivery record yet", vec![], now).await?;
                None
            }
        };
        // Where the intent stands now decides its next check (delivered leaves the index).
        let current = match read {
            Some(current) => Some(current),
            None => self.store.get(key).await?,
        };
        if let Some(current) = current {
            let next = self.next_check_from(&current, now);
            self.store.set_next_check(key, next, Some(current.status.state)).await?;
        }
        Ok(())
    }

    /// The SMS a search linked to `record`, its records applied: to the intent alone, or, when it
    /// is its digest's SMS, to every member (the digest's fate recorded on the digest first).
    async fn apply_link(
        &self,
        record: &IntentRecord,
        sns_message_id: &str,
        records: &[Found],
        digest: Option<DigestRecord>,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let key = &record.intent.key;
        let recipient = &record.intent.recipient;
        // A storm-mode digest's SMS is every member's: its message id is indexed once for
        // all of them, and its records settle them together.
        let mut members = vec![key.clone()];
        let mut link = Link::Reconciled;
        if let Some(digest) = digest {
            self.store.index_digest_message(sns_message_id, &digest).await?;
            // The digest's fate on the digest itself first, as the status function records
            // it, every waiting member brought forward: a member this run does not reach
            // (its write fails, the run ends) learns it at the next sweep.
            if let Some(first) = records.iter().find(|f| f.record.status.receipt().is_some()) {
                for member in &digest.members {
                    self.store.bring_check_forward(member, now, &State::AWAITING_RECEIPT).await?;
                }
                let outcome = LoggedRecord {
                    log_event_id: first.log_event_id.clone(),
                    timestamp_ms: first.timestamp_ms,
                    message: first.message.clone(),
                };
                self.store.record_digest_outcome(&digest.id, &outcome).await?;
            }
            members = digest.members;
            link = Link::ReconciledDigest;
        }
        // Every member is tried even when one's write fails: the failure is reported, never
        // a reason to leave its siblings unsettled.
        let mut first_error = None;
        for member in &members {
            for f in records {
                let event = LogEvent { id: &f.log_event_id, timestamp_ms: f.timestamp_ms };
                if let Err(e) =
                    receipts::apply(&self.store, &self.registry, member, recipient, event, &f.record, link, now).await
                {
                    tracing::warn!(key = member.short(), error = %e, "a reconciled record not applied to a member");
                    first_error.get_or_insert(e);
                    break;
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        tracing::info!(key = key.short(), sns_message_id = %sns_message_id, "unknown outcome reconciled from the delivery-status logs");
        Ok(())
    }

    /// A search that found the alert's SMS but nothing that settles it — only a provider's
    /// progress (End User Messaging's non-final acceptance), or a write refused — is counted, and
    /// the next search waits its backoff like any other: otherwise the alert, still `send_unknown`
    /// and never searched by the count, would come first in every run's batch and, with enough
    /// like it, starve every other unknown outcome of its search (simulation seed 150834).
    /// Returns the intent as it read it when it wrote nothing (`None` when it wrote, or the
    /// intent is gone), so its caller need not read it again.
    pub(crate) async fn searched_again_later_if_still_unknown(
        &self,
        record: &IntentRecord,
        now: DateTime<Utc>,
    ) -> Result<Option<IntentRecord>, PortError> {
        let Some(current) = self.store.get(&record.intent.key).await? else { return Ok(None) };
        if current.status.state != State::SendUnknown
            || current.status.reconcile_attempts != record.status.reconcile_attempts
        {
            return Ok(Some(current));
        }
        let search = current.status.reconcile_attempts + 1;
        let outcome = "its SMS found, but no outcome yet (only the provider's progress): searched again later";
        self.search_again_later(&current, search, outcome, vec![], now).await?;
        Ok(None)
    }

    /// An unknown outcome the search could not settle yet: what it found that is not the alert's
    /// (`candidates`, for a human), its next search scheduled, and why.
    async fn search_again_later(
        &self,
        record: &IntentRecord,
        search: u32,
        outcome: &str,
        candidates: Vec<Candidate>,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let next = next_attempt(record.status.reconcile_attempts, now);
        let t = self.bookkeeping(record, search, next, outcome, candidates, now);
        self.store.transition(t).await?;
        Ok(())
    }

    fn bookkeeping(
        &self,
        record: &IntentRecord,
        search: u32,
        next: DateTime<Utc>,
        outcome: &str,
        candidates: Vec<Candidate>,
        now: DateTime<Utc>,
    ) -> Transition {
        Transition {
            key: record.intent.key.clone(),
            from: vec![State::SendUnknown],
            attempt_id: None,
            patch: StatusPatch { reconcile: Some((search, Some(next), ReconcileState::Pending)), ..Default::default() },
            observation: Observation::new(
                format!("reconcile:{search}"),
                now,
                ObservationKind::Reconciliation { outcome: outcome.into(), search, candidates },
            ),
            next_check: NextCheck::Keep,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
            carried_along: Vec::new(),
        }
    }
}
