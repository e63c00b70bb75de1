//! What the tests share: a stand-in for CloudFormation's pre-signed ResponseURL (a loopback HTTP
//! server that records every PUT), events in CloudFormation's shape, and SMS attribute reads.

#![allow(dead_code)]

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
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The local stack's delivery-status role (`SmsDeliveryStatusRole`, as the IAM gate names it):
/// the one role the custom resource's own role may pass to SNS.
pub const ROLE: &str = "arn:aws:iam::123456789012:role/tocsin-local-SmsDeliveryStatusRole";
pub const STACK_ID: &str =
    "arn:aws:cloudformation:us-east-1:123456789012:stack/tocsin-local/5b6e2c70-7c1a-11ef-9a2b-0a1b2c3d4e5f";

/// One PUT received on the ResponseURL.
#[derive(Debug, Clone)]
pub struct Answer {
    pub method: String,
    pub path_and_query: String,
    pub content_type: Option<String>,
    pub body: Value,
}

struct State {
    answers: Vec<Answer>,
    /// Answer this many PUTs with HTTP 500 before accepting.
    refuse: u32,
}

/// The ResponseURL stand-in.
pub struct ResponseCapture {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl ResponseCapture {
    pub async fn start() -> ResponseCapture {
        Self::refusing_first(0).await
    }

    /// Answers the first `n` PUTs with HTTP 500 (S3 having a bad moment), then accepts.
    pub async fn refusing_first(n: u32) -> ResponseCapture {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State { answers: Vec::new(), refuse: n }));
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let st = st.clone();
                        async move { Ok::<_, std::convert::Infallible>(record(req, st).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        ResponseCapture { addr, state, task }
    }

    /// A pre-signed-looking URL on this server, unique per request id.
    pub fn url(&self, request_id: &str) -> String {
        format!(
            "http://{}/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/tocsin-local/5b6e%7CSmsPreferences%7C{request_id}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host&X-Amz-Signature=00ff",
            self.addr
        )
    }

    /// Rewrites a real ResponseURL to point here, keeping its path and query.
    pub fn rehost(&self, url: &str) -> String {
        let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
        let path = rest.find('/').map(|i| &rest[i..]).unwrap_or("/");
        format!("http://{}{path}", self.addr)
    }

    pub fn answers(&self) -> Vec<Answer> {
        self.state.lock().map(|s| s.answers.clone()).unwrap_or_default()
    }

    /// The one answer accepted so far (panics on none or several).
    pub fn only_answer(&self) -> Answer {
        let accepted: Vec<Answer> = self.answers();
        assert_eq!(accepted.len(), 1, "exactly one answer reached the ResponseURL: {accepted:#?}");
        accepted.into_iter().next().expect("one")
    }
}

impl Drop for ResponseCapture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(req: Request<Incoming>, st: Arc<Mutex<State>>) -> Response<Full<Bytes>> {
    let method = req.method().to_string();
    let path_and_query = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let content_type = req.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::new()));
    let Ok(mut s) = st.lock() else {
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        return r;
    };
    if s.refuse > 0 {
        s.refuse -= 1;
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        return r;
    }
    let body = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    s.answers.push(Answer { method, path_and_query, content_type, body });
    r
}

/// A custom resource request in CloudFormation's shape.
pub fn request(kind: &str, response_url: &str, request_id: &str, properties: Value) -> Value {
    let token = "arn:aws:lambda:us-east-1:123456789012:function:tocsin-local-sms-preferences";
    let mut props = properties;
    if let Some(p) = props.as_object_mut() {
        p.insert("ServiceToken".into(), json!(token));
    }
    let mut e = json!({
        "RequestType": kind,
        "ServiceToken": token,
        "ResponseURL": response_url,
        "StackId": STACK_ID,
        "RequestId": request_id,
        "LogicalResourceId": "SmsPreferences",
        "ResourceType": "Custom::SmsPreferences",
        "ResourceProperties": props,
    });
    if kind != "Create" {
        e["PhysicalResourceId"] = json!("tocsin-sms-preferences-us-east-1");
    }
    if kind == "Update" {
        e["OldResourceProperties"] =
            json!({"ServiceToken": token, "DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": ""});
    }
    e
}

/// Every SMS attribute the account holds.
pub async fn sms_attributes(sdk: &aws_config::SdkConfig) -> HashMap<String, String> {
    aws_sdk_sns::Client::new(sdk)
        .get_sms_attributes()
        .send()
        .await
        .expect("GetSMSAttributes")
        .attributes
        .unwrap_or_default()
}

pub const GENEROUS: Duration = Duration::from_secs(60);

/// A custom resource binary, running under its own Runtime API stand-in with the environment
/// template.yaml gives its function (and `changes` on top: a stack deployed with other
/// parameters), signing as that function; its log lines kept.
pub struct Running {
    api: tocsin_harness::runtime_api::RuntimeApi,
    pub child: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
    binary: String,
}

impl Running {
    pub async fn start(
        emulator: &tocsin_harness::Emulator,
        stack: &tocsin_harness::Stack,
        binary: &str,
        function: &str,
        changes: &[(&str, &str)],
    ) -> Running {
        use tokio::io::AsyncBufReadExt;
        let api = tocsin_harness::runtime_api::RuntimeApi::start().await.expect("runtime API");
        let mut env = stack.function_env(function).expect("function env from template.yaml");
        for (k, v) in changes {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        let mut child = tokio::process::Command::new(binary)
            .env_clear()
            .envs(env)
            .envs(emulator.aws_env(&tocsin_harness::Principal::function(function)))
            .envs(api.lambda_env(function))
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout");
        let kept = lines.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(l)) = reader.next_line().await {
                kept.lock().expect("lines").push(l);
            }
        });
        Running { api, child, lines, binary: binary.to_owned() }
    }

    pub async fn invoke(&mut self, event: Value) -> Value {
        use tocsin_harness::runtime_api::Invocation;
        let answer = tokio::select! {
            a = self.api.invoke(event, Duration::from_secs(60)) => a.expect("answer"),
            status = self.child.wait() => {
                panic!("{} exited ({status:?}); init error: {:?}", self.binary, self.api.init_error())
            }
        };
        let Invocation::Response(returned) = answer else { panic!("{answer:?}") };
        returned
    }

    /// Every JSON log line so far (the answer is posted after the handler's last line: a moment
    /// for the pipe).
    pub async fn log_lines(&self) -> Vec<Value> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let lines = self.lines.lock().expect("lines").clone();
        lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}
