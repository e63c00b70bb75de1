//! Applying one delivery record (an SNS delivery-status record or an End User Messaging event) to
//! the intent it belongs to: an append-only observation keyed by the CloudWatch Logs event id, a
//! monotonic state change, and immediate suppression of a number the record proves unusable. Used
//! by the status function (records that arrive through the subscription) and by reconciliation
//! (records found by searching the logs).

use chrono::{DateTime, TimeZone, Utc};

use crate::domain::delivery::{DeliveryRecord, DeliveryStatus};
use crate::domain::intent::IntentRecord;
use crate::domain::observation::{Observation, ObservationKind};
use crate::domain::provider::FailureClass;
use crate::domain::send_context::Subject;
use crate::domain::state::{ReceiptEffect, apply_linked_receipt, apply_receipt};
use crate::domain::{IdempotencyKey, PhoneNumber, State};
use crate::ports::{
    Commit, Expect, IntentStore, NextCheck, PortError, RecipientRegistry, StatusPatch, SuppressionEvidence, Transition,
    TransitionOutcome,
};

/// Optimistic-concurrency retries when the intent changes between read and write.
const MAX_RACES: usize = 4;

/// Where a record came from.
#[derive(Debug, Clone)]
pub struct LogEvent<'a> {
    pub id: &'a str,
    /// Epoch milliseconds of the log event.
    pub timestamp_ms: i64,
}

/// An earlier event of the same SMS that changes nothing — a provider's progress (End User
/// Messaging's carrier acceptance, queued, pending) logged before the record it goes with in one
/// batch — carried along in that record's one write when the record changes the state
/// ([`Transition::carried_along`]), else applied alone first, as it would have been.
#[derive(Debug, Clone)]
pub struct Along<'a> {
    pub event: LogEvent<'a>,
    pub record: &'a DeliveryRecord,
}

impl Along<'_> {
    /// Whether `record` is an event that [`apply_carrying`] can carry along: a provider's progress
    /// (no outcome, so no effect but its observation).
    pub fn can_carry(record: &DeliveryRecord) -> bool {
        record.status.receipt().is_none() && matches!(record.status, DeliveryStatus::Pending(_))
    }

    fn class(&self) -> Option<FailureClass> {
        self.record.failure.map(|c| c.class)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Effect(ReceiptEffect),
    /// This log event was applied before (a redelivery or a retried invocation).
    Duplicate,
    /// The record names an intent by key that does not exist (expired long ago, or a forged
    /// event): nothing written, counted.
    NoSuchIntent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub applied: Applied,
    /// The recipient was (re)suppressed by this record.
    pub suppressed: bool,
    pub class: Option<FailureClass>,
    /// False when a failure's provider response was not in the table.
    pub recognised: bool,
}

/// How the record was tied to the intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Through the message-id index the sender wrote.
    Indexed,
    /// Found by reconciliation (destination and time window): it may also settle an intent that is
    /// still `sending`, whose sender never recorded the MessageId.
    Reconciled,
    /// Found by reconciliation as the SMS of a storm-mode digest this intent is a member of: its
    /// message id is indexed once for every member (never for this intent alone).
    ReconciledDigest,
    /// The record's own context names this intent and the attempt that sent it (End User
    /// Messaging echoes it in every event): exact, with no index. The attempt decides whether it
    /// is the current attempt's SMS (then it settles the intent in any waiting state, `sending`
    /// and `send_unknown` included) or an earlier one's (stored, never applied).
    Keyed,
}

/// Applies `record` (from `event`) to intent `key` of `recipient`.
#[allow(clippy::too_many_arguments)]
pub async fn apply<S: IntentStore, R: RecipientRegistry>(
    store: &S,
    registry: &R,
    key: &IdempotencyKey,
    recipient: &PhoneNumber,
    event: LogEvent<'_>,
    record: &DeliveryRecord,
    link: Link,
    now: DateTime<Utc>,
) -> Result<Outcome, PortError> {
    let (outcome, _) = apply_carrying(store, registry, key, recipient, event, record, &[], link, now).await?;
    Ok(outcome)
}

