//! The gate: an HTTP proxy in front of moto that every client reaches (the emulator's endpoint).
//! Each SigV4-signed request is attributed by its access key id ([`Principal`]), mapped to what
//! AWS authorizes ([`request::requirements`]) and evaluated against the principal's policies.
//! Allowed: forwarded, and the grants that allowed it recorded. Denied: answered as AWS answers
//! (HTTP 400 `AccessDeniedException` in the JSON protocols, 403 `AuthorizationError` /
//! `AccessDenied` in the query protocols), never forwarded, and recorded — the test fails even if
//! the code swallowed the error: at the harness's next checkpoint ([`Gate::assert_no_denials`],
//! which `Pipeline` calls after each function invocation) and, at the latest, when the gate is
//! dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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

use super::Principal;
use super::coverage::{self, Exercised, TestId};
use super::policy::{Ask, Decision, Effect, Patterns, evaluate};
use super::request::{self, Call, Requirement};
use super::roles::{Principals, Role};
use crate::Result;

/// One call a principal's policies do not allow.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Denial {
    /// The principal, as [`Principal`]'s `Display` names it.
    pub principal: String,
    /// `SenderFunctionRole`, `OperatorPolicy`, … (empty when the caller is unknown).
    pub role: String,
    /// `DynamoDB_20120810.TransactWriteItems`, `SNS.Publish`, …
    pub operation: String,
    pub action: String,
    pub resource: String,
    /// Everything a reader needs: who, what, on what, why, and the statement that would allow it.
    pub message: String,
}

#[derive(Default)]
struct State {
    denials: Vec<Denial>,
    exercised: BTreeSet<Exercised>,
    /// (stand-in ARN, the ARN it stands for): a resource the harness made to play another.
    stand_ins: Vec<(String, String)>,
}

struct Shared {
    principals: Mutex<Arc<Principals>>,
    state: Mutex<State>,
    /// Set by [`Gate::close`]: no request is forwarded from then on.
    closed: AtomicBool,
    /// Requests being handled now. One abandoned halfway (its caller gone) stays counted.
    in_flight: AtomicUsize,
}

impl Shared {
    fn principals(&self) -> Option<Arc<Principals>> {
        self.principals.lock().ok().map(|p| p.clone())
    }
}

/// The gate; stops (and reports what it saw) when dropped.
pub struct Gate {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    test: TestId,
}

