//! The manual half of reconciliation, for the operator tooling: list the delivery-status records
//! that could belong to an intent with an unknown outcome, and link one by hand — with a reason,
//! recorded with the operator's identity — exactly as the automatic path would have.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::observation::{Observation, ObservationKind};
use crate::domain::reconcile::{Found, Window};
use crate::domain::{IdempotencyKey, State};
use crate::ports::{
    Commit, DeliveryLogSearch, IntentStore, MessageIndex, NextCheck, PortError, RecipientRegistry, SearchError,
    SearchFor, StatusPatch, Transition,
};
use crate::services::receipts::{self, Link, LogEvent};

#[derive(Debug, thiserror::Error)]
pub enum ManualError {
    #[error("no intent with key {0}")]
    NotFound(String),
    #[error("the intent is {0}: only send_unknown (or sending) outcomes are reconciled")]
    NotUnknown(State),
    #[error("the intent has no claim time to search around")]
    NeverClaimed,
    #[error("no record of message {0} to this recipient in the attempt's window")]
    NoSuchCandidate(String),
    #[error("message {0} already belongs to intent {1}")]
    LinkedElsewhere(String, String),
    #[error("a reason is required")]
    NoReason,
    #[error("the log search was throttled; try again in a minute")]
    Throttled,
    #[error(transparent)]
    Port(#[from] PortError),
}

impl From<SearchError> for ManualError {
    fn from(e: SearchError) -> Self {
        match e {
            SearchError::Throttled => ManualError::Throttled,
            SearchError::Failed(p) => ManualError::Port(p),
        }
    }
}

/// A record that could be the intent's SMS, and whether another intent owns it already (one it
/// shares as a member of the same storm-mode digest does not count).
#[derive(Debug, Clone)]
pub struct CandidateRecord {
    pub found: Found,
    pub linked_to: Option<IdempotencyKey>,
}

/// The records to the intent's recipient of SMS sent in its attempt's window (`margin` after the
/// claim), logged by `now` (a late receipt is logged long after the window).
pub async fn candidates<S: IntentStore + MessageIndex, L: DeliveryLogSearch>(
    store: &S,
    logs: &L,
    key: &IdempotencyKey,
    margin: Duration,
    now: DateTime<Utc>,
) -> Result<Vec<CandidateRecord>, ManualError> {
    let record = store.get(key).await?.ok_or_else(|| ManualError::NotFound(key.to_string()))?;
    if !matches!(record.status.state, State::SendUnknown | State::Sending) {
        return Err(ManualError::NotUnknown(record.status.state));
    }
    let claimed = record.status.claimed_at.ok_or(ManualError::NeverClaimed)?;
    let window = Window::of_attempt(claimed, margin);
    let what = SearchFor {
        recipient: &record.intent.recipient,
        key: &record.intent.key,
        digest: record.status.digest_id.as_ref(),
    };
    let found = logs.records_for(what, window.logged_by(now), 200).await?;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for f in found {
        if f.record.destination.as_deref() != Some(record.intent.recipient.expose())
            || !window.holds(&f)
            || !seen.insert(f.log_event_id.clone())
        {
            continue;
        }
        // A digest's SMS that covers this intent is its own, not another intent's.
        let linked_to = store.lookup(&f.record.message_id).await?.filter(|e| !e.covers(key)).map(|e| e.key);
        out.push(CandidateRecord { found: f, linked_to });
    }
    out.sort_by_key(|c| c.found.timestamp_ms);
    Ok(out)
}

/// Links SNS message `message_id` to the intent by hand and applies its records.
#[allow(clippy::too_many_arguments)]
pub async fn link<S: IntentStore + MessageIndex, R: RecipientRegistry, L: DeliveryLogSearch>(
    store: &S,
    registry: &R,
    logs: &L,
    key: &IdempotencyKey,
    message_id: &str,
    operator: &str,
    reason: &str,
    margin: Duration,
    now: DateTime<Utc>,
) -> Result<State, ManualError> {
    if reason.trim().is_empty() {
        return Err(ManualError::NoReason);
    }
    let all = candidates(store, logs, key, margin, now).await?;
    let mine: Vec<&CandidateRecord> = all.iter().filter(|c| c.found.record.message_id == message_id).collect();
    if mine.is_empty() {
        return Err(ManualError::NoSuchCandidate(message_id.to_owned()));
    }
    if let Some(owner) = mine.iter().find_map(|c| c.linked_to.as_ref()).filter(|o| *o != key) {
        return Err(ManualError::LinkedElsewhere(message_id.to_owned(), owner.to_string()));
    }
    let record = store.get(key).await?.ok_or_else(|| ManualError::NotFound(key.to_string()))?;
    // The operator's decision is recorded first, then the evidence is applied as usual.
    store
        .transition(Transition {
            key: key.clone(),
            from: vec![],
            attempt_id: None,
            patch: StatusPatch::default(),
            observation: Observation::new(
                format!("operator:{}:link:{message_id}", now.timestamp_millis()),
                now,
                ObservationKind::Operator {
                    operator: operator.to_owned(),
                    action: format!("linked SNS message {message_id}"),
                    reason: reason.to_owned(),
                },
            ),
            next_check: NextCheck::Keep,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
            carried_along: Vec::new(),
        })
        .await?;
    for c in mine {
        let event = LogEvent { id: &c.found.log_event_id, timestamp_ms: c.found.timestamp_ms };
        receipts::apply(store, registry, key, &record.intent.recipient, event, &c.found.record, Link::Reconciled, now)
            .await?;
    }
    let state = store.get(key).await?.map(|r| r.status.state).unwrap_or(record.status.state);
    Ok(state)
}