/// Applies `record` as [`apply`] does, with `along` — earlier progress events of the same SMS
/// ([`Along`]) — carried in its write when it changes the state, else applied alone before it.
/// Also answers how each of `along` was applied, in order.
#[allow(clippy::too_many_arguments)]
pub async fn apply_carrying<S: IntentStore, R: RecipientRegistry>(
    store: &S,
    registry: &R,
    key: &IdempotencyKey,
    recipient: &PhoneNumber,
    event: LogEvent<'_>,
    record: &DeliveryRecord,
    along: &[Along<'_>],
    link: Link,
    now: DateTime<Utc>,
) -> Result<(Outcome, Vec<Applied>), PortError> {
    // A record that may suppress reads its intent first and may apply nothing: its progress goes
    // alone, before it, as it would have (never carried by a record that is not applied).
    let along_alone = record.failure.is_some_and(|c| c.class == FailureClass::PermanentRecipient);
    let (mut along_applied, along) = if along_alone {
        (apply_alone(store, key, recipient, along, link, now).await?, &[][..])
    } else {
        (Vec::new(), along)
    };
    let classification = record.failure;
    let class = classification.map(|c| c.class);
    // The number first: the record proves it unusable whatever becomes of the state write. Were
    // it second, a state write that landed with its answer lost would leave the number enabled
    // for good whenever nothing retries the record — the sweep's reconciliation does not: the
    // intent it searched for has left `send_unknown`. The registry write is idempotent, so a
    // retried record (a redelivered batch) suppresses again harmlessly.
    let mut suppressed = false;
    if let Some(c) = classification.filter(|c| c.class == FailureClass::PermanentRecipient) {
        // A keyed record names its intent itself: before a number is suppressed on its word, the
        // intent is read and must be that number's and that attempt's (an event anyone could
        // write into the group suppresses nothing).
        if link == Link::Keyed && !keyed_record_is_the_intents(store, key, recipient, record).await? {
            return Ok((
                Outcome { applied: Applied::NoSuchIntent, suppressed, class, recognised: c.recognised },
                along_applied,
            ));
        }
        let evidence = SuppressionEvidence {
            log_event_id: event.id.to_owned(),
            provider_response: record.provider_response.clone(),
            at: now,
            intent_key: key.to_string(),
            table_version: c.table_version.into(),
        };
        registry.suppress(recipient, &evidence).await?;
        suppressed = true;
        tracing::warn!(recipient = %recipient, key = key.short(), reason = record.provider_response.as_deref().unwrap_or(""), "recipient suppressed");
    }
    let (applied, carried) =
        apply_observation(store, key, recipient, event.clone(), record, class, along, link, now).await?;
    along_applied.extend(carried);
    Ok((Outcome { applied, suppressed, class, recognised: classification.is_none_or(|c| c.recognised) }, along_applied))
}

/// Whether the intent `key` exists, is to `recipient`, and is the attempt (or the SMS) the keyed
/// `record` names.
async fn keyed_record_is_the_intents<S: IntentStore>(
    store: &S,
    key: &IdempotencyKey,
    recipient: &PhoneNumber,
    record: &DeliveryRecord,
) -> Result<bool, PortError> {
    let Some(current) = store.get(key).await? else { return Ok(false) };
    Ok(current.intent.recipient == *recipient && Basis::of(&current).keyed_attempt(record) != KeyedAttempt::Other)
}

/// What a failed delivery's intent records as its error (and its escalation repeats to on-call).
pub fn failure_text(provider_response: Option<&str>, class: Option<FailureClass>) -> String {
    let response = provider_response.unwrap_or("delivery failed");
    match class {
        Some(FailureClass::AccountLimit) => format!(
            "{} (SNS: {response}); SNS sends no SMS at all until the limit is raised, and the number stays enabled",
            crate::domain::storm::AccountSpendExhausted::REASON
        ),
        _ => format!("{response} ({})", class.map_or("unclassified", FailureClass::as_str)),
    }
}

/// The facts about the intent a receipt's effect is decided on.
#[derive(Debug, Clone)]
struct Basis {
    state: State,
    sns_message_id: Option<String>,
    escalated: bool,
    /// Presumed, not read: the transition then carries these facts as conditions.
    presumed: bool,
    /// The intent's expiry, when it was read.
    retain_until: Option<DateTime<Utc>>,
    /// The intent's SMS was a storm-mode digest: its message id is indexed for every member, by
    /// whoever links it, never for this intent alone.
    in_digest: bool,
    /// When the current claim began (read intents only).
    claimed_at: Option<DateTime<Utc>>,
    /// The current (or last) attempt (read intents only).
    attempt_id: Option<String>,
    /// The intent's recipient (read intents only).
    recipient: Option<PhoneNumber>,
    /// How long the intent's level of an escalation chain has to acknowledge once delivered
    /// (read intents only; a presumed one is expected unchained).
    chain_wait: Option<std::time::Duration>,
}

/// Whose attempt a keyed record is, as the intent's basis tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyedAttempt {
    /// The current (or last) attempt's SMS.
    Current,
    /// An earlier attempt's (the intent was resent since).
    Earlier,
    /// Not this intent's at all (another number; or its context names no attempt of it).
    Other,
}

