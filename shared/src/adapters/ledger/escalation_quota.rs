//! `EscalationQuota`: one counter item per producer and UTC hour (`PRODUCER#<name>`,
//! `ESCALATIONS#<hour>`): `escalated` (counted by an `UpdateItem` ADD that returns the new
//! count) and `notice_sent` (set once the cap's notice went out). Expires an hour after its hour.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use chrono::{DateTime, Utc};

use super::DynamoLedger;
use super::items::{get_u32, n, s, ts, unavailable};
use crate::domain::escalation_cap::EscalationCount;
use crate::domain::producer::ProducerName;
use crate::domain::spend::hour_of;
use crate::ports::{EscalationQuota, PortResult};

fn key(producer: &ProducerName, now: DateTime<Utc>) -> (AttributeValue, AttributeValue) {
    (s(format!("PRODUCER#{producer}")), s(format!("ESCALATIONS#{}", ts(hour_of(now)))))
}

fn expires(now: DateTime<Utc>) -> AttributeValue {
    n((hour_of(now) + chrono::Duration::hours(2)).timestamp())
}

impl EscalationQuota for DynamoLedger {
    async fn count_escalation(&self, producer: &ProducerName, now: DateTime<Utc>) -> PortResult<EscalationCount> {
        let (pk, sk) = key(producer, now);
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", pk)
            .key("sk", sk)
            .update_expression("ADD escalated :one SET expires_at = :expires")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":expires", expires(now))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB UpdateItem (escalation cap)", &e))?;
        let item = out.attributes().cloned().unwrap_or_default();
        Ok(EscalationCount {
            n: get_u32(&item, "escalated"),
            notice_sent: matches!(item.get("notice_sent"), Some(AttributeValue::Bool(true))),
        })
    }

    async fn escalation_notice_sent(&self, producer: &ProducerName, now: DateTime<Utc>) -> PortResult<()> {
        let (pk, sk) = key(producer, now);
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", pk)
            .key("sk", sk)
            .update_expression("SET notice_sent = :yes, expires_at = :expires")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":expires", expires(now))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| unavailable("DynamoDB UpdateItem (escalation cap notice)", &e))
    }
}
