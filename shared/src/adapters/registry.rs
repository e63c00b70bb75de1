//! The recipient registry in DynamoDB.
//!
//! Keyed by the E.164 number in clear (`RCPT#+14155550100`), inside a KMS-encrypted table whose
//! access is limited by IAM. A hash would not protect anything: the space of phone numbers is
//! small enough to enumerate in minutes, so a hashed key is pseudonymisation in name only, and it
//! would stop an operator from finding a number they were asked about. The numbers never leave
//! the table in clear: logs and metrics carry the masked form. See docs/data-model.md, "Data model".
//!
//! | item | pk | sk |
//! |---|---|---|
//! | current state | `RCPT#<e164>` | `STATE` (`needs_opt_out_check`: re-enabled, SNS not asked yet) |
//! | audit event | `RCPT#<e164>` | `EVENT#<time>#<suppress:log id \| re-enable:operator>` |
//!
//! Retention (the table's TTL attribute `expires_at`): the state item of a suppressed number has
//! none — a number that proved unusable stays suppressed until an operator re-enables it, however
//! long that takes; re-enabling gives it the history's retention. Each audit event expires
//! [`HISTORY_RETENTION`] after it happened.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::describe;
use super::ledger::ts;
use crate::domain::PhoneNumber;
use crate::ports::{PortError, PortResult, RecipientRegistry, Standing, Suppression, SuppressionEvidence};

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// How long the audit trail of a number is kept: thirteen months, so a yearly review still finds
/// last year's suppressions and who re-enabled them.
pub const HISTORY_RETENTION: chrono::Duration = chrono::Duration::days(400);

fn expiry(at: DateTime<Utc>) -> AttributeValue {
    AttributeValue::N(at.checked_add_signed(HISTORY_RETENTION).unwrap_or(at).timestamp().to_string())
}

fn pk(p: &PhoneNumber) -> String {
    format!("RCPT#{}", p.expose())
}

/// One entry of a recipient's audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum RegistryEvent {
    Suppressed {
        evidence: SuppressionEvidence,
    },
    ReEnabled {
        operator: String,
        reason: String,
        at: DateTime<Utc>,
        /// The operator asked for the number to be opted back in at the provider (`--opt-in`):
        /// the sender does it before its next SMS to the number.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        opt_in: bool,
    },
}

#[derive(Clone, Debug)]
pub struct DynamoRegistry {
    client: Client,
    table: String,
}

impl DynamoRegistry {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoRegistry { client, table: table.into() }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// Every item of partition `pk` whose sort key begins with `prefix` (one strongly consistent
    /// query, read through its pages): the roster's and the chain policies' short lists and their
    /// audit trails.
    pub(crate) async fn partition(
        &self,
        pk: &str,
        prefix: &str,
        operation: &'static str,
    ) -> PortResult<Vec<HashMap<String, AttributeValue>>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", s(pk))
                .expression_attribute_values(":prefix", s(prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| PortError::Unavailable { operation, message: describe(&e) })?;
            out.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    fn put_event(
        &self,
        p: &PhoneNumber,
        sk: String,
        event: &RegistryEvent,
        at: DateTime<Utc>,
    ) -> PortResult<TransactWriteItem> {
        let json = serde_json::to_string(event)
            .map_err(|e| PortError::Corrupt { what: "registry event".into(), message: e.to_string() })?;
        let put = Put::builder()
            .table_name(&self.table)
            .item("pk", s(pk(p)))
            .item("sk", s(sk))
            .item("event", s(json))
            .item("expires_at", expiry(at))
            .build()
            .map_err(|e| PortError::Unavailable { operation: "DynamoDB Put builder", message: describe(&e) })?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The audit trail of one number, oldest first.
    pub async fn history(&self, p: &PhoneNumber) -> PortResult<Vec<RegistryEvent>> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :ev)")
            .expression_attribute_values(":pk", s(pk(p)))
            .expression_attribute_values(":ev", s("EVENT#"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "DynamoDB Query (registry)", message: describe(&e) })?;
        out.items()
            .iter()
            .map(|i| {
                let raw = i.get("event").and_then(|v| v.as_s().ok()).map(String::as_str).unwrap_or_default();
                serde_json::from_str(raw)
                    .map_err(|e| PortError::Corrupt { what: "registry event".into(), message: e.to_string() })
            })
            .collect()
    }

    /// Whether `p` was re-enabled and no send has asked SNS since whether it is still opted out
    /// (`CheckIfPhoneNumberIsOptedOut`): set by [`RecipientRegistry::re_enable`], cleared by
    /// [`Self::opt_out_checked`]. A number that opted out stays opted out at SNS until it is opted
    /// back in or the person replies START, whatever the registry says.
    pub async fn needs_opt_out_check(&self, p: &PhoneNumber) -> PortResult<bool> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk(p)))
            .key("sk", s("STATE"))
            .projection_expression("needs_opt_out_check")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "DynamoDB GetItem (registry)", message: describe(&e) })?;
        Ok(matches!(out.item.as_ref().and_then(|i| i.get("needs_opt_out_check")), Some(AttributeValue::Bool(true))))
    }

    /// Clears the flag once SNS said the number is not opted out (only on a re-enabled number).
    pub async fn opt_out_checked(&self, p: &PhoneNumber) -> PortResult<()> {
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(pk(p)))
            .key("sk", s("STATE"))
            .update_expression("REMOVE needs_opt_out_check, opt_in_requested")
            .condition_expression("suppressed = :f")
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            // Suppressed again meanwhile: the flag no longer matters, the suppression does.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => {
                Err(PortError::Unavailable { operation: "DynamoDB UpdateItem (registry)", message: describe(&e) })
            }
        }
    }

    /// Every suppressed number (operator listing; a scan).
    pub async fn suppressed(&self) -> PortResult<Vec<(PhoneNumber, Suppression)>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("sk = :st AND suppressed = :t")
                .expression_attribute_values(":st", s("STATE"))
                .expression_attribute_values(":t", AttributeValue::Bool(true))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| PortError::Unavailable { operation: "DynamoDB Scan (registry)", message: describe(&e) })?;
            for item in page.items() {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                let Ok(p) = PhoneNumber::parse(get("pk").trim_start_matches("RCPT#")) else { continue };
                let since =
                    DateTime::parse_from_rfc3339(&get("since")).map(|d| d.with_timezone(&Utc)).unwrap_or_default();
                out.push((p, Suppression { since, reason: get("reason") }));
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }
}

