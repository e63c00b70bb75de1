//! Walking an escalation chain (issue 37, `tocsin::domain::chain`): when nobody at a level
//! acknowledged within its wait, the next level is started on the chain's root — one conditional
//! write that an acknowledgement refuses — and then its intent is written (its key derived from
//! the root's, so a retry finds it) and put on the send queue: a tracked SMS of its own, claimed
//! and sent at most once by the sender, its delivery and acknowledgement recorded, swept in turn.
//! After the last phone, on-call's queue (`escalating`). Every step after the start is
//! idempotent, so a run that dies between them is finished by the next.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::acknowledgement::Acknowledgement;
use tocsin::domain::chain::Chain;
use tocsin::domain::intent::{Escalation, IntentRecord, Status};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::storm::Lane;
use tocsin::domain::sweep::next_check;
use tocsin::ports::{
    DeliveryLogSearch, EscalationQueue, LevelStart, NextCheck, PortError, PutOutcome, SendQueue, TransitionOutcome,
};
use tocsin::services::acknowledging::acknowledgement_transition;

use crate::escalating::Escalated;
use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

/// What the chain says about an escalation that is due.
pub(crate) enum ChainStep {
    /// Handled here: the next level started, or someone acknowledged first.
    Done(Escalated),
    /// The last phone level passed: page on-call, with this reason.
    PageOnCall(String),
}

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// The next step of `record`'s chain, due now for `reason`.
    pub(crate) async fn walk_chain(
        &self,
        record: &IntentRecord,
        chain: &Chain,
        run_id: &str,
        now: DateTime<Utc>,
        reason: &str,
    ) -> Result<ChainStep, PortError> {
        let key = &record.intent.key;
        let next = chain.level.saturating_add(1);
        let reason = match self.store.start_level(&chain.root, next, now, reason).await? {
            LevelStart::Acknowledged(ack) => {
                tracing::info!(key = key.short(), level = chain.level, "chain acknowledged: no further level");
                return Ok(ChainStep::Done(Escalated::NotNeeded(Box::new(
                    self.take_chain_ack(record, &ack, now).await?,
                ))));
            }
            // Started by a run that died before finishing: finished here, told as it started (a
            // degraded carrier's early move stays one, whatever this run would decide now).
            LevelStart::StartedBefore { reason: Some(started) } => started,
            // Started here; or before, by a run whose reason the root no longer holds; or the
            // root expired (nothing left to arbitrate: an acknowledgement of this level would be
            // on this level's item).
            LevelStart::Started | LevelStart::StartedBefore { reason: None } | LevelStart::Missing => reason.to_owned(),
        };
        let reason = reason.as_str();
        let levels = chain.levels.len();
        let Some(intent) = record.intent.next_level(now) else {
            return Ok(ChainStep::PageOnCall(format!(
                "nobody in the alert's chain acknowledged it (level {} of {levels}, the last): {reason}",
                usize::from(chain.level) + 1
            )));
        };
        let to = intent.recipient.masked();
        let level_key = intent.key.clone();
        let fresh = IntentRecord { intent, status: Status::new() };
        let first_check = next_check(&fresh, now, &self.config.sweep).unwrap_or(fresh.intent.deadline);
        let waiting = match self.store.put_new(&fresh, first_check).await? {
            PutOutcome::Created => true,
            // Written by a run that died before marking this level: on the queue again unless a
            // sender has it already (a second message is harmless: the claim).
            PutOutcome::Exists(stored) => matches!(stored.status.state, State::Received | State::Queued),
        };
        if waiting {
            let lane = Lane::of(now, fresh.intent.deadline, std::time::Duration::ZERO);
            self.send_queue.enqueue(&level_key, lane, std::time::Duration::ZERO).await?;
        }
        let escalation = Escalation {
            at: now,
            reason: format!("{reason}; level {} of {levels} texted: {to}", usize::from(next) + 1),
            folded: false,
            to_level: Some(next),
        };
        self.mark_escalated(record, run_id, &escalation).await?;
        tracing::warn!(
            key = key.short(),
            level = next,
            next_key = level_key.short(),
            to,
            "chain moved on: the next level is texted"
        );
        Ok(ChainStep::Done(Escalated::NextLevel(Box::new(record.clone()), escalation)))
    }

    /// This level takes the chain's acknowledgement (someone at another level has it), so it is
    /// never escalated; returns it as it is now.
    async fn take_chain_ack(
        &self,
        record: &IntentRecord,
        ack: &Acknowledgement,
        now: DateTime<Utc>,
    ) -> Result<IntentRecord, PortError> {
        let key = &record.intent.key;
        let observation = Observation::new(
            format!("ack:chain:{}", ack.at.timestamp_millis()),
            now,
            ObservationKind::Acknowledged { by: ack.by.clone(), via: ack.via },
        );
        // Never escalated again, but still swept while its own SMS is in flight: a claim whose
        // lease lapses becomes an explicit unknown, an acceptance meets its receipt window.
        let mut taken = record.clone();
        taken.status.acknowledgement = Some(ack.clone());
        let next = next_check(&taken, now, &self.config.sweep);
        let t = acknowledgement_transition(record, ack, observation, next.map_or(NextCheck::Remove, NextCheck::At));
        match self.store.transition(t).await? {
            TransitionOutcome::Applied => {
                taken.status.next_check = next;
                Ok(taken)
            }
            TransitionOutcome::Refused(current) => Ok(*current),
            TransitionOutcome::AlreadyApplied => Ok(self.store.get(key).await?.unwrap_or_else(|| record.clone())),
        }
    }
}
