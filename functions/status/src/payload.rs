//! Decoding a CloudWatch Logs subscription payload (`base64(gzip(JSON))`) one log event at a time.
//!
//! A payload of up to 1 MB base64 unpacks to roughly ten times as much JSON. Holding the decoded
//! text and every log event at once would make memory follow the batch size; instead each log
//! event is handed over as soon as it is read. The JSON text of a payload up to
//! [`IN_MEMORY_LIMIT`] is parsed from memory (fast); a larger one is read as a stream (base64 →
//! gzip → JSON), so memory stays bounded, whatever the batch size.

use std::fmt;
use std::io::{BufReader, Read};

use aws_lambda_events::cloudwatch_logs::LogEntry;
use base64::engine::general_purpose::STANDARD;
use base64::read::DecoderReader;
use flate2::read::MultiGzDecoder;
use serde::Deserializer as _;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What the payload says about all its log events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// `DATA_MESSAGE`, or `CONTROL_MESSAGE` for CloudWatch Logs' reachability checks.
    pub message_type: String,
    pub log_group: String,
}

impl Header {
    pub fn is_control(&self) -> bool {
        self.message_type == "CONTROL_MESSAGE"
    }
}

/// One piece of a payload, in the order the consumer needs them: the header, then each event.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Header(Header),
    Event(LogEntry),
}

/// A payload decoded in full (tests, fuzzing, small payloads).
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub header: Header,
    pub log_events: Vec<LogEntry>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(String);

/// Decodes `data` (the `awslogs.data` string) and hands each piece to `each`, the header first.
/// `each` returns false to stop early (the consumer went away). Pieces handed over before an
/// error in the payload stay handed over: the caller decides what a partial payload means.
pub fn decode_each(data: &str, mut each: impl FnMut(Piece) -> bool) -> Result<(), DecodeError> {
    let gzip = || MultiGzDecoder::new(DecoderReader::new(data.trim().as_bytes(), &STANDARD));
    // A payload whose JSON fits in `IN_MEMORY_LIMIT` is parsed from memory (several times faster
    // than from a reader); a larger one is decompressed again and parsed as a stream, so memory
    // stays bounded whatever the batch size.
    let mut text = Vec::new();
    let read = gzip().take(IN_MEMORY_LIMIT + 1).read_to_end(&mut text);
    match read {
        Ok(n) if n as u64 <= IN_MEMORY_LIMIT => decode_json(serde_json::Deserializer::from_slice(&text), &mut each),
        // Larger than the limit, or broken: stream it (a broken payload fails there, in order).
        _ => {
            drop(text);
            let reader = BufReader::with_capacity(64 * 1024, gzip());
            decode_json(serde_json::Deserializer::from_reader(reader), &mut each)
        }
    }
}

/// The largest decompressed payload parsed from memory (bytes); larger ones are streamed.
pub const IN_MEMORY_LIMIT: u64 = 2 * 1024 * 1024;

/// Decodes `data` in full.
pub fn decode_all(data: &str) -> Result<Payload, DecodeError> {
    let mut header = None;
    let mut log_events = Vec::new();
    decode_each(data, |piece| {
        match piece {
            Piece::Header(h) => header = Some(h),
            Piece::Event(e) => log_events.push(e),
        }
        true
    })?;
    let header = header.ok_or_else(|| DecodeError("no header".into()))?;
    Ok(Payload { header, log_events })
}

fn decode_json<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    each: &mut dyn FnMut(Piece) -> bool,
) -> Result<(), DecodeError> {
    de.deserialize_map(PayloadVisitor { each }).map_err(|e| DecodeError(e.to_string()))?;
    de.end().map_err(|e| DecodeError(format!("trailing data: {e}")))
}

struct PayloadVisitor<'a> {
    each: &'a mut dyn FnMut(Piece) -> bool,
}

/// Hands over events once the header is known; buffers them in the (never observed) case of a
/// payload whose `logEvents` comes before `messageType` or `logGroup`.
struct Sink<'a> {
    each: &'a mut dyn FnMut(Piece) -> bool,
    message_type: Option<String>,
    log_group: Option<String>,
    header_sent: bool,
    early: Vec<LogEntry>,
    stopped: bool,
}

