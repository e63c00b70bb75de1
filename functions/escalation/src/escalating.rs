//! Escalating to on-call: lease → send → mark, the escalation decided again on the intent as the
//! lease finds it. Writes only the escalation lease and mark; never changes an intent's state.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::{Escalation, IntentRecord};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::sweep::{Action, decide};
use tocsin::ports::{
    Commit, DeliveryLogSearch, EscalationMessage, EscalationQueue, NextCheck, PortError, SendQueue, StatusPatch,
    Transition,
};

use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

/// How an escalation attempt ended.
pub(crate) enum Escalated {
    /// Sent to on-call: the intent as the lease found it, and the fact recorded.
    Now(Box<IntentRecord>, Escalation),
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
        let reason = reason.as_str();
        let record = &record;
        let history = self.store.observations(key).await?;
        let mut lines = vec![format!(
            "{} received from {}",
            record.intent.created_at.format("%H:%M:%S"),
            record.intent.origin.as_str()
        )];
        lines.extend(history.iter().map(|o| format!("{} {}", o.at.format("%H:%M:%S"), o.summary())));
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
        };
        self.escalations.escalate(&msg).await?;
        let escalation = Escalation { at: now, reason: reason.to_owned() };
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
        };
        self.store.transition(t).await?;
        tracing::warn!(key = key.short(), recipient = %record.intent.recipient, state = %record.status.state, reason, "escalated to on-call");
        Ok(Escalated::Now(Box::new(record.clone()), escalation))
    }
}
