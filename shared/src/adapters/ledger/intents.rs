//! `IntentStore`: the intent item — its conditional creation, the claim, reads, and its
//! observations. A transition's writes are in `transitions`; the indexes' reads in their own files.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};

use super::DynamoLedger;
use super::expr::Expr;
use super::items::{
    ABSENT_OR_EXPIRED, carried_all, get_s, get_time, intent_pk, n, record_from_item, record_to_item, s, ts, unavailable,
};
use super::pages::{Upto, query_pages};
use crate::adapters::commit;
use crate::domain::intent::IntentRecord;
use crate::domain::observation::Observation;
use crate::domain::{IdempotencyKey, State};
use crate::ports::{ClaimOutcome, IntentStore, PortError, PortResult, PutOutcome, Transition, TransitionOutcome};

impl IntentStore for DynamoLedger {
    async fn put_new(&self, record: &IntentRecord, next_check: DateTime<Utc>) -> PortResult<PutOutcome> {
        let shard = self.next_shard.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.due_shards;
        let item = record_to_item(record, next_check, shard)?;
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(ABSENT_OR_EXPIRED)
            .expression_attribute_values(":expired_before", n(record.intent.created_at.timestamp()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match res {
            Ok(_) => Ok(PutOutcome::Created),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let old = match e.err() {
                    aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c) => {
                        c.item.clone()
                    }
                    _ => None,
                };
                let item = self.refused_intent(old, &record.intent.key).await?.ok_or_else(|| PortError::Corrupt {
                    what: record.intent.key.to_string(),
                    message: "exists yet unreadable".into(),
                })?;
                Ok(PutOutcome::Exists(Box::new(record_from_item(&item)?)))
            }
            Err(e) => Err(unavailable("DynamoDB PutItem", &e)),
        }
    }

    async fn get(&self, key: &IdempotencyKey) -> PortResult<Option<IntentRecord>> {
        self.get_item(intent_pk(key), "INTENT").await?.as_ref().map(record_from_item).transpose()
    }

    async fn transition(&self, t: Transition) -> PortResult<TransitionOutcome> {
        commit::transition(self, t).await
    }

    async fn claim(
        &self,
        key: &IdempotencyKey,
        attempt_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> PortResult<ClaimOutcome> {
        // The sweep must look at a claimed intent by the lease's end at the latest (its sender may
        // die holding it): the claim's own write sees to it. Nearly always the due-index entry is
        // already earlier (intake's first check, its re-enqueue grace) and is left as it is — no
        // index write. An entry later than the lease's end (an intent the sweep re-enqueued a
        // while ago) refuses that first try, and the claim is made again moving the entry to the
        // lease's end: one call more, only then. Never a second write after the claim, which a
        // sender that dies between the two would skip, leaving its intent `sending` until the old
        // check — for a chain level, past the moment it should have moved on.
        match Box::pin(self.claim_once(key, attempt_id, now, lease_until, false)).await? {
            Claimed::Refused(item) => {
                let record = record_from_item(&item)?;
                let claimable = State::CLAIMABLE.contains(&record.status.state);
                if claimable && record.status.next_check.is_some_and(|c| c > lease_until) {
                    return match Box::pin(self.claim_once(key, attempt_id, now, lease_until, true)).await? {
                        Claimed::Refused(item) => self.not_claimed(&item, attempt_id),
                        Claimed::Done(outcome) => Ok(outcome),
                    };
                }
                self.not_claimed(&item, attempt_id)
            }
            Claimed::Done(outcome) => Ok(outcome),
        }
    }

    /// The observations of the intent's current life. The partition is read whole (the intent item
    /// sorts after the observations): an observation left from an earlier life of the key, expired
    /// but not yet deleted by DynamoDB's lazy TTL, expires before the current intent was created
    /// and is left out.
    async fn observations(&self, key: &IdempotencyKey) -> PortResult<Vec<Observation>> {
        let mut out = Vec::new();
        let mut created_at: Option<i64> = None;
        let mut carried: Vec<(String, String)> = Vec::new();
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(intent_pk(key)))
            .consistent_read(true);
        query_pages(query, "DynamoDB Query (observations)", Upto::All, |item| {
            if get_s(item, "sk") == Some("INTENT") {
                // `list_sk` is the creation time (`created_at` in items written before it).
                created_at = get_time(item, "list_sk").or_else(|| get_time(item, "created_at")).map(|c| c.timestamp());
                carried = carried_all(item).into_iter().map(|(id, o)| (id.to_owned(), o.to_owned())).collect();
                return Ok(());
            }
            if !get_s(item, "sk").is_some_and(|sk| sk.starts_with("OBS#")) {
                return Ok(());
            }
            let expires = item.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
            out.push((expires, get_s(item, "obs").unwrap_or_default().to_owned()));
            Ok(())
        })
        .await?;
        let mut observations = Vec::with_capacity(out.len());
        for (expires, raw) in out {
            if let (Some(e), Some(c)) = (expires, created_at)
                && e < c
            {
                continue;
            }
            let o: Observation = serde_json::from_str(&raw)
                .map_err(|e| PortError::Corrupt { what: format!("observation of {key}"), message: e.to_string() })?;
            observations.push(o);
        }
        // The observations the intent carries (`Commit::Carried`): those of the changes it
        // made, and of an older item's last change whose own item may never have been written.
        // Carried in the write that made the change, it is the one that tells it: an item of the
        // same id (written by a release before carried observations, retrying) gives way.
        for (id, raw) in carried {
            let o: Observation = serde_json::from_str(&raw).map_err(|e| PortError::Corrupt {
                what: format!("observation {id} carried by {key}"),
                message: e.to_string(),
            })?;
            observations.retain(|kept| kept.id != o.id);
            observations.push(o);
        }
        observations.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        Ok(observations)
    }
}

