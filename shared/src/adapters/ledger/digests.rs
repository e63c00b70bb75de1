//! `DigestStore`: storm-mode digests (`DIGEST#<id>`), their message-index entry, their outcome, and
//! a recipient's digests by time (list-index). Never writes a member's intent item.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use super::items::{Item, get_s, get_time, get_u32, n, s, ts, unavailable};
use super::{DynamoLedger, digests_partition};
use crate::domain::storm::DigestId;
use crate::domain::{IdempotencyKey, PhoneNumber};
use crate::ports::{DigestRecord, DigestStore, PortError, PortResult};

/// A digest's `members` attribute (a list of keys, earliest deadline first).
pub(super) fn members_of(item: &Item) -> Result<Vec<IdempotencyKey>, String> {
    let list = item.get("members").and_then(|v| v.as_l().ok()).ok_or("no members list")?;
    let members = list
        .iter()
        .map(|v| v.as_s().ok().and_then(|k| IdempotencyKey::parse(k).ok()).ok_or("bad member key"))
        .collect::<Result<Vec<_>, _>>()?;
    if members.is_empty() { Err("empty members list".into()) } else { Ok(members) }
}

fn members_value(members: &[IdempotencyKey]) -> AttributeValue {
    AttributeValue::L(members.iter().map(|k| s(k.as_str())).collect())
}

impl DigestStore for DynamoLedger {
    async fn put_digest(&self, d: &DigestRecord) -> PortResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("DIGEST#{}", d.id)))
            .item("sk", s("DIGEST"))
            .item("recipient", s(d.recipient.expose()))
            .item("members", members_value(&d.members))
            .item("segments", n(d.segments))
            .item("created_at", s(ts(d.created_at)))
            .item("expires_at", n(d.expires_at.timestamp()))
            // Findable by recipient and time (the list-index), for a member that never learnt it.
            .item("list_pk", s(digests_partition(&d.recipient)))
            .item("list_sk", s(ts(d.created_at)))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| unavailable("DynamoDB PutItem (digest)", &e))
    }

    async fn index_digest_message(&self, sns_message_id: &str, d: &DigestRecord) -> PortResult<()> {
        let Some(first) = d.members.first() else {
            return Err(PortError::Corrupt { what: format!("DIGEST#{}", d.id), message: "no members".into() });
        };
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("MSG#{sns_message_id}")))
            .item("sk", s("MSG"))
            .item("key", s(first.as_str()))
            .item("recipient", s(d.recipient.expose()))
            .item("digest_id", s(d.id.as_str()))
            .item("members", members_value(&d.members))
            .item("at", s(ts(d.created_at)))
            .item("expires_at", n(d.expires_at.timestamp()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| unavailable("DynamoDB PutItem (digest message index)", &e))
    }

    async fn digests_to(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> PortResult<Vec<DigestRecord>> {
        let mut ids = Vec::new();
        let what = "DynamoDB Query (list-index, digests)";
        self.list_range(digests_partition(recipient), from, to, what, |item| {
            if let Some(id) = get_s(item, "pk").and_then(|pk| pk.strip_prefix("DIGEST#")).and_then(DigestId::parse) {
                ids.push(id);
            }
            Ok(())
        })
        .await?;
        let mut digests = Vec::with_capacity(ids.len());
        for id in ids {
            digests.extend(self.get_digest(&id).await?);
        }
        Ok(digests)
    }

    async fn record_digest_outcome(&self, id: &DigestId, outcome: &crate::ports::LoggedRecord) -> PortResult<()> {
        let json = serde_json::to_string(outcome)
            .map_err(|e| PortError::Corrupt { what: format!("DIGEST#{id}"), message: e.to_string() })?;
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(format!("DIGEST#{id}")))
            .key("sk", s("DIGEST"))
            .update_expression("SET outcome = :o")
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(outcome)")
            .expression_attribute_values(":o", s(json))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            // The first record is kept; or the digest is gone (expired): nothing to add to.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (digest outcome)", &e)),
        }
    }

    async fn get_digest(&self, id: &DigestId) -> PortResult<Option<DigestRecord>> {
        let Some(item) = self.get_item(format!("DIGEST#{id}"), "DIGEST").await? else { return Ok(None) };
        let corrupt = |m: String| PortError::Corrupt { what: format!("DIGEST#{id}"), message: m };
        Ok(Some(DigestRecord {
            id: id.clone(),
            recipient: PhoneNumber::parse(get_s(&item, "recipient").unwrap_or_default())
                .map_err(|_| corrupt("bad recipient".into()))?,
            members: members_of(&item).map_err(corrupt)?,
            segments: get_u32(&item, "segments"),
            created_at: get_time(&item, "created_at").ok_or_else(|| corrupt("no created_at".into()))?,
            expires_at: item
                .get("expires_at")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(|t| DateTime::from_timestamp(t, 0))
                .ok_or_else(|| corrupt("no expires_at".into()))?,
            outcome: match get_s(&item, "outcome") {
                Some(raw) => Some(serde_json::from_str(raw).map_err(|e| corrupt(format!("outcome: {e}")))?),
                None => None,
            },
        }))
    }
}
