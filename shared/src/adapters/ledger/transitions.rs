//! The writes of a transition (`commit::TransitionWrites`): the observation, the message-index entry,
//! the conditional update of the intent, or all of them in one transaction. Decides no order.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use chrono::{DateTime, Utc};

use super::expr::{Expr, transition_update};
use super::items::{
    ABSENT_OR_EXPIRED, Item, carried_attribute, carried_by, escalation_pk, intent_pk, n, observation_item,
    record_from_item, s, ts, unavailable,
};
use super::{DynamoLedger, OPEN_ESCALATIONS, RETENTION_AFTER_DEADLINE};
use crate::adapters::commit::TransitionWrites;
use crate::domain::IdempotencyKey;
use crate::domain::intent::IntentRecord;
use crate::domain::observation::Observation;
use crate::ports::{IntentStore, PortError, PortResult, Transition, TransitionOutcome};

/// How many times a transaction cancelled only by `TransactionConflict` (another transaction on
/// the same item at the same moment: AWS answers this, the emulator never does) is tried again
/// before the conflict is reported as a transient failure.
const CONFLICT_RETRIES: u32 = 3;

/// When the items a transition writes expire: with the intent, or — for a change decided without
/// reading the intent — the retention counted from the observation itself (never longer than the
/// intent's by more than the receipt window, since such observations are delivery records).
fn retain_until(t: &Transition) -> DateTime<Utc> {
    t.retain_until
        .unwrap_or_else(|| t.observation.at.checked_add_signed(RETENTION_AFTER_DEADLINE).unwrap_or(t.observation.at))
}

impl TransitionWrites for DynamoLedger {
    async fn put_observation(&self, t: &Transition) -> PortResult<bool> {
        self.put_observation(t).await
    }

    async fn put_message_index(&self, t: &Transition) -> PortResult<()> {
        self.put_message_index(t).await
    }

    async fn update_intent(
        &self,
        t: &Transition,
        carry: bool,
    ) -> PortResult<Option<(IntentRecord, Option<Observation>)>> {
        let (mut update, mut condition) = transition_update(t);
        if carry {
            // The observation travels with the change it describes, in the same write: never
            // lost, never written twice (a retry meets it and is refused).
            let json = serde_json::to_string(&t.observation)
                .map_err(|e| PortError::Corrupt { what: t.observation.id.clone(), message: e.to_string() })?;
            update.set_as("carried", &carried_attribute(&t.observation.id), s(json));
            condition.push_str(" AND attribute_not_exists(#carried)");
            // Earlier events of the same SMS, carried along: kept unless already carried.
            for (i, along) in t.carried_along.iter().enumerate() {
                let json = serde_json::to_string(along)
                    .map_err(|e| PortError::Corrupt { what: along.id.clone(), message: e.to_string() })?;
                update.set_if_absent_as(&format!("along{i}"), &carried_attribute(&along.id), s(json));
            }
        }
        let Some(item) = self.update_intent(&t.key, update, condition).await? else { return Ok(None) };
        let carried = carried_by(&item, &t.observation.id)
            .map(|raw| {
                serde_json::from_str::<Observation>(raw).map_err(|e| PortError::Corrupt {
                    what: format!("observation {} carried by {}", t.observation.id, t.key),
                    message: e.to_string(),
                })
            })
            .transpose()?;
        Ok(Some((record_from_item(&item)?, carried)))
    }

    async fn transact(&self, t: &Transition) -> PortResult<TransitionOutcome> {
        let (update, condition) = transition_update(t);
        self.transact(t, update, condition).await
    }
}

impl DynamoLedger {
    fn observation_put(&self, t: &Transition) -> PortResult<Put> {
        Put::builder()
            .table_name(&self.table)
            .set_item(Some(observation_item(&t.key, &t.observation, retain_until(t))?))
            .condition_expression(ABSENT_OR_EXPIRED)
            .expression_attribute_values(":expired_before", n(t.observation.at.timestamp()))
            .build()
            .map_err(|e| unavailable("DynamoDB Put builder", &e))
    }

    fn message_index_put(&self, t: &Transition) -> PortResult<Option<Put>> {
        let Some((mid, recipient)) = &t.index_message else { return Ok(None) };
        Put::builder()
            .table_name(&self.table)
            .item("pk", s(format!("MSG#{mid}")))
            .item("sk", s("MSG"))
            .item("key", s(t.key.as_str()))
            .item("recipient", s(recipient.expose()))
            .item("at", s(ts(t.observation.at)))
            .item("expires_at", n(retain_until(t).timestamp()))
            .build()
            .map(Some)
            .map_err(|e| unavailable("DynamoDB Put builder", &e))
    }

