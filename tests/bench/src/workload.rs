//! Inputs shared by the measurements and the criterion benches: delivery-status records in SNS's
//! real format and End User Messaging events in AWS's, inside a CloudWatch Logs subscription
//! envelope, and a valid alert request.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tocsin::domain::IdempotencyKey;
use tocsin::domain::request::Limits;
use tocsin::domain::send_context::SendContext;
use tocsin_harness::events::{LogLine, eum_event_record, logs_envelope, logs_payload, sns_delivery_record};

/// Records per subscription payload in the status-parsing bench.
pub const RECORDS_PER_PAYLOAD: usize = 1_000;

/// `n` delivery-status log lines as SNS writes them: unique message ids and numbers, 9 in 10
/// successes, the rest carrier failures.
pub fn delivery_lines(n: usize, at: DateTime<Utc>) -> Vec<LogLine> {
    (0..n)
        .map(|i| {
            let success = i % 10 != 0;
            let response = if success {
                "Message has been accepted by phone carrier"
            } else {
                "Phone carrier has blocked this message"
            };
            let destination = format!("+1415{:07}", 5_000_000 + i);
            LogLine {
                // CloudWatch Logs event ids are 56 decimal digits.
                id: format!("{:056}", 36_000_000_000_000_000u64 + i as u64),
                timestamp: at.timestamp_millis() + i as i64,
                message: sns_delivery_record(&uuid::Uuid::new_v4().to_string(), &destination, success, response, at),
            }
        })
        .collect()
}

/// `n` End User Messaging events as the stack's configuration set writes them: each a final
/// event naming its alert and attempt in its context (tocsin's own), unique message ids, keys and
/// numbers, 9 in 10 deliveries, the rest carrier failures.
pub fn eum_event_lines(n: usize, at: DateTime<Utc>) -> Vec<LogLine> {
    (0..n)
        .map(|i| {
            let key = IdempotencyKey::parse(&format!("{:064x}", 0xc0ffee_u64 * 1_000_003 + i as u64))
                .unwrap_or_else(|e| panic!("a bench key: {e}"));
            let context = SendContext::alert("tocsin-bench", key, format!("a-{i}"));
            let destination = format!("+1415{:07}", 5_000_000 + i);
            LogLine {
                id: format!("{:056}", 37_000_000_000_000_000u64 + i as u64),
                timestamp: at.timestamp_millis() + i as i64,
                message: eum_event_record(
                    &uuid::Uuid::new_v4().to_string(),
                    &destination,
                    i % 10 != 0,
                    &context.entries(),
                    at,
                ),
            }
        })
        .collect()
}

/// The subscription invocation (`{"awslogs":{"data":…}}`) for `lines` of `log_group`.
pub fn envelope(log_group: &str, lines: &[LogLine]) -> Value {
    logs_envelope(&logs_payload(log_group, "DATA_MESSAGE", lines))
}

/// An envelope of at least `target_bytes` serialized, and its record count.
pub fn envelope_of_size(log_group: &str, target_bytes: usize, at: DateTime<Utc>) -> (Value, usize) {
    let probe = 2_000;
    let size = envelope(log_group, &delivery_lines(probe, at)).to_string().len().max(1);
    let n = (probe * target_bytes).div_ceil(size) + 1;
    (envelope(log_group, &delivery_lines(n, at)), n)
}

/// A valid alert request body (the example in docs/alert-requests.md).
pub fn alert_body(i: usize) -> Value {
    serde_json::json!({
        "event_id": format!("monitoring:disk:db-1:/var:2026-11-29T22:00Z:{i}"),
        "template": {"name": "disk_full", "version": 1},
        "variables": {"host": "db-1", "mount": "/var", "percent": "97"},
        "recipient": "+14155550100",
        "deadline": "15m",
        "sms": {"sender_id": "TOCSIN", "origination_number": "+18005550100", "max_price_usd": "0.50"}
    })
}

/// The template's default limits (DefaultDeadline 15m, MinDeadline 1m, MaxDeadline 72h,
/// MaxSegments 3), with the example's SMS settings as the deployment's own.
pub fn default_limits() -> Limits {
    Limits {
        default_deadline: Duration::from_secs(15 * 60),
        min_deadline: Duration::from_secs(60),
        max_deadline: Duration::from_secs(72 * 3600),
        max_segments: 3,
        reply_prompt: false,
        // A deployment whose own settings are the example's (docs/alert-requests.md).
        sms: tocsin::domain::sms::SmsPolicy {
            defaults: tocsin::domain::SmsOptions {
                sender_id: Some("TOCSIN".into()),
                origination_number: tocsin::domain::PhoneNumber::parse("+18005550100").ok(),
                max_price_usd: Some("0.50".into()),
            },
            ..Default::default()
        },
    }
}
