//! The operator listings on the list-index: intents by creation day, and the list-index readers
//! shared with the open escalations and the digests. Reads only; writes nothing.

use chrono::{DateTime, NaiveDate, Utc};

use super::items::{Item, get_s, get_time, s, ts};
use super::pages::{Upto, query_pages};
use super::{DynamoLedger, LIST_INDEX, LIST_SHARDS, OPEN_ESCALATIONS, created_partition};
use crate::domain::IdempotencyKey;
use crate::ports::{PortError, PortResult};

/// The key and time of one list-index entry (its projected keys).
fn list_entry(item: &Item, prefix: &str) -> PortResult<(DateTime<Utc>, IdempotencyKey)> {
    let corrupt = |m: &str| PortError::Corrupt { what: format!("{LIST_INDEX} entry"), message: m.to_owned() };
    let pk = get_s(item, "pk").ok_or_else(|| corrupt("no pk"))?;
    let key = pk.strip_prefix(prefix).ok_or_else(|| corrupt("pk of another kind"))?;
    let key = IdempotencyKey::parse(key).map_err(|e| corrupt(&e.to_string()))?;
    let at = get_time(item, "list_sk").ok_or_else(|| corrupt("no list_sk time"))?;
    Ok((at, key))
}

impl DynamoLedger {
    /// Intents created on `day` (UTC), newest first, from the list-index (keys only): each of the
    /// day's [`LIST_SHARDS`] partitions read newest first, at most `each` entries from each, merged.
    /// With `key_prefix`, only keys that start with it (the partitions are read through, the
    /// prefix filtering what comes back). Eventually consistent: an intent created a moment ago
    /// may be missing.
    pub async fn created_on(
        &self,
        day: NaiveDate,
        each: usize,
        key_prefix: Option<&str>,
    ) -> PortResult<Vec<(DateTime<Utc>, IdempotencyKey)>> {
        let queries = (0..LIST_SHARDS).map(|n| self.list_partition(created_partition(day, n), false, each, key_prefix));
        let mut out: Vec<(DateTime<Utc>, IdempotencyKey)> =
            futures::future::try_join_all(queries).await?.into_iter().flatten().collect();
        out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
        Ok(out)
    }

    pub(super) async fn list_partition(
        &self,
        partition: String,
        oldest_first: bool,
        limit: usize,
        key_prefix: Option<&str>,
    ) -> PortResult<Vec<(DateTime<Utc>, IdempotencyKey)>> {
        let kind = if partition == OPEN_ESCALATIONS { "ESC#" } else { "INTENT#" };
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(LIST_INDEX)
            .key_condition_expression("list_pk = :p")
            .expression_attribute_values(":p", s(partition.as_str()))
            .scan_index_forward(oldest_first);
        let upto = match key_prefix {
            Some(prefix) => {
                query = query
                    .filter_expression("begins_with(pk, :kp)")
                    .expression_attribute_values(":kp", s(format!("{kind}{prefix}")));
                Upto::Filtered(limit)
            }
            None => Upto::Items(limit),
        };
        let mut out = Vec::new();
        query_pages(query, "DynamoDB Query (list-index)", upto, |item| {
            out.push(list_entry(item, kind)?);
            Ok(())
        })
        .await?;
        out.truncate(limit);
        Ok(out)
    }

    /// Every list-index entry of `partition` whose `list_sk` time lies in [`from`, `to`], each
    /// handed to `take` (`what` names the listing in errors).
    pub(super) async fn list_range(
        &self,
        partition: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        what: &'static str,
        take: impl FnMut(&Item) -> PortResult<()>,
    ) -> PortResult<()> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(LIST_INDEX)
            .key_condition_expression("list_pk = :p AND list_sk BETWEEN :from AND :to")
            .expression_attribute_values(":p", s(partition))
            .expression_attribute_values(":from", s(ts(from)))
            .expression_attribute_values(":to", s(ts(to)));
        query_pages(query, what, Upto::All, take).await
    }
}