/// How one try of a claim ended.
enum Claimed {
    Done(ClaimOutcome),
    /// The condition failed: the intent as it is.
    Refused(super::items::Item),
}

impl DynamoLedger {
    /// One conditional claim: the intent in a claimable state and, unless `move_due`, its
    /// due-index entry absent or no later than the lease's end (kept); with `move_due`, the entry
    /// is moved to the lease's end.
    async fn claim_once(
        &self,
        key: &IdempotencyKey,
        attempt_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        move_due: bool,
    ) -> PortResult<Claimed> {
        let mut x = Expr::new();
        x.set("state", s(State::Sending.as_str()));
        x.set("attempt_id", s(attempt_id));
        x.set("claimed_at", s(ts(now)));
        x.set("lease_until", s(ts(lease_until)));
        x.names.insert("#due_at".into(), "due_at".into());
        x.names.insert("#due_shard".into(), "due_shard".into());
        x.names.insert("#due_home".into(), "due_home".into());
        x.values.insert(":lease_due".into(), n(lease_until.timestamp_millis()));
        x.values.insert(":legacy_shard".into(), s(super::DUE_SHARD));
        // The due-index entry: kept when it is no later than the lease's end; an intent with no
        // entry at all (escalated past its deadline, then re-enqueued) gets the lease's end.
        if move_due {
            x.set.push("#due_at = :lease_due".into());
        } else {
            x.set.push("#due_at = if_not_exists(#due_at, :lease_due)".into());
        }
        x.set.push("#due_shard = if_not_exists(#due_home, :legacy_shard)".into());
        let mut condition = x.condition(&State::CLAIMABLE, None);
        if !move_due {
            condition.push_str(" AND (attribute_not_exists(#due_at) OR #due_at <= :lease_due)");
        }
        let res = self
            .update_intent_item(key, x, condition)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match res {
            Ok(out) => match out.attributes {
                Some(item) => Ok(Claimed::Done(ClaimOutcome::Claimed(Box::new(record_from_item(&item)?)))),
                None => {
                    Err(PortError::Corrupt { what: key.to_string(), message: "claim returned no attributes".into() })
                }
            },
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let old = match e.err() {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                        c.item.clone()
                    }
                    _ => None,
                };
                match self.refused_intent(old, key).await? {
                    Some(item) => Ok(Claimed::Refused(item)),
                    None => Ok(Claimed::Done(ClaimOutcome::Missing)),
                }
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (claim)", &e)),
        }
    }

    /// A claim refused with the intent as `item`: ours after all (the SDK's retry of a claim whose
    /// answer was lost), or someone else's state.
    fn not_claimed(&self, item: &super::items::Item, attempt_id: &str) -> PortResult<ClaimOutcome> {
        let record = record_from_item(item)?;
        if record.status.state == State::Sending && record.status.attempt_id.as_deref() == Some(attempt_id) {
            return Ok(ClaimOutcome::Claimed(Box::new(record)));
        }
        Ok(ClaimOutcome::NotClaimable(Box::new(record)))
    }
}
