//! A stand-in for the Lambda Runtime API (the interface `lambda_runtime` polls), so the real
//! function binaries can be run locally: start it, spawn a binary with `AWS_LAMBDA_RUNTIME_API`
//! pointing here, and `invoke` events one at a time.
//!
//! Implements `GET /2018-06-01/runtime/invocation/next`, `POST …/invocation/{id}/response`,
//! `POST …/invocation/{id}/error` and `POST …/init/error`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::{HarnessError, Result};

/// What the function answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    Response(Value),
    Error(Value),
}

struct Shared {
    pending: Mutex<HashMap<String, oneshot::Sender<Invocation>>>,
    init_error: Mutex<Option<String>>,
    queue: tokio::sync::Mutex<mpsc::Receiver<(String, Value)>>,
}

pub struct RuntimeApi {
    addr: SocketAddr,
    tx: mpsc::Sender<(String, Value)>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    counter: Mutex<u64>,
}

impl RuntimeApi {
    pub async fn start() -> Result<RuntimeApi> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(16);
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            init_error: Mutex::new(None),
            queue: tokio::sync::Mutex::new(rx),
        });
        let sh = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let sh = sh.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let sh = sh.clone();
                        async move { Ok::<_, std::convert::Infallible>(route(req, sh).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(RuntimeApi { addr, tx, shared, task, counter: Mutex::new(0) })
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// The environment the Lambda service gives a function process, pointed at this stand-in.
    pub fn lambda_env(&self, function_name: &str) -> Vec<(String, String)> {
        vec![
            ("AWS_LAMBDA_RUNTIME_API".into(), self.address()),
            ("AWS_LAMBDA_FUNCTION_NAME".into(), function_name.into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(), "128".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into()),
            ("AWS_LAMBDA_LOG_GROUP_NAME".into(), format!("/aws/lambda/{function_name}")),
            ("AWS_LAMBDA_LOG_STREAM_NAME".into(), "local".into()),
        ]
    }

    /// Hands one event to the function and waits for its answer.
    pub async fn invoke(&self, event: Value, timeout: Duration) -> Result<Invocation> {
        let id = {
            let mut c = self.counter.lock().map_err(|_| HarnessError::Emulator("lock".into()))?;
            *c += 1;
            format!("req-{c:06}")
        };
        let (done_tx, done_rx) = oneshot::channel();
        self.shared.pending.lock().map_err(|_| HarnessError::Emulator("lock".into()))?.insert(id.clone(), done_tx);
        self.tx.send((id, event)).await.map_err(|_| HarnessError::Emulator("runtime API closed".into()))?;
        match tokio::time::timeout(timeout, done_rx).await {
            Ok(Ok(result)) => Ok(result),
            _ => {
                let init = self.shared.init_error.lock().ok().and_then(|e| e.clone());
                Err(HarnessError::Emulator(format!(
                    "no answer from the function within {timeout:?}; init error: {init:?}"
                )))
            }
        }
    }

    pub fn init_error(&self) -> Option<String> {
        self.shared.init_error.lock().ok().and_then(|e| e.clone())
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r
}

async fn route(req: Request<Incoming>, sh: Arc<Shared>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (Method::GET, ["2018-06-01", "runtime", "invocation", "next"]) => {
            let next = sh.queue.lock().await.recv().await;
            let Some((id, event)) = next else { return reply(StatusCode::GONE, Bytes::new()) };
            let deadline = chrono::Utc::now().timestamp_millis() + 30_000;
            let mut r = reply(StatusCode::OK, Bytes::from(event.to_string()));
            let h = r.headers_mut();
            for (k, v) in [
                ("lambda-runtime-aws-request-id", id.clone()),
                ("lambda-runtime-deadline-ms", deadline.to_string()),
                ("lambda-runtime-invoked-function-arn", "arn:aws:lambda:us-east-1:123456789012:function:local".into()),
                ("lambda-runtime-trace-id", format!("Root=1-00000000-{id}")),
                ("content-type", "application/json".into()),
            ] {
                if let Ok(v) = v.parse() {
                    h.insert(k, v);
                }
            }
            r
        }
        (Method::POST, ["2018-06-01", "runtime", "invocation", id, kind @ ("response" | "error")]) => {
            let value: Value =
                serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
            let result = if *kind == "response" { Invocation::Response(value) } else { Invocation::Error(value) };
            if let Some(tx) = sh.pending.lock().ok().and_then(|mut p| p.remove(*id)) {
                let _ = tx.send(result);
            }
            reply(StatusCode::ACCEPTED, Bytes::from_static(b"{\"status\":\"OK\"}"))
        }
        (Method::POST, ["2018-06-01", "runtime", "init", "error"]) => {
            if let Ok(mut e) = sh.init_error.lock() {
                *e = Some(String::from_utf8_lossy(&body).into());
            }
            reply(StatusCode::ACCEPTED, Bytes::from_static(b"{\"status\":\"OK\"}"))
        }
        _ => reply(StatusCode::NOT_FOUND, Bytes::new()),
    }
}
