//! The templates' chain policies (`domain::chain_policy`) in the recipients table, beside the
//! roster (docs/data-model.md):
//!
//! | item | pk | sk |
//! |---|---|---|
//! | policy | `CHAIN_POLICY` | `TEMPLATE#<name>` (the chain as JSON; who set it, why, when; no TTL) |
//! | audit event | `CHAIN_POLICY` | `EVENT#<time>#<set \| remove>:<name>` (expires after 400 days) |
//!
//! Intake reads the policies with one `Query` of the `CHAIN_POLICY` partition (strongly
//! consistent) and keeps them for a minute; the operator CLI sets and removes them, each change
//! written with its audit event in one transaction.

use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::describe;
use super::ledger::ts;
use super::registry::{DynamoRegistry, HISTORY_RETENTION};
use crate::domain::chain_policy::{ChainPolicies, ChainPolicy};
use crate::domain::template::Catalog;
use crate::ports::{ChainPolicySource, PortError, PortResult};

const PK: &str = "CHAIN_POLICY";

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn unavailable(operation: &'static str, e: &impl std::error::Error) -> PortError {
    PortError::Unavailable { operation, message: describe(e) }
}

fn time(raw: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(raw).ok().map(|d| d.with_timezone(&Utc))
}

/// One policy as listed: the chain as set, who set it, why and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedPolicy {
    pub template: String,
    pub chain: Value,
    pub set_by: String,
    pub reason: String,
    pub set_at: DateTime<Utc>,
}

/// One change of a template's policy, as its audit event records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyChange {
    Set,
    Remove,
}

impl PolicyChange {
    fn as_str(self) -> &'static str {
        match self {
            PolicyChange::Set => "set",
            PolicyChange::Remove => "remove",
        }
    }
}

/// One audit event: a policy set (with the chain set) or removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyEvent {
    pub at: DateTime<Utc>,
    pub change: PolicyChange,
    pub template: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub chain: Value,
    pub operator: String,
    pub reason: String,
}

impl DynamoRegistry {
    /// Every template's policy as stored (one strongly consistent query, paginated).
    pub async fn chain_policies_listed(&self) -> PortResult<Vec<ListedPolicy>> {
        let items = self.partition(PK, "TEMPLATE#", "DynamoDB Query (chain policies)").await?;
        Ok(items
            .iter()
            .map(|item| {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                ListedPolicy {
                    template: get("sk").trim_start_matches("TEMPLATE#").to_owned(),
                    // A chain that is no JSON is listed as null and refused by the parser.
                    chain: serde_json::from_str(&get("chain")).unwrap_or(Value::Null),
                    set_by: get("set_by"),
                    reason: get("reason"),
                    set_at: time(&get("set_at")).unwrap_or_default(),
                }
            })
            .collect())
    }

    /// Sets (or replaces) `policy`'s template's chain, with who and why, and its audit event.
    pub async fn set_chain_policy(&self, policy: &ChainPolicy, operator: &str, reason: &str) -> PortResult<()> {
        let at = policy.set_at;
        let chain = policy.shape.spec.to_string();
        let put = Put::builder()
            .table_name(self.table())
            .item("pk", s(PK))
            .item("sk", s(format!("TEMPLATE#{}", policy.template)))
            .item("chain", s(&chain))
            .item("set_by", s(operator))
            .item("reason", s(reason))
            .item("set_at", s(ts(at)))
            .build()
            .map_err(|e| unavailable("DynamoDB Put builder", &e))?;
        let audit = self.policy_event(PolicyChange::Set, &policy.template, Some(&chain), operator, reason, at)?;
        self.audited(
            TransactWriteItem::builder().put(put).build(),
            audit,
            "DynamoDB TransactWriteItems (chain policy)",
        )
        .await?;
        Ok(())
    }

    /// Removes `template`'s policy and records who and why; false when it had none (nothing
    /// written).
    pub async fn remove_chain_policy(
        &self,
        template: &str,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let delete = Delete::builder()
            .table_name(self.table())
            .key("pk", s(PK))
            .key("sk", s(format!("TEMPLATE#{template}")))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|e| unavailable("DynamoDB Delete builder", &e))?;
        let audit = self.policy_event(PolicyChange::Remove, template, None, operator, reason, at)?;
        self.audited(
            TransactWriteItem::builder().delete(delete).build(),
            audit,
            "DynamoDB TransactWriteItems (chain policy)",
        )
        .await
    }

    fn policy_event(
        &self,
        change: PolicyChange,
        template: &str,
        chain: Option<&str>,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<Put> {
        let expires = at.checked_add_signed(HISTORY_RETENTION).unwrap_or(at).timestamp();
        let mut put = Put::builder()
            .table_name(self.table())
            .item("pk", s(PK))
            .item("sk", s(format!("EVENT#{}#{}:{template}", ts(at), change.as_str())))
            .item("at", s(ts(at)))
            .item("change", s(change.as_str()))
            .item("template", s(template))
            .item("operator", s(operator))
            .item("reason", s(reason))
            .item("expires_at", AttributeValue::N(expires.to_string()));
        if let Some(chain) = chain {
            put = put.item("chain", s(chain));
        }
        put.build().map_err(|e| unavailable("DynamoDB Put builder", &e))
    }

    /// The policies' audit trail, oldest first.
    pub async fn chain_policy_history(&self) -> PortResult<Vec<PolicyEvent>> {
        let items = self.partition(PK, "EVENT#", "DynamoDB Query (chain policy history)").await?;
        Ok(items
            .iter()
            .filter_map(|i| {
                let get = |k: &str| i.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                Some(PolicyEvent {
                    at: time(&get("at"))?,
                    change: serde_json::from_value(Value::String(get("change"))).ok()?,
                    template: get("template"),
                    chain: serde_json::from_str(&get("chain")).unwrap_or(Value::Null),
                    operator: get("operator"),
                    reason: get("reason"),
                })
            })
            .collect())
    }
}

impl ChainPolicySource for DynamoRegistry {
    async fn chain_policies(&self) -> PortResult<ChainPolicies> {
        let listed = self.chain_policies_listed().await?;
        Ok(ChainPolicies::new(listed.into_iter().filter_map(|p| {
            match ChainPolicy::parse(&p.template, &p.chain, p.set_at, Catalog::builtin()) {
                Ok(policy) => Some(policy),
                // Only a hand-edited item can be refused (the CLI sets only what parses): its
                // template's alerts get the default chain; the error names no number.
                Err(e) => {
                    let error = match &e {
                        crate::domain::chain_policy::PolicyError::Chain(errors) => {
                            errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>().join(", ")
                        }
                        other => other.to_string(),
                    };
                    tracing::error!(template = %p.template, %error, "chain policy that does not parse; skipped (tocsin chains)");
                    None
                }
            }
        })))
    }
}