    /// Stores the transition's observation unless it is there already. True: stored now.
    async fn put_observation(&self, t: &Transition) -> PortResult<bool> {
        let put = self.observation_put(t)?;
        let res = self
            .client
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .set_expression_attribute_values(put.expression_attribute_values().cloned())
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(unavailable("DynamoDB PutItem (observation)", &e)),
        }
    }

    /// Writes the SNS message id → intent entry, if the transition has one. Idempotent: the same
    /// message id always names the same intent.
    async fn put_message_index(&self, t: &Transition) -> PortResult<()> {
        let Some(put) = self.message_index_put(t)? else { return Ok(()) };
        self.client
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB PutItem (message index)", &e))?;
        Ok(())
    }

    /// The conditional update of the intent item alone. `None`: applied. `Some`: refused, with the
    /// intent item as it is.
    async fn update_intent(&self, key: &IdempotencyKey, x: Expr, condition: String) -> PortResult<Option<Item>> {
        let res = self
            .update_intent_item(key, x, condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match res {
            Ok(_) => Ok(None),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let old = match e.err() {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                        c.item.clone()
                    }
                    _ => None,
                };
                let item = self
                    .refused_intent(old, key)
                    .await?
                    .ok_or_else(|| PortError::Corrupt { what: key.to_string(), message: "intent missing".into() })?;
                Ok(Some(item))
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (transition)", &e)),
        }
    }

    /// The transition as one transaction: the intent's update, its observation, and the message
    /// index and open-escalation entries when it has them; all or nothing.
    async fn transact(&self, t: &Transition, x: Expr, condition: String) -> PortResult<TransitionOutcome> {
        // Nothing to change on the intent: its condition alone is checked.
        let intent = if x.is_empty() {
            let check = ConditionCheck::builder()
                .table_name(&self.table)
                .key("pk", s(intent_pk(&t.key)))
                .key("sk", s("INTENT"))
                .condition_expression(condition)
                .set_expression_attribute_names((!x.names.is_empty()).then_some(x.names))
                .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
                .build()
                .map_err(|e| unavailable("DynamoDB ConditionCheck builder", &e))?;
            TransactWriteItem::builder().condition_check(check).build()
        } else {
            let update = Update::builder()
                .table_name(&self.table)
                .key("pk", s(intent_pk(&t.key)))
                .key("sk", s("INTENT"))
                .update_expression(x.expression())
                .condition_expression(condition)
                .set_expression_attribute_names(Some(x.names))
                .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
                .build()
                .map_err(|e| unavailable("DynamoDB Update builder", &e))?;
            TransactWriteItem::builder().update(update).build()
        };
        let mut items = vec![intent, TransactWriteItem::builder().put(self.observation_put(t)?).build()];
        if let Some(put) = self.message_index_put(t)? {
            items.push(TransactWriteItem::builder().put(put).build());
        }
        if let Some(e) = t.patch.escalation.as_ref().filter(|e| e.to_level.is_none()) {
            // On the open-escalations list until an operator acknowledges it (a page: a chain's
            // next level is a tracked SMS of its own, not on-call's).
            let put = Put::builder()
                .table_name(&self.table)
                .item("pk", s(escalation_pk(&t.key)))
                .item("sk", s("ESC"))
                .item("key", s(t.key.as_str()))
                .item("list_pk", s(OPEN_ESCALATIONS))
                .item("list_sk", s(ts(e.at)))
                .item("expires_at", n(retain_until(t).timestamp()))
                .build()
                .map_err(|e| unavailable("DynamoDB Put builder", &e))?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let mut conflicts = 0;
        let codes = loop {
            let res = self.client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
            let codes = match res {
                Ok(_) => return Ok(TransitionOutcome::Applied),
                Err(SdkError::ServiceError(e)) if e.err().is_transaction_canceled_exception() => match e.err() {
                    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None").to_owned())
                        .collect::<Vec<String>>(),
                    _ => Vec::new(),
                },
                Err(e) => return Err(unavailable("DynamoDB TransactWriteItems", &e)),
            };
            // Another transaction touched one of these items at the same moment: nothing was
            // written, and the same transaction is safe to try again after a short, jittered wait.
            let conflict = codes.iter().any(|c| c == "TransactionConflict")
                && !codes.iter().any(|c| c == "ConditionalCheckFailed");
            if conflict && conflicts < CONFLICT_RETRIES {
                conflicts += 1;
                let wait = rand::random_range(10..=25u64 << conflicts);
                tracing::debug!(
                    key = t.key.short(),
                    attempt = conflicts,
                    wait_ms = wait,
                    "transaction conflict; trying again"
                );
                tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                continue;
            }
            break codes;
        };
        let failed = |i: usize| codes.get(i).is_some_and(|c| c == "ConditionalCheckFailed");
        if failed(1) {
            return Ok(TransitionOutcome::AlreadyApplied);
        }
        if failed(0) || codes.is_empty() {
            return match self.get(&t.key).await? {
                Some(r) => Ok(TransitionOutcome::Refused(Box::new(r))),
                None => Err(PortError::Corrupt { what: t.key.to_string(), message: "intent missing".into() }),
            };
        }
        Err(PortError::Unavailable {
            operation: "DynamoDB TransactWriteItems",
            message: format!("cancelled: {codes:?}"),
        })
    }
}
