//! Escalating to on-call: lease → count → send → mark, the escalation decided again on the intent
//! as the lease finds it, and paged or folded as its producer's escalation cap says
//! (`domain::escalation_cap`). Writes only the escalation lease, the producer's counter and the
//! mark; never changes an intent's state.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::escalation_cap::Paging;
use tocsin::domain::intent::{Escalation, IntentRecord};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::sweep::{Action, decide};
use tocsin::ports::{
    Commit, DeliveryLogSearch, EscalationMessage, EscalationQueue, NextCheck, PortError, SendQueue, StatusPatch,
    Transition,
};

use crate::chaining::ChainStep;
use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

/// How an escalation attempt ended.
pub(crate) enum Escalated {
    /// Sent to on-call: the intent as the lease found it, and the fact recorded.
    Now(Box<IntentRecord>, Escalation),
    /// Handed to the next level of its chain (`chaining`): texted, not paged.
    NextLevel(Box<IntentRecord>, Escalation),
    /// The intent, read at lease time, needs no escalation (it changed since the index was read).
    NotNeeded(Box<IntentRecord>),
    /// Another run holds the lease, or the intent is delivered or escalated already.
    NotLeased,
}

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// Lease → send → mark. The lease is taken on the intent as it is now and returns it: the
    /// escalation is decided again on that (the due-index the run read from lags behind the
    /// table), so a delivery that landed a moment ago is never escalated.
    ///
    /// `early`: the reason of an escalation before the deadline (a degraded or held carrier),
    /// made only while the intent is still in flight as the lease finds it.
    pub(crate) async fn escalate(
        &self,
        indexed: &IntentRecord,
        run_id: &str,
        now: DateTime<Utc>,
        early: Option<String>,
    ) -> Result<Escalated, PortError> {
        let key = &indexed.intent.key;
        let until =
            now + chrono::Duration::from_std(self.config.escalation_lease).unwrap_or(chrono::Duration::minutes(5));
        let Some(record) = self.store.lease_escalation(key, run_id, now, until).await? else {
            return Ok(Escalated::NotLeased);
        };
        // Someone has it: nothing escalates an acknowledged alert (promise 17), the deadline's
        // escalation (`decide`) nor an early one for a degraded or held carrier.
        if record.status.acknowledgement.is_some() {
            return Ok(Escalated::NotNeeded(Box::new(record)));
        }
        let reason = match early {
            Some(reason) => {
                let s = &record.status;
                (s.escalation.is_none() && matches!(s.state, State::Accepted | State::DelaySuspected)).then_some(reason)
            }
            None => decide(&record, now, &self.config.sweep).into_iter().find_map(|a| match a {
                Action::Escalate { reason } => Some(reason),
                _ => None,
            }),
        };
        let Some(reason) = reason else { return Ok(Escalated::NotNeeded(Box::new(record))) };
        let record = &record;
        // A chain's next level, or the end of the chain: on-call (`chaining`).
        let reason = match &record.intent.chain {
            Some(chain) => match Box::pin(self.walk_chain(record, chain, run_id, now, &reason)).await? {
                ChainStep::Done(escalated) => return Ok(escalated),
                ChainStep::PageOnCall(reason) => reason,
            },
            None => reason,
        };
        let reason = reason.as_str();
        // One producer's flood must not bury the rest: its escalations past its cap for the hour
        // are folded, once on-call was told (domain::escalation_cap).
        let producer = record.intent.producer.as_ref();
        let paging = match producer {
            Some(p) => self.config.escalation_cap.paging(self.store.count_escalation(p, now).await?),
            None => Paging::Page,
        };
        let producer_name = producer.map(ToString::to_string);
        let notice = match (&paging, &producer_name) {
            (Paging::PageWithNotice, Some(p)) => Some(self.config.escalation_cap.notice(p, now)),
            _ => None,
        };
        if let (Paging::Fold, Some(p)) = (&paging, &producer_name) {
            let reason = self.config.escalation_cap.folded(reason, p);
            let escalation = Escalation { at: now, reason, folded: true, to_level: None };
            self.mark_escalated(record, run_id, &escalation).await?;
            tracing::warn!(key = key.short(), producer = %p, state = %record.status.state, "escalated, folded: the producer is over its escalation cap this hour");
            return Ok(Escalated::Now(Box::new(record.clone()), escalation));
        }
        let history = self.store.observations(key).await?;
        let mut lines = vec![format!(
            "{} received from {}",
            record.intent.created_at.format("%H:%M:%S"),
            record.intent.origin.as_str()
        )];
        lines.extend(history.iter().map(|o| format!("{} {}", o.at.format("%H:%M:%S"), o.summary())));
        let reason = match &notice {
            Some(n) => format!("{reason} — {n}"),
            None => reason.to_owned(),
        };
        let reason = reason.as_str();
        let msg = EscalationMessage {
            idempotency_key: key.to_string(),
            event_id: record.intent.event_id.clone(),
            template: record.intent.template.to_string(),
            recipient_masked: record.intent.recipient.masked(),
            deadline: record.intent.deadline,
            state: record.status.state,
            reason: reason.to_owned(),
            escalated_at: now,
            sns_message_id: record.status.sns_message_id.clone(),
            history: lines,
            producer: producer_name,
            producer_cap_reached: notice.is_some(),
        };
        self.escalations.escalate(&msg).await?;
        if let (Some(_), Some(p)) = (&notice, producer) {
            // Folding starts only once this is recorded: a failure here leaves the next one to
            // carry the notice again.
            if let Err(e) = self.store.escalation_notice_sent(p, now).await {
                tracing::warn!(producer = %p, error = %e, "escalation cap notice sent but not recorded; the next escalation carries it again");
            }
        }
        let escalation = Escalation { at: now, reason: reason.to_owned(), folded: false, to_level: None };
        self.mark_escalated(record, run_id, &escalation).await?;
        tracing::warn!(key = key.short(), recipient = %record.intent.recipient, state = %record.status.state, reason, "escalated to on-call");
        Ok(Escalated::Now(Box::new(record.clone()), escalation))
    }

    /// Marks the intent escalated (the fact and its observation), with the lease's run.
    pub(crate) async fn mark_escalated(
        &self,
        record: &IntentRecord,
        run_id: &str,
        escalation: &Escalation,
    ) -> Result<(), PortError> {
        let key = &record.intent.key;
        let reason = escalation.reason.as_str();
        let t = Transition {
            key: key.clone(),
            from: vec![],
            attempt_id: None,
            patch: StatusPatch { escalation: Some(escalation.clone()), ..Default::default() },
            observation: Observation::new(
                "escalation",
                self.clock.now(),
                ObservationKind::Escalated { reason: reason.to_owned(), run_id: run_id.to_owned() },
            ),
            next_check: NextCheck::Keep,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
            carried_along: Vec::new(),
        };
        self.store.transition(t).await?;
        Ok(())
    }
}
