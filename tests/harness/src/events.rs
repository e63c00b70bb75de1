//! The events AWS sends each function, built in the shapes AWS writes them, from what the
//! emulator really holds (queue messages, log events).

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use base64::Engine;
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;

/// An SQS event from messages received from the real queue (as the event source mapping does).
pub fn sqs_event(queue_arn: &str, messages: &[aws_sdk_sqs::types::Message]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for m in messages {
        let mut r = SqsMessage::default();
        r.message_id = m.message_id.clone();
        r.receipt_handle = m.receipt_handle.clone();
        r.body = m.body.clone();
        r.md5_of_body = m.md5_of_body.clone();
        r.event_source = Some("aws:sqs".into());
        r.event_source_arn = Some(queue_arn.to_owned());
        r.aws_region = Some("us-east-1".into());
        if let Some(attrs) = &m.attributes {
            for (k, v) in attrs {
                r.attributes.insert(k.as_str().to_owned(), v.clone());
            }
        }
        event.records.push(r);
    }
    event
}

/// One log event of a subscription payload.
#[derive(Debug, Clone, Serialize)]
pub struct LogLine {
    pub id: String,
    pub timestamp: i64,
    pub message: String,
}

/// The decoded subscription payload, with its fields in the order CloudWatch Logs writes them
/// (`messageType`, `owner`, `logGroup`, `logStream`, `subscriptionFilters`, `logEvents`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LogsPayload<'a> {
    message_type: &'a str,
    owner: &'a str,
    log_group: &'a str,
    log_stream: &'a str,
    subscription_filters: [&'a str; 1],
    log_events: &'a [LogLine],
}

/// The decoded subscription payload CloudWatch Logs sends, as JSON text in its field order.
pub fn logs_payload(log_group: &str, message_type: &str, lines: &[LogLine]) -> String {
    let payload = LogsPayload {
        message_type,
        owner: crate::stack::ACCOUNT,
        log_group,
        log_stream: "sms-delivery",
        subscription_filters: ["tocsin-status"],
        log_events: lines,
    };
    serde_json::to_string(&payload).unwrap_or_default()
}

/// Gzip + base64 of a payload's JSON text, in the `{"awslogs":{"data":…}}` envelope.
pub fn logs_envelope(payload: &str) -> Value {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    let _ = gz.write_all(payload.as_bytes());
    let bytes = gz.finish().unwrap_or_default();
    json!({"awslogs": {"data": base64::engine::general_purpose::STANDARD.encode(bytes)}})
}

/// An SNS SMS delivery-status record, compact, as SNS writes it to CloudWatch Logs.
pub fn sns_delivery_record(
    message_id: &str,
    destination: &str,
    success: bool,
    provider_response: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut delivery = json!({
        "mnc": 270,
        "numberOfMessageParts": 1,
        "destination": destination,
        "priceInUSD": 0.00645,
        "smsType": "Transactional",
        "mcc": 310,
        "providerResponse": provider_response,
        "dwellTimeMs": 599,
        "dwellTimeMsUntilDeviceAck": 1344,
    });
    if success {
        delivery["phoneCarrier"] = json!("My Phone Carrier");
    }
    json!({
        "notification": {"messageId": message_id, "timestamp": at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()},
        "delivery": delivery,
        "status": if success { "SUCCESS" } else { "FAILURE" },
    })
    .to_string()
}

/// An End User Messaging SMS event, compact, as a configuration set's CloudWatch Logs event
/// destination writes it (AWS End User Messaging SMS User Guide, "Example SMS event data"): a
/// final `TEXT_DELIVERED` or a final `TEXT_CARRIER_UNREACHABLE`, echoing `context` (the sender's
/// `Context` entries).
pub fn eum_event_record(
    message_id: &str,
    destination: &str,
    delivered: bool,
    context: &[(&str, String)],
    at: chrono::DateTime<chrono::Utc>,
) -> String {
    let (event_type, status, description) = if delivered {
        ("TEXT_DELIVERED", "DELIVERED", "Message has been accepted by phone")
    } else {
        ("TEXT_CARRIER_UNREACHABLE", "CARRIER_UNREACHABLE", "The carrier could not be reached")
    };
    let requested = at.timestamp_millis();
    let context: serde_json::Map<String, Value> = context.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    json!({
        "eventType": event_type,
        "eventVersion": "1.0",
        "eventTimestamp": requested + 2_100,
        "isFinal": true,
        "originationPhoneNumber": "+18445550100",
        "destinationPhoneNumber": destination,
        "isInternationalSend": false,
        "isoCountryCode": "US",
        "mcc": "310",
        "mnc": "260",
        "carrierName": "T-Mobile USA, Inc.",
        "messageId": message_id,
        "messageRequestTimestamp": requested,
        "messageEncoding": "GSM",
        "messageType": "TRANSACTIONAL",
        "messageStatus": status,
        "messageStatusDescription": description,
        "context": context,
        "totalMessageParts": 1,
        "totalMessagePrice": 0.00581,
        "totalCarrierFee": 0.00302,
    })
    .to_string()
}

/// The scheduled EventBridge event that fires the escalation sweep.
pub fn scheduled_event(at: chrono::DateTime<chrono::Utc>) -> Value {
    json!({
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.scheduler",
        "account": crate::stack::ACCOUNT,
        "time": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "us-east-1",
        "resources": ["arn:aws:scheduler:us-east-1:123456789012:schedule/default/tocsin-escalation"],
        "detail": {}
    })
}

/// An HTTP API (payload 2.0) POST with a JSON body, as API Gateway sends it, signed by the local
/// producer ([`crate::stack::LOCAL_PRODUCER`]).
pub fn http_api_post(body: &str) -> Value {
    http_api_post_by(body, crate::stack::LOCAL_PRODUCER)
}

/// [`http_api_post`] signed by `caller` (the ARN API Gateway's IAM authorizer passes on).
pub fn http_api_post_by(body: &str, caller: &str) -> Value {
    json!({
        "version": "2.0",
        "routeKey": "POST /alerts",
        "rawPath": "/alerts",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "content-length": body.len().to_string(), "host": "abc123.execute-api.us-east-1.amazonaws.com"},
        "requestContext": {
            "accountId": crate::stack::ACCOUNT,
            "apiId": "abc123",
            "authorizer": {"iam": {"accessKey": "AKIAEXAMPLE", "accountId": crate::stack::ACCOUNT, "callerId": "AIDAEXAMPLE", "principalOrgId": null, "userArn": caller, "userId": "AIDAEXAMPLE"}},
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abc123",
            "http": {"method": "POST", "path": "/alerts", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.10", "userAgent": "monitoring/1.0"},
            "requestId": "JKJaXmPLvHcESHA=",
            "routeKey": "POST /alerts",
            "stage": "$default",
            "time": "29/Nov/2026:22:00:00 +0000",
            "timeEpoch": 1795990000000u64
        },
        "body": body,
        "isBase64Encoded": false
    })
}

/// An "Alert Requested" event as the stack's bus delivers it: `detail` put by `source` from
/// `account`.
pub fn alert_requested(source: &str, account: &str, detail: Value) -> Value {
    json!({
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "Alert Requested",
        "source": source,
        "account": account,
        "time": "2026-11-29T22:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail
    })
}
