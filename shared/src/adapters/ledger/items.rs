//! Items ↔ attributes: the one place that maps intents and observations to DynamoDB items and back,
//! and the attribute helpers every port's file uses. Knows no client, sends no request.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, SecondsFormat, Utc};

use super::{created_partition, due_shard_name};
use crate::adapters::describe;
use crate::domain::acknowledgement::{AckVia, Acknowledgement};
use crate::domain::intent::{Escalation, Intent, IntentRecord, Status};
use crate::domain::observation::Observation;
use crate::domain::reconcile::ReconcileState;
use crate::domain::storm::DigestId;
use crate::domain::{IdempotencyKey, State};
use crate::ports::{PortError, PortResult};

pub(super) type Item = HashMap<String, AttributeValue>;

pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn intent_pk(key: &IdempotencyKey) -> String {
    format!("INTENT#{key}")
}

pub(super) fn escalation_pk(key: &IdempotencyKey) -> String {
    format!("ESC#{key}")
}

pub(super) fn unavailable<E: std::error::Error>(operation: &'static str, e: &E) -> PortError {
    PortError::Unavailable { operation, message: describe(e) }
}

pub(super) fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

pub(super) fn get_time(item: &Item, name: &str) -> Option<DateTime<Utc>> {
    get_s(item, name).and_then(|v| DateTime::parse_from_rfc3339(v).ok()).map(|d| d.with_timezone(&Utc))
}

