//! The operator's actions on an alert, over the ports: a manual resend, exclusive with the
//! automation, and the acknowledgement of an escalation. The CLI (`tocsin resend`, `tocsin
//! escalations ack`) presents them; the simulation runs them against the automation at any moment.
//!
//! A resend takes the same kind of claim as the sender — a conditional move to `sending` with an
//! attempt id and a lease — so an operator and the automation can never both publish one intent.
//! It differs in three ways only:
//!
//! - it claims from the states in which nothing will happen by itself and no SMS is known to be
//!   on its way ([`RESENDABLE`]), never from the states the automation owns (`received`, `queued`,
//!   `sending`) nor from those where SNS took the message (`accepted`, `delay_suspected`) or the
//!   carrier delivered it;
//! - the claim and the operator's observation (who, why) are one atomic write: a refused claim
//!   records nothing, an applied one always says who took it;
//! - it is refused while an escalation run holds the intent (between the sweep's lease, on which
//!   it decides, and its page or the chain's next level): of a resend and an escalation, exactly
//!   one comes first, and a chain's level waits from a resend that did.
//!
//! After the claim it publishes once and records the outcome exactly as the sender does (a
//! transition out of `sending` conditioned on its attempt id). A command that dies after the
//! claim leaves a lease that the sweep turns into `send_unknown`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::intent::SmsOptions;
use crate::domain::observation::{Observation, ObservationKind};
use crate::domain::send_context::SendContext;
use crate::domain::{IdempotencyKey, IntentRecord, State};
use crate::ports::{
    Clock, Commit, EscalationBacklog, Expect, IntentStore, NextCheck, PortError, PortResult, PublishOutcome,
    RecipientRegistry, Refusal, SmsGateway, SmsMessage, StatusPatch, Suppression, SuppressionEvidence, Transition,
    TransitionOutcome, after,
};

/// The states an operator may resend from: the outcome is unknown, or the intent ended without a
/// confirmed delivery, and no automation will act on it any more.
pub const RESENDABLE: [State; 4] = [State::SendUnknown, State::Failed, State::Stale, State::ExpiredUnknown];

/// The attempt id of an operator's resend: `operator:<uuid>`, distinct from a sender's attempt.
pub fn operator_attempt_id(id: &str) -> String {
    format!("operator:{id}")
}

/// The operator observation's action for an acknowledged escalation.
pub const ACK_ACTION: &str = "acknowledged escalation";

/// One operator resend claim.
#[derive(Debug, Clone)]
pub struct OperatorClaim<'a> {
    pub key: &'a IdempotencyKey,
    /// `operator:<uuid>`, see [`operator_attempt_id`].
    pub attempt_id: &'a str,
    /// Who acts: the caller's identity (the CLI: its STS GetCallerIdentity ARN).
    pub operator: &'a str,
    pub reason: &'a str,
    pub now: DateTime<Utc>,
    /// Past it, the sweep declares the attempt's outcome unknown (`send_unknown`), as for a sender.
    pub lease_until: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OperatorClaimOutcome {
    /// Claimed: the intent is `sending` under this attempt id and the operator observation is
    /// stored. The record is the one read before the claim, with the claimed status applied.
    Claimed(Box<IntentRecord>),
    /// Not in a resendable state (any more): the current record. Nothing was written.
    NotResendable(Box<IntentRecord>),
    /// Resendable, but an escalation run holds it: that run decided on the intent as it was, and
    /// its page (or the chain's next level) follows; a resend now would slip in between and the
    /// level would not wait for it (promise 19). The current record; nothing was written.
    BeingEscalated(Box<IntentRecord>),
    Missing,
}

