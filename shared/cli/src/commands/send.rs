//! `tocsin send`: submits an alert request to the deployed intake, exactly as an upstream system
//! does — a POST to the stack's `AlertApiUrl` signed with SigV4 (service `execute-api`) by the
//! caller's AWS identity, who needs `execute-api:Invoke` on the API. The intake's answer is printed
//! as it came (201 created, 200 replay, 4xx with the fields at fault, 503 retry).

use std::io::Read;
use std::time::SystemTime;

use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use serde_json::{Value, json};

use crate::args::SendArgs;
use crate::context::Context;
use crate::error::{CliError, CliResult, exit};
use crate::output;

/// The alert request document: from `--file` (or stdin), else from the flags.
pub fn request_body(args: &SendArgs) -> CliResult<Value> {
    if let Some(path) = &args.file {
        let mut text = String::new();
        if path == "-" {
            std::io::stdin().read_to_string(&mut text).map_err(|e| CliError::Usage(format!("reading stdin: {e}")))?;
        } else {
            text = std::fs::read_to_string(path).map_err(|e| CliError::Usage(format!("reading {path}: {e}")))?;
        }
        return serde_json::from_str(&text).map_err(|e| CliError::Usage(format!("{path} is not JSON: {e}")));
    }
    let (Some(event_id), Some((name, version)), Some(to)) = (&args.event_id, &args.template, &args.to) else {
        return Err(CliError::Usage("give --file, or --event-id, --template and --to".into()));
    };
    let variables: serde_json::Map<String, Value> =
        args.vars.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    let mut body = json!({
        "event_id": event_id,
        "template": {"name": name, "version": version},
        "variables": variables,
        "recipient": to,
    });
    if let Some(d) = &args.deadline {
        body["deadline"] = Value::String(d.clone());
    }
    Ok(body)
}

/// The headers that SigV4-sign `POST url` with `body` for API Gateway (`execute-api`) in `region`
/// with `identity` at `time` (Authorization, X-Amz-Date, and X-Amz-Security-Token for temporary
/// credentials).
pub fn sigv4_headers(
    url: &reqwest::Url,
    body: &[u8],
    identity: &Identity,
    region: &str,
    time: SystemTime,
) -> CliResult<Vec<(String, String)>> {
    let signing_error =
        |e: &dyn std::fmt::Display| CliError::Aws { operation: "SigV4 signing", message: e.to_string() };
    if url.host_str().is_none() {
        return Err(CliError::Usage(format!("AlertApiUrl {url} has no host")));
    }
    let params: aws_sigv4::http_request::SigningParams<'_> = v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name("execute-api")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let headers = [("content-type", "application/json")];
    let signable = SignableRequest::new("POST", url.as_str(), headers.into_iter(), SignableBody::Bytes(body))
        .map_err(|e| signing_error(&e))?;
    let (instructions, _) = sign(signable, &params).map_err(|e| signing_error(&e))?.into_parts();
    Ok(instructions.headers().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
}

pub async fn run(ctx: &Context, args: &SendArgs) -> CliResult<u8> {
    let (status, answer) = post(ctx, &request_body(args)?, args.timeout).await?;
    if ctx.json {
        output::json(&json!({"status": status, "answer": answer}))?;
    } else {
        output::line(summary(status, &answer))?;
    }
    Ok(match status {
        200 | 201 => exit::OK,
        403 => {
            eprintln!("tocsin: {}", forbidden(ctx, &answer).await);
            exit::REFUSED
        }
        400..=499 => exit::REFUSED,
        _ => exit::UNAVAILABLE,
    })
}

/// What a 403 means, with the caller's identity: API Gateway refused the signature or the
/// identity's `execute-api:Invoke`, or intake found the identity among none of the stack's
/// producers.
pub async fn forbidden(ctx: &Context, answer: &Value) -> String {
    let who = ctx.operator().await.unwrap_or_else(|_| "your identity".into());
    if answer.pointer("/error/code").and_then(Value::as_str) == Some("producer_unknown") {
        return format!(
            "{who} is not one of the stack's producers (403 producer_unknown): add its role's ARN to the \
             stack's Producers parameter and deploy (docs/deployment.md, \"Adding a producer\")"
        );
    }
    format!(
        "the API refused your signature or identity (403): grant execute-api:Invoke on the stack's API (output \
         AlertApiArn) to {who}"
    )
}

/// POSTs `body` to the stack's `AlertApiUrl`, SigV4-signed with the caller's credentials, and
/// returns the intake's answer: (HTTP status, JSON body or the text as a JSON string).
pub async fn post(ctx: &Context, body: &Value, timeout: std::time::Duration) -> CliResult<(u16, Value)> {
    let url_text = ctx.outputs.require("AlertApiUrl")?;
    let url = reqwest::Url::parse(url_text)
        .map_err(|e| CliError::Usage(format!("the stack's AlertApiUrl {url_text} is not a URL: {e}")))?;
    let body = serde_json::to_vec(body).map_err(|e| CliError::Output(e.to_string()))?;
    let region = ctx.sdk.region().map(|r| r.to_string()).ok_or_else(|| CliError::Usage("no AWS region".into()))?;
    let provider = ctx
        .sdk
        .credentials_provider()
        .ok_or_else(|| CliError::Usage("no AWS credentials: configure a profile or the environment".into()))?;
    let credentials = provider.provide_credentials().await.map_err(CliError::aws("loading AWS credentials"))?;
    let identity: Identity = credentials.into();
    let signed = sigv4_headers(&url, &body, &identity, &region, SystemTime::now())?;

    let http = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| CliError::Aws { operation: "HTTP client", message: e.to_string() })?;
    let mut req = http.post(url.clone()).header("content-type", "application/json").body(body);
    for (k, v) in &signed {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.send().await.map_err(|e| CliError::Aws {
        operation: "POST AlertApiUrl",
        message: format!("{url}: {}", crate::error::describe(&e)),
    })?;
    let status = resp.status().as_u16();
    let text =
        resp.text().await.map_err(|e| CliError::Aws { operation: "POST AlertApiUrl", message: e.to_string() })?;
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
    Ok((status, answer))
}

/// One line for people: what the intake did, and where to watch it.
fn summary(status: u16, answer: &Value) -> String {
    let key = answer.get("idempotency_key").and_then(Value::as_str).unwrap_or("?");
    let state = answer.get("state").and_then(Value::as_str).unwrap_or("?");
    match status {
        201 => format!("201 created: intent {key} ({state}). Watch it: tocsin show {key}"),
        200 => format!("200 replay: the same event was sent before; intent {key} is {state}. tocsin show {key}"),
        _ => format!("{status}: {answer}"),
    }
}
