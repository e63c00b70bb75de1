//! SNS SMS delivery-status records (one per log event in the account's
//! `DirectPublishToPhoneNumber` groups): `{"notification":{"messageId":…,"timestamp":…},
//! "delivery":{…},"status":"SUCCESS"|"FAILURE"}`. Only `notification.messageId` and `status` are
//! relied on. An SNS record carries no text and no tag of tocsin's: only the message id ties it
//! to an alert.

use super::json::{RawRecord, number_f64, number_u64, text, timestamp};
use super::{DeliveryRecord, DeliveryStatus, Format, RecordError};
use crate::domain::provider::classify;

pub(super) fn record(raw: &RawRecord<'_>) -> Result<DeliveryRecord, RecordError> {
    let message_id = text(raw.notification.get("messageId")).ok_or(RecordError::NoMessageId)?;
    let status = match text(raw.top.get("status")) {
        Some(s) if s.eq_ignore_ascii_case("SUCCESS") => DeliveryStatus::Success,
        Some(s) if s.eq_ignore_ascii_case("FAILURE") => DeliveryStatus::Failure,
        Some(s) => DeliveryStatus::Other(s),
        None => return Err(RecordError::NoStatus),
    };
    let d = |k: &str| raw.delivery.get(k);
    let provider_response = text(d("providerResponse"));
    let failure = (status == DeliveryStatus::Failure).then(|| classify(provider_response.as_deref()));
    Ok(DeliveryRecord {
        format: Format::SnsDeliveryLog,
        message_id,
        status,
        timestamp: raw.notification.get("timestamp").and_then(timestamp),
        reported_at: None,
        destination: text(d("destination")),
        provider_response,
        carrier: text(d("phoneCarrier")),
        mcc: text(d("mcc")),
        mnc: text(d("mnc")),
        iso_country: None,
        parts: number_u64(d("numberOfMessageParts")).and_then(|p| u32::try_from(p).ok()),
        price_usd: number_f64(d("priceInUSD")),
        dwell_ms: number_u64(d("dwellTimeMs")),
        dwell_until_ack_ms: number_u64(d("dwellTimeMsUntilDeviceAck")),
        sms_type: text(d("smsType")),
        context: None,
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{DeliveryStatus, RecordError, parse_record};
    use crate::domain::provider::FailureClass;

    const SUCCESS: &str = r#"{"notification":{"messageId":"34d9b400-c6dd-5444-820d-fbeb0f1f54cf","timestamp":"2016-06-28 00:40:34.558"},"delivery":{"phoneCarrier":"My Phone Carrier","mnc":270,"numberOfMessageParts":1,"destination":"+1XXX5550100","priceInUSD":0.00645,"smsType":"Transactional","mcc":310,"providerResponse":"Message has been accepted by phone carrier","dwellTimeMs":599,"dwellTimeMsUntilDeviceAck":1344},"status":"SUCCESS"}"#;

    #[test]
    fn parses_the_documented_success_record() {
        let r = parse_record(SUCCESS).expect("parses");
        assert_eq!(r.message_id, "34d9b400-c6dd-5444-820d-fbeb0f1f54cf");
        assert_eq!(r.status, DeliveryStatus::Success);
        assert_eq!(r.carrier.as_deref(), Some("My Phone Carrier"));
        assert_eq!(r.mcc.as_deref(), Some("310"));
        assert_eq!(r.dwell_ms, Some(599));
        assert_eq!(r.price_usd, Some(0.00645));
        assert_eq!(r.timestamp.map(|t| t.timestamp_millis()), Some(1_467_074_434_558));
    }

    #[test]
    fn only_message_id_and_status_are_required() {
        let r = parse_record(r#"{"notification":{"messageId":"m-1"},"status":"FAILURE"}"#).expect("parses");
        assert_eq!(r.status, DeliveryStatus::Failure);
        assert_eq!((r.destination, r.provider_response, r.timestamp), (None, None, None));
    }

    #[test]
    fn tolerates_strings_for_numbers_and_other_timestamp_formats() {
        let r = parse_record(
            r#"{"notification":{"messageId":"m","timestamp":"2016-06-28T00:40:34.558Z"},"delivery":{"mcc":"310","dwellTimeMs":"12","priceInUSD":"0.1","numberOfMessageParts":"2"},"status":"success"}"#,
        )
        .expect("parses");
        assert_eq!(r.status, DeliveryStatus::Success);
        assert_eq!((r.mcc.as_deref(), r.dwell_ms, r.parts), (Some("310"), Some(12), Some(2)));
        assert!(r.timestamp.is_some());
        assert_eq!(r.price_usd, Some(0.1));
    }

    #[test]
    fn every_timestamp_spelling_reads_as_the_same_instant() {
        let at = |s: &str| crate::domain::delivery::parse_timestamp(s).map(|t| t.timestamp_millis());
        for s in [
            "2016-06-28 00:40:34.558",
            " 2016-06-28 00:40:34.558000 ",
            "2016-06-28T00:40:34.558Z",
            "2016-06-28T02:40:34.558+02:00",
            "2016-06-28T00:40:34.558",
            "1467074434558",
        ] {
            assert_eq!(at(s), Some(1_467_074_434_558), "{s}");
        }
        assert_eq!(at("2016-06-28 00:40:34"), Some(1_467_074_434_000));
        for bad in ["2016-06-28 25:40:34", "2016-06-28", "yesterday", ""] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_unknown_status_is_kept_and_never_read_as_success() {
        let r = parse_record(r#"{"notification":{"messageId":"m"},"status":"PENDING"}"#).expect("parses");
        assert_eq!(r.status.receipt(), None);
    }

    #[test]
    fn records_without_the_two_reliable_fields_are_errors() {
        assert_eq!(parse_record(r#"{"status":"SUCCESS"}"#), Err(RecordError::NoMessageId));
        assert_eq!(parse_record(r#"{"notification":{"messageId":"m"}}"#), Err(RecordError::NoStatus));
        assert!(matches!(parse_record("[ERROR] First test message"), Err(RecordError::NotJson(_))));
        assert_eq!(parse_record("[1]"), Err(RecordError::NotObject));
    }

    #[test]
    fn odd_shapes_read_as_absent_and_escapes_are_decoded() {
        let r = parse_record(
            r#"{"notification":{"messageId":"m\u002d1","timestamp":1467074434558},"delivery":{"phoneCarrier":"A \"B\" C","mcc":{"x":1},"mnc":[1,2],"dwellTimeMs":-5,"priceInUSD":"NaN","extra":null},"status":"FAILURE","more":{"a":[1,{"b":2}]}}"#,
        )
        .expect("parses");
        assert_eq!(r.message_id, "m-1");
        assert_eq!(r.carrier.as_deref(), Some(r#"A "B" C"#));
        assert_eq!((r.mcc, r.mnc, r.dwell_ms, r.price_usd), (None, None, None, None));
        assert_eq!(r.timestamp.map(|t| t.timestamp_millis()), Some(1_467_074_434_558));
        let not_sections = parse_record(r#"{"notification":"m","delivery":7,"status":"SUCCESS"}"#);
        assert_eq!(not_sections, Err(RecordError::NoMessageId));
        assert!(matches!(
            parse_record(r#"{"notification":{"messageId":"m"},"status":"SUCCESS"} x"#),
            Err(RecordError::NotJson(_))
        ));
        assert_eq!(parse_record(r#""just a string""#), Err(RecordError::NotObject));
    }

    #[test]
    fn a_failure_is_classified_by_the_sns_table_and_a_success_is_not() {
        let r = parse_record(r#"{"notification":{"messageId":"m"},"delivery":{"providerResponse":"Phone number is opted out"},"status":"FAILURE"}"#)
            .expect("parses");
        let c = r.failure.expect("classified");
        assert_eq!(c.class, FailureClass::PermanentRecipient);
        assert_eq!(c.table_version, crate::domain::provider::TABLE_VERSION);
        assert_eq!(parse_record(SUCCESS).expect("parses").failure, None);
        assert_eq!(parse_record(SUCCESS).expect("parses").context, None);
    }
}
