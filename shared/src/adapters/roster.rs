//! The recipients roster in the recipients table, beside the registry (docs/data-model.md):
//!
//! | item | pk | sk |
//! |---|---|---|
//! | entry | `ROSTER` | `ENTRY#<+digits>` (who added it, why, when; no TTL: kept until removed) |
//! | audit event | `ROSTER` | `EVENT#<time>#<allow \| remove>:<entry>` (expires after 400 days) |
//!
//! Intake reads the entries with one `Query` of the `ROSTER` partition (strongly consistent) and
//! keeps them for a minute; the operator CLI adds and removes entries, each change written with
//! its audit event in one transaction.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::describe;
use super::ledger::ts;
use super::registry::{DynamoRegistry, HISTORY_RETENTION};
use crate::domain::roster::{Roster, RosterEntry};
use crate::ports::{PortError, PortResult, RecipientRoster};

const PK: &str = "ROSTER";

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn unavailable(operation: &'static str, e: &impl std::error::Error) -> PortError {
    PortError::Unavailable { operation, message: describe(e) }
}

/// One entry as listed: who added it, why and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedEntry {
    pub entry: String,
    pub added_by: String,
    pub reason: String,
    pub added_at: DateTime<Utc>,
}

/// One change of the roster, as its audit event records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RosterChange {
    Allow,
    Remove,
}

impl RosterChange {
    fn as_str(self) -> &'static str {
        match self {
            RosterChange::Allow => "allow",
            RosterChange::Remove => "remove",
        }
    }
}

impl DynamoRegistry {
    /// Every entry, with who added it (one strongly consistent query, paginated).
    pub async fn roster_entries(&self) -> PortResult<Vec<ListedEntry>> {
        let items = self.partition(PK, "ENTRY#", "DynamoDB Query (roster)").await?;
        Ok(items
            .iter()
            .map(|item| {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                let added_at =
                    DateTime::parse_from_rfc3339(&get("added_at")).map(|d| d.with_timezone(&Utc)).unwrap_or_default();
                ListedEntry {
                    entry: get("sk").trim_start_matches("ENTRY#").to_owned(),
                    added_by: get("added_by"),
                    reason: get("reason"),
                    added_at,
                }
            })
            .collect())
    }

    /// Adds `entry`, with who and why, and its audit event; false when it was there already
    /// (nothing written).
    pub async fn allow(
        &self,
        entry: &RosterEntry,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let put = Put::builder()
            .table_name(self.table())
            .item("pk", s(PK))
            .item("sk", s(format!("ENTRY#{}", entry.as_str())))
            .item("added_by", s(operator))
            .item("reason", s(reason))
            .item("added_at", s(ts(at)))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| unavailable("DynamoDB Put builder", &e))?;
        self.change(TransactWriteItem::builder().put(put).build(), entry, RosterChange::Allow, operator, reason, at)
            .await
    }

    /// Removes `entry` and records who and why; false when it was not there (nothing written).
    pub async fn remove(
        &self,
        entry: &RosterEntry,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let delete = Delete::builder()
            .table_name(self.table())
            .key("pk", s(PK))
            .key("sk", s(format!("ENTRY#{}", entry.as_str())))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|e| unavailable("DynamoDB Delete builder", &e))?;
        self.change(
            TransactWriteItem::builder().delete(delete).build(),
            entry,
            RosterChange::Remove,
            operator,
            reason,
            at,
        )
        .await
    }

    /// The roster's audit trail, oldest first: (when, change, entry, operator, reason).
    pub async fn roster_history(&self) -> PortResult<Vec<(DateTime<Utc>, RosterChange, String, String, String)>> {
        let items = self.partition(PK, "EVENT#", "DynamoDB Query (roster history)").await?;
        Ok(items
            .iter()
            .filter_map(|i| {
                let get = |k: &str| i.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                let at = DateTime::parse_from_rfc3339(&get("at")).ok()?.with_timezone(&Utc);
                let change = serde_json::from_value(serde_json::Value::String(get("change"))).ok()?;
                Some((at, change, get("entry"), get("operator"), get("reason")))
            })
            .collect())
    }

    async fn change(
        &self,
        write: TransactWriteItem,
        entry: &RosterEntry,
        change: RosterChange,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let expires = at.checked_add_signed(HISTORY_RETENTION).unwrap_or(at).timestamp();
        let audit = Put::builder()
            .table_name(self.table())
            .item("pk", s(PK))
            .item("sk", s(format!("EVENT#{}#{}:{}", ts(at), change.as_str(), entry.as_str())))
            .item("at", s(ts(at)))
            .item("change", s(change.as_str()))
            .item("entry", s(entry.as_str()))
            .item("operator", s(operator))
            .item("reason", s(reason))
            .item("expires_at", AttributeValue::N(expires.to_string()))
            .build()
            .map_err(|e| unavailable("DynamoDB Put builder", &e))?;
        self.audited(write, audit, "DynamoDB TransactWriteItems (roster)").await
    }

    /// Writes `write` and its audit event `audit` in one transaction: false when `write`'s own
    /// condition failed (nothing written).
    pub(crate) async fn audited(
        &self,
        write: TransactWriteItem,
        audit: Put,
        operation: &'static str,
    ) -> PortResult<bool> {
        let res = self
            .client()
            .transact_write_items()
            .transact_items(write)
            .transact_items(TransactWriteItem::builder().put(audit).build())
            .send()
            .await;
        let codes: Vec<String> = match res {
            Ok(_) => return Ok(true),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    c.cancellation_reasons().iter().map(|r| r.code().unwrap_or("None").to_owned()).collect()
                }
                other => return Err(unavailable(operation, other)),
            },
            Err(e) => return Err(unavailable(operation, &e)),
        };
        // The write's own condition (first) failed: there already, or not there.
        if codes.first().map(String::as_str) == Some("ConditionalCheckFailed") {
            Ok(false)
        } else {
            Err(PortError::Unavailable { operation, message: format!("cancelled: {codes:?}") })
        }
    }
}

impl RecipientRoster for DynamoRegistry {
    async fn roster(&self) -> PortResult<Roster> {
        let entries = self
            .roster_entries()
            .await?
            .into_iter()
            .filter_map(|e| match RosterEntry::parse(&e.entry) {
                Ok(entry) => Some(entry),
                // The raw value may be a whole number: logged by its length only, never in clear.
                Err(_) => {
                    tracing::warn!(chars = e.entry.chars().count(), "roster item that is no entry; skipped");
                    None
                }
            })
            .collect();
        Ok(Roster { entries })
    }
}
