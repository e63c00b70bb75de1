//! `ProducerQuota`: one counter item per producer and minute (`PRODUCER#<name>`,
//! `MINUTE#<start>`), incremented by a conditional `UpdateItem` that refuses once the limit is
//! reached: one call and one write unit per admitted request, nothing read. Touches no other item.

use aws_sdk_dynamodb::error::SdkError;

use super::DynamoLedger;
use super::items::{n, s, ts, unavailable};
use crate::domain::producer::{ProducerName, RateWindow};
use crate::ports::{PortResult, ProducerQuota};

impl ProducerQuota for DynamoLedger {
    async fn admit(&self, producer: &ProducerName, window: &RateWindow, limit: u32) -> PortResult<bool> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(format!("PRODUCER#{producer}")))
            .key("sk", s(format!("MINUTE#{}", ts(window.start))))
            .update_expression("ADD admitted :one SET expires_at = :expires")
            .condition_expression("attribute_not_exists(admitted) OR admitted < :limit")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":limit", n(limit))
            .expression_attribute_values(":expires", n(window.expires_at().timestamp()))
            .send()
            .await;
        match out {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (producer quota)", &e)),
        }
    }
}