impl Gate {
    /// Starts on a free loopback port in front of `upstream` (moto), enforcing `principals`.
    pub async fn start(upstream: &str, principals: Arc<Principals>) -> Result<Gate> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            principals: Mutex::new(principals),
            state: Mutex::new(State::default()),
            closed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
        });
        // No idle connections kept to moto: werkzeug may close a kept-alive connection while the
        // pool still holds it, and the next request forwarded on it fails (`IncompleteMessage`)
        // after it was written — a failure no test asked for. A fresh loopback connection per
        // request costs microseconds.
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build_http();
        let upstream = upstream.trim_end_matches('/').to_owned();
        let sh = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (sh, client, upstream) = (sh.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (sh, client, upstream) = (sh.clone(), client.clone(), upstream.clone());
                        async move {
                            // Counted before the check: `close` then sees it, or it sees `close`.
                            sh.in_flight.fetch_add(1, Ordering::SeqCst);
                            if sh.closed.load(Ordering::SeqCst) {
                                sh.in_flight.fetch_sub(1, Ordering::SeqCst);
                                return Err(Dropped);
                            }
                            let answer = handle(req, sh.clone(), client, upstream).await;
                            sh.in_flight.fetch_sub(1, Ordering::SeqCst);
                            answer
                        }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        let test = coverage::current_test();
        coverage::starting(&test);
        Ok(Gate { addr, shared, task, test })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The policies the gate enforces.
    pub fn principals(&self) -> Arc<Principals> {
        self.shared.principals().unwrap_or_else(|| panic!("IAM gate: lock poisoned"))
    }

    /// Forwards nothing from now on (a request arriving later is dropped). True when no request
    /// is being handled either, so the upstream has seen this gate's last one: an emulator is
    /// handed to the next test only then (a late request of a test that ended, from a task it
    /// left running, would otherwise land after the reset, in the next test's emulator).
    pub fn close(&self) -> bool {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.in_flight.load(Ordering::SeqCst) == 0
    }

    /// Enforces `principals` from now on (another stack's policies: a test that deploys it).
    pub fn enforce(&self, principals: Arc<Principals>) {
        if let Ok(mut p) = self.shared.principals.lock() {
            *p = principals;
        }
    }

    /// The denials so far (kept: the test still fails unless it takes them).
    pub fn denials(&self) -> Vec<Denial> {
        self.shared.state.lock().map(|s| s.denials.clone()).unwrap_or_default()
    }

    /// Takes the denials so far: for a test that provokes one on purpose and asserts on it.
    pub fn take_denials(&self) -> Vec<Denial> {
        self.shared.state.lock().map(|mut s| std::mem::take(&mut s.denials)).unwrap_or_default()
    }

    /// Authorizes requests on `stand_in` (an ARN, or an ARN prefix) as on `real`: a copy the
    /// harness made to play the real resource (a lagging index answers from a snapshot table).
    pub fn authorize_as(&self, stand_in: &str, real: &str) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.stand_ins.push((stand_in.to_owned(), real.to_owned()));
        }
    }

    /// Authorizes, and records like any request, what a stand-in for an AWS service checks
    /// itself (API Gateway's IAM authorizer: `execute-api:Invoke`). `Err` carries the denial.
    pub fn authorize(
        &self,
        principal: &Principal,
        operation: &str,
        requirement: &Requirement,
    ) -> std::result::Result<(), Box<Denial>> {
        let principals = self.principals();
        let Some(role) = principals.role_of(principal) else {
            return Ok(());
        };
        let context = role.in_session(&requirement.context);
        let ask = Ask { action: &requirement.action, resource: &requirement.resource, context: &context };
        let mut state = self.shared.state.lock().map_err(|_| {
            Box::new(Denial {
                principal: principal.to_string(),
                role: role.id.clone(),
                operation: operation.to_owned(),
                action: requirement.action.clone(),
                resource: requirement.resource.clone(),
                message: "IAM gate: lock poisoned".into(),
            })
        })?;
        match evaluate(&role.policies, &ask) {
            Decision::Allowed(grants) => {
                state.exercised.extend(grants.into_iter().map(|grant| Exercised::new(&role.id, grant)));
                Ok(())
            }
            decision => {
                let d = denial(principal, role, operation, requirement, &decision);
                eprintln!("{}", d.message);
                state.denials.push(d.clone());
                Err(Box::new(d))
            }
        }
    }

    /// Every grant that allowed a call so far.
    pub fn exercised(&self) -> BTreeSet<Exercised> {
        self.shared.state.lock().map(|s| s.exercised.clone()).unwrap_or_default()
    }

    /// Panics with every denial so far: the checkpoint that fails the test that made the call.
    pub fn assert_no_denials(&self) {
        let denials = self.denials();
        if !denials.is_empty() {
            panic!("{}", report(&denials));
        }
    }
}

/// The failure message for `denials`.
pub fn report(denials: &[Denial]) -> String {
    let mut out =
        format!("IAM: {} call(s) denied by the caller's own policies (AWS would refuse them):\n", denials.len());
    for d in denials {
        out.push_str(&d.message);
        out.push('\n');
    }
    out
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
        let (exercised, denials) = match self.shared.state.lock() {
            Ok(s) => (s.exercised.clone(), s.denials.clone()),
            Err(_) => return,
        };
        coverage::record(&self.test, &exercised, &denials);
        if !denials.is_empty() && !std::thread::panicking() {
            panic!("{}", report(&denials));
        }
    }
}

#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IAM gate: upstream unreachable")
    }
}

impl std::error::Error for Dropped {}