impl Basis {
    fn of(record: &IntentRecord) -> Self {
        Basis {
            state: record.status.state,
            sns_message_id: record.status.sns_message_id.clone(),
            escalated: record.status.escalation.is_some(),
            presumed: false,
            retain_until: Some(record.intent.expires_at()),
            in_digest: record.status.digest_id.is_some(),
            claimed_at: record.status.claimed_at,
            attempt_id: record.status.attempt_id.clone(),
            recipient: Some(record.intent.recipient.clone()),
            chain_wait: record.intent.chain.as_ref().map(|c| c.wait()),
        }
    }

    /// Whether a keyed record (its context names this intent) is the current attempt's SMS. The
    /// message id decides when the intent recorded one for its attempt; else the attempt id in the
    /// context against the intent's current attempt.
    fn keyed_attempt(&self, record: &DeliveryRecord) -> KeyedAttempt {
        let Some(Subject::Alert { attempt, .. }) = record.context.as_ref().map(|c| &c.subject) else {
            return KeyedAttempt::Other;
        };
        if self.recipient.as_ref().zip(record.destination.as_deref()).is_some_and(|(r, d)| r.expose() != d) {
            return KeyedAttempt::Other;
        }
        match self.attempt_id.as_deref() {
            Some(current) if current == attempt => KeyedAttempt::Current,
            Some(_) => KeyedAttempt::Earlier,
            // Written before attempts were kept on the intent: the message id alone can tell.
            None if self.sns_message_id.as_deref() == Some(record.message_id.as_str()) => KeyedAttempt::Current,
            None => KeyedAttempt::Earlier,
        }
    }

    /// What an indexed record's intent almost always is: the sender wrote the message-id index just
    /// before it made the intent `accepted` with that message id (a record seldom overtakes that
    /// write: it comes after the carrier's answer). Deciding on this saves the read; a wrong guess is refused by the write's conditions and costs one read, never
    /// a wrong change.
    fn presumed_accepted(message_id: &str) -> Self {
        Basis {
            state: State::Accepted,
            sns_message_id: Some(message_id.to_owned()),
            escalated: false,
            presumed: true,
            retain_until: None,
            in_digest: false,
            claimed_at: None,
            attempt_id: None,
            recipient: None,
            chain_wait: None,
        }
    }
}

/// How far SNS's clock (a record's `notification.timestamp`) and the functions' may disagree.
fn clock_skew() -> chrono::Duration {
    chrono::Duration::from_std(crate::domain::reconcile::SKEW).unwrap_or(chrono::Duration::zero())
}

