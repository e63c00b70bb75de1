//! End User Messaging SMS events, as a configuration set's CloudWatch Logs event destination
//! writes them (one JSON object per log event; AWS End User Messaging SMS User Guide, "Example
//! SMS event data"):
//!
//! ```text
//! {"eventType":"TEXT_DELIVERED","eventVersion":"1.0","eventTimestamp":1686975103470,"isFinal":true,
//!  "originationPhoneNumber":"+12065550152","destinationPhoneNumber":"+14255550156",
//!  "isoCountryCode":"US","mcc":"310","mnc":"800","carrierName":"…","messageId":"862a8790-…",
//!  "messageRequestTimestamp":1686975103170,"messageEncoding":"GSM","messageType":"TRANSACTIONAL",
//!  "messageStatus":"DELIVERED","messageStatusDescription":"…","context":{"tocsin-key":"…"},
//!  "totalMessageParts":1,"totalMessagePrice":0.00581,"totalCarrierFee":0.0}
//! ```
//!
//! `eventType` and `messageId` are relied on; an event without `isFinal` is read as not final
//! (never delivered on a guess). The `context` is the sender's, echoed: it names the alert and
//! the attempt (or the digest) by key ([`SendContext`]).

use super::json::{RawRecord, boolean, number_f64, number_u64, text, timestamp};
use super::{DeliveryRecord, DeliveryStatus, Format, RecordError};
use crate::domain::eum_status::{Meaning, meaning};
use crate::domain::send_context::SendContext;

pub(super) fn record(raw: &RawRecord<'_>) -> Result<DeliveryRecord, RecordError> {
    let t = |k: &str| raw.top.get(k);
    let event_type = text(t("eventType")).ok_or(RecordError::NoStatus)?;
    let message_id = text(t("messageId")).ok_or(RecordError::NoEventMessageId)?;
    let is_final = boolean(t("isFinal")).unwrap_or(false);
    let message_status = text(t("messageStatus"));
    let (meaning, classification) = meaning(&event_type, is_final, message_status.as_deref());
    let (status, failure) = match meaning {
        Meaning::Delivered => (DeliveryStatus::Success, None),
        Meaning::Failed(_) => (DeliveryStatus::Failure, Some(classification)),
        Meaning::Progress => (DeliveryStatus::Pending(event_type.clone()), None),
        Meaning::Unrecognised => (DeliveryStatus::Other(event_type.clone()), None),
    };
    let requested = t("messageRequestTimestamp").and_then(timestamp);
    let reported = t("eventTimestamp").and_then(timestamp);
    // How long the SMS took to reach its outcome: the SNS record's dwell, as End User Messaging
    // tells it (only a final event is an outcome).
    let dwell_ms = match (requested, reported) {
        (Some(from), Some(to)) if is_final => u64::try_from((to - from).num_milliseconds()).ok(),
        _ => None,
    };
    let description = text(t("messageStatusDescription")).or(message_status);
    let context =
        SendContext::from_entries(raw.context.0.iter().filter_map(|(k, v)| Some((k.as_ref(), scalar_str(v)?))))
            // A malformed tocsin context is read as none: the event is then nobody's, never a guess's.
            .unwrap_or(None);
    Ok(DeliveryRecord {
        format: Format::EumEvent,
        message_id,
        status,
        timestamp: requested.or(reported),
        reported_at: reported,
        destination: text(t("destinationPhoneNumber")),
        provider_response: Some(match description {
            Some(d) => format!("{event_type}: {d}"),
            None => event_type,
        }),
        carrier: text(t("carrierName")),
        mcc: text(t("mcc")),
        mnc: text(t("mnc")),
        iso_country: text(t("isoCountryCode")),
        parts: number_u64(t("totalMessageParts")).and_then(|p| u32::try_from(p).ok()),
        price_usd: number_f64(t("totalMessagePrice")),
        dwell_ms,
        dwell_until_ack_ms: None,
        sms_type: text(t("messageType")),
        context,
        failure,
    })
}