/// (access key id, region, service) of a SigV4-signed request, from the header or a pre-signed URL.
fn credential(headers: &hyper::HeaderMap, query: Option<&str>) -> Option<(String, String, String)> {
    let scope = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .map(|c| c.split([',', ' ']).next().unwrap_or_default().to_owned())
        .or_else(|| {
            let form = request::form(query.unwrap_or_default().as_bytes());
            form.get("X-Amz-Credential").cloned()
        })?;
    let mut parts = scope.split('/');
    let key = parts.next()?.to_owned();
    let region = parts.nth(1)?.to_owned();
    let service = parts.next()?.to_owned();
    Some((key, region, service))
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: String,
) -> std::result::Result<Response<Full<Bytes>>, Dropped> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let path = parts.uri.path().to_owned();
    let identities = match sms_identities_needed(&parts) {
        Some(region) => sms_identities(&client, &upstream, &region).await,
        None => BTreeMap::new(),
    };
    if !path.starts_with("/moto-api")
        && let Some(refusal) = judge(&shared, &parts, &body, identities)
    {
        return Ok(refusal);
    }
    let uri = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut fwd = Request::builder().method(parts.method.clone()).uri(uri);
    for (k, v) in &parts.headers {
        fwd = fwd.header(k, v);
    }
    let fwd = fwd.body(Full::new(body)).map_err(|_| Dropped)?;
    let resp = client.request(fwd).await.map_err(|_| Dropped)?;
    let (rparts, rbody) = resp.into_parts();
    let rbody = rbody.collect().await.map_err(|_| Dropped)?.to_bytes();
    let mut out = Response::builder().status(rparts.status);
    for (k, v) in &rparts.headers {
        out = out.header(k, v);
    }
    out.body(Full::new(rbody)).map_err(|_| Dropped)
}

/// The region of an End User Messaging request the gate will check (signed by a principal other
/// than the harness): its origination identities must be named by ARN, which only the stand-in
/// knows (`request::Facts::sms_identities`).
fn sms_identities_needed(parts: &hyper::http::request::Parts) -> Option<String> {
    let (key, region, service) = credential(&parts.headers, parts.uri.query())?;
    (service == "sms-voice" && Principal::from_access_key_id(&key).is_some_and(|p| p != Principal::Harness))
        .then_some(region)
}

/// The stand-in's identity forms → ARNs (`GET /tocsin-eum/identities`); empty when it cannot say,
/// and the requirements then name each identity by the form it was given.
async fn sms_identities(
    client: &Client<HttpConnector, Full<Bytes>>,
    upstream: &str,
    region: &str,
) -> BTreeMap<String, String> {
    let Ok(uri) = format!("{upstream}/tocsin-eum/identities?region={region}").parse::<hyper::Uri>() else {
        return BTreeMap::new();
    };
    let Ok(response) = client.get(uri).await else { return BTreeMap::new() };
    let Ok(body) = response.into_body().collect().await.map(|b| b.to_bytes()) else { return BTreeMap::new() };
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| serde_json::from_value(v["resolve"].clone()).ok())
        .unwrap_or_default()
}

