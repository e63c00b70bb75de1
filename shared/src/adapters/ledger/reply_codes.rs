//! `ReplyCodes`: one item per phone (`CODES#<e164>`, `CODES`), one map attribute per code it
//! holds (`c7`: `s` the subject — `alert:<key>` or `digest:<id>` —, `g` given, `t` sent, `x`
//! closed). A code is given (absent, closed a day ago, or given two days ago: lapsed a day ago) by a conditional `UpdateItem` on its own attribute, so two senders
//! cannot both take it (DynamoDB serialises writes to an item); sent and closed are conditional
//! on the code still being the subject's. Touches no other item.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use super::DynamoLedger;
use super::items::{Item, get_s, get_time, n, s, ts, unavailable};
use crate::domain::PhoneNumber;
use crate::domain::digest_id::DigestId;
use crate::domain::key::IdempotencyKey;
use crate::domain::reply::code::{OPEN_FOR, REUSE_AFTER};
use crate::domain::reply::{AckSubject, HeldCode, ReplyCode};
use crate::ports::{PortError, PortResult, ReplyCodes};

fn codes_pk(phone: &PhoneNumber) -> String {
    format!("CODES#{}", phone.expose())
}

const CODES_SK: &str = "CODES";

fn code_attr(code: ReplyCode) -> String {
    format!("c{code}")
}

/// How a subject is stored.
pub fn subject_to_stored(subject: &AckSubject) -> String {
    match subject {
        AckSubject::Alert(key) => format!("alert:{key}"),
        AckSubject::Digest(id) => format!("digest:{}", id.as_str()),
    }
}

/// A stored subject read back; `None` when it is neither form.
pub fn subject_from_stored(raw: &str) -> Option<AckSubject> {
    if let Some(key) = raw.strip_prefix("alert:") {
        return IdempotencyKey::parse(key).ok().map(AckSubject::Alert);
    }
    raw.strip_prefix("digest:").and_then(DigestId::parse).map(AckSubject::Digest)
}

fn held_from_item(phone_item: &Item) -> PortResult<Vec<HeldCode>> {
    let mut held = Vec::new();
    for (name, value) in phone_item {
        let Some(code) = name.strip_prefix('c').and_then(|d| d.parse::<u16>().ok()).and_then(ReplyCode::new) else {
            continue;
        };
        let corrupt =
            |message: &str| PortError::Corrupt { what: format!("reply code {name}"), message: message.to_owned() };
        let entry: &HashMap<String, AttributeValue> = value.as_m().map_err(|_| corrupt("not a map"))?;
        let subject = get_s(entry, "s").and_then(subject_from_stored).ok_or_else(|| corrupt("no readable subject"))?;
        let given_at = get_time(entry, "g").ok_or_else(|| corrupt("no time given"))?;
        held.push(HeldCode { code, subject, given_at, sent_at: get_time(entry, "t"), closed_at: get_time(entry, "x") });
    }
    held.sort_by_key(|h| h.code);
    Ok(held)
}

impl DynamoLedger {
    /// One conditional `UpdateItem` of a code's attribute: true when applied.
    async fn update_code(
        &self,
        operation: &'static str,
        phone: &PhoneNumber,
        code: ReplyCode,
        update: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> PortResult<bool> {
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(codes_pk(phone)))
            .key("sk", s(CODES_SK))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#c", code_attr(code));
        for (name, value) in values {
            req = req.expression_attribute_values(name, value);
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(unavailable(operation, &e)),
        }
    }
}

impl DynamoLedger {
    /// Stamps `field` (`t` sent, `x` closed) of `code` with `at`, only while the code is
    /// `subject`'s and open.
    async fn stamp_open_code(
        &self,
        operation: &'static str,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        field: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.update_code(
            operation,
            phone,
            code,
            &format!("SET #c.{field} = :at"),
            "#c.s = :subject AND attribute_not_exists(#c.x)",
            vec![(":at", s(ts(at))), (":subject", s(subject_to_stored(subject)))],
        )
        .await
    }
}

impl ReplyCodes for DynamoLedger {
    async fn held_codes(&self, phone: &PhoneNumber) -> PortResult<Vec<HeldCode>> {
        match self.get_item(codes_pk(phone), CODES_SK).await? {
            Some(item) => held_from_item(&item),
            None => Ok(Vec::new()),
        }
    }

    async fn give_code(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let entry = HashMap::from([("s".to_owned(), s(subject_to_stored(subject))), ("g".to_owned(), s(ts(at)))]);
        self.update_code(
            "DynamoDB UpdateItem (give a reply code)",
            phone,
            code,
            "SET #c = :entry, expires_at = :expires",
            "attribute_not_exists(#c) OR #c.x <= :reusable OR #c.g <= :lapsed",
            vec![
                (":entry", AttributeValue::M(entry)),
                (":expires", n(expires_at.timestamp())),
                (":reusable", s(ts(at - REUSE_AFTER))),
                (":lapsed", s(ts(at - REUSE_AFTER - OPEN_FOR))),
            ],
        )
        .await
    }

    async fn code_sent(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.stamp_open_code("DynamoDB UpdateItem (reply code sent)", phone, code, subject, "t", at).await
    }

    async fn close_code(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.stamp_open_code("DynamoDB UpdateItem (close a reply code)", phone, code, subject, "x", at).await
    }
}
