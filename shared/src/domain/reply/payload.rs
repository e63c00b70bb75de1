//! End User Messaging's two-way payload: what a phone number with two-way messaging publishes to
//! its `TwoWayChannelArn` topic when someone texts it.
//!
//! ```json
//! { "originationNumber": "+14255550182", "destinationNumber": "+12125550101",
//!   "messageKeyword": "KEYWORD_…", "messageBody": "ack 7",
//!   "inboundMessageId": "cae173d2-…", "previousPublishedMessageId": "wJalrX…" }
//! ```
//!
//! Read defensively, as the delivery records are: only `originationNumber` (the person) and
//! `inboundMessageId` (the reply's identity, what makes a duplicate a duplicate) are relied on.
//! `previousPublishedMessageId` is "not always set" (AWS): a hint, never needed. A body may be
//! missing (a picture, an empty message) and is then no command. The topic may deliver the payload
//! as it is (raw message delivery, as the stack subscribes its queue) or inside SNS's notification
//! envelope (a subscription someone changed by hand): both read the same, the envelope adding the
//! time SNS took the message.
//!
//! The person's number and what they typed never reach a log line: both are typed so that `Debug`
//! masks them.

use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::domain::delivery::parse_timestamp;
use crate::domain::phone::{PhoneError, PhoneNumber};

/// What a person texted, kept out of `Debug` (it may hold anything, a number included).
#[derive(Clone, PartialEq, Eq)]
pub struct ReplyText(String);

impl ReplyText {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text in clear: for reading the command, never for a log line.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ReplyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplyText(<{} chars>)", self.0.chars().count())
    }
}

/// One inbound SMS to the stack's two-way number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundReply {
    /// The person's phone (`originationNumber`).
    pub from: PhoneNumber,
    /// The stack's number the person texted (`destinationNumber`): E.164 or a short code.
    pub to: String,
    /// What they typed (`messageBody`); `None` when the payload carries no text.
    pub body: Option<ReplyText>,
    /// The keyword End User Messaging matched (`messageKeyword`), when it says.
    pub keyword: Option<String>,
    /// The reply's identity (`inboundMessageId`): a redelivered reply carries the same one.
    pub inbound_id: String,
    /// The message id of the SMS the person answered, when End User Messaging knows it
    /// (`previousPublishedMessageId`): the most recent message from this number to that phone.
    pub answering: Option<String>,
    /// When SNS took the message, from its envelope; `None` under raw message delivery (the
    /// queue's own timestamp stands in).
    pub published_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("the reply is not JSON: {0}")]
    NotJson(String),
    #[error("the reply is not a JSON object")]
    NotObject,
    #[error("the SNS envelope's Message is not a string")]
    EnvelopeMessage,
    #[error("the reply has no {0} (a string)")]
    Missing(&'static str),
    #[error("the reply's originationNumber is not an E.164 number: {0}")]
    Number(PhoneError),
    #[error("the reply's inboundMessageId is {0} characters long, more than {MAX_INBOUND_ID_LEN}: not an AWS id")]
    IdTooLong(usize),
}

/// The longest `inboundMessageId` kept: AWS's are UUIDs (36 characters); anything far longer is
/// not one and would only bloat the ledger key built from it.
pub const MAX_INBOUND_ID_LEN: usize = 128;

/// Reads one two-way payload, raw or inside SNS's notification envelope.
pub fn parse_reply(raw: &str) -> Result<InboundReply, PayloadError> {
    let value: Value = serde_json::from_str(raw).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    let outer = value.as_object().ok_or(PayloadError::NotObject)?;
    if outer.get("Type").and_then(Value::as_str) == Some("Notification") && outer.contains_key("Message") {
        let inner = outer.get("Message").and_then(Value::as_str).ok_or(PayloadError::EnvelopeMessage)?;
        let published_at = outer.get("Timestamp").and_then(Value::as_str).and_then(parse_timestamp);
        let mut reply = parse_reply_object(inner)?;
        reply.published_at = published_at;
        return Ok(reply);
    }
    read_fields(outer)
}

fn parse_reply_object(raw: &str) -> Result<InboundReply, PayloadError> {
    let value: Value = serde_json::from_str(raw).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    read_fields(value.as_object().ok_or(PayloadError::NotObject)?)
}