pub(super) fn get_u32(item: &Item, name: &str) -> u32 {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Reads an intent item back into a record.
pub fn record_from_item(item: &Item) -> PortResult<IntentRecord> {
    let what = get_s(item, "pk").unwrap_or("<no pk>").to_owned();
    let corrupt = |message: String| PortError::Corrupt { what: what.clone(), message };
    let intent: Intent =
        serde_json::from_str(get_s(item, "intent").ok_or_else(|| corrupt("no intent attribute".into()))?)
            .map_err(|e| corrupt(format!("intent JSON: {e}")))?;
    let state: State = get_s(item, "state")
        .ok_or_else(|| corrupt("no state".into()))?
        .parse()
        .map_err(|e: crate::domain::state::UnknownState| corrupt(e.to_string()))?;
    let escalation = match (get_time(item, "escalated_at"), get_s(item, "escalation_reason")) {
        (Some(at), reason) => Some(Escalation {
            at,
            reason: reason.unwrap_or_default().to_owned(),
            folded: matches!(item.get("escalation_folded"), Some(AttributeValue::Bool(true))),
            to_level: item
                .get("escalation_level")
                .and_then(|v| v.as_n().ok())
                .map(|v| v.parse::<u8>().map_err(|e| corrupt(format!("escalation_level: {e}"))))
                .transpose()?,
        }),
        _ => None,
    };
    Ok(IntentRecord {
        intent,
        status: Status {
            state,
            attempts: get_u32(item, "attempts"),
            attempt_id: get_s(item, "attempt_id").map(str::to_owned),
            claimed_at: get_time(item, "claimed_at"),
            lease_until: get_time(item, "lease_until"),
            sns_message_id: get_s(item, "sns_message_id").map(str::to_owned),
            accepted_at: get_time(item, "accepted_at"),
            final_at: get_time(item, "final_at"),
            escalation,
            conflicts: get_u32(item, "conflicts"),
            last_error: get_s(item, "last_error").map(str::to_owned),
            reconcile_attempts: get_u32(item, "reconcile_attempts"),
            reconcile_next_at: get_time(item, "reconcile_next_at"),
            enqueued_at: get_time(item, "enqueued_at"),
            next_check: item
                .get("due_at")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(DateTime::from_timestamp_millis),
            reconcile_state: match get_s(item, "reconcile_state") {
                Some("ambiguous") => ReconcileState::Ambiguous,
                _ => ReconcileState::Pending,
            },
            escalation_run_until: get_time(item, "esc_lease"),
            late_expected: get_time(item, "late_expected"),
            digest_id: match get_s(item, "digest_id") {
                Some(raw) => Some(DigestId::parse(raw).ok_or_else(|| corrupt("bad digest_id".into()))?),
                None => None,
            },
            acknowledgement: match get_time(item, "ack_at") {
                Some(at) => Some(Acknowledgement {
                    at,
                    by: get_s(item, "ack_by").unwrap_or_default().to_owned(),
                    via: get_s(item, "ack_via").and_then(AckVia::parse).ok_or_else(|| corrupt("bad ack_via".into()))?,
                }),
                None => None,
            },
            chain_level: item
                .get("chain_level")
                .and_then(|v| v.as_n().ok())
                .map(|v| v.parse::<u8>().map_err(|e| corrupt(format!("chain_level: {e}"))))
                .transpose()?,
        },
    })
}

pub(super) fn record_to_item(r: &IntentRecord, next_check: DateTime<Utc>, shard: u32) -> PortResult<Item> {
    let due_shard = due_shard_name(shard);
    let due_shard = due_shard.as_str();
    let i = &r.intent;
    let intent_json =
        serde_json::to_string(i).map_err(|e| PortError::Corrupt { what: i.key.to_string(), message: e.to_string() })?;
    // Every byte counts: each write of an item over 1 KB costs 2 write units, and the intent item
    // is written at intake, at the claim, at the SNS answer and at the delivery record. So no
    // attribute repeats what the key or the intent JSON holds (creation time and deadline are in
    // it; `list_sk` is the creation time too), counters start absent (read as 0), and the last
    // change's time is its observation's.
    let mut item = Item::from([
        ("pk".into(), s(intent_pk(&i.key))),
        ("sk".into(), s("INTENT")),
        ("intent".into(), s(intent_json)),
        ("state".into(), s(r.status.state.as_str())),
        ("due_shard".into(), s(due_shard)),
        ("due_home".into(), s(due_shard)),
        ("due_at".into(), n(next_check.timestamp_millis())),
        ("expires_at".into(), n(i.expires_at().timestamp())),
        // The list-index entry: written once here, never changed (so never written again).
        ("list_pk".into(), s(created_partition(i.created_at.date_naive(), shard))),
        ("list_sk".into(), s(ts(i.created_at))),
        // The pending-index entry (recipient, deadline), from here until an SMS for the intent is
        // known to be with SNS (or the intent is settled otherwise): `pending_by` is removed then.
        ("pending_to".into(), s(i.recipient.expose())),
    ]);
    if r.status.state.is_pending() {
        item.insert("pending_by".into(), s(ts(i.deadline)));
    }
    if let Some(expected) = r.status.late_expected {
        item.insert("late_expected".into(), s(ts(expected)));
    }
    // A level of an escalation chain: its root, where the chain's levels are started and its
    // acknowledgement arbitrated (`chains`). Also what lets the sweep lease a delivered level
    // nobody acknowledged.
    if let Some(chain) = &i.chain {
        item.insert("chain_root".into(), s(chain.root.as_str()));
    }
    Ok(item)
}

pub(super) fn observation_item(key: &IdempotencyKey, o: &Observation, expires_at: DateTime<Utc>) -> PortResult<Item> {
    let json =
        serde_json::to_string(o).map_err(|e| PortError::Corrupt { what: o.id.clone(), message: e.to_string() })?;
    Ok(Item::from([
        ("pk".into(), s(intent_pk(key))),
        ("sk".into(), s(format!("OBS#{}", o.id))),
        ("at".into(), s(ts(o.at))),
        ("obs".into(), s(json)),
        ("expires_at".into(), n(expires_at.timestamp())),
    ]))
}

/// The intent item's attribute that carries observation `id` (`Commit::Carried`).
pub(super) fn carried_attribute(id: &str) -> String {
    format!("{CARRIED_PREFIX}{id}")
}

const CARRIED_PREFIX: &str = "obs#";

/// The observation `id` as the intent item carries it (its JSON), if it does: under its own
/// attribute, or — on an item written before carried observations were named by id — as the
/// item's last marked change (`moved_by`, `moved_obs`).
pub(super) fn carried_by<'a>(item: &'a Item, id: &str) -> Option<&'a str> {
    get_s(item, &carried_attribute(id))
        .or_else(|| (get_s(item, "moved_by") == Some(id)).then(|| get_s(item, "moved_obs")).flatten())
}

/// Every observation the intent item carries (its JSON, by id), the older form included.
pub(super) fn carried_all(item: &Item) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = item
        .iter()
        .filter_map(|(name, v)| Some((name.strip_prefix(CARRIED_PREFIX)?, v.as_s().ok()?.as_str())))
        .collect();
    if let Some((id, raw)) = get_s(item, "moved_by").zip(get_s(item, "moved_obs"))
        && !out.iter().any(|(carried, _)| *carried == id)
    {
        out.push((id, raw));
    }
    out
}

/// `attribute_not_exists(pk)`, or the item there is past its TTL and only waiting for DynamoDB's
/// lazy deletion (which AWS says can take days): an expired item counts as absent, so a key's
/// second life never runs into its first life's leftovers.
pub(super) const ABSENT_OR_EXPIRED: &str = "attribute_not_exists(pk) OR expires_at < :expired_before";
