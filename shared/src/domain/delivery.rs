//! SNS SMS delivery-status records, read defensively.
//!
//! Only `notification.messageId` and `status` are relied on. Every other field may be missing or
//! come in another shape than the documentation shows (numbers as strings, other timestamp
//! formats, extra fields): such a field is kept as `None` rather than failing the record.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::state::Receipt;

/// How long a record that matched no intent is kept (the ORPHAN item's TTL). Nearly all of them
/// are other applications' SMS (the delivery-status log groups are the account's), and each holds
/// someone's phone number, so not the intents' 30 days. Six hours is ample for what an orphan is
/// for: a record that overtook the sender's MessageId write is read back by the sweep at its
/// intent's first check (minutes later), a crashed sender's is found by the sweep's reconciliation
/// within minutes (it searches the log groups themselves, not the orphans), and an operator
/// investigating a missing receipt the same shift still finds it.
pub const ORPHAN_RETENTION: chrono::Duration = chrono::Duration::hours(6);

/// The carriers' receipt window: a delivery record can arrive up to 72 h late; one hour of margin.
pub const RECEIPT_WINDOW: std::time::Duration = std::time::Duration::from_secs(73 * 3600);

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

/// A field's value as SNS may write it: a string or a number; anything else is kept as `Other`
/// (and read as absent). Strings are borrowed from the log message when they hold no escapes.
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'a> {
    Str(Cow<'a, str>),
    U64(u64),
    I64(i64),
    F64(f64),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor(PhantomData))
    }
}

struct ScalarVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ScalarVisitor<'a> {
    type Value = Scalar<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar<'a>, E> {
        Ok(Scalar::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar<'a>, E> {
        Ok(Scalar::I64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar<'a>, E> {
        Ok(Scalar::F64(v))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'a>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'a>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

/// An object's fields (`notification`, `delivery`), or nothing when the value is not an object.
#[derive(Debug, Default)]
struct Section<'a>(Vec<(Cow<'a, str>, Scalar<'a>)>);

impl<'a> Section<'a> {
    fn get(&self, key: &str) -> Option<&Scalar<'a>> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Section<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SectionVisitor(PhantomData))
    }
}

struct SectionVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for SectionVisitor<'a> {
    type Value = Section<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Section<'a>, A::Error> {
        let mut fields = Vec::with_capacity(12);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            fields.push((key, map.next_value::<Scalar<'de>>()?));
        }
        Ok(Section(fields))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Section<'a>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Section::default())
    }
    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Section<'a>, E> {
        Ok(Section::default())
    }
}

/// The three parts of a record this version reads; every other top-level field is skipped.
#[derive(Debug, Default)]
struct RawRecord<'a> {
    notification: Section<'a>,
    delivery: Section<'a>,
    status: Option<Scalar<'a>>,
}

struct RecordVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for RecordVisitor<'a> {
    type Value = RawRecord<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRecord<'a>, A::Error> {
        let mut r = RawRecord::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "notification" => r.notification = map.next_value()?,
                "delivery" => r.delivery = map.next_value()?,
                "status" => r.status = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(r)
    }
}

fn text(v: Option<&Scalar<'_>>) -> Option<String> {
    match v? {
        Scalar::Str(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Scalar::U64(n) => Some(n.to_string()),
        Scalar::I64(n) => Some(n.to_string()),
        Scalar::F64(f) => Some(f.to_string()),
        _ => None,
    }
}

fn number_f64(v: Option<&Scalar<'_>>) -> Option<f64> {
    match v? {
        Scalar::U64(n) => Some(*n as f64),
        Scalar::I64(n) => Some(*n as f64),
        Scalar::F64(f) => Some(*f),
        Scalar::Str(s) => s.trim().parse().ok(),
        Scalar::Other => None,
    }
    .filter(|f: &f64| f.is_finite() && *f >= 0.0)
}

fn number_u64(v: Option<&Scalar<'_>>) -> Option<u64> {
    match v? {
        Scalar::U64(n) => Some(*n),
        Scalar::I64(_) | Scalar::Other => None,
        Scalar::F64(f) => Some(*f).filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64),
        Scalar::Str(s) => s.trim().parse().ok(),
    }
}

/// SNS writes `2016-06-28 00:40:34.558` (UTC); accept RFC 3339 and epoch milliseconds too.
fn timestamp(v: &Scalar<'_>) -> Option<DateTime<Utc>> {
    match v {
        Scalar::Str(s) => parse_timestamp(s),
        Scalar::U64(ms) => i64::try_from(*ms).ok().and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
        Scalar::I64(ms) => Utc.timestamp_millis_opt(*ms).single(),
        Scalar::F64(_) | Scalar::Other => None,
    }
}

/// A timestamp as text: SNS's own format first (the common case), then RFC 3339, then the other
/// spellings, then epoch milliseconds.
pub fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .map(|n| Utc.from_utc_datetime(&n))
        .or_else(|| DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).ok())
        .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok().map(|n| Utc.from_utc_datetime(&n)))
        .or_else(|| s.parse::<i64>().ok().and_then(|ms| Utc.timestamp_millis_opt(ms).single()))
}

/// Parses one CloudWatch Logs message written by SNS. Reads the message once, into the fields
/// it needs (no intermediate JSON tree): the status function does this for every record.
pub fn parse_record(message: &str) -> Result<DeliveryRecord, RecordError> {
    let message = message.trim();
    if !message.starts_with('{') {
        return match serde_json::from_str::<IgnoredAny>(message) {
            Ok(_) => Err(RecordError::NotObject),
            Err(e) => Err(RecordError::NotJson(e.to_string())),
        };
    }
    let mut de = serde_json::Deserializer::from_str(message);
    let raw = de.deserialize_map(RecordVisitor(PhantomData)).map_err(|e| RecordError::NotJson(e.to_string()))?;
    de.end().map_err(|e| RecordError::NotJson(e.to_string()))?;
    let message_id = text(raw.notification.get("messageId")).ok_or(RecordError::NoMessageId)?;
    let status = match text(raw.status.as_ref()) {
        Some(s) if s.eq_ignore_ascii_case("SUCCESS") => DeliveryStatus::Success,
        Some(s) if s.eq_ignore_ascii_case("FAILURE") => DeliveryStatus::Failure,
        Some(s) => DeliveryStatus::Other(s),
        None => return Err(RecordError::NoStatus),
    };
    let d = |k: &str| raw.delivery.get(k);
    Ok(DeliveryRecord {
        message_id,
        status,
        timestamp: raw.notification.get("timestamp").and_then(timestamp),
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
}
