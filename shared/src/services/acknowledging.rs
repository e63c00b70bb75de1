//! Acknowledging an alert (issue 37, docs/acknowledgement.md): someone has it, so it is never
//! escalated after this. One conditional write of the intent and its observation, together
//! (`Expect::not_acknowledged`): of two acknowledgements at once — a reply and an operator, two
//! copies of one reply — exactly one is recorded, and the other learns whose stands. The same
//! acknowledgement retried (its observation id is the reply's `inboundMessageId`, or the
//! operator's request id) is recognised as already applied.
//!
//! An acknowledgement never changes the state: a delivered alert stays delivered, an unknown one
//! unknown — the timeline keeps both what the carrier said and what the person did. An
//! escalation already sent stays sent; from now on nothing escalates the alert again.

use chrono::{DateTime, Utc};

use crate::domain::acknowledgement::{AckVia, Acknowledgement};
use crate::domain::observation::{Observation, ObservationKind};
use crate::domain::{IdempotencyKey, IntentRecord};
use crate::ports::{Commit, Expect, IntentStore, NextCheck, PortError, StatusPatch, Transition, TransitionOutcome};

/// The one write of an acknowledgement: `ack` on the intent with `observation`, together, only if
/// nobody acknowledged it before (`Expect::not_acknowledged`).
pub fn acknowledgement_transition(
    record: &IntentRecord,
    ack: &Acknowledgement,
    observation: Observation,
    next_check: NextCheck,
) -> Transition {
    Transition {
        key: record.intent.key.clone(),
        from: Vec::new(),
        attempt_id: None,
        patch: StatusPatch { acknowledgement: Some(ack.clone()), ..Default::default() },
        observation: observation.with_state(record.status.state),
        next_check,
        index_message: None,
        expect: Expect { not_acknowledged: true, ..Default::default() },
        retain_until: Some(record.intent.expires_at()),
        commit: Commit::Atomic,
        carried_along: Vec::new(),
    }
}

/// How an acknowledgement ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertAck {
    /// Recorded by this call.
    Now(Acknowledgement),
    /// The alert was acknowledged before (by this same request, retried, or by someone else):
    /// that acknowledgement stands.
    Before(Acknowledgement),
}

#[derive(Debug, thiserror::Error)]
pub enum AlertAckError {
    #[error("no intent with key {0}")]
    Missing(IdempotencyKey),
    #[error("{what}: {error}")]
    Port { what: &'static str, error: PortError },
}

/// Acknowledges `key` for `by` (an operator's name, or the replying phone masked), through `via`;
/// `request_id` names this acknowledgement (the reply's `inboundMessageId`, the operator's
/// request), so a retry of it is recognised.
pub async fn acknowledge_alert<S: IntentStore>(
    store: &S,
    key: &IdempotencyKey,
    by: &str,
    via: AckVia,
    request_id: &str,
    now: DateTime<Utc>,
) -> Result<AlertAck, AlertAckError> {
    acknowledge_intent(store, key, by, via, request_id, now).await.map(|(ack, _)| ack)
}

/// [`acknowledge_alert`], with the intent as read before (what it was about: its template).
///
/// A level of an escalation chain (`domain::chain`) is acknowledged on the chain's root first:
/// the root's item arbitrates between an acknowledgement and the next level's start, so what is
/// recorded there first stands — for every level — and then on the level itself. Someone at
/// another level who acknowledged first is the answer (`Before`).
pub async fn acknowledge_intent<S: IntentStore>(
    store: &S,
    key: &IdempotencyKey,
    by: &str,
    via: AckVia,
    request_id: &str,
    now: DateTime<Utc>,
) -> Result<(AlertAck, IntentRecord), AlertAckError> {
    let port = |what| move |error| AlertAckError::Port { what, error };
    let record =
        store.get(key).await.map_err(port("reading the intent"))?.ok_or_else(|| AlertAckError::Missing(key.clone()))?;
    if let Some(before) = record.status.acknowledgement.clone() {
        return Ok((AlertAck::Before(before), record));
    }
    // To the millisecond, as the ledger keeps it: the caller's answer equals what is stored.
    let now = DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
    let mine = Acknowledgement { at: now, by: by.to_owned(), via };
    let root = record.intent.chain.as_ref().map(|c| &c.root).filter(|root| *root != key);
    let chain_ack = match root {
        Some(root) => match Box::pin(acknowledge_intent(store, root, by, via, request_id, now)).await {
            Ok((answer, _)) => Some(answer),
            // The root is past its retention: nothing arbitrates; this level alone.
            Err(AlertAckError::Missing(_)) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let ack = match &chain_ack {
        Some(AlertAck::Now(a) | AlertAck::Before(a)) => a.clone(),
        None => mine,
    };
    let observation = Observation::new(
        format!("ack:{}:{request_id}", via.as_str()),
        now,
        ObservationKind::Acknowledged { by: by.to_owned(), via },
    );
    let t = acknowledgement_transition(&record, &ack, observation, NextCheck::Keep);
    let written = store.transition(t).await.map_err(port("recording the acknowledgement"))?;
    if let Some(answer) = chain_ack {
        // The chain's answer stands, whatever this level's own write found.
        return Ok((answer, record));
    }
    match written {
        TransitionOutcome::Applied => Ok((AlertAck::Now(ack), record)),
        TransitionOutcome::AlreadyApplied | TransitionOutcome::Refused(_) => {
            let now_stored = store.get(key).await.map_err(port("reading the intent"))?;
            match now_stored.and_then(|r| r.status.acknowledgement) {
                Some(stands) => Ok((AlertAck::Before(stands), record)),
                None => Err(AlertAckError::Missing(key.clone())),
            }
        }
    }
}
