//! API Gateway's part in the CLI's tests: moto does not serve API Gateway invoking a Lambda
//! function, so a local HTTP server checks the request's SigV4 `Authorization` header the way API
//! Gateway's IAM authoriser does (shape, service `execute-api`, region, and the signature
//! recomputed from the request with the caller's secret key) and the caller's permission
//! (`execute-api:Invoke` on the route, evaluated by the IAM gate against the operator policy),
//! answers 403 when either does not hold,
//! and otherwise hands the body — as the HTTP API's event — to the real intake handler of the
//! pipeline (`Pipeline::invoke_intake`), answering with its status code and body.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use tocsin_harness::Principal;
use tocsin_harness::iam::request::Requirement;
use tocsin_tests::Pipeline;

/// API Gateway's part: SigV4 checked with `secret`, then intake.
pub struct ApiStandIn {
    pub url: String,
    /// Authorization headers seen.
    pub seen: Arc<std::sync::Mutex<Vec<String>>>,
}

pub async fn start_api(p: Arc<Pipeline>, secret: &'static str) -> ApiStandIn {
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
    let event =
        tocsin_harness::events::http_api_post_by(std::str::from_utf8(&body).expect("utf-8"), &caller.caller_arn());
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

/// A stack whose outputs are template.yaml's, with AlertApiUrl at the stand-in (and `extra`).
pub async fn stack_with_api(p: &Pipeline, name: &str, api: &ApiStandIn, extra: &[(&str, &str)]) {
    let mut outputs = vec![("AlertApiUrl", api.url.as_str())];
    outputs.extend_from_slice(extra);
    tocsin_harness::stack_outputs::publish(&p.emulator.endpoint(), &p.stack, name, &outputs)
        .await
        .expect("stack outputs");
}
