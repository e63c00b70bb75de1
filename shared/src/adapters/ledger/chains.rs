//! `ChainLedger`: a chain's levels are started on its root intent's item (`chain_level`, the
//! highest level started), by one conditional `UpdateItem` that an acknowledgement (`ack_at`)
//! refuses and that never moves the level back. DynamoDB serialises writes to one item, so of an
//! acknowledgement and a level's start exactly one comes first. When the condition fails, the
//! item DynamoDB returns with the refusal tells which — and, for a level started before, why it
//! was (`chain_reason_<level>`, one per level: a later level may start before a slow run finishes
//! this one), so the run that finishes it tells the story of the start.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use chrono::{DateTime, Utc};

use super::DynamoLedger;
use super::items::{intent_pk, n, record_from_item, s, ts, unavailable};
use crate::domain::IdempotencyKey;
use crate::ports::{ChainLedger, LevelStart, PortResult};

impl ChainLedger for DynamoLedger {
    async fn start_level(
        &self,
        root: &IdempotencyKey,
        level: u8,
        now: DateTime<Utc>,
        reason: &str,
    ) -> PortResult<LevelStart> {
        let started = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(root)))
            .key("sk", s("INTENT"))
            .update_expression("SET chain_level = :level, chain_level_at = :now, #reason = :reason")
            .expression_attribute_names("#reason", reason_attribute(level))
            .condition_expression(
                "attribute_exists(pk) AND attribute_not_exists(ack_at) \
                 AND (attribute_not_exists(chain_level) OR chain_level < :level)",
            )
            .expression_attribute_values(":level", n(level))
            .expression_attribute_values(":now", s(ts(now)))
            .expression_attribute_values(":reason", s(reason))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match started {
            Ok(_) => Ok(LevelStart::Started),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let returned = match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => c.item.clone(),
                    _ => None,
                };
                let Some(item) = self.refused_intent(returned, root).await? else {
                    return Ok(LevelStart::Missing);
                };
                Ok(match record_from_item(&item)?.status.acknowledgement {
                    Some(ack) => LevelStart::Acknowledged(ack),
                    None => {
                        let reason = item.get(&reason_attribute(level)).and_then(|v| v.as_s().ok()).cloned();
                        LevelStart::StartedBefore { reason }
                    }
                })
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (start a chain's level)", &e)),
        }
    }
}

/// The root's attribute that keeps why `level` started.
fn reason_attribute(level: u8) -> String {
    format!("chain_reason_{level}")
}
