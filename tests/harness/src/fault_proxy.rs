//! A fault-injecting HTTP proxy between the functions' SDK clients and the emulator.
//!
//! Per AWS operation (`SNS.Publish`, `DynamoDB_20120810.UpdateItem`, `AmazonSQS.SendMessage`,
//! `PinpointSMSVoiceV2.SendTextMessage`, …)
//! it can drop the response after forwarding the request (the request took effect, the caller
//! never hears), answer with an error without forwarding (throttling, 5xx, any service error),
//! delay, or reset the connection before forwarding. Each rule fires with a probability, and
//! optionally only a number of times.
//!
//! Whether a probabilistic rule fires is a function of the seed and the request's identity, not
//! of arrival order: the operation, the body with its volatile parts blanked (timestamps, UUIDs,
//! epoch numbers, SQS receipt handles), and how many times that identity was seen before. So
//! the same request meets the same fault in every run however concurrent requests interleave.
//! (What the functions do under concurrency can still differ between runs — which of three
//! racing senders wins a claim — and with it the requests they make; the `remaining` count of a
//! `once`/`times` rule is spent in arrival order.)

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::Result;

#[derive(Debug, Clone)]
pub enum Fault {
    /// Forward, let the emulator act, then close the connection without answering.
    DropResponse,
    /// Close the connection without forwarding (the request never took effect).
    Reset,
    /// Answer this without forwarding.
    Respond { status: u16, content_type: &'static str, body: String },
    /// Wait, then forward — whether or not the caller is still waiting (a slow service still acts
    /// on a request its caller gave up on).
    Delay(Duration),
    /// Forward with every occurrence of `from` in the body replaced by `to` (e.g. a due-index
    /// Query sent to a snapshot copy of the table: an index that lags behind the base table).
    Rewrite { from: String, to: String },
}

impl Fault {
    /// SNS's throttling answer (query protocol): HTTP 400, code `Throttling`, "Rate exceeded".
    pub fn sns_error(code: &str, message: &str, status: u16) -> Fault {
        Fault::Respond {
            status,
            content_type: "text/xml",
            body: format!(
                "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
            ),
        }
    }
    pub fn sns_throttling() -> Fault {
        Fault::sns_error("Throttling", "Rate exceeded", 400)
    }
    /// A JSON-protocol error (DynamoDB, SQS, CloudWatch Logs).
    pub fn json_error(type_: &str, message: &str, status: u16) -> Fault {
        Fault::Respond {
            status,
            content_type: "application/x-amz-json-1.0",
            body: serde_json::json!({"__type": type_, "message": message}).to_string(),
        }
    }
    /// An End User Messaging SMS error (`pinpoint-sms-voice-v2`, AWS JSON 1.0), as the service
    /// answers one: `__type` names the error, `Message` its text, `Reason` the modeled reason the
    /// SDK decodes (`ConflictException` + `DESTINATION_PHONE_NUMBER_OPTED_OUT`, …; `None` for the
    /// errors without one, such as `ThrottlingException`). HTTP 400, or 500 for
    /// `InternalServerException`.
    pub fn eum_error(type_: &str, message: &str, reason: Option<&str>) -> Fault {
        let mut body = serde_json::json!({"__type": type_, "Message": message});
        if let Some(reason) = reason {
            body["Reason"] = serde_json::json!(reason);
        }
        let status = if type_ == "InternalServerException" { 500 } else { 400 };
        Fault::Respond { status, content_type: "application/x-amz-json-1.0", body: body.to_string() }
    }
    /// DynamoDB refusing a request for the table's throughput (what a throttled write answers).
    pub fn dynamodb_throttled() -> Fault {
        Fault::json_error(
            "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "The level of configured provisioned throughput for the table was exceeded",
            400,
        )
    }
    pub fn http_status(status: u16) -> Fault {
        Fault::Respond { status, content_type: "text/plain", body: format!("fault proxy: HTTP {status}") }
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    /// `SNS.Publish`, or a JSON target such as `DynamoDB_20120810.UpdateItem`; `*` for any.
    pub operation: String,
    pub fault: Fault,
    pub probability: f64,
    /// Fire at most this many times; `None` for no limit.
    pub remaining: Option<u32>,
    /// Only requests whose body contains every one of these texts (e.g. one transaction among
    /// many).
    pub body_contains: Vec<String>,
}

impl Rule {
    pub fn once(operation: &str, fault: Fault) -> Rule {
        Rule { operation: operation.into(), fault, probability: 1.0, remaining: Some(1), body_contains: Vec::new() }
    }
    pub fn times(operation: &str, fault: Fault, n: u32) -> Rule {
        Rule { operation: operation.into(), fault, probability: 1.0, remaining: Some(n), body_contains: Vec::new() }
    }
    pub fn sometimes(operation: &str, fault: Fault, probability: f64) -> Rule {
        Rule { operation: operation.into(), fault, probability, remaining: None, body_contains: Vec::new() }
    }
    /// Narrows the rule to requests whose body contains `text` (and any text named before).
    pub fn when_body_contains(mut self, text: &str) -> Rule {
        self.body_contains.push(text.to_owned());
        self
    }
}

struct State {
    rules: Vec<Rule>,
    seed: u64,
    /// How many times each (operation, identity) was seen.
    seen: HashMap<(String, u64), u32>,
    log: Vec<Proxied>,
}

/// One request the proxy saw, and what it did with it.
#[derive(Debug, Clone)]
pub struct Proxied {
    /// `SNS.Publish`, `DynamoDB_20120810.UpdateItem`, …
    pub operation: String,
    /// The fault injected (its `Debug` form), or `"forwarded"`.
    pub what: String,
    /// The request's identity: a hash of the operation and the body without its volatile parts.
    pub identity: u64,
    /// How many requests with the same identity came before this one.
    pub occurrence: u32,
    /// The request body as sent (for attributing a fault to an intent: its key, its number).
    pub body: String,
}

impl Proxied {
    pub fn is_fault(&self) -> bool {
        self.what != "forwarded"
    }
}

#[derive(Clone)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

/// The operation name of a request: the JSON target header, or the query protocol's Action.
fn operation(headers: &hyper::HeaderMap, body: &[u8]) -> String {
    if let Some(t) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        return t.to_owned();
    }
    let text = String::from_utf8_lossy(body);
    match text.split('&').find_map(|kv| kv.strip_prefix("Action=")) {
        Some(a) => format!("SNS.{a}"),
        None => "unknown".into(),
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream` (http://127.0.0.1:PORT).
    pub async fn start(upstream: &str, seed: u64) -> Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State { rules: Vec::new(), seed, seen: HashMap::new(), log: Vec::new() }));
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let upstream = upstream.trim_end_matches('/').to_owned();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (st, client, upstream) = (st.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (st, client, upstream) = (st.clone(), client.clone(), upstream.clone());
                        async move { handle(req, st, client, upstream).await }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(FaultProxy { addr, state, task: Arc::new(task) })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn add_rule(&self, rule: Rule) {
        if let Ok(mut s) = self.state.lock() {
            s.rules.push(rule);
        }
    }

    pub fn clear_rules(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.rules.clear();
        }
    }

    /// Every request seen: (operation, what the proxy did).
    pub fn log(&self) -> Vec<(String, String)> {
        self.requests().into_iter().map(|r| (r.operation, r.what)).collect()
    }

    /// Every request seen, with its identity and body.
    pub fn requests(&self) -> Vec<Proxied> {
        self.state.lock().map(|s| s.log.clone()).unwrap_or_default()
    }

    /// The requests that met a fault.
    pub fn faults(&self) -> Vec<Proxied> {
        self.requests().into_iter().filter(Proxied::is_fault).collect()
    }

    /// How many faults were injected in all.
    pub fn injected(&self) -> usize {
        self.state.lock().map(|s| s.log.iter().filter(|r| r.is_fault()).count()).unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the fault proxy")
    }
}

impl std::error::Error for Dropped {}

async fn handle(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: String,
) -> std::result::Result<Response<Full<Bytes>>, Dropped> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let op = operation(&parts.headers, &body);
    let fault = {
        let mut s = state.lock().map_err(|_| Dropped)?;
        let identity = identity(&op, &body);
        let occurrence = {
            let n = s.seen.entry((op.clone(), identity)).or_insert(0);
            *n += 1;
            *n - 1
        };
        let seed = s.seed;
        let mut chosen = None;
        for (index, rule) in s.rules.iter_mut().enumerate() {
            let draw = unit(&[seed, identity, u64::from(occurrence), index as u64]);
            let body_matches = rule.body_contains.iter().all(|text| memchr_contains(&body, text.as_bytes()));
            if (rule.operation == "*" || rule.operation == op)
                && body_matches
                && rule.remaining != Some(0)
                && draw < rule.probability
            {
                if let Some(n) = rule.remaining.as_mut() {
                    *n -= 1;
                }
                chosen = Some(rule.fault.clone());
                break;
            }
        }
        let what = chosen.as_ref().map_or_else(|| "forwarded".to_owned(), |f| format!("{f:?}"));
        s.log.push(Proxied {
            operation: op.clone(),
            what,
            identity,
            occurrence,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        chosen
    };
    match &fault {
        Some(Fault::Reset) => return Err(Dropped),
        Some(Fault::Respond { status, content_type, body }) => {
            return Response::builder()
                .status(StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                .header("content-type", *content_type)
                .header("x-amzn-requestid", "fault-proxy")
                .body(Full::new(Bytes::from(body.clone())))
                .map_err(|_| Dropped);
        }
        _ => {}
    }
    let body = match &fault {
        Some(Fault::Rewrite { from, to }) => {
            Bytes::from(String::from_utf8_lossy(&body).replace(from.as_str(), to.as_str()).into_bytes())
        }
        _ => body,
    };
    let uri = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut fwd = Request::builder().method(parts.method.clone()).uri(uri);
    for (k, v) in &parts.headers {
        // The body may have been rewritten: its length is set anew from the body.
        if k != hyper::header::CONTENT_LENGTH {
            fwd = fwd.header(k, v);
        }
    }
    let fwd = fwd.body(Full::new(body)).map_err(|_| Dropped)?;
    let resp = match &fault {
        // In its own task: hyper drops this handler when the caller hangs up, the service acts anyway.
        Some(Fault::Delay(d)) => {
            let d = *d;
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                client.request(fwd).await
            })
            .await
            .map_err(|_| Dropped)?
        }
        _ => client.request(fwd).await,
    }
    .map_err(|_| Dropped)?;
    let (rparts, rbody) = resp.into_parts();
    let rbody = rbody.collect().await.map_err(|_| Dropped)?.to_bytes();
    if matches!(fault, Some(Fault::DropResponse)) {
        return Err(Dropped);
    }
    let mut out = Response::builder().status(rparts.status);
    for (k, v) in &rparts.headers {
        out = out.header(k, v);
    }
    out.body(Full::new(rbody)).map_err(|_| Dropped)
}

fn memchr_contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// The identity of a request: its operation and its body with the volatile parts blanked.
fn identity(operation: &str, body: &[u8]) -> u64 {
    let stable = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) => {
            let mut out = String::new();
            canonical(&v, &mut out);
            out
        }
        // The query protocol (SNS): `k=v` pairs, in a stable order.
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let mut pairs: Vec<&str> = text.split('&').collect();
            pairs.sort_unstable();
            scrub(&pairs.join("&"))
        }
    };
    fnv1a(&[operation.as_bytes(), &[0], stable.as_bytes()])
}

/// Fields whose values differ on every request for the same thing.
const VOLATILE_FIELDS: &[&str] = &["ReceiptHandle"];

/// JSON with sorted keys, volatile fields dropped and volatile strings blanked.
fn canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().filter(|k| !VOLATILE_FIELDS.contains(&k.as_str())).collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(k);
                out.push(':');
                canonical(&map[k.as_str()], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for i in items {
                canonical(i, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::String(text) => {
            // Epoch seconds or milliseconds (TTL attributes, log timestamps).
            if text.len() >= 9 && text.bytes().all(|b| b.is_ascii_digit()) {
                out.push_str("<n>");
            } else {
                out.push_str(&scrub(text));
            }
        }
        Value::Number(n) if n.as_u64().is_some_and(|n| n >= 100_000_000) => out.push_str("<n>"),
        other => out.push_str(&other.to_string()),
    }
}

/// `d` a digit, `h` a hex digit, anything else itself.
const TIMESTAMP: &str = "dddd-dd-ddTdd:dd:dd";
const UUID: &str = "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh";

fn at(bytes: &[u8], i: usize, template: &str) -> bool {
    let t = template.as_bytes();
    bytes.len() >= i + t.len()
        && t.iter().zip(&bytes[i..]).all(|(p, b)| match p {
            b'd' => b.is_ascii_digit(),
            b'h' => b.is_ascii_hexdigit(),
            p => p == b,
        })
}

/// Blanks RFC 3339 timestamps (with their fraction and offset) and UUIDs in `text`.
fn scrub(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if at(bytes, i, TIMESTAMP) {
            i += TIMESTAMP.len();
            while i < bytes.len() && (bytes[i].is_ascii_digit() || matches!(bytes[i], b'.' | b':' | b'+' | b'-' | b'Z'))
            {
                i += 1;
            }
            out.extend_from_slice(b"<time>");
        } else if at(bytes, i, UUID) {
            i += UUID.len();
            out.extend_from_slice(b"<uuid>");
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// FNV-1a over the parts, with a final mix: stable across runs, platforms and Rust versions.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    mix(h)
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A number in [0, 1) determined by `words`.
fn unit(words: &[u64]) -> f64 {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    (fnv1a(&[&bytes]) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_differing_only_in_timestamps_uuids_and_epochs_has_the_same_identity() {
        let a = br#"{"TableName":"t","Key":{"pk":{"S":"INTENT#ab"}},"ExpressionAttributeValues":{":now":{"S":"2026-11-30T15:07:06.123456Z"},":a":{"S":"sender:0b1e7c3a-59f4-4c41-9e0e-2d4f5a6b7c8d"},":exp":{"N":"1767225600"}}}"#;
        let b = br#"{"ExpressionAttributeValues":{":exp":{"N":"1767312000"},":now":{"S":"2026-12-01T01:00:00Z"},":a":{"S":"sender:11111111-2222-3333-4444-555555555555"}},"Key":{"pk":{"S":"INTENT#ab"}},"TableName":"t"}"#;
        assert_eq!(identity("DynamoDB_20120810.UpdateItem", a), identity("DynamoDB_20120810.UpdateItem", b));
    }

    #[test]
    fn requests_for_different_items_or_operations_have_different_identities() {
        let a = br#"{"TableName":"t","Key":{"pk":{"S":"INTENT#ab"}}}"#;
        let b = br#"{"TableName":"t","Key":{"pk":{"S":"INTENT#ac"}}}"#;
        assert_ne!(identity("DynamoDB_20120810.GetItem", a), identity("DynamoDB_20120810.GetItem", b));
        assert_ne!(identity("DynamoDB_20120810.GetItem", a), identity("DynamoDB_20120810.DeleteItem", a));
        let p1 = b"Action=Publish&PhoneNumber=%2B14155560001&Message=disk";
        let p2 = b"Action=Publish&PhoneNumber=%2B14155560002&Message=disk";
        assert_ne!(identity("SNS.Publish", p1), identity("SNS.Publish", p2));
    }

    #[test]
    fn draws_depend_on_seed_identity_occurrence_and_rule_and_nothing_else() {
        assert_eq!(unit(&[7, 1, 0, 0]), unit(&[7, 1, 0, 0]));
        let draws =
            [unit(&[7, 1, 0, 0]), unit(&[8, 1, 0, 0]), unit(&[7, 2, 0, 0]), unit(&[7, 1, 1, 0]), unit(&[7, 1, 0, 1])];
        for (i, a) in draws.iter().enumerate() {
            assert!((0.0..1.0).contains(a));
            for b in &draws[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Uniform enough for probabilities: about 10 % of 10,000 draws below 0.1.
        let below = (0..10_000u64).filter(|i| unit(&[2026, *i, 0, 0]) < 0.1).count();
        assert!((900..1100).contains(&below), "{below}");
    }

    #[test]
    fn an_end_user_messaging_request_is_named_by_its_target_and_its_error_carries_the_reason() {
        let mut headers = hyper::HeaderMap::new();
        headers.insert("x-amz-target", hyper::header::HeaderValue::from_static("PinpointSMSVoiceV2.SendTextMessage"));
        assert_eq!(
            operation(&headers, br#"{"DestinationPhoneNumber":"+14255550100"}"#),
            "PinpointSMSVoiceV2.SendTextMessage"
        );
        let Fault::Respond { status, content_type, body } =
            Fault::eum_error("ConflictException", "opted out", Some("DESTINATION_PHONE_NUMBER_OPTED_OUT"))
        else {
            panic!("a response")
        };
        assert_eq!((status, content_type), (400, "application/x-amz-json-1.0"));
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["__type"], "ConflictException");
        assert_eq!(v["Reason"], "DESTINATION_PHONE_NUMBER_OPTED_OUT");
        let Fault::Respond { status, .. } = Fault::eum_error("InternalServerException", "boom", None) else {
            panic!("a response")
        };
        assert_eq!(status, 500);
    }

    /// Sends `requests` (key, timestamp) one after another as GetItems; returns identity → what.
    async fn faults_met(order: &[(usize, &str)]) -> HashMap<u64, String> {
        // Nothing listens upstream: a forwarded request is dropped, a fault is answered.
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
        let proxy = FaultProxy::start(&format!("http://{upstream}"), 2026).await.expect("proxy");
        proxy.add_rule(Rule::sometimes("DynamoDB_20120810.GetItem", Fault::http_status(500), 0.5));
        let http = reqwest::Client::new();
        for (key, at) in order {
            let body = format!(r#"{{"TableName":"t","Key":{{"pk":{{"S":"INTENT#{key}"}}}},"At":"{at}"}}"#);
            let _ =
                http.post(proxy.endpoint()).header("x-amz-target", "DynamoDB_20120810.GetItem").body(body).send().await;
        }
        proxy.requests().into_iter().map(|r| (r.identity, r.what)).collect()
    }

    #[tokio::test]
    async fn the_same_requests_in_another_order_and_at_other_times_meet_the_same_faults() {
        let forward: Vec<(usize, &str)> = (0..40).map(|k| (k, "2026-11-30T15:00:00.000Z")).collect();
        let backward: Vec<(usize, &str)> = (0..40).rev().map(|k| (k, "2026-12-01T09:30:00.5Z")).collect();
        let (a, b) = (faults_met(&forward).await, faults_met(&backward).await);
        assert_eq!(a.len(), 40);
        assert_eq!(a, b, "fault choice follows arrival order");
        let faulted = a.values().filter(|w| *w != "forwarded").count();
        assert!((8..=32).contains(&faulted), "{faulted} of 40 at p = 0.5");
    }
}