/// `None`: forward. `Some`: the AccessDenied answer (the denial is recorded).
fn judge(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    body: &[u8],
    sms_identities: BTreeMap<String, String>,
) -> Option<Response<Full<Bytes>>> {
    let target = parts.headers.get("x-amz-target").and_then(|v| v.to_str().ok());
    // Another emulator's start-up probe (`is_ours`): a parallel test picked this port while it was
    // free and asks whose emulator listens here. Not a call of the code under test: answered "not
    // yours" (the id it expects is not this one), with no denial recorded against this test.
    if parts.uri.path() == "/tocsin-emulator/id" {
        return Some(
            Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Full::new(Bytes::from_static(b"another test's emulator")))
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))),
        );
    }
    let Some((key, region, service)) = credential(&parts.headers, parts.uri.query()) else {
        let call = Call {
            service: "unknown",
            region: "",
            target,
            method: parts.method.as_str(),
            path: parts.uri.path(),
            body,
        };
        return Some(refuse(shared, "", &call, None, "an unsigned request reached the emulator".into()));
    };
    let call = Call {
        service: &service,
        region: &region,
        target,
        method: parts.method.as_str(),
        path: parts.uri.path(),
        body,
    };
    let Some(principal) = Principal::from_access_key_id(&key) else {
        let why = format!(
            "access key id {key:?} belongs to no principal: sign as a function, the operator or the harness \
             (tocsin_harness::iam::Principal)"
        );
        return Some(refuse(shared, &key, &call, None, why));
    };
    let principals = shared.principals()?;
    let role = match principals.role_of(&principal) {
        None if principal == Principal::Harness => return None,
        None => {
            let why = format!("{principal} has no role in the translated template");
            return Some(refuse(shared, &principal.to_string(), &call, None, why));
        }
        Some(r) => r,
    };
    let with_identities;
    let facts = if sms_identities.is_empty() {
        &principals.facts
    } else {
        with_identities = request::Facts { sms_identities, ..principals.facts.clone() };
        &with_identities
    };
    let mut requirements = match request::requirements(&call, facts) {
        Ok(r) => r,
        Err(e) => return Some(refuse(shared, &principal.to_string(), &call, Some(role), e.to_string())),
    };
    let stand_ins = shared.state.lock().map(|s| s.stand_ins.clone()).unwrap_or_default();
    for r in &mut requirements {
        if let Some((from, to)) = stand_ins.iter().find(|(from, _)| r.resource.starts_with(from.as_str())) {
            r.resource = format!("{to}{}", &r.resource[from.len()..]);
        }
    }
    let mut granted = Vec::new();
    let mut denied = Vec::new();
    for r in &requirements {
        let context = role.in_session(&r.context);
        let ask = Ask { action: &r.action, resource: &r.resource, context: &context };
        match evaluate(&role.policies, &ask) {
            Decision::Allowed(grants) => granted.extend(grants),
            decision => denied.push(denial(&principal, role, &call.operation(), r, &decision)),
        }
    }
    let mut state = shared.state.lock().ok()?;
    if denied.is_empty() {
        state.exercised.extend(granted.into_iter().map(|grant| Exercised::new(&role.id, grant)));
        return None;
    }
    for d in &denied {
        eprintln!("{}", d.message);
    }
    let first = denied[0].clone();
    state.denials.extend(denied);
    drop(state);
    Some(access_denied(&call, role, &first))
}

/// Records a request the gate refuses before any policy (unknown caller, unmapped operation).
fn refuse(
    shared: &Shared,
    principal: &str,
    call: &Call<'_>,
    role: Option<&Role>,
    why: String,
) -> Response<Full<Bytes>> {
    let d = Denial {
        principal: principal.to_owned(),
        role: role.map(|r| r.id.clone()).unwrap_or_default(),
        operation: call.operation(),
        action: String::new(),
        resource: String::new(),
        message: format!("IAM gate refused {} by {principal}: {why}", call.operation()),
    };
    eprintln!("{}", d.message);
    if let Ok(mut s) = shared.state.lock() {
        s.denials.push(d.clone());
    }
    let fallback;
    let role = match role {
        Some(r) => r,
        None => {
            fallback = Role {
                id: String::new(),
                arn: String::new(),
                caller: principal.to_owned(),
                policies: vec![],
                fix_in: String::new(),
                session: Default::default(),
            };
            &fallback
        }
    };
    access_denied(call, role, &d)
}

/// The denial of `r` to `principal`, with everything a reader needs to fix it.
pub fn denial(principal: &Principal, role: &Role, operation: &str, r: &Requirement, decision: &Decision) -> Denial {
    let because = r.because.as_deref().map(|b| format!(" ({b})")).unwrap_or_default();
    let mut message = format!(
        "IAM denied {principal}: {} on {}\n  call: {operation}{because}\n  role: {} ({})\n",
        r.action, r.resource, role.id, role.arn
    );
    match decision {
        Decision::ExplicitDeny(g) => {
            message.push_str(&format!(
                "  explicitly denied by {} ({} on {}); an explicit Deny wins over any Allow\n",
                g.statement, g.action, g.resource
            ));
        }
        Decision::ImplicitDeny { unevaluated } => {
            message.push_str(&format!("  no statement of {} allows it (implicit deny)\n", role.id));
            for u in unevaluated {
                message.push_str(&format!("  not applied: {u}\n"));
            }
            let related = related_statements(role, r);
            if !related.is_empty() {
                message.push_str(&format!("  what the role has nearby: {}\n", related.join("; ")));
            }
            message.push_str(&format!(
                "  missing statement: {{\"Effect\": \"Allow\", \"Action\": \"{}\", \"Resource\": \"{}\"}} — in {}\n",
                r.action, r.resource, role.fix_in
            ));
        }
        Decision::Allowed(_) => {}
    }
    Denial {
        principal: principal.to_string(),
        role: role.id.clone(),
        operation: operation.to_owned(),
        action: r.action.clone(),
        resource: r.resource.clone(),
        message,
    }
}