impl Sink<'_> {
    fn header_ready(&mut self) -> bool {
        if !self.header_sent
            && let (Some(message_type), Some(log_group)) = (&self.message_type, &self.log_group)
        {
            let header = Header { message_type: message_type.clone(), log_group: log_group.clone() };
            self.header_sent = true;
            self.stopped = !(self.each)(Piece::Header(header));
        }
        self.header_sent
    }

    fn event(&mut self, entry: LogEntry) {
        if self.stopped {
            return;
        }
        if self.header_ready() {
            if !self.stopped {
                self.stopped = !(self.each)(Piece::Event(entry));
            }
        } else {
            self.early.push(entry);
        }
    }

    fn finish<E: serde::de::Error>(mut self) -> Result<(), E> {
        if !self.header_ready() {
            return Err(E::custom(match self.message_type {
                None => "missing field `messageType`",
                Some(_) => "missing field `logGroup`",
            }));
        }
        for entry in std::mem::take(&mut self.early) {
            if self.stopped {
                break;
            }
            self.stopped = !(self.each)(Piece::Event(entry));
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for PayloadVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a CloudWatch Logs subscription payload object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut sink = Sink {
            each: self.each,
            message_type: None,
            log_group: None,
            header_sent: false,
            early: Vec::new(),
            stopped: false,
        };
        let mut events_seen = false;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "messageType" => sink.message_type = Some(map.next_value()?),
                "logGroup" => sink.log_group = Some(map.next_value()?),
                "logEvents" => {
                    if events_seen {
                        return Err(serde::de::Error::duplicate_field("logEvents"));
                    }
                    events_seen = true;
                    map.next_value_seed(EventsSeed { sink: &mut sink })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !events_seen {
            return Err(serde::de::Error::missing_field("logEvents"));
        }
        sink.finish()
    }
}

struct EventsSeed<'s, 'a> {
    sink: &'s mut Sink<'a>,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of log events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(entry) = seq.next_element::<LogEntry>()? {
            self.sink.event(entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn pack(json: &str) -> String {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(json.as_bytes()).expect("gzip in memory");
        STANDARD.encode(gz.finish().expect("gzip in memory"))
    }

    const EVENTS: &str = r#"[{"id":"1","timestamp":1,"message":"a"},{"id":"2","timestamp":2,"message":"b"}]"#;

    #[test]
    fn the_header_comes_first_then_every_event_in_order() {
        let json = format!(
            r#"{{"messageType":"DATA_MESSAGE","owner":"1","logGroup":"g","logStream":"s","subscriptionFilters":["f"],"logEvents":{EVENTS}}}"#
        );
        let mut pieces = Vec::new();
        decode_each(&pack(&json), |p| {
            pieces.push(p);
            true
        })
        .expect("decodes");
        let ids: Vec<String> = pieces
            .iter()
            .map(|p| match p {
                Piece::Header(h) => format!("{}:{}", h.message_type, h.log_group),
                Piece::Event(e) => e.id.clone(),
            })
            .collect();
        assert_eq!(ids, ["DATA_MESSAGE:g", "1", "2"]);
    }

    #[test]
    fn events_before_the_header_fields_are_held_until_the_header_is_known() {
        let json = format!(r#"{{"logEvents":{EVENTS},"logGroup":"g","messageType":"DATA_MESSAGE"}}"#);
        let payload = decode_all(&pack(&json)).expect("decodes");
        assert_eq!(payload.header.log_group, "g");
        assert_eq!(payload.log_events.len(), 2);
    }

    #[test]
    fn a_consumer_that_stops_receives_nothing_more() {
        let json = format!(r#"{{"messageType":"DATA_MESSAGE","logGroup":"g","logEvents":{EVENTS}}}"#);
        let mut n = 0;
        decode_each(&pack(&json), |_| {
            n += 1;
            n < 2
        })
        .expect("decodes");
        assert_eq!(n, 2, "the header and one event");
    }

    #[test]
    fn a_payload_larger_than_the_in_memory_limit_is_streamed_with_the_same_result() {
        let message = "x".repeat(1000);
        let n = (IN_MEMORY_LIMIT as usize / 1000) + 10;
        let events: Vec<String> =
            (0..n).map(|i| format!(r#"{{"id":"{i}","timestamp":{i},"message":"{message}"}}"#)).collect();
        let json = format!(r#"{{"messageType":"DATA_MESSAGE","logGroup":"g","logEvents":[{}]}}"#, events.join(","));
        assert!(json.len() as u64 > IN_MEMORY_LIMIT);
        let payload = decode_all(&pack(&json)).expect("decodes");
        assert_eq!(payload.log_events.len(), n);
        assert_eq!(payload.log_events[n - 1].id, (n - 1).to_string());
        let cut = pack(&json[..json.len() - 10]);
        assert!(decode_all(&cut).is_err(), "a broken large payload is an error too");
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        for bad in [
            "not base64!".to_owned(),
            STANDARD.encode(b"not gzip"),
            pack("{\"messageType\":\"DATA_MESSAGE\""),
            pack(r#"{"messageType":"DATA_MESSAGE","logGroup":"g"}"#),
            pack(&format!(r#"{{"logGroup":"g","logEvents":{EVENTS}}}"#)),
            pack(&format!(r#"{{"messageType":"DATA_MESSAGE","logGroup":"g","logEvents":{EVENTS}}} trailing"#)),
            pack(r#"[1,2,3]"#),
        ] {
            assert!(decode_all(&bad).is_err(), "{bad}");
        }
    }
}