impl RecipientRegistry for DynamoRegistry {
    async fn suppression(&self, recipient: &PhoneNumber) -> PortResult<Option<Suppression>> {
        Ok(match self.standing(recipient).await? {
            Standing::Suppressed(s) => Some(s),
            Standing::Clear | Standing::ReEnabledUnchecked { .. } => None,
        })
    }

    async fn opt_out_checked(&self, recipient: &PhoneNumber) -> PortResult<()> {
        DynamoRegistry::opt_out_checked(self, recipient).await
    }

    async fn standing(&self, recipient: &PhoneNumber) -> PortResult<Standing> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk(recipient)))
            .key("sk", s("STATE"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "DynamoDB GetItem (registry)", message: describe(&e) })?;
        let Some(item) = out.item else { return Ok(Standing::Clear) };
        if !matches!(item.get("suppressed"), Some(AttributeValue::Bool(true))) {
            return Ok(if matches!(item.get("needs_opt_out_check"), Some(AttributeValue::Bool(true))) {
                Standing::ReEnabledUnchecked {
                    opt_in: matches!(item.get("opt_in_requested"), Some(AttributeValue::Bool(true))),
                }
            } else {
                Standing::Clear
            });
        }
        let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        let since = DateTime::parse_from_rfc3339(&get("since")).map(|d| d.with_timezone(&Utc)).unwrap_or_default();
        Ok(Standing::Suppressed(Suppression { since, reason: get("reason") }))
    }

    async fn suppress(&self, recipient: &PhoneNumber, evidence: &SuppressionEvidence) -> PortResult<()> {
        let reason = evidence.provider_response.clone().unwrap_or_else(|| "permanent delivery failure".into());
        let state = Update::builder()
            .table_name(&self.table)
            .key("pk", s(pk(recipient)))
            .key("sk", s("STATE"))
            .update_expression("SET suppressed = :t, since = :since, reason = :reason, evidence_log_event = :ev, evidence_intent = :ik REMOVE expires_at")
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":since", s(ts(evidence.at)))
            .expression_attribute_values(":reason", s(reason))
            .expression_attribute_values(":ev", s(evidence.log_event_id.as_str()))
            .expression_attribute_values(":ik", s(evidence.intent_key.as_str()))
            .build()
            .map_err(|e| PortError::Unavailable { operation: "DynamoDB Update builder", message: describe(&e) })?;
        let event = self.put_event(
            recipient,
            format!("EVENT#{}#suppress:{}", ts(evidence.at), evidence.log_event_id),
            &RegistryEvent::Suppressed { evidence: evidence.clone() },
            evidence.at,
        )?;
        self.client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(state).build())
            .transact_items(event)
            .send()
            .await
            .map_err(|e| PortError::Unavailable {
                operation: "DynamoDB TransactWriteItems (suppress)",
                message: describe(&e),
            })?;
        Ok(())
    }

    async fn re_enable(
        &self,
        recipient: &PhoneNumber,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.re_enable_as(recipient, operator, reason, at, false).await
    }
}

impl DynamoRegistry {
    /// [`RecipientRegistry::re_enable`], asking the sender to opt the number back in at the
    /// provider before its next SMS (`tocsin re-enable --opt-in`): the only way tocsin takes a
    /// number off an opt-out list, audited with the re-enable.
    pub async fn re_enable_opting_in(
        &self,
        recipient: &PhoneNumber,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.re_enable_as(recipient, operator, reason, at, true).await
    }

    async fn re_enable_as(
        &self,
        recipient: &PhoneNumber,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
        opt_in: bool,
    ) -> PortResult<bool> {
        let state = Update::builder()
            .table_name(&self.table)
            .key("pk", s(pk(recipient)))
            .key("sk", s("STATE"))
            .update_expression(
                "SET suppressed = :f, re_enabled_at = :at, re_enabled_by = :op, re_enabled_reason = :why, expires_at = :exp, needs_opt_out_check = :t, opt_in_requested = :oi",
            )
            .expression_attribute_values(":oi", AttributeValue::Bool(opt_in))
            .expression_attribute_values(":exp", expiry(at))
            .condition_expression("suppressed = :t")
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":at", s(ts(at)))
            .expression_attribute_values(":op", s(operator))
            .expression_attribute_values(":why", s(reason))
            .build()
            .map_err(|e| PortError::Unavailable { operation: "DynamoDB Update builder", message: describe(&e) })?;
        let event = self.put_event(
            recipient,
            format!("EVENT#{}#re-enable:{operator}", ts(at)),
            &RegistryEvent::ReEnabled { operator: operator.to_owned(), reason: reason.to_owned(), at, opt_in },
            at,
        )?;
        let res = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(state).build())
            .transact_items(event)
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_transaction_canceled_exception() => Ok(false),
            Err(e) => Err(PortError::Unavailable {
                operation: "DynamoDB TransactWriteItems (re-enable)",
                message: describe(&e),
            }),
        }
    }
}
