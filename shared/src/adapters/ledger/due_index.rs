//! `DueIndex`: the sparse, sharded due-index the sweep reads, the escalation lease, and moving an
//! intent's next check. Touches only the intent item's due and lease attributes.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use chrono::{DateTime, Utc};

use super::expr::Expr;
use super::items::{Item, get_s, intent_pk, n, record_from_item, s, ts, unavailable};
use super::{DUE_INDEX, DUE_SHARD, DynamoLedger, due_shard_name};
use crate::domain::intent::IntentRecord;
use crate::domain::{IdempotencyKey, State};
use crate::ports::{DueIndex, NextCheck, PortError, PortResult};

impl DueIndex for DynamoLedger {
    fn due_shards(&self) -> Vec<String> {
        let mut shards: Vec<String> = (0..self.due_shards).map(due_shard_name).collect();
        shards.push(DUE_SHARD.to_owned());
        shards
    }

    async fn due(
        &self,
        shard: &str,
        now: DateTime<Utc>,
        limit: i32,
        after: Option<String>,
    ) -> PortResult<(Vec<IdempotencyKey>, Option<String>)> {
        let start: Option<Item> = match after {
            Some(token) => {
                let m: HashMap<String, String> = serde_json::from_str(&token)
                    .map_err(|e| PortError::Corrupt { what: "due-index page token".into(), message: e.to_string() })?;
                Some(
                    m.into_iter()
                        .map(|(k, v)| {
                            let av = if k == "due_at" { n(v) } else { s(v) };
                            (k, av)
                        })
                        .collect(),
                )
            }
            None => None,
        };
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(DUE_INDEX)
            .key_condition_expression("due_shard = :shard AND due_at <= :now")
            .expression_attribute_values(":shard", s(shard))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB Query (due-index)", &e))?;
        // The index projects keys only (an index write costs what the keys weigh, not the
        // intent): the sweep reads each due intent from the table itself.
        let keys = page
            .items()
            .iter()
            .map(|item| {
                let pk = get_s(item, "pk").unwrap_or_default();
                IdempotencyKey::parse(pk.trim_start_matches("INTENT#")).map_err(|_| PortError::Corrupt {
                    what: format!("due-index entry {pk}"),
                    message: "not an intent key".into(),
                })
            })
            .collect::<PortResult<Vec<_>>>()?;
        let next = match page.last_evaluated_key {
            Some(k) if !k.is_empty() => {
                let m: HashMap<String, String> = k
                    .iter()
                    .filter_map(|(name, v)| match v {
                        AttributeValue::S(x) | AttributeValue::N(x) => Some((name.clone(), x.clone())),
                        _ => None,
                    })
                    .collect();
                Some(
                    serde_json::to_string(&m)
                        .map_err(|e| PortError::Corrupt { what: "page token".into(), message: e.to_string() })?,
                )
            }
            _ => None,
        };
        Ok((keys, next))
    }

    async fn lease_escalation(
        &self,
        key: &IdempotencyKey,
        run_id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> PortResult<Option<IntentRecord>> {
        // The due-index is a GSI, updated eventually: the record the sweep read there may be older
        // than the intent. The lease is taken on the base item, on its current state, and returns
        // the item as it is now, so the caller decides on the truth. A delivered intent is leased
        // only as a level of a chain (nobody acknowledged it within its wait).
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(key)))
            .key("sk", s("INTENT"))
            .update_expression("SET esc_lease = :until, esc_run = :run")
            .condition_expression(
                "attribute_exists(pk) AND attribute_not_exists(escalated_at) \
                 AND (#state <> :delivered OR attribute_exists(chain_root)) \
                 AND (attribute_not_exists(esc_lease) OR esc_lease < :now)",
            )
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":delivered", s(State::Delivered.as_str()))
            .expression_attribute_values(":until", s(ts(until)))
            .expression_attribute_values(":run", s(run_id))
            .expression_attribute_values(":now", s(ts(now)))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match res {
            Ok(out) => out.attributes.as_ref().map(record_from_item).transpose(),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(None),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (escalation lease)", &e)),
        }
    }

    async fn set_next_check(&self, key: &IdempotencyKey, next: NextCheck, in_state: Option<State>) -> PortResult<()> {
        let mut x = Expr::new();
        x.next_check(next);
        if x.set.is_empty() && x.remove.is_empty() {
            return Ok(());
        }
        let condition = x.condition(in_state.as_slice(), None);
        let res = self.update_intent_item(key, x, condition).send().await;
        match res {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (next check)", &e)),
        }
    }

    async fn bring_check_forward(&self, key: &IdempotencyKey, by: DateTime<Utc>, while_in: &[State]) -> PortResult<()> {
        let mut x = Expr::new();
        x.next_check(NextCheck::At(by));
        // `#due_at`/`:due_at` are the new check's, set above.
        let condition =
            format!("{} AND (attribute_not_exists(#due_at) OR #due_at > :due_at)", x.condition(while_in, None));
        let res = self.update_intent_item(key, x, condition).send().await;
        match res {
            Ok(_) => Ok(()),
            // Settled since, gone, or due sooner already: nothing to bring forward.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (next check forward)", &e)),
        }
    }
}