fn scalar_str<'v>(v: &'v super::json::Scalar<'_>) -> Option<&'v str> {
    match v {
        super::json::Scalar::Str(s) => Some(s.as_ref()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DeliveryStatus, Format, RecordError, parse_record};
    use crate::domain::IdempotencyKey;
    use crate::domain::provider::FailureClass;
    use crate::domain::send_context::{SendContext, Subject};

    /// AWS's documented example, its context replaced by one of tocsin's.
    fn event(event_type: &str, is_final: bool, status: &str, context: &str) -> String {
        format!(
            r#"{{"eventType":"{event_type}","eventVersion":"1.0","eventTimestamp":1686975103470,"isFinal":{is_final},"originationPhoneNumber":"+12065550152","destinationPhoneNumber":"+14255550156","isInternationalSend":false,"isoCountryCode":"US","mcc":"310","mnc":"800","carrierName":"T-Mobile","messageId":"862a8790-60c0-4430-9b2b-658bdexample","messageRequestTimestamp":1686975103170,"messageEncoding":"GSM","messageType":"TRANSACTIONAL","messageStatus":"{status}","messageStatusDescription":"Message has been accepted by phone","context":{context},"totalMessageParts":1,"totalMessagePrice":0.00581,"totalCarrierFee":0.0}}"#
        )
    }

    fn key() -> IdempotencyKey {
        IdempotencyKey::parse(&"c0".repeat(32)).expect("key")
    }

    fn ours() -> String {
        format!(r#"{{"tocsin-stack":"tocsin-dev","tocsin-key":"{}","tocsin-attempt":"a-1"}}"#, key())
    }

    #[test]
    fn a_final_delivery_event_is_a_delivery_tied_to_its_alert_by_the_echoed_context() {
        let r = parse_record(&event("TEXT_DELIVERED", true, "DELIVERED", &ours())).expect("parses");
        assert_eq!(r.format, Format::EumEvent);
        assert_eq!(r.status, DeliveryStatus::Success);
        assert_eq!(r.message_id, "862a8790-60c0-4430-9b2b-658bdexample");
        assert_eq!(r.context, Some(SendContext::alert("tocsin-dev", key(), "a-1")));
        assert_eq!((r.carrier.as_deref(), r.mcc.as_deref(), r.country()), (Some("T-Mobile"), Some("310"), Some("US")));
        assert_eq!(r.destination.as_deref(), Some("+14255550156"));
        assert_eq!(r.dwell_ms, Some(300));
        assert_eq!(r.timestamp.map(|t| t.timestamp_millis()), Some(1_686_975_103_170));
        assert_eq!(r.price_usd, Some(0.00581));
    }

    #[test]
    fn the_carriers_non_final_acceptance_is_progress_never_delivery() {
        let r = parse_record(&event("TEXT_SUCCESSFUL", false, "SUCCESSFUL", &ours())).expect("parses");
        assert_eq!(r.status, DeliveryStatus::Pending("TEXT_SUCCESSFUL".into()));
        assert_eq!(r.status.receipt(), None);
        assert_eq!(r.dwell_ms, None);
        let missing_final = event("TEXT_SUCCESSFUL", true, "SUCCESSFUL", &ours()).replace(r#""isFinal":true,"#, "");
        assert_eq!(parse_record(&missing_final).expect("parses").status.receipt(), None, "no isFinal: not final");
    }

    #[test]
    fn a_blocked_number_is_a_failure_the_eum_table_classifies_for_the_recipient() {
        let r = parse_record(&event("TEXT_BLOCKED", true, "BLOCKED", &ours())).expect("parses");
        assert_eq!(r.status, DeliveryStatus::Failure);
        let c = r.failure.expect("classified");
        assert_eq!(c.class, FailureClass::PermanentRecipient);
        assert_eq!(c.table_version, crate::domain::eum_status::TABLE_VERSION);
        assert_eq!(r.provider_response.as_deref(), Some("TEXT_BLOCKED: Message has been accepted by phone"));
    }

    #[test]
    fn another_applications_event_carries_no_context_of_ours() {
        let r = parse_record(&event("TEXT_DELIVERED", true, "DELIVERED", r#"{"account":"bar"}"#)).expect("parses");
        assert_eq!(r.context, None);
        let none = event("TEXT_DELIVERED", true, "DELIVERED", "{}").replace(r#","context":{}"#, "");
        assert_eq!(parse_record(&none).expect("parses").context, None);
    }

    #[test]
    fn a_half_tocsin_context_is_read_as_none_never_guessed() {
        let half = format!(r#"{{"tocsin-key":"{}"}}"#, key());
        assert_eq!(parse_record(&event("TEXT_DELIVERED", true, "DELIVERED", &half)).expect("parses").context, None);
    }

    #[test]
    fn a_digests_event_names_the_digest() {
        let id = crate::domain::digest_id::DigestId::derive([&key()]);
        let ctx = format!(r#"{{"tocsin-stack":"s","tocsin-digest":"{id}"}}"#);
        let r = parse_record(&event("TEXT_DELIVERED", true, "DELIVERED", &ctx)).expect("parses");
        assert_eq!(r.context.map(|c| c.subject), Some(Subject::Digest { id }));
    }

    #[test]
    fn an_event_without_a_message_id_is_an_error() {
        let no_id = event("TEXT_DELIVERED", true, "DELIVERED", "{}")
            .replace(r#""messageId":"862a8790-60c0-4430-9b2b-658bdexample","#, "");
        assert_eq!(parse_record(&no_id), Err(RecordError::NoEventMessageId));
    }

    #[test]
    fn an_unknown_event_type_changes_nothing() {
        let r = parse_record(&event("TEXT_READ", true, "READ", &ours())).expect("parses");
        assert_eq!(r.status, DeliveryStatus::Other("TEXT_READ".into()));
        assert_eq!(r.status.receipt(), None);
    }
}
