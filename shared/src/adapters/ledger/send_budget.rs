//! `SendBudget`: storm mode's per-recipient send log (`BUDGET#<e164>`), read and appended to on the
//! version read. Touches no other item.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use super::DynamoLedger;
use super::items::{n, s, ts, unavailable};
use crate::domain::PhoneNumber;
use crate::ports::{PortResult, SendBudget, SendLog};

impl SendBudget for DynamoLedger {
    async fn send_log(&self, recipient: &PhoneNumber) -> PortResult<SendLog> {
        let Some(item) = self.get_item(format!("BUDGET#{}", recipient.expose()), "BUDGET").await? else {
            return Ok(SendLog::default());
        };
        let sent = item
            .get("sent")
            .and_then(|v| v.as_l().ok())
            .map(|l| {
                l.iter()
                    .filter_map(|v| v.as_s().ok())
                    .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|d| d.with_timezone(&Utc))
                    .collect()
            })
            .unwrap_or_default();
        let version = item.get("version").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok());
        Ok(SendLog { sent, version })
    }

    /// One conditional PutItem: the whole (small) log, on the version read.
    async fn record_send(
        &self,
        recipient: &PhoneNumber,
        read: &SendLog,
        at: DateTime<Utc>,
        keep: usize,
        expires_at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let mut sent = read.sent.clone();
        sent.push(at);
        sent.sort();
        let drop = sent.len().saturating_sub(keep.max(1));
        sent.drain(..drop);
        let version = read.version.map_or(1, |v| v + 1);
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("BUDGET#{}", recipient.expose())))
            .item("sk", s("BUDGET"))
            .item("sent", AttributeValue::L(sent.iter().map(|t| s(ts(*t))).collect()))
            .item("version", n(version))
            .item("expires_at", n(expires_at.timestamp()));
        put = match read.version {
            Some(v) => put.condition_expression("version = :v").expression_attribute_values(":v", n(v)),
            None => put.condition_expression("attribute_not_exists(pk)"),
        };
        match put.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(unavailable("DynamoDB PutItem (send log)", &e)),
        }
    }
}
