//! A fault-injecting HTTP proxy between the functions' SDK clients and the emulator.
//!
//! Per AWS operation (`SNS.Publish`, `DynamoDB_20120810.UpdateItem`, `AmazonSQS.SendMessage`, …)
//! it can drop the response after forwarding the request (the request took effect, the caller
//! never hears), answer with an error without forwarding (throttling, 5xx, any service error),
//! delay, or reset the connection before forwarding. Each rule fires with a probability, drawn
//! from a seeded generator so a run is repeatable, and optionally only a number of times.

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
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
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
    /// Wait, then forward.
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
    /// Only requests whose body contains this text (e.g. one transaction among many).
    pub body_contains: Option<String>,
}

impl Rule {
    pub fn once(operation: &str, fault: Fault) -> Rule {
        Rule { operation: operation.into(), fault, probability: 1.0, remaining: Some(1), body_contains: None }
    }
    pub fn times(operation: &str, fault: Fault, n: u32) -> Rule {
        Rule { operation: operation.into(), fault, probability: 1.0, remaining: Some(n), body_contains: None }
    }
    pub fn sometimes(operation: &str, fault: Fault, probability: f64) -> Rule {
        Rule { operation: operation.into(), fault, probability, remaining: None, body_contains: None }
    }
    /// Narrows the rule to requests whose body contains `text`.
    pub fn when_body_contains(mut self, text: &str) -> Rule {
        self.body_contains = Some(text.to_owned());
        self
    }
}

struct State {
    rules: Vec<Rule>,
    rng: StdRng,
    /// (operation, fault injected or "forwarded")
    log: Vec<(String, String)>,
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
        let state =
            Arc::new(Mutex::new(State { rules: Vec::new(), rng: StdRng::seed_from_u64(seed), log: Vec::new() }));
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
        self.state.lock().map(|s| s.log.clone()).unwrap_or_default()
    }

    /// How many faults were injected in all.
    pub fn injected(&self) -> usize {
        self.log().iter().filter(|(_, what)| what != "forwarded").count()
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
        let mut chosen = None;
        let draws: Vec<f64> = (0..s.rules.len()).map(|_| s.rng.random::<f64>()).collect();
        for (rule, draw) in s.rules.iter_mut().zip(draws) {
            let body_matches =
                rule.body_contains.as_deref().is_none_or(|text| memchr_contains(&body, text.as_bytes()));
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
        s.log.push((op.clone(), what));
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
        Some(Fault::Delay(d)) => tokio::time::sleep(*d).await,
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
    let resp = client.request(fwd).await.map_err(|_| Dropped)?;
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