/// Claims `claim.key` for an operator's resend: conditionally moves it from one of
/// [`RESENDABLE`] to `sending` with the operator's attempt id and lease, and stores the
/// `operator` observation (action `resend`) in the same transaction.
pub async fn claim_for_operator<S: IntentStore>(
    store: &S,
    claim: OperatorClaim<'_>,
) -> PortResult<OperatorClaimOutcome> {
    let Some(mut record) = store.get(claim.key).await? else { return Ok(OperatorClaimOutcome::Missing) };
    if !RESENDABLE.contains(&record.status.state) {
        return Ok(OperatorClaimOutcome::NotResendable(Box::new(record)));
    }
    let t = Transition {
        key: claim.key.clone(),
        from: RESENDABLE.to_vec(),
        attempt_id: None,
        patch: StatusPatch {
            state: Some(State::Sending),
            claim: Some((claim.attempt_id.to_owned(), claim.now, claim.lease_until)),
            pending_again: Some((record.intent.recipient.clone(), record.intent.deadline)),
            ..Default::default()
        },
        observation: Observation::new(
            format!("{}:resend", claim.attempt_id),
            claim.now,
            ObservationKind::Operator {
                operator: claim.operator.to_owned(),
                action: "resend".into(),
                reason: claim.reason.to_owned(),
            },
        )
        .with_state(State::Sending),
        // A lapsed lease is found by the sweep and becomes send_unknown, as for a sender. An
        // escalation the alert owes is not postponed by the claim: one past its deadline (or
        // due by it) and not yet escalated nor acknowledged keeps its check at the deadline
        // (long mode, End User Messaging seed 129228: a failed alert owed its escalation while
        // Lambda was throttled; an operator's resend put its check at the lease's end, and the
        // sweeps that could act skipped it).
        next_check: NextCheck::At(resend_check(&record, claim.now, claim.lease_until)),
        index_message: None,
        // Never between a sweep's decision and its page or next level (long mode, SNS seed
        // 170134: a sweep leased a chain's first level, whose outcome was unknown, and decided to
        // move on; an operator's resend claimed it before the sweep started the next level, which
        // then texted the next person a second after the first was texted anew).
        expect: Expect { no_escalation_run_at: Some(claim.now), ..Default::default() },
        retain_until: Some(record.intent.expires_at()),
        // The operator's action is recorded only if it takes place.
        commit: Commit::Atomic,
        carried_along: Vec::new(),
    };
    match store.transition(t).await? {
        TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied => {
            let s = &mut record.status;
            s.state = State::Sending;
            s.attempt_id = Some(claim.attempt_id.to_owned());
            s.claimed_at = Some(claim.now);
            s.lease_until = Some(claim.lease_until);
            Ok(OperatorClaimOutcome::Claimed(Box::new(record)))
        }
        // Refused in a resendable state while an escalation run holds the intent: that run is
        // paging on-call (or starting the chain's next level) on what it read.
        TransitionOutcome::Refused(current)
            if RESENDABLE.contains(&current.status.state)
                && current.status.escalation_run_until.is_some_and(|until| until >= claim.now) =>
        {
            Ok(OperatorClaimOutcome::BeingEscalated(current))
        }
        TransitionOutcome::Refused(current) => Ok(OperatorClaimOutcome::NotResendable(current)),
    }
}

/// The next check a resend's claim writes: the lease's end, or the alert's deadline when that
/// comes first and the alert still owes its escalation (never a time already past).
fn resend_check(record: &IntentRecord, now: DateTime<Utc>, lease_until: DateTime<Utc>) -> DateTime<Utc> {
    let s = &record.status;
    if s.escalation.is_none() && s.acknowledgement.is_none() {
        lease_until.min(record.intent.deadline.max(now))
    } else {
        lease_until
    }
}

/// What an operator asks for when resending.
#[derive(Debug, Clone)]
pub struct ResendRequest<'a> {
    pub key: &'a IdempotencyKey,
    pub operator: &'a str,
    pub reason: &'a str,
    /// `operator:<uuid>` ([`operator_attempt_id`]).
    pub attempt_id: &'a str,
    /// How long the claim holds (longer than one publish).
    pub lease: Duration,
    /// The deployment's SMS settings where the intent names none.
    pub defaults: &'a SmsOptions,
    /// The deployment (stack) sending: the SMS's context names it with the alert and attempt.
    pub stack: &'a str,
}

/// How long an operator's resend stays worth delivering when the alert's deadline has passed
/// (a person asked for it now): the carrier gives up after this (End User Messaging's TimeToLive).
pub const RESEND_WORTH: Duration = Duration::from_secs(3600);