/// Allow statements of the role on the same resource, or with the same action.
fn related_statements(role: &Role, r: &Requirement) -> Vec<String> {
    let mut out = Vec::new();
    for p in &role.policies {
        for (i, s) in p.statements.iter().enumerate() {
            if s.effect != Effect::Allow {
                continue;
            }
            let on_resource = match &s.resources {
                Patterns::Listed(rs) => rs.iter().any(|x| super::policy::resource_matches(x, &r.resource)),
                Patterns::AllBut(_) => false,
            };
            let same_action = match &s.actions {
                Patterns::Listed(a) => a.iter().any(|x| super::policy::action_matches(x, &r.action)),
                Patterns::AllBut(_) => false,
            };
            if on_resource || same_action {
                let name = s.sid.clone().unwrap_or_else(|| format!("statement {i} of {}", p.name));
                out.push(format!("{name}: {} on {}", s.actions.grants().join(", "), s.resources.grants().join(", ")));
            }
        }
    }
    out
}

/// AccessDenied as the service answers it.
fn access_denied(call: &Call<'_>, role: &Role, d: &Denial) -> Response<Full<Bytes>> {
    let aws_message = if d.action.is_empty() {
        format!("User: {} is not authorized to perform this operation: {}", role.caller, d.message)
    } else {
        format!(
            "User: {} is not authorized to perform: {} on resource: {} because no identity-based policy allows the {} action",
            role.caller, d.action, d.resource, d.action
        )
    };
    if call.service == "monitoring" {
        let body = crate::recorded::cbor(&serde_json::json!({"__type": "AccessDenied", "message": aws_message}));
        return Response::builder()
            .status(StatusCode::FORBIDDEN)
            .header("content-type", "application/cbor")
            .header("smithy-protocol", "rpc-v2-cbor")
            .header("x-amzn-requestid", "iam-gate")
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
    }
    let (status, content_type, body, extra) = match call.service {
        "dynamodb" => (
            400,
            "application/x-amz-json-1.0",
            serde_json::json!({"__type": "com.amazon.coral.service#AccessDeniedException", "Message": aws_message})
                .to_string(),
            None,
        ),
        "sqs" => (
            400,
            "application/x-amz-json-1.0",
            serde_json::json!({"__type": "com.amazon.coral.service#AccessDeniedException", "message": aws_message})
                .to_string(),
            Some(("x-amzn-query-error", "AccessDenied;Sender")),
        ),
        // End User Messaging SMS: AWS JSON 1.0, the error named by `__type`, its text in `Message`.
        "sms-voice" => (
            400,
            "application/x-amz-json-1.0",
            serde_json::json!({"__type": "AccessDeniedException", "Message": aws_message}).to_string(),
            None,
        ),
        "logs" | "kms" => (
            400,
            "application/x-amz-json-1.1",
            serde_json::json!({"__type": "AccessDeniedException", "message": aws_message}).to_string(),
            None,
        ),
        service => {
            let code = if service == "sns" { "AuthorizationError" } else { "AccessDenied" };
            (
                403,
                "text/xml",
                format!(
                    "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{}</Message></Error><RequestId>iam-gate</RequestId></ErrorResponse>",
                    xml_escape(&aws_message)
                ),
                None,
            )
        }
    };
    let mut r = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN))
        .header("content-type", content_type)
        .header("x-amzn-requestid", "iam-gate");
    if let Some((k, v)) = extra {
        r = r.header(k, v);
    }
    r.body(Full::new(Bytes::from(body))).unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
