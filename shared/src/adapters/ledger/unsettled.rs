//! `UnsettledAttempts`: attempts an operator superseded while their outcome was unknown
//! (`UNSETTLED#<key>#<claim>`), findable by recipient and claim time (list-index, keys only: the
//! item's key holds all it says). Expire with the receipt window, by TTL.

use chrono::{DateTime, Utc};

use super::items::{get_s, n, s, ts, unavailable};
use super::{DynamoLedger, unsettled_partition};
use crate::domain::{IdempotencyKey, PhoneNumber};
use crate::ports::{PortError, PortResult, UnsettledAttempts};

const PREFIX: &str = "UNSETTLED#";

fn pk(key: &IdempotencyKey, claimed_at: DateTime<Utc>) -> String {
    format!("{PREFIX}{key}#{}", ts(claimed_at))
}

/// The intent and claim an item's `pk` names.
fn parse_pk(pk: &str) -> Option<(IdempotencyKey, DateTime<Utc>)> {
    let (key, at) = pk.strip_prefix(PREFIX)?.split_once('#')?;
    let at = DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc);
    Some((IdempotencyKey::parse(key).ok()?, at))
}

impl UnsettledAttempts for DynamoLedger {
    async fn note_unsettled(
        &self,
        recipient: &PhoneNumber,
        key: &IdempotencyKey,
        claimed_at: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> PortResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(pk(key, claimed_at)))
            .item("sk", s("UNSETTLED"))
            .item("expires_at", n(until.timestamp()))
            .item("list_pk", s(unsettled_partition(recipient)))
            .item("list_sk", s(ts(claimed_at)))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| unavailable("DynamoDB PutItem (unsettled attempt)", &e))
    }

    async fn unsettled_to(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> PortResult<Vec<(IdempotencyKey, DateTime<Utc>)>> {
        let mut out = Vec::new();
        let what = "DynamoDB Query (list-index, unsettled attempts)";
        self.list_range(unsettled_partition(recipient), from, to, what, |item| {
            let pk = get_s(item, "pk").unwrap_or_default();
            let found = parse_pk(pk).ok_or_else(|| PortError::Corrupt {
                what: pk.to_owned(),
                message: "not an unsettled attempt's key".into(),
            })?;
            out.push(found);
            Ok(())
        })
        .await?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsettled_attempts_key_names_its_intent_and_claim() {
        let key =
            IdempotencyKey::derive("evt-1", &crate::domain::template::TemplateRef { name: "t".into(), version: 1 });
        let at = DateTime::parse_from_rfc3339("2026-11-29T12:00:00.123Z").map(|d| d.with_timezone(&Utc)).expect("t");
        assert_eq!(parse_pk(&pk(&key, at)), Some((key, at)));
        assert_eq!(parse_pk("DIGEST#abc"), None);
    }
}