/// Why nothing was sent.
#[derive(Debug, thiserror::Error)]
pub enum ResendError {
    #[error("no intent with key {0}")]
    Missing(IdempotencyKey),
    /// Not resendable: the record as it is, and whether it changed while claiming it.
    #[error("intent {} is {}: not resendable", .record.intent.key, .record.status.state)]
    NotResendable { record: Box<IntentRecord>, changed: bool },
    /// An escalation run holds the intent now (its page or the chain's next level follows):
    /// nothing was sent; look again once it is escalated (at most the escalation lease, when
    /// that run died).
    #[error("intent {} is being escalated right now: not resent", .record.intent.key)]
    BeingEscalated { record: Box<IntentRecord> },
    /// The recipient is suppressed: re-enable the number first.
    #[error("the recipient {} is suppressed", .record.intent.recipient.masked())]
    Suppressed { record: Box<IntentRecord>, suppression: Suppression },
    #[error("{what}: {error}")]
    Port { what: &'static str, error: PortError },
}

/// How a resend that got as far as the publish ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResendOutcome {
    /// SNS took it (not delivered yet).
    Accepted,
    /// SNS refused it for good; the intent is `failed`.
    Rejected,
    /// SNS proved it did not take it (throttled, 5xx); the intent is `failed`; resend again.
    NotAcceptedRetryable,
    /// It may or may not have gone out; the intent is `send_unknown`.
    Unknown,
}

impl ResendOutcome {
    pub fn accepted(self) -> bool {
        self == ResendOutcome::Accepted
    }
}

/// Why a published resend's outcome could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum NotRecorded {
    #[error("the intent moved on to {0}")]
    MovedOn(State),
    #[error(transparent)]
    Port(#[from] PortError),
}

/// A resend that published: what SNS answered and whether it was recorded.
#[derive(Debug)]
pub struct Resent {
    pub outcome: ResendOutcome,
    pub published: PublishOutcome,
    /// The claimed record.
    pub record: IntentRecord,
    pub recorded: Result<(), NotRecorded>,
}

/// An operator's resend: refused unless resendable and the number is not suppressed; then claimed
/// (exclusive with the automation), published once, and recorded as the sender records.
pub async fn resend<S, R, G, C>(
    store: &S,
    registry: &R,
    gateway: &G,
    clock: &C,
    req: ResendRequest<'_>,
) -> Result<Resent, ResendError>
where
    S: IntentStore,
    R: RecipientRegistry,
    G: SmsGateway,
    C: Clock,
{
    let port = |what| move |error| ResendError::Port { what, error };
    let key = req.key;
    let record =
        store.get(key).await.map_err(port("reading the intent"))?.ok_or_else(|| ResendError::Missing(key.clone()))?;
    if !RESENDABLE.contains(&record.status.state) {
        return Err(ResendError::NotResendable { record: Box::new(record), changed: false });
    }
    // The registry first: a suppressed number is never published to.
    if let Some(suppression) =
        registry.suppression(&record.intent.recipient).await.map_err(port("checking the recipient"))?
    {
        return Err(ResendError::Suppressed { record: Box::new(record), suppression });
    }
    let now = clock.now();
    let claim = OperatorClaim {
        key,
        attempt_id: req.attempt_id,
        operator: req.operator,
        reason: req.reason,
        now,
        lease_until: after(now, req.lease),
    };
    let record = match claim_for_operator(store, claim).await.map_err(port("claiming the intent"))? {
        OperatorClaimOutcome::Claimed(r) => *r,
        OperatorClaimOutcome::NotResendable(current) => {
            return Err(ResendError::NotResendable { record: current, changed: true });
        }
        OperatorClaimOutcome::BeingEscalated(record) => return Err(ResendError::BeingEscalated { record }),
        OperatorClaimOutcome::Missing => return Err(ResendError::Missing(key.clone())),
    };
    // Claimed: this operator alone may publish now, once.
    let options = record.intent.sms.or_defaults(req.defaults);
    let context = SendContext::alert(req.stack, key.clone(), req.attempt_id);
    let worth_until = record.intent.deadline.max(after(now, RESEND_WORTH));
    let published = gateway
        .publish(SmsMessage {
            to: &record.intent.recipient,
            body: record.intent.body.expose(),
            options: &options,
            context: &context,
            worth_until,
        })
        .await;
    // An opted-out number (the provider refused the send) is suppressed before anything else is
    // written, as the sender does: no later alert goes to it.
    if let PublishOutcome::Rejected { error, refusal: Refusal::Recipient } = &published {
        let evidence = SuppressionEvidence {
            log_event_id: format!("refusal:{}", req.attempt_id),
            provider_response: Some(error.clone()),
            at: clock.now(),
            intent_key: key.to_string(),
            table_version: "refusal".into(),
        };
        registry.suppress(&record.intent.recipient, &evidence).await.map_err(port("suppressing the number"))?;
    }
    let outcome = match &published {
        PublishOutcome::Accepted { .. } => ResendOutcome::Accepted,
        PublishOutcome::Rejected { .. } => ResendOutcome::Rejected,
        PublishOutcome::Retryable { .. } => ResendOutcome::NotAcceptedRetryable,
        PublishOutcome::Unknown { .. } => ResendOutcome::Unknown,
    };
    let recorded = record_resend(store, &record, req.attempt_id, &published, clock.now()).await;
    Ok(Resent { outcome, published, record, recorded })
}