fn read_fields(o: &Map<String, Value>) -> Result<InboundReply, PayloadError> {
    let required = |name: &'static str| {
        o.get(name).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).ok_or(PayloadError::Missing(name))
    };
    let optional = |name: &str| o.get(name).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let from = PhoneNumber::parse(required("originationNumber")?).map_err(PayloadError::Number)?;
    let inbound_id = required("inboundMessageId")?;
    if inbound_id.len() > MAX_INBOUND_ID_LEN {
        return Err(PayloadError::IdTooLong(inbound_id.len()));
    }
    Ok(InboundReply {
        from,
        to: optional("destinationNumber").unwrap_or_default().to_owned(),
        body: o.get("messageBody").and_then(Value::as_str).map(ReplyText::new),
        keyword: optional("messageKeyword").map(str::to_owned),
        inbound_id: inbound_id.to_owned(),
        answering: optional("previousPublishedMessageId").map(str::to_owned),
        published_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWS_EXAMPLE: &str = r#"{
        "originationNumber":"+14255550182",
        "destinationNumber":"+12125550101",
        "messageKeyword":"JOIN",
        "messageBody":"EXAMPLE",
        "inboundMessageId":"cae173d2-66b9-564c-8309-21f858e9fb84",
        "previousPublishedMessageId":"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    }"#;

    #[test]
    fn the_documented_payload_reads_into_every_field() {
        let r = parse_reply(AWS_EXAMPLE).expect("AWS's own example");
        assert_eq!(r.from.expose(), "+14255550182");
        assert_eq!(r.to, "+12125550101");
        assert_eq!(r.body.as_ref().map(ReplyText::expose), Some("EXAMPLE"));
        assert_eq!(r.keyword.as_deref(), Some("JOIN"));
        assert_eq!(r.inbound_id, "cae173d2-66b9-564c-8309-21f858e9fb84");
        assert_eq!(r.answering.as_deref(), Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"));
        assert_eq!(r.published_at, None);
    }

    #[test]
    fn inside_an_sns_envelope_the_payload_reads_the_same_and_gains_the_time_sns_took_it() {
        let envelope = serde_json::json!({
            "Type": "Notification",
            "MessageId": "8b5c3a36-0000-0000-0000-000000000000",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:tocsin-replies",
            "Message": AWS_EXAMPLE,
            "Timestamp": "2026-12-05T03:12:09.123Z",
            "SignatureVersion": "1"
        })
        .to_string();
        let r = parse_reply(&envelope).expect("enveloped");
        assert_eq!(r.inbound_id, "cae173d2-66b9-564c-8309-21f858e9fb84");
        assert_eq!(r.published_at.map(|t| t.to_rfc3339()), Some("2026-12-05T03:12:09.123+00:00".to_owned()));
    }

    #[test]
    fn only_the_person_and_the_reply_id_are_required_the_rest_may_be_missing() {
        let r = parse_reply(r#"{"originationNumber":"+447700900123","inboundMessageId":"x-1"}"#).expect("minimal");
        assert_eq!(r.body, None);
        assert_eq!(r.answering, None);
        assert_eq!(r.keyword, None);
        assert_eq!(r.to, "");
    }

    #[test]
    fn a_payload_without_a_usable_sender_or_id_is_refused_with_the_field_named() {
        assert_eq!(parse_reply(r#"{"inboundMessageId":"x"}"#), Err(PayloadError::Missing("originationNumber")));
        assert_eq!(
            parse_reply(r#"{"originationNumber":"+14255550182","inboundMessageId":"  "}"#),
            Err(PayloadError::Missing("inboundMessageId"))
        );
        assert_eq!(
            parse_reply(r#"{"originationNumber":"4255550182","inboundMessageId":"x"}"#),
            Err(PayloadError::Number(PhoneError::MissingPlus))
        );
        assert_eq!(
            parse_reply(r#"{"originationNumber":14255550182,"inboundMessageId":"x"}"#),
            Err(PayloadError::Missing("originationNumber"))
        );
        assert!(matches!(parse_reply("not json"), Err(PayloadError::NotJson(_))));
        assert_eq!(parse_reply("[1]"), Err(PayloadError::NotObject));
        assert_eq!(parse_reply(r#"{"Type":"Notification","Message":{"a":1}}"#), Err(PayloadError::EnvelopeMessage));
        let long_id = format!(r#"{{"originationNumber":"+14255550182","inboundMessageId":"{}"}}"#, "x".repeat(200));
        assert_eq!(parse_reply(&long_id), Err(PayloadError::IdTooLong(200)));
    }

    #[test]
    fn debug_output_shows_neither_the_number_nor_the_text() {
        let r = parse_reply(
            r#"{"originationNumber":"+14255550182","inboundMessageId":"x","messageBody":"call me on +14255550199"}"#,
        )
        .expect("parses");
        let shown = format!("{r:?}");
        assert!(!shown.contains("4255550182"), "{shown}");
        assert!(!shown.contains("call me"), "{shown}");
        assert!(shown.contains("<23 chars>"), "{shown}");
    }
}
