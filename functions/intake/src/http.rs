//! The HTTP edge of intake: API Gateway REST (v1) and HTTP (v2) proxy events in, precise status
//! codes out. Never a 500 with internals: a dependency failure is a 503 with `Retry-After`.

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayV2httpRequest};
use base64::Engine;
use serde_json::{Value, json};

use crate::Submitted;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub version: Version,
    pub method: String,
    pub content_type: Option<String>,
    pub body: Option<String>,
    pub base64: bool,
    /// The signing principal's ARN, as API Gateway's IAM authorizer passes it (`None` when the
    /// request carries none).
    pub caller_arn: Option<String>,
}

impl HttpRequest {
    /// Reads an API Gateway proxy event of either version; `None` when it is neither.
    pub fn from_event(event: &Value) -> Option<Self> {
        let is_v2 = event.get("version").and_then(Value::as_str) == Some("2.0")
            && event.pointer("/requestContext/http").is_some();
        if is_v2 {
            let r: ApiGatewayV2httpRequest = serde_json::from_value(event.clone()).ok()?;
            Some(HttpRequest {
                version: Version::V2,
                method: r.request_context.http.method.as_str().to_owned(),
                content_type: r.headers.get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned),
                body: r.body,
                base64: r.is_base64_encoded,
                caller_arn: signed(event.pointer("/requestContext/authorizer/iam/userArn")),
            })
        } else if event.get("httpMethod").is_some() {
            let r: ApiGatewayProxyRequest = serde_json::from_value(event.clone()).ok()?;
            Some(HttpRequest {
                version: Version::V1,
                method: r.http_method.as_str().to_owned(),
                content_type: r.headers.get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned),
                body: r.body,
                base64: r.is_base64_encoded,
                caller_arn: signed(event.pointer("/requestContext/identity/userArn")),
            })
        } else {
            None
        }
    }

    /// Method, content type, size and JSON checks, in that order.
    pub fn body_json(&self, max_bytes: usize) -> Result<Value, HttpResponse> {
        if !self.method.eq_ignore_ascii_case("POST") {
            let mut r =
                HttpResponse::error(405, "method_not_allowed", format!("{} is not allowed; use POST", self.method));
            r.allow = Some("POST");
            return Err(r);
        }
        let media =
            self.content_type.as_deref().map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
        if media.as_deref() != Some("application/json") {
            return Err(HttpResponse::error(
                415,
                "unsupported_media_type",
                "send the request as Content-Type: application/json".into(),
            ));
        }
        let raw = self.body.as_deref().unwrap_or_default();
        let bytes = if self.base64 {
            base64::engine::general_purpose::STANDARD.decode(raw).map_err(|_| {
                HttpResponse::error(400, "malformed_body", "the body is marked base64 but is not".into())
            })?
        } else {
            raw.as_bytes().to_vec()
        };
        if bytes.len() > max_bytes {
            return Err(HttpResponse::error(
                413,
                "payload_too_large",
                format!("the body has {} bytes; the limit is {max_bytes}", bytes.len()),
            ));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(HttpResponse::error(400, "malformed_json", "the body is empty; send a JSON object".into()));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| HttpResponse::error(400, "malformed_json", format!("the body is not valid JSON: {e}")))
    }
}

/// A caller ARN as the authorizer passes it; an empty or null one is none.
fn signed(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned)
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    pub status: u16,
    pub body: Value,
    pub retry_after: Option<u32>,
    pub allow: Option<&'static str>,
}

impl HttpResponse {
    pub fn error(status: u16, code: &str, message: String) -> Self {
        HttpResponse {
            status,
            body: json!({"error": {"code": code, "message": message}}),
            retry_after: None,
            allow: None,
        }
    }

    pub fn code(&self) -> &str {
        self.body.pointer("/error/code").and_then(Value::as_str).unwrap_or("ok")
    }

    pub fn from_submitted(outcome: &Submitted) -> Self {
        match outcome {
            Submitted::Created(r) | Submitted::Replayed(r) => {
                let replay = matches!(outcome, Submitted::Replayed(_));
                let i = &r.intent;
                HttpResponse {
                    status: if replay { 200 } else { 201 },
                    body: json!({
                        "idempotency_key": i.key,
                        "event_id": i.event_id,
                        "template": i.template.to_string(),
                        "state": r.status.state,
                        "replay": replay,
                        "deadline": i.deadline,
                        "created_at": i.created_at,
                        "recipient": i.recipient.masked(),
                        "segments": i.segments.segments,
                        "encoding": i.segments.encoding,
                    }),
                    retry_after: None,
                    allow: None,
                }
            }
            Submitted::Invalid(errors) => HttpResponse {
                status: 422,
                body: json!({"error": {"code": "validation_failed", "message": "the request has invalid fields", "fields": errors}}),
                retry_after: None,
                allow: None,
            },
            Submitted::Conflict { key, fields } => HttpResponse {
                status: 409,
                body: json!({"error": {
                    "code": "idempotency_conflict",
                    "message": "this event id and template were already submitted with a different payload; the original is kept",
                    "idempotency_key": key,
                    "differing_fields": fields,
                }}),
                retry_after: None,
                allow: None,
            },
            Submitted::UnknownProducer(why) => HttpResponse::error(403, "producer_unknown", why.to_string()),
            Submitted::RateLimited { producer, retry_after } => {
                let mut r = HttpResponse::error(
                    429,
                    "producer_rate_limited",
                    format!(
                        "producer {producer} has sent its requests for this minute (ProducerRatePerMinute); retry the \
                         same body after Retry-After seconds"
                    ),
                );
                r.retry_after = Some(*retry_after);
                r
            }
            Submitted::Unavailable(e) => {
                tracing::error!(error = %e, "dependency failed");
                let mut r = HttpResponse::error(
                    503,
                    "unavailable",
                    "a dependency is unavailable; retry with the same body".into(),
                );
                r.retry_after = Some(5);
                r
            }
        }
    }

    /// The proxy response (the same shape serves both payload versions).
    pub fn render(&self, _version: Version) -> Value {
        let mut headers = json!({"content-type": "application/json", "cache-control": "no-store"});
        if let Some(s) = self.retry_after {
            headers["retry-after"] = json!(s.to_string());
        }
        if let Some(a) = self.allow {
            headers["allow"] = json!(a);
        }
        json!({
            "statusCode": self.status,
            "headers": headers,
            "body": self.body.to_string(),
            "isBase64Encoded": false,
        })
    }
}
