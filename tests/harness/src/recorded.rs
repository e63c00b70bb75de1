//! Recorded AWS answers for the APIs the emulator does not serve, in front of the emulator.
//!
//! moto 5.2.5 does not implement SNS `GetSMSSandboxAccountStatus` / `ListSMSSandboxPhoneNumbers`,
//! and does not speak the Smithy RPC v2 CBOR protocol that `aws-sdk-cloudwatch` ≥ 1.100 uses
//! (`POST /service/GraniteServiceVersion20100801/operation/<Operation>`). A test points the
//! SDK's standard per-service endpoint variables (`AWS_ENDPOINT_URL_SNS`,
//! `AWS_ENDPOINT_URL_CLOUDWATCH`) at this server: it answers the operations it holds a recorded
//! answer for — in the wire format AWS uses, so the real SDK deserialises them — and forwards
//! every other request to the emulator unchanged. Lambda's `GetAccountSettings` (not in moto
//! either) is a REST-JSON call, recognised by its path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::Result;

/// One recorded answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// An SNS (query protocol) answer: `<{Operation}Response><{Operation}Result>{result_xml}…`.
    pub fn sns_query(operation: &str, result_xml: &str) -> Answer {
        let body = format!(
            "<{operation}Response xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><{operation}Result>{result_xml}\
             </{operation}Result><ResponseMetadata><RequestId>recorded-0001</RequestId></ResponseMetadata>\
             </{operation}Response>"
        );
        Answer {
            status: 200,
            headers: vec![("content-type", "text/xml".into()), ("x-amzn-requestid", "recorded-0001".into())],
            body: body.into_bytes(),
        }
    }

    /// A REST-JSON or JSON-protocol answer (Lambda, CloudWatch Logs): the document as JSON.
    pub fn json(document: &Value) -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type", "application/json".into()), ("x-amzn-requestid", "recorded-0001".into())],
            body: document.to_string().into_bytes(),
        }
    }

    /// A Smithy RPC v2 CBOR answer (CloudWatch), the document given as JSON (see [`cbor`]).
    pub fn rpc_v2_cbor(document: &Value) -> Answer {
        Answer {
            status: 200,
            headers: vec![
                ("content-type", "application/cbor".into()),
                ("smithy-protocol", "rpc-v2-cbor".into()),
                ("x-amzn-requestid", "recorded-0001".into()),
            ],
            body: cbor(document),
        }
    }
}

/// The operation a request names: RPC v2 CBOR's path, the query protocol's `Action`, or JSON
/// protocols' `X-Amz-Target` (its part after the dot).
fn operation(path: &str, headers: &hyper::HeaderMap, body: &[u8]) -> Option<String> {
    if let Some((_, op)) = path.split_once("/operation/") {
        return Some(op.to_owned());
    }
    // Lambda's REST paths (`/2016-08-19/account-settings/`, `/2019-09-30/functions/F/concurrency`).
    let rest = path.trim_end_matches('/');
    if rest.ends_with("/account-settings") {
        return Some("GetAccountSettings".to_owned());
    }
    if rest.contains("/functions/") && rest.ends_with("/concurrency") {
        return Some("GetFunctionConcurrency".to_owned());
    }
    if let Some(t) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        return t.rsplit('.').next().map(str::to_owned);
    }
    String::from_utf8_lossy(body).split('&').find_map(|kv| kv.strip_prefix("Action=").map(str::to_owned))
}

#[derive(Default)]
struct State {
    answers: HashMap<String, Answer>,
    /// Every request: (operation, answered from the recording?).
    log: Vec<(String, bool)>,
}

