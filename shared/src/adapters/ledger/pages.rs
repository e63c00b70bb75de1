//! Reading and writing many items: the one query pagination loop, and BatchGetItem/BatchWriteItem
//! with their unprocessed rounds. Knows no item layout.

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;

use super::DynamoLedger;
use super::items::{Item, unavailable};
use crate::ports::{PortError, PortResult};

/// How many items a paginated query reads.
#[derive(Clone, Copy)]
pub(super) enum Upto {
    /// Every page.
    All,
    /// At most this many: each page asks for no more than are left.
    Items(usize),
    /// At most this many, pages unlimited: with a filter, DynamoDB applies a page's `Limit` before
    /// filtering, so a limited page could come back empty while matches remain.
    Filtered(usize),
}

/// Runs `query` page after page, each from where the last one stopped, handing every item to
/// `take`, until the pages end or `upto` items were read. `operation` names the query in errors.
pub(super) async fn query_pages(
    query: QueryFluentBuilder,
    operation: &'static str,
    upto: Upto,
    mut take: impl FnMut(&Item) -> PortResult<()>,
) -> PortResult<()> {
    let mut taken = 0usize;
    let mut start: Option<Item> = None;
    loop {
        let mut req = query.clone();
        match upto {
            Upto::All => {}
            Upto::Items(limit) | Upto::Filtered(limit) if taken >= limit => break,
            Upto::Items(limit) => req = req.limit(i32::try_from(limit - taken).unwrap_or(i32::MAX)),
            Upto::Filtered(_) => {}
        }
        let page = req.set_exclusive_start_key(start.take()).send().await.map_err(|e| unavailable(operation, &e))?;
        for item in page.items() {
            take(item)?;
            taken += 1;
        }
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => break,
        }
    }
    Ok(())
}

/// Keys per BatchGetItem call: DynamoDB's limit.
const BATCH_GET_KEYS: usize = 100;
/// Items per BatchWriteItem call: DynamoDB's limit.
pub(super) const BATCH_WRITE_ITEMS: usize = 25;
/// Rounds for keys DynamoDB leaves unprocessed (it does under throttling) before giving up.
const UNPROCESSED_ROUNDS: u32 = 6;

impl DynamoLedger {
    /// One BatchWriteItem of at most [`BATCH_WRITE_ITEMS`] requests, with the unprocessed ones
    /// sent again (25 ms, doubling) for [`UNPROCESSED_ROUNDS`] rounds before the write fails.
    pub(super) async fn batch_write(&self, mut pending: Vec<aws_sdk_dynamodb::types::WriteRequest>) -> PortResult<()> {
        for round in 0.. {
            let out = self
                .client
                .batch_write_item()
                .request_items(&self.table, pending)
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB BatchWriteItem", &e))?;
            match out.unprocessed_items.and_then(|mut u| u.remove(&self.table)).filter(|left| !left.is_empty()) {
                None => return Ok(()),
                Some(left) if round + 1 < UNPROCESSED_ROUNDS => {
                    tokio::time::sleep(std::time::Duration::from_millis(25u64 << round)).await;
                    pending = left;
                }
                Some(left) => {
                    return Err(PortError::Unavailable {
                        operation: "DynamoDB BatchWriteItem",
                        message: format!(
                            "{} items still unprocessed after {UNPROCESSED_ROUNDS} rounds (throttled)",
                            left.len()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Items by key with BatchGetItem, [`BATCH_GET_KEYS`] keys per call, strongly consistent. Keys
    /// left in `UnprocessedKeys` are asked again with exponential backoff (25 ms, doubling), as
    /// DynamoDB asks; still unprocessed after [`UNPROCESSED_ROUNDS`], the read fails.
    pub(super) async fn batch_get(&self, keys: Vec<Item>) -> PortResult<Vec<Item>> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut pending = KeysAndAttributes::builder()
                .set_keys(Some(chunk.to_vec()))
                .consistent_read(true)
                .build()
                .map_err(|e| unavailable("DynamoDB BatchGetItem (request)", &e))?;
            for round in 0.. {
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(|e| unavailable("DynamoDB BatchGetItem", &e))?;
                items.extend(out.responses.and_then(|mut r| r.remove(&self.table)).unwrap_or_default());
                match out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)).filter(|k| !k.keys.is_empty()) {
                    None => break,
                    Some(left) if round + 1 < UNPROCESSED_ROUNDS => {
                        tokio::time::sleep(std::time::Duration::from_millis(25u64 << round)).await;
                        pending = left;
                    }
                    Some(left) => {
                        return Err(PortError::Unavailable {
                            operation: "DynamoDB BatchGetItem",
                            message: format!(
                                "{} keys still unprocessed after {UNPROCESSED_ROUNDS} rounds (throttled)",
                                left.keys.len()
                            ),
                        });
                    }
                }
            }
        }
        Ok(items)
    }
}
