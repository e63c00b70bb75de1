//! `tocsin send`: an alert through the deployed intake, SigV4-signed.
//!
//! moto does not serve API Gateway invoking a Lambda function, so these tests stand in for API
//! Gateway with a local HTTP server: it checks the request's SigV4 `Authorization` header the way
//! API Gateway's IAM authoriser does (shape, service `execute-api`, region, and the signature
//! recomputed from the request with the caller's secret key) and the caller's permission
//! (`execute-api:Invoke` on the route, evaluated by the IAM gate against the operator policy),
//! answers 403 when either does not hold, and otherwise hands the body — as the HTTP API's event — to the real intake handler of the
//! pipeline (`Pipeline::invoke_intake`), answering with its status code and body. The stack's
//! `AlertApiUrl` output points at that server; everything else is the emulator.

mod common;

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use common::{Run, aws_env, tocsin_with};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use tocsin::domain::{IdempotencyKey, State};
use tocsin_harness::Principal;
use tocsin_harness::iam::request::Requirement;
use tocsin_tests::Pipeline;

/// API Gateway's part: SigV4 checked with `secret`, then intake.
struct ApiStandIn {
    url: String,
    /// Authorization headers seen.
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn start_api(p: Arc<Pipeline>, secret: &'static str) -> ApiStandIn {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/alerts", listener.local_addr().expect("addr"));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (u, s) = (url.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (p, u, s) = (p.clone(), u.clone(), s.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (p, u, s) = (p.clone(), u.clone(), s.clone());
                    async move { Ok::<_, std::convert::Infallible>(answer(req, &p, &u, secret, &s).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    ApiStandIn { url, seen }
}

fn reply(status: u16, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("response")
}

async fn answer(
    req: Request<Incoming>,
    p: &Pipeline,
    url: &str,
    secret: &str,
    seen: &std::sync::Mutex<Vec<String>>,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let authorization = header("authorization");
    seen.lock().expect("lock").push(authorization.clone());
    if let Err(why) = verify(&authorization, &header("x-amz-date"), &header("content-type"), url, &body, secret) {
        return reply(403, serde_json::json!({"message": format!("Forbidden: {why}")}).to_string());
    }
    // The IAM authorizer: the caller's policy must allow invoking this route.
    let key = authorization.split("Credential=").nth(1).and_then(|c| c.split('/').next()).unwrap_or_default();
    let caller = Principal::from_access_key_id(key).unwrap_or(Principal::Operator);
    let route = Requirement::plain(
        "execute-api:Invoke",
        "arn:aws:execute-api:us-east-1:123456789012:local0api/$default/POST/alerts",
    );
    if let Err(d) = p.emulator.iam().authorize(&caller, "execute-api POST /alerts", &route) {
        let message = format!("User: {caller} is not authorized to perform: {} on resource: {}", d.action, d.resource);
        return reply(403, serde_json::json!({ "Message": message }).to_string());
    }
    let event = tocsin_harness::events::http_api_post(std::str::from_utf8(&body).expect("utf-8"));
    let (status, body) = p.invoke_intake(event).await;
    reply(status, body.to_string())
}

/// What API Gateway's IAM authoriser checks of a SigV4 signature.
fn verify(
    authorization: &str,
    amz_date: &str,
    content_type: &str,
    url: &str,
    body: &[u8],
    secret: &str,
) -> Result<(), String> {
    let rest = authorization.strip_prefix("AWS4-HMAC-SHA256 Credential=").ok_or("not SigV4")?;
    let (credential, rest) = rest.split_once(", SignedHeaders=").ok_or("no SignedHeaders")?;
    let (signed_headers, signature) = rest.split_once(", Signature=").ok_or("no Signature")?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, date, region, service, terminator] = scope[..] else { return Err("bad credential scope".into()) };
    if (region, service, terminator) != ("us-east-1", "execute-api", "aws4_request") {
        return Err(format!("scope {region}/{service}/{terminator}"));
    }
    if !amz_date.starts_with(date) {
        return Err("X-Amz-Date does not match the scope's date".into());
    }
    for h in ["host", "x-amz-date"] {
        if !signed_headers.split(';').any(|s| s == h) {
            return Err(format!("{h} is not signed"));
        }
    }
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("signature is not 64 hex digits".into());
    }
    let time = chrono::NaiveDateTime::parse_from_str(amz_date, "%Y%m%dT%H%M%SZ").map_err(|e| e.to_string())?.and_utc();
    let credentials = aws_credential_types::Credentials::new(access_key, secret, None, None, "api-stand-in");
    let identity: aws_smithy_runtime_api::client::identity::Identity = credentials.into();
    let params: aws_sigv4::http_request::SigningParams<'_> = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("execute-api")
        .time(SystemTime::from(time))
        .settings(aws_sigv4::http_request::SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let headers = [("content-type", content_type)];
    let signable = aws_sigv4::http_request::SignableRequest::new(
        "POST",
        url,
        headers.into_iter(),
        aws_sigv4::http_request::SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (_, expected) = aws_sigv4::http_request::sign(signable, &params).map_err(|e| e.to_string())?.into_parts();
    if expected != signature { Err("the signature does not match".into()) } else { Ok(()) }
}

async fn tocsin(p: &Pipeline, stack: &str, args: &[&str]) -> Run {
    let mut all = vec!["--stack", stack];
    all.extend_from_slice(args);
    tocsin_with(aws_env(&p.emulator.endpoint()), &all).await
}

/// The local stack's outputs (template.yaml's) with AlertApiUrl at the stand-in, as `name`.
async fn stack_with_api(p: &Pipeline, name: &str, api: &ApiStandIn) {
    tocsin_harness::stack_outputs::publish(&p.emulator.endpoint(), &p.stack, name, &[("AlertApiUrl", &api.url)])
        .await
        .expect("stack outputs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_submits_a_signed_alert_through_intake_and_a_second_send_is_a_replay() {
    let p = Arc::new(Pipeline::start().await);
    let api = start_api(p.clone(), tocsin_harness::iam::SECRET).await;
    stack_with_api(&p, "tocsin-local", &api).await;
    let args = [
        "send",
        "--event-id",
        "first-alert-1",
        "--template",
        "disk_full@1",
        "--var",
        "host=db-1",
        "--var",
        "mount=/var",
        "--var",
        "percent=97",
        "--to",
        "+14155550160",
        "--deadline",
        "15m",
    ];
    let r = tocsin(&p, "tocsin-local", &args).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("201 created: intent "), "{}", r.stdout);
    let auth = api.seen.lock().expect("lock")[0].clone();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=OPERATOR/")
            && auth.contains("/us-east-1/execute-api/aws4_request"),
        "{auth}"
    );

    let doc = tocsin(&p, "tocsin-local", &[&["--json"][..], &args[..]].concat()).await.json();
    assert_eq!(doc["status"], 200, "the same event again is a replay: {doc}");
    assert_eq!(doc["answer"]["replay"], true);
    let key = IdempotencyKey::parse(doc["answer"]["idempotency_key"].as_str().expect("key")).expect("key");
    assert_eq!(p.record(&key).await.intent.event_id, "first-alert-1");

    p.run_sender().await;
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    assert_eq!(sms[0].phone_number, "+14155550160");
    assert!(sms[0].message.contains("db-1"), "{}", sms[0].message);

    // A request document from a file is sent as is; intake's refusal comes back with its fields.
    let file = std::env::temp_dir().join(format!("tocsin-send-{}.json", std::process::id()));
    std::fs::write(
        &file,
        r#"{"event_id": "bad-1", "template": {"name": "disk_full", "version": 1}, "recipient": "0800"}"#,
    )
    .expect("write");
    let bad = tocsin(&p, "tocsin-local", &["--json", "send", "--file", file.to_str().expect("path")]).await;
    assert_eq!(bad.code, 1, "{bad:?}");
    assert_eq!(bad.json()["status"], 422);
    assert!(bad.stdout.contains("recipient"), "{}", bad.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_the_api_does_not_accept_is_a_403_that_names_the_permission_and_creates_nothing() {
    let p = Arc::new(Pipeline::start().await);
    // The stand-in expects another secret for the operator's key: the signature cannot match.
    let api = start_api(p.clone(), "not-the-callers-secret").await;
    stack_with_api(&p, "tocsin-local", &api).await;
    let r = tocsin(
        &p,
        "tocsin-local",
        &["send", "--event-id", "denied-1", "--template", "disk_full@1", "--to", "+14155550161"],
    )
    .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("403") && r.stderr.contains("execute-api:Invoke"), "{r:?}");
    assert!(r.stdout.contains("the signature does not match"), "{r:?}");
    assert_eq!(p.ledger_item_count().await, 0, "nothing reached intake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_needs_the_stacks_api_url_and_says_which_output_is_missing() {
    let p = Pipeline::start().await;
    // tocsin-local's outputs hold no AlertApiUrl: the emulator hosts no HTTP API.
    let r =
        tocsin(&p, "tocsin-local", &["send", "--event-id", "x-1", "--template", "disk_full@1", "--to", "+14155550162"])
            .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("stack tocsin-local has no output AlertApiUrl"), "{r:?}");
}
