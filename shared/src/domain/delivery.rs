//! SNS SMS delivery-status records, read defensively.
//!
//! Only `notification.messageId` and `status` are relied on. Every other field may be missing or
//! come in another shape than the documentation shows (numbers as strings, other timestamp
//! formats, extra fields): such a field is kept as `None` rather than failing the record.

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use serde_json::Value;

use super::state::Receipt;

#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryStatus {
    Success,
    Failure,
    /// A status string this version does not know. Never read as success.
    Other(String),
}

impl DeliveryStatus {
    pub fn receipt(&self) -> Option<Receipt> {
        match self {
            DeliveryStatus::Success => Some(Receipt::Delivered),
            DeliveryStatus::Failure => Some(Receipt::Failed),
            DeliveryStatus::Other(_) => None,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            DeliveryStatus::Success => "SUCCESS",
            DeliveryStatus::Failure => "FAILURE",
            DeliveryStatus::Other(s) => s,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub message_id: String,
    pub status: DeliveryStatus,
    pub timestamp: Option<DateTime<Utc>>,
    /// As SNS wrote it: may be masked, invalid or absent. Mask before logging.
    pub destination: Option<String>,
    pub provider_response: Option<String>,
    pub carrier: Option<String>,
    pub mcc: Option<String>,
    pub mnc: Option<String>,
    pub parts: Option<u32>,
    pub price_usd: Option<f64>,
    pub dwell_ms: Option<u64>,
    pub dwell_until_ack_ms: Option<u64>,
    pub sms_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("log message is not JSON: {0}")]
    NotJson(String),
    #[error("log message is not a JSON object")]
    NotObject,
    #[error("record has no notification.messageId")]
    NoMessageId,
    #[error("record has no status")]
    NoStatus,
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number_f64(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|f: &f64| f.is_finite() && *f >= 0.0)
}

fn number_u64(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// SNS writes `2016-06-28 00:40:34.558` (UTC); accept RFC 3339 and epoch milliseconds too.
pub fn parse_timestamp(v: &Value) -> Option<DateTime<Utc>> {
    match v {
        Value::String(s) => {
            let s = s.trim();
            DateTime::parse_from_rfc3339(s)
                .map(|d| d.with_timezone(&Utc))
                .ok()
                .or_else(|| {
                    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S"]
                        .iter()
                        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
                        .map(|n| Utc.from_utc_datetime(&n))
                })
                .or_else(|| s.parse::<i64>().ok().and_then(|ms| Utc.timestamp_millis_opt(ms).single()))
        }
        Value::Number(n) => n.as_i64().and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
        _ => None,
    }
}

/// Parses one CloudWatch Logs message written by SNS.
pub fn parse_record(message: &str) -> Result<DeliveryRecord, RecordError> {
    let v: Value = serde_json::from_str(message.trim()).map_err(|e| RecordError::NotJson(e.to_string()))?;
    let obj = v.as_object().ok_or(RecordError::NotObject)?;
    let notification = obj.get("notification").and_then(Value::as_object);
    let delivery = obj.get("delivery").and_then(Value::as_object);
    let message_id = notification.and_then(|n| text(n.get("messageId"))).ok_or(RecordError::NoMessageId)?;
    let status = match text(obj.get("status")) {
        Some(s) if s.eq_ignore_ascii_case("SUCCESS") => DeliveryStatus::Success,
        Some(s) if s.eq_ignore_ascii_case("FAILURE") => DeliveryStatus::Failure,
        Some(s) => DeliveryStatus::Other(s),
        None => return Err(RecordError::NoStatus),
    };
    let d = |k: &str| delivery.and_then(|d| d.get(k));
    Ok(DeliveryRecord {
        message_id,
        status,
        timestamp: notification.and_then(|n| n.get("timestamp")).and_then(parse_timestamp),
        destination: text(d("destination")),
        provider_response: text(d("providerResponse")),
        carrier: text(d("phoneCarrier")),
        mcc: text(d("mcc")),
        mnc: text(d("mnc")),
        parts: number_u64(d("numberOfMessageParts")).and_then(|p| u32::try_from(p).ok()),
        price_usd: number_f64(d("priceInUSD")),
        dwell_ms: number_u64(d("dwellTimeMs")),
        dwell_until_ack_ms: number_u64(d("dwellTimeMsUntilDeviceAck")),
        sms_type: text(d("smsType")),
    })
}

/// ISO country of a mobile country code, for the latency metrics. Unknown MCCs stay numeric.
pub fn country_of_mcc(mcc: &str) -> &str {
    match mcc {
        "310" | "311" | "312" | "313" | "314" | "315" | "316" => "US",
        "302" => "CA",
        "234" | "235" => "GB",
        "262" => "DE",
        "208" => "FR",
        "222" => "IT",
        "214" => "ES",
        "204" => "NL",
        "505" => "AU",
        "440" | "441" => "JP",
        "450" => "KR",
        "404" | "405" => "IN",
        "724" => "BR",
        "334" => "MX",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