/// Records the publish outcome exactly as the sender does: a transition out of `sending` held by
/// this attempt, with its observation; accepted also indexes the SNS message id in the same write.
async fn record_resend<S: IntentStore>(
    store: &S,
    record: &IntentRecord,
    attempt_id: &str,
    published: &PublishOutcome,
    now: DateTime<Utc>,
) -> Result<(), NotRecorded> {
    let intent = &record.intent;
    let base = StatusPatch { clear_claim: true, increment_attempts: true, ..Default::default() };
    let (to, kind, patch, tag) = match published {
        PublishOutcome::Accepted { message_id } => (
            State::Accepted,
            ObservationKind::Accepted { attempt_id: attempt_id.into(), sns_message_id: message_id.clone() },
            StatusPatch { sns_message_id: Some(message_id.clone()), accepted_at: Some(now), ..base },
            "accepted",
        ),
        PublishOutcome::Rejected { error, refusal: Refusal::Recipient } => (
            State::Suppressed,
            ObservationKind::Suppressed { registry_reason: Refusal::Recipient.reason(error) },
            StatusPatch { last_error: Some(Refusal::Recipient.reason(error)), ..base },
            "rejected",
        ),
        PublishOutcome::Rejected { error, refusal } => (
            refusal.state(),
            ObservationKind::PublishRejected { attempt_id: attempt_id.into(), error: error.clone() },
            StatusPatch { last_error: Some(format!("operator's resend: {}", refusal.reason(error))), ..base },
            "rejected",
        ),
        PublishOutcome::Retryable { error } => (
            State::Failed,
            ObservationKind::PublishRejected {
                attempt_id: attempt_id.into(),
                error: format!(
                    "not accepted, retryable ({error}); nothing was sent, the operator may run the resend again"
                ),
            },
            StatusPatch {
                last_error: Some(format!("SNS did not accept the operator's resend (retryable: {error})")),
                ..base
            },
            "retryable",
        ),
        PublishOutcome::Unknown { error } => (
            State::SendUnknown,
            ObservationKind::SendUnknown { attempt_id: attempt_id.into(), cause: error.clone() },
            StatusPatch { last_error: Some(error.clone()), ..base },
            "unknown",
        ),
    };
    let mut patch = patch;
    patch.state = Some(to);
    if to.is_final() {
        patch.final_at = Some(now);
    }
    let mut t = Transition {
        key: intent.key.clone(),
        from: vec![State::Sending],
        attempt_id: Some(attempt_id.to_owned()),
        patch,
        observation: Observation::new(format!("attempt:{attempt_id}:{tag}"), now, kind).with_state(to),
        // Earlier than needed is always safe: the next sweep sets the right time with the
        // deployment's own thresholds (delay suspected, receipt window, escalation).
        next_check: NextCheck::At(now),
        index_message: None,
        expect: Default::default(),
        retain_until: Some(intent.expires_at()),
        commit: Commit::Atomic,
        carried_along: Vec::new(),
    };
    if let PublishOutcome::Accepted { message_id } = published {
        t.index_message = Some((message_id.clone(), intent.recipient.clone()));
    }
    match store.transition(t.clone()).await? {
        TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied => Ok(()),
        TransitionOutcome::Refused(current) if current.status.state == State::SendUnknown => {
            // The sweep gave up on our lease while we waited; we know better now (as the sender).
            t.from = vec![State::SendUnknown];
            t.attempt_id = None;
            match store.transition(t).await? {
                TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied => Ok(()),
                TransitionOutcome::Refused(c) => Err(NotRecorded::MovedOn(c.status.state)),
            }
        }
        TransitionOutcome::Refused(current) => Err(NotRecorded::MovedOn(current.status.state)),
    }
}

