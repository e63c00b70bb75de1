//! Operator actions on the ledger (the `tocsin` CLI).
//!
//! A manual resend takes the same kind of claim as the sender — a conditional move to `sending`
//! with an attempt id and a lease — so an operator and the automation can never both publish one
//! intent. It differs in two ways only:
//!
//! - it claims from the states in which nothing will happen by itself and no SMS is known to be
//!   on its way ([`RESENDABLE`]), never from the states the automation owns (`received`, `queued`,
//!   `sending`) nor from those where SNS took the message (`accepted`, `delay_suspected`) or the
//!   carrier delivered it;
//! - the claim and the operator's observation (who, why) are one atomic write: a refused claim
//!   records nothing, an applied one always says who took it.
//!
//! The claim is written through [`IntentStore::transition`], the same conditional, transactional
//! write every state change uses, so the observation store, the due index and the state cannot
//! disagree. After the claim the caller publishes and records the outcome exactly as the sender
//! does (a transition from `sending` conditioned on its attempt id).

use chrono::{DateTime, Utc};

use super::dynamodb::DynamoLedger;
use crate::domain::observation::{Observation, ObservationKind};
use crate::domain::{IdempotencyKey, IntentRecord, State};
use crate::ports::{Commit, IntentStore, NextCheck, PortResult, StatusPatch, Transition, TransitionOutcome};

/// The states an operator may resend from: the outcome is unknown, or the intent ended without a
/// confirmed delivery, and no automation will act on it any more.
pub const RESENDABLE: [State; 4] = [State::SendUnknown, State::Failed, State::Stale, State::ExpiredUnknown];

/// The attempt id of an operator's resend: `operator:<uuid>`, distinct from a sender's attempt.
pub fn operator_attempt_id(id: uuid::Uuid) -> String {
    format!("operator:{id}")
}

/// One operator resend claim.
#[derive(Debug, Clone)]
pub struct OperatorClaim<'a> {
    pub key: &'a IdempotencyKey,
    /// `operator:<uuid>`, see [`operator_attempt_id`].
    pub attempt_id: &'a str,
    /// Who acts: the caller's IAM identity (STS GetCallerIdentity ARN).
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
    Missing,
}

impl DynamoLedger {
    /// Claims `claim.key` for an operator's resend: conditionally moves it from one of
    /// [`RESENDABLE`] to `sending` with the operator's attempt id and lease, and stores the
    /// `operator` observation (action `resend`) in the same transaction.
    pub async fn claim_for_operator(&self, claim: OperatorClaim<'_>) -> PortResult<OperatorClaimOutcome> {
        let Some(mut record) = self.get(claim.key).await? else { return Ok(OperatorClaimOutcome::Missing) };
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
            // A lapsed lease is found by the sweep and becomes send_unknown, as for a sender.
            next_check: NextCheck::At(claim.lease_until),
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            // The operator's action is recorded only if it takes place.
            commit: Commit::Atomic,
        };
        match self.transition(t).await {
            Ok(TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied) => {
                let s = &mut record.status;
                s.state = State::Sending;
                s.attempt_id = Some(claim.attempt_id.to_owned());
                s.claimed_at = Some(claim.now);
                s.lease_until = Some(claim.lease_until);
                Ok(OperatorClaimOutcome::Claimed(Box::new(record)))
            }
            Ok(TransitionOutcome::Refused(current)) => Ok(OperatorClaimOutcome::NotResendable(current)),
            Err(e) => Err(e),
        }
    }
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
        let id = operator_attempt_id(uuid::Uuid::nil());
        assert_eq!(id, "operator:00000000-0000-0000-0000-000000000000");
    }
}
