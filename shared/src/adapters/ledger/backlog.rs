//! `Backlog`: a recipient's pending alerts in deadline order, from the pending-index (keys only).
//! Reads only.

use chrono::{DateTime, Utc};

use super::items::{Item, get_s, get_time, s, ts};
use super::pages::{Upto, query_pages};
use super::{DynamoLedger, PENDING_INDEX};
use crate::domain::{IdempotencyKey, PhoneNumber};
use crate::ports::{Backlog, PortError, PortResult};

impl DynamoLedger {
    /// A recipient's entries in the pending-index (keys only: `pk`, `sk`, `pending_to`,
    /// `pending_by`), earliest deadline first, whose deadline is after `from`, at most `limit`,
    /// page after page.
    async fn pending_entries(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        limit: usize,
    ) -> PortResult<Vec<Item>> {
        let condition = "pending_to = :r AND pending_by > :from";
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(PENDING_INDEX)
            .key_condition_expression(condition)
            .expression_attribute_values(":r", s(recipient.expose()))
            .expression_attribute_values(":from", s(ts(from)));
        let mut entries: Vec<Item> = Vec::new();
        query_pages(query, "DynamoDB Query (pending-index)", Upto::Items(limit), |item| {
            entries.push(item.clone());
            Ok(())
        })
        .await?;
        Ok(entries)
    }
}

impl Backlog for DynamoLedger {
    /// The pending-index (keys only), earliest deadline first.
    async fn pending_for(
        &self,
        recipient: &PhoneNumber,
        due_after: DateTime<Utc>,
        limit: usize,
    ) -> PortResult<Vec<(IdempotencyKey, DateTime<Utc>)>> {
        self.pending_entries(recipient, due_after, limit.max(1))
            .await?
            .iter()
            .map(|item| {
                let pk = get_s(item, "pk").unwrap_or_default();
                let corrupt = |m: &str| PortError::Corrupt { what: pk.to_owned(), message: m.to_owned() };
                let key = IdempotencyKey::parse(pk.strip_prefix("INTENT#").unwrap_or(pk))
                    .map_err(|_| corrupt("bad key in pending-index"))?;
                let deadline = get_time(item, "pending_by").ok_or_else(|| corrupt("no pending_by in pending-index"))?;
                Ok((key, deadline))
            })
            .collect()
    }
}