/// Who acknowledged an escalation, when and why: the operator observation in its timeline.
pub fn acknowledgement(timeline: &[Observation]) -> Option<(&str, DateTime<Utc>, &str)> {
    timeline.iter().find_map(|o| match &o.kind {
        ObservationKind::Operator { operator, action, reason } if action == ACK_ACTION => {
            Some((operator.as_str(), o.at, reason.as_str()))
        }
        _ => None,
    })
}

/// An acknowledgement, as it ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Acknowledged {
    /// Recorded by this call.
    Now,
    /// Acknowledged before: who, when, why (that record stands).
    Before { operator: String, at: DateTime<Utc>, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum AckError {
    #[error("no intent with key {0}")]
    Missing(IdempotencyKey),
    /// Not escalated: nothing to acknowledge (its state).
    #[error("the intent was not escalated (state {0}): nothing to acknowledge")]
    NotEscalated(State),
    #[error("{what}: {error}")]
    Port { what: &'static str, error: PortError },
}

/// Acknowledges `key`'s escalation: who, when and why recorded in its timeline (once per
/// escalation), then taken off the open escalations (which the unacknowledged-escalation alarm
/// reads). The ledger first: a caller that fails after it finds the record when it runs again.
pub async fn acknowledge<S: IntentStore + EscalationBacklog>(
    store: &S,
    key: &IdempotencyKey,
    operator: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Acknowledged, AckError> {
    let port = |what| move |error| AckError::Port { what, error };
    let record =
        store.get(key).await.map_err(port("reading the intent"))?.ok_or_else(|| AckError::Missing(key.clone()))?;
    let Some(escalation) = record.status.escalation.clone() else {
        return Err(AckError::NotEscalated(record.status.state));
    };
    let timeline = store.observations(key).await.map_err(port("reading the timeline"))?;
    let earlier = acknowledgement(&timeline).map(|(o, at, r)| Acknowledged::Before {
        operator: o.to_owned(),
        at,
        reason: r.to_owned(),
    });
    let acknowledged = match earlier {
        Some(before) => before,
        None => {
            let t = Transition {
                key: key.clone(),
                from: Vec::new(),
                attempt_id: None,
                patch: StatusPatch::default(),
                observation: Observation::new(
                    format!("operator:ack-escalation:{}", escalation.at.timestamp_millis()),
                    now,
                    ObservationKind::Operator {
                        operator: operator.to_owned(),
                        action: ACK_ACTION.to_owned(),
                        reason: reason.to_owned(),
                    },
                )
                .with_state(record.status.state),
                next_check: NextCheck::Keep,
                index_message: None,
                expect: Default::default(),
                retain_until: Some(record.intent.expires_at()),
                commit: Commit::Atomic,
                carried_along: Vec::new(),
            };
            match store.transition(t).await.map_err(port("recording the acknowledgement"))? {
                TransitionOutcome::Applied => Acknowledged::Now,
                // Another operator's acknowledgement of the same escalation landed first.
                TransitionOutcome::AlreadyApplied => {
                    let timeline = store.observations(key).await.map_err(port("reading the timeline"))?;
                    acknowledgement(&timeline)
                        .map(|(o, at, r)| Acknowledged::Before { operator: o.to_owned(), at, reason: r.to_owned() })
                        .unwrap_or(Acknowledged::Now)
                }
                TransitionOutcome::Refused(_) => return Err(AckError::Missing(key.clone())),
            }
        }
    };
    store.close_escalation(key).await.map_err(port("closing the escalation"))?;
    Ok(acknowledged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_states_without_a_pending_or_confirmed_sms_are_resendable() {
        for s in crate::domain::state::ALL_STATES {
            let owned_by_automation = matches!(s, State::Received | State::Queued | State::Sending);
            let sns_has_it = matches!(s, State::Accepted | State::DelaySuspected | State::Delivered);
            let suppressed = s == State::Suppressed;
            assert_eq!(RESENDABLE.contains(&s), !(owned_by_automation || sns_has_it || suppressed), "{s}");
        }
    }

    #[test]
    fn operator_attempt_ids_cannot_be_mistaken_for_a_senders() {
        assert_eq!(
            operator_attempt_id("00000000-0000-0000-0000-000000000000"),
            "operator:00000000-0000-0000-0000-000000000000"
        );
    }
}