/// The server; stops when dropped.
pub struct Recorded {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorded {
    /// Starts on a free loopback port; requests without a recorded answer go to `upstream`.
    pub async fn start(upstream: &str, answers: Vec<(&str, Answer)>) -> Result<Recorded> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            answers: answers.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            log: Vec::new(),
        }));
        let upstream = upstream.trim_end_matches('/').to_owned();
        let http = reqwest::Client::new();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (st, http, upstream) = (st.clone(), http.clone(), upstream.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (st, http, upstream) = (st.clone(), http.clone(), upstream.clone());
                        async move { handle(req, st, http, upstream).await }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Recorded { addr, state, task })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request seen: (operation, answered from the recording).
    pub fn log(&self) -> Vec<(String, bool)> {
        self.state.lock().map(|s| s.log.clone()).unwrap_or_default()
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

async fn handle(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    http: reqwest::Client,
    upstream: String,
) -> std::result::Result<Response<Full<Bytes>>, Failed> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|e| Failed(e.to_string()))?.to_bytes();
    let op = operation(parts.uri.path(), &parts.headers, &body).unwrap_or_else(|| "unknown".into());
    let recorded = {
        let mut s = state.lock().map_err(|_| Failed("poisoned".into()))?;
        let a = s.answers.get(&op).cloned();
        s.log.push((op.clone(), a.is_some()));
        a
    };
    if let Some(a) = recorded {
        let mut r = Response::builder().status(a.status);
        for (k, v) in &a.headers {
            r = r.header(*k, v.as_str());
        }
        return r.body(Full::new(Bytes::from(a.body))).map_err(|e| Failed(e.to_string()));
    }
    let uri = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut fwd = http.request(parts.method.clone(), uri);
    for (k, v) in &parts.headers {
        if k != hyper::header::CONTENT_LENGTH && k != hyper::header::HOST {
            fwd = fwd.header(k, v);
        }
    }
    let resp = fwd.body(body).send().await.map_err(|e| Failed(e.to_string()))?;
    let mut out = Response::builder().status(resp.status().as_u16());
    for (k, v) in resp.headers() {
        if k != hyper::header::CONTENT_LENGTH && k != hyper::header::TRANSFER_ENCODING {
            out = out.header(k, v);
        }
    }
    let bytes = resp.bytes().await.map_err(|e| Failed(e.to_string()))?;
    out.body(Full::new(bytes)).map_err(|e| Failed(e.to_string()))
}

/// Encodes a JSON document as CBOR (RFC 8949) the way Smithy RPC v2 CBOR carries it: objects as
/// maps with text keys, integers as integers, other numbers as 64-bit floats, and an object
/// `{"$timestamp": <epoch seconds>}` as a timestamp (tag 1 on a float).
pub fn cbor(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode(v, &mut out);
    out
}

fn head(major: u8, n: u64, out: &mut Vec<u8>) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend([m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend((n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend((n as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend(n.to_be_bytes());
        }
    }
}

fn float(f: f64, out: &mut Vec<u8>) {
    out.push(0xfb);
    out.extend(f.to_be_bytes());
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0xf6),
        Value::Bool(false) => out.push(0xf4),
        Value::Bool(true) => out.push(0xf5),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => head(0, u, out),
            (None, Some(i)) => head(1, (-1 - i) as u64, out),
            _ => float(n.as_f64().unwrap_or(0.0), out),
        },
        Value::String(s) => {
            head(3, s.len() as u64, out);
            out.extend(s.as_bytes());
        }
        Value::Array(a) => {
            head(4, a.len() as u64, out);
            a.iter().for_each(|x| encode(x, out));
        }
        Value::Object(m) => {
            if let (1, Some(t)) = (m.len(), m.get("$timestamp").and_then(Value::as_f64)) {
                head(6, 1, out);
                float(t, out);
                return;
            }
            head(5, m.len() as u64, out);
            for (k, x) in m {
                head(3, k.len() as u64, out);
                out.extend(k.as_bytes());
                encode(x, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cbor_matches_rfc_8949_examples() {
        assert_eq!(cbor(&serde_json::json!(10)), [0x0a]);
        assert_eq!(cbor(&serde_json::json!(1000)), [0x19, 0x03, 0xe8]);
        assert_eq!(cbor(&serde_json::json!(-10)), [0x29]);
        assert_eq!(cbor(&serde_json::json!("a")), [0x61, 0x61]);
        assert_eq!(cbor(&serde_json::json!([1, 2])), [0x82, 0x01, 0x02]);
        assert_eq!(cbor(&serde_json::json!({"a": 1})), [0xa1, 0x61, 0x61, 0x01]);
        assert_eq!(cbor(&serde_json::json!(1.1)), [0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a]);
    }
}
