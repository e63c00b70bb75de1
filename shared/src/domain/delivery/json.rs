//! Reading one delivery log message in a single pass: the top-level fields and the few nested
//! objects the providers' formats use (`notification`, `delivery`, `context`), each value kept
//! as written — a string, a number, a boolean — or as absent when it has another shape. No
//! intermediate JSON tree: the status function reads every record of a batch this way. Which
//! provider's format a message is, and what its fields mean, is for `sns` and `eum` to say.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::LazyLock;

use chrono::format::{Item, Parsed, StrftimeItems};
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A field's value as a provider may write it: a string, a number or a boolean; anything else is
/// kept as `Other` (and read as absent). Strings are borrowed from the log message when they hold no escapes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scalar<'a> {
    Str(Cow<'a, str>),
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
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
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar<'a>, E> {
        Ok(Scalar::Bool(v))
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

/// An object's fields (`notification`, `delivery`, `context`), or nothing when the value is not
/// an object.
#[derive(Debug, Default)]
pub(super) struct Section<'a>(pub(super) Vec<(Cow<'a, str>, Scalar<'a>)>);

impl<'a> Section<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&Scalar<'a>> {
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

/// A log message's top-level scalar fields and its nested objects, as read.
#[derive(Debug, Default)]
pub(super) struct RawRecord<'a> {
    /// Top-level fields whose values are scalars (`status`, `eventType`, `messageId`, …).
    pub(super) top: Section<'a>,
    /// SNS: `notification` and `delivery`.
    pub(super) notification: Section<'a>,
    pub(super) delivery: Section<'a>,
    /// End User Messaging: the `context` map the sender gave, echoed.
    pub(super) context: Section<'a>,
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
                "context" => r.context = map.next_value()?,
                _ => {
                    let value = map.next_value::<Scalar<'de>>()?;
                    if value != Scalar::Other {
                        r.top.0.push((key, value));
                    }
                }
            }
        }
        Ok(r)
    }
}

/// Why a message is not a record at all.
#[derive(Debug)]
pub(super) enum Unreadable {
    NotJson(String),
    NotObject,
}

/// Reads `message` (trimmed) as one JSON object, once.
pub(super) fn read(message: &str) -> Result<RawRecord<'_>, Unreadable> {
    let message = message.trim();
    if !message.starts_with('{') {
        return match serde_json::from_str::<IgnoredAny>(message) {
            Ok(_) => Err(Unreadable::NotObject),
            Err(e) => Err(Unreadable::NotJson(e.to_string())),
        };
    }
    let mut de = serde_json::Deserializer::from_str(message);
    let raw = de.deserialize_map(RecordVisitor(PhantomData)).map_err(|e| Unreadable::NotJson(e.to_string()))?;
    de.end().map_err(|e| Unreadable::NotJson(e.to_string()))?;
    Ok(raw)
}

pub(super) fn text(v: Option<&Scalar<'_>>) -> Option<String> {
    match v? {
        Scalar::Str(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Scalar::U64(n) => Some(n.to_string()),
        Scalar::I64(n) => Some(n.to_string()),
        Scalar::F64(f) => Some(f.to_string()),
        _ => None,
    }
}

pub(super) fn number_f64(v: Option<&Scalar<'_>>) -> Option<f64> {
    match v? {
        Scalar::U64(n) => Some(*n as f64),
        Scalar::I64(n) => Some(*n as f64),
        Scalar::F64(f) => Some(*f),
        Scalar::Str(s) => s.trim().parse().ok(),
        Scalar::Bool(_) | Scalar::Other => None,
    }
    .filter(|f: &f64| f.is_finite() && *f >= 0.0)
}

pub(super) fn number_u64(v: Option<&Scalar<'_>>) -> Option<u64> {
    match v? {
        Scalar::U64(n) => Some(*n),
        Scalar::I64(_) | Scalar::Bool(_) | Scalar::Other => None,
        Scalar::F64(f) => Some(*f).filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64),
        Scalar::Str(s) => s.trim().parse().ok(),
    }
}

/// SNS writes `2016-06-28 00:40:34.558` (UTC), End User Messaging epoch milliseconds; accept
/// RFC 3339 too.
pub(super) fn timestamp(v: &Scalar<'_>) -> Option<DateTime<Utc>> {
    match v {
        Scalar::Str(s) => parse_timestamp(s),
        Scalar::U64(ms) => i64::try_from(*ms).ok().and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
        Scalar::I64(ms) => Utc.timestamp_millis_opt(*ms).single(),
        Scalar::F64(_) | Scalar::Bool(_) | Scalar::Other => None,
    }
}

/// A timestamp as text: SNS's own format first (the common case), then RFC 3339, then the other
/// spellings, then epoch milliseconds.
pub fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    sns_timestamp(s)
        .map(|n| Utc.from_utc_datetime(&n))
        .or_else(|| DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).ok())
        .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok().map(|n| Utc.from_utc_datetime(&n)))
        .or_else(|| s.parse::<i64>().ok().and_then(|ms| Utc.timestamp_millis_opt(ms).single()))
}

/// SNS's spelling, `%Y-%m-%d %H:%M:%S%.f` or without the fraction, parsed with the formats' items
/// compiled once: compiling the strftime strings again for every record was a twentieth of the
/// status function's parse time.
fn sns_timestamp(s: &str) -> Option<NaiveDateTime> {
    static SNS_FORMATS: LazyLock<[Vec<Item<'static>>; 2]> =
        LazyLock::new(|| ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S"].map(|f| StrftimeItems::new(f).collect()));
    SNS_FORMATS.iter().find_map(|items| {
        let mut parsed = Parsed::new();
        chrono::format::parse(&mut parsed, s, items.iter()).ok()?;
        parsed.to_naive_datetime_with_offset(0).ok()
    })
}

/// A boolean as written (`true`), or as a string (`"true"`); anything else is absent.
pub(super) fn boolean(v: Option<&Scalar<'_>>) -> Option<bool> {
    match v? {
        Scalar::Bool(b) => Some(*b),
        Scalar::Str(s) if s.trim().eq_ignore_ascii_case("true") => Some(true),
        Scalar::Str(s) if s.trim().eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}