#[allow(clippy::too_many_arguments)]
async fn apply_observation<S: IntentStore>(
    store: &S,
    key: &IdempotencyKey,
    recipient: &PhoneNumber,
    event: LogEvent<'_>,
    record: &DeliveryRecord,
    class: Option<FailureClass>,
    along: &[Along<'_>],
    link: Link,
    now: DateTime<Utc>,
) -> Result<(Applied, Vec<Applied>), PortError> {
    let at = reported_at(record, &event, now);
    // How each of `along` was applied: alone (when this record changes no state), else with it.
    let mut along_alone: Vec<Applied> = Vec::new();
    let mut along = along;
    let read = || async {
        match store.get(key).await? {
            Some(current) => Ok(Basis::of(&current)),
            None => Err(PortError::Corrupt { what: key.to_string(), message: "indexed intent is missing".into() }),
        }
    };
    let mut basis = match link {
        // Nearly always the intent is accepted with this very message id: decided on that, the
        // write's conditions check it, and a refusal answers with the intent as it is.
        Link::Indexed | Link::Keyed => Basis::presumed_accepted(&record.message_id),
        // Reconciliation links intents in other states (sending, send_unknown): read them.
        Link::Reconciled | Link::ReconciledDigest => read().await?,
    };
    for _ in 0..MAX_RACES {
        let state = basis.state;
        // A keyed record is exactly its attempt's: the presumption (this message id) is checked by
        // the write; a read intent is judged by the attempt its context names.
        let keyed = (link == Link::Keyed && !basis.presumed).then(|| basis.keyed_attempt(record));
        if keyed == Some(KeyedAttempt::Other) {
            along_alone.extend(along.iter().map(|_| Applied::NoSuchIntent));
            return Ok((Applied::NoSuchIntent, along_alone));
        }
        // A record for an earlier attempt's message (the intent was resent since) is evidence
        // about that message, not about the current attempt: stored, never applied. An intent
        // still `sending` has recorded no message id for its current attempt yet: the id it
        // carries is an earlier attempt's.
        let sending = state == State::Sending;
        // SNS took this record's message before the current claim began: it is an earlier
        // attempt's whose outcome was never recorded (its state write lost, then the intent
        // resent by an operator), not the current attempt's.
        let before_this_claim = sending
            && record.timestamp.zip(basis.claimed_at).is_some_and(|(sent, claimed)| sent + clock_skew() < claimed);
        let earlier_attempt = match keyed {
            Some(k) => k == KeyedAttempt::Earlier,
            None => {
                before_this_claim
                    || match basis.sns_message_id.as_deref() {
                        Some(id) if sending => id == record.message_id,
                        Some(id) => id != record.message_id,
                        None => false,
                    }
            }
        };
        let effect = match (record.status.receipt(), link) {
            (Some(_), _) if earlier_attempt => ReceiptEffect::Late,
            // Found by the message index while still `sending`: its sender stored the MessageId
            // SNS answered (facts first) and its state change has not landed yet, or never will
            // (a crash). The record settles it as a linked one would.
            (Some(r), Link::Indexed) if sending => apply_linked_receipt(state, r),
            (Some(r), Link::Indexed) => apply_receipt(state, r),
            (Some(r), Link::Reconciled | Link::ReconciledDigest | Link::Keyed) => apply_linked_receipt(state, r),
            (None, _) => ReceiptEffect::Unrecognised,
        };
        // A provider's progress on this SMS (queued, pending, the carrier's acceptance).
        let progress =
            matches!(effect, ReceiptEffect::Unrecognised) && matches!(record.status, DeliveryStatus::Pending(_));
        let mut patch = StatusPatch::default();
        let mut next = NextCheck::Keep;
        let from = match effect {
            ReceiptEffect::Moved { from, to } => {
                patch.state = Some(to);
                patch.final_at = Some(at);
                patch.clear_claim = true;
                if to == State::Failed {
                    patch.last_error = Some(failure_text(record.provider_response.as_deref(), class));
                    next = if basis.escalated { NextCheck::Remove } else { NextCheck::At(now) };
                } else if let Some(wait) = basis.chain_wait {
                    // A level of a chain nobody acknowledged yet: the sweep moves on after its
                    // wait from the delivery (`sweep::moves_on_at`).
                    next = match (to, chrono::Duration::from_std(wait)) {
                        (State::Delivered, Ok(wait)) if !basis.escalated => NextCheck::At(at + wait),
                        _ => NextCheck::Keep,
                    };
                } else {
                    next = NextCheck::Remove;
                }
                // The record's message is the current attempt's: the intent has no id recorded
                // yet (its sender's state write is late or lost), or it is still `sending`.
                if basis.sns_message_id.is_none() || from == State::Sending {
                    patch.sns_message_id = Some(record.message_id.clone());
                }
                vec![from]
            }
            ReceiptEffect::Conflicting => {
                patch.add_conflict = true;
                vec![state]
            }
            _ => vec![state],
        };
        let observation = record_observation(&event, record, at, class, effect, basis.escalated)
            .with_state(patch.state.unwrap_or(state));
        let effect_moves = patch.state.is_some();
        // The earlier progress rides with a change; without one, it is applied alone first.
        if !effect_moves && !along.is_empty() {
            along_alone.extend(apply_alone(store, key, recipient, along, link, now).await?);
            along = &[];
        }
        let carried_along: Vec<Observation> = along
            .iter()
            .map(|a| {
                let at = reported_at(a.record, &a.event, now);
                record_observation(&a.event, a.record, at, a.class(), ReceiptEffect::Unrecognised, basis.escalated)
                    .with_state(state)
            })
            .collect();
        let index_message =
            (link == Link::Reconciled && !basis.in_digest).then(|| (record.message_id.clone(), recipient.clone()));
        let t = Transition {
            key: key.clone(),
            from,
            attempt_id: None,
            patch,
            observation,
            next_check: next,
            index_message,
            expect: if basis.presumed {
                Expect {
                    sns_message_id: basis.sns_message_id.clone(),
                    not_escalated: !basis.escalated,
                    unchained: true,
                    ..Default::default()
                }
            } else {
                Expect::default()
            },
            retain_until: basis.retain_until,
            // A state change carries its observation (whose effect was decided on the state) in
            // its one conditional write, and so does a provider's progress (End User Messaging's
            // acceptance, queued or pending: a few per SMS), checked against the intent it is
            // about. Records that can recur on one intent without bound (conflicting, late,
            // redundant) update a counter at most and are items of their own: one transaction
            // keeps that counter exact under redelivery.
            commit: if effect_moves || progress { Commit::Carried } else { Commit::Atomic },
            carried_along,
        };
        let written = match store.transition(t).await {
            // Presumed, and the intent is not there at all: a keyed record may name a key this
            // stack never had (or one long expired). Read to be sure; nothing is written.
            Err(PortError::Corrupt { .. }) if link == Link::Keyed && basis.presumed => match store.get(key).await? {
                None => {
                    along_alone.extend(along.iter().map(|_| Applied::NoSuchIntent));
                    return Ok((Applied::NoSuchIntent, along_alone));
                }
                Some(current) => {
                    basis = Basis::of(&current);
                    continue;
                }
            },
            other => other?,
        };
        match written {
            TransitionOutcome::Applied => {
                if effect == ReceiptEffect::Conflicting {
                    tracing::warn!(key = key.short(), state = %state, status = record.status.as_str(), "conflicting delivery record stored; state kept");
                }
                along_alone.extend(along.iter().map(|_| Applied::Effect(ReceiptEffect::Unrecognised)));
                return Ok((Applied::Effect(effect), along_alone));
            }
            // Its earlier try carried the progress along, or wrote it alone before.
            TransitionOutcome::AlreadyApplied => {
                along_alone.extend(along.iter().map(|_| Applied::Duplicate));
                return Ok((Applied::Duplicate, along_alone));
            }
            TransitionOutcome::Refused(current) => basis = Basis::of(&current),
        }
    }
    Err(PortError::Unavailable {
        operation: "delivery record",
        message: format!("intent {} kept changing", key.short()),
    })
}

/// Applies each of `along` on its own, in order (as it would have been without the record it
/// came with); how each was applied.
async fn apply_alone<S: IntentStore>(
    store: &S,
    key: &IdempotencyKey,
    recipient: &PhoneNumber,
    along: &[Along<'_>],
    link: Link,
    now: DateTime<Utc>,
) -> Result<Vec<Applied>, PortError> {
    let mut applied = Vec::with_capacity(along.len());
    for a in along {
        let alone = apply_observation(store, key, recipient, a.event.clone(), a.record, a.class(), &[], link, now);
        applied.push(Box::pin(alone).await?.0);
    }
    Ok(applied)
}

/// What a record reports happened then: End User Messaging's event time, else (SNS) when the SMS
/// was sent, else when the record was logged.
fn reported_at(record: &DeliveryRecord, event: &LogEvent<'_>, now: DateTime<Utc>) -> DateTime<Utc> {
    record
        .reported_at
        .or(record.timestamp)
        .or_else(|| Utc.timestamp_millis_opt(event.timestamp_ms).single())
        .unwrap_or(now)
}

/// The observation a delivery record leaves, keyed by its log event.
fn record_observation(
    event: &LogEvent<'_>,
    record: &DeliveryRecord,
    at: DateTime<Utc>,
    class: Option<FailureClass>,
    effect: ReceiptEffect,
    late: bool,
) -> Observation {
    Observation::new(
        format!("log:{}", event.id),
        at,
        ObservationKind::DeliveryStatus {
            log_event_id: event.id.to_owned(),
            sns_message_id: record.message_id.clone(),
            status: record.status.as_str().to_owned(),
            provider_response: record.provider_response.clone(),
            class,
            carrier: record.carrier.clone(),
            dwell_ms: record.dwell_ms,
            effect,
            late,
        },
    )
}
