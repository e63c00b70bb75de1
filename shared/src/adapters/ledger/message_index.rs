//! `MessageIndex`: SNS message id → intent (`MSG#<id>` items), one at a time or a status batch at
//! once, and the orphaned delivery records kept beside it (and read back by message id). Written by transitions and digests too.

use std::collections::HashMap;

use super::DynamoLedger;
use super::digests::members_of;
use super::items::{Item, get_s, get_time, n, s, ts, unavailable};
use super::pages::{BATCH_WRITE_ITEMS, Upto, query_pages};
use crate::domain::storm::DigestId;
use crate::domain::{IdempotencyKey, PhoneNumber};
use crate::ports::{IndexEntry, MessageIndex, OrphanRecord, PortError, PortResult};

impl MessageIndex for DynamoLedger {
    async fn lookup(&self, sns_message_id: &str) -> PortResult<Option<IndexEntry>> {
        match self.get_item(format!("MSG#{sns_message_id}"), "MSG").await? {
            Some(item) => index_entry(sns_message_id, &item).map(Some),
            None => Ok(None),
        }
    }

    /// BatchWriteItem, 25 orphans per call (DynamoDB's limit), the calls side by side: a foreign
    /// record (other applications' SMS arrive by the thousand) costs a 25th of a call instead of a
    /// call. BatchWriteItem takes no condition: a redelivered record's item is written again with
    /// the same key and message (only `received_at` moves), which is still one item. Items DynamoDB
    /// leaves unprocessed (it does under throttling) are sent again with backoff.
    async fn keep_orphans(&self, orphans: &[OrphanRecord]) -> PortResult<()> {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        let requests = orphans
            .iter()
            .map(|o| {
                let put = PutRequest::builder()
                    .item("pk", s(format!("ORPHAN#{}", o.sns_message_id)))
                    .item("sk", s(format!("LOG#{}", o.log_event_id)))
                    .item("log_group", s(o.log_group.as_str()))
                    .item("message", s(o.message.as_str()))
                    .item("received_at", s(ts(o.received_at)))
                    .item("expires_at", n(o.expires_at.timestamp()))
                    .build()
                    .map_err(|e| unavailable("DynamoDB PutRequest builder", &e))?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<PortResult<Vec<_>>>()?;
        // One log event can appear twice in a batch; BatchWriteItem refuses duplicate keys.
        let mut seen = std::collections::HashSet::new();
        let requests: Vec<WriteRequest> = requests
            .into_iter()
            .filter(|r| {
                let item = r.put_request().map(|p| p.item());
                seen.insert(item.map(|i| (get_s(i, "pk").map(str::to_owned), get_s(i, "sk").map(str::to_owned))))
            })
            .collect();
        let calls = requests.chunks(BATCH_WRITE_ITEMS).map(|chunk| self.batch_write(chunk.to_vec()));
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    async fn lookup_many(&self, sns_message_ids: &[String]) -> PortResult<crate::ports::IndexEntries> {
        self.batch_lookup(sns_message_ids).await
    }

    /// One Query on `ORPHAN#<id>` (nearly always empty: one read unit).
    async fn orphans_of(&self, sns_message_id: &str) -> PortResult<Vec<OrphanRecord>> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(format!("ORPHAN#{sns_message_id}")))
            .consistent_read(true);
        let mut out = Vec::new();
        query_pages(query, "DynamoDB Query (orphans)", Upto::All, |item| {
            out.push(orphan_record(sns_message_id, item)?);
            Ok(())
        })
        .await?;
        Ok(out)
    }
}

/// One `ORPHAN#` item read back.
fn orphan_record(id: &str, item: &Item) -> PortResult<OrphanRecord> {
    let corrupt = |m: &str| PortError::Corrupt { what: format!("ORPHAN#{id}"), message: m.to_owned() };
    let log_event_id = get_s(item, "sk").and_then(|sk| sk.strip_prefix("LOG#")).ok_or_else(|| corrupt("bad sk"))?;
    let message = get_s(item, "message").ok_or_else(|| corrupt("no message"))?;
    let received_at = get_time(item, "received_at").ok_or_else(|| corrupt("bad received_at"))?;
    let expires_at = item
        .get("expires_at")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .ok_or_else(|| corrupt("bad expires_at"))?;
    Ok(OrphanRecord {
        log_event_id: log_event_id.to_owned(),
        sns_message_id: id.to_owned(),
        log_group: get_s(item, "log_group").unwrap_or_default().to_owned(),
        message: message.to_owned(),
        received_at,
        expires_at,
    })
}

// ---- The message index, many ids at a time (status looks a whole batch of records up at once) ----

impl DynamoLedger {
    /// `MSG#<id>` entries by BatchGetItem, 100 keys per call, strongly consistent (the sender's
    /// write is read as soon as it lands). Keys left in `UnprocessedKeys` are asked again with
    /// exponential backoff (25 ms, doubling), as DynamoDB asks; still unprocessed after
    /// [`UNPROCESSED_ROUNDS`], the lookup fails (the status invocation is then retried whole).
    async fn batch_lookup(&self, ids: &[String]) -> PortResult<crate::ports::IndexEntries> {
        let mut unique: Vec<&str> = ids.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        let keys = unique
            .iter()
            .map(|id| HashMap::from([("pk".to_owned(), s(format!("MSG#{id}"))), ("sk".to_owned(), s("MSG"))]))
            .collect();
        let mut found = crate::ports::IndexEntries::new();
        for item in self.batch_get(keys).await? {
            if let Some(id) = get_s(&item, "pk").and_then(|pk| pk.strip_prefix("MSG#")) {
                found.insert(id.to_owned(), index_entry(id, &item));
            }
        }
        Ok(found)
    }
}

/// One message-index item read back: the intent's key and recipient, and for a digest its id and
/// members.
fn index_entry(id: &str, item: &Item) -> PortResult<IndexEntry> {
    let corrupt = |m: &str| PortError::Corrupt { what: format!("MSG#{id}"), message: m.to_owned() };
    let key = IdempotencyKey::parse(get_s(item, "key").unwrap_or_default()).map_err(|_| corrupt("bad key"))?;
    let recipient =
        PhoneNumber::parse(get_s(item, "recipient").unwrap_or_default()).map_err(|_| corrupt("bad recipient"))?;
    let digest = match get_s(item, "digest_id") {
        None => None,
        Some(raw) => {
            let digest_id = DigestId::parse(raw).ok_or_else(|| corrupt("bad digest_id"))?;
            Some((digest_id, members_of(item).map_err(|m| corrupt(&m))?))
        }
    };
    Ok(IndexEntry { key, recipient, digest })
}
