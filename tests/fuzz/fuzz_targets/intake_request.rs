//! Arbitrary bytes as an alert request, through everything intake does before any I/O: the HTTP
//! edge (method, content type, size, JSON), validation, rendering, SMS segment counting and key
//! derivation. Nothing may panic; an accepted request must satisfy the documented limits.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use tocsin::domain::intent::Intent;
use tocsin::domain::request::{Limits, validate};
use tocsin::domain::template::Catalog;
use tocsin::domain::{IdempotencyKey, Origin};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        default_deadline: Duration::from_secs(900),
        min_deadline: Duration::from_secs(60),
        max_deadline: Duration::from_secs(72 * 3600),
        max_segments: 3,
        sms: Default::default(),
    };
    let now = chrono::DateTime::from_timestamp(1_795_990_000, 0).unwrap_or_default();
    // As an HTTP API event body.
    let body = String::from_utf8_lossy(data).into_owned();
    let event = json!({"version": "2.0", "requestContext": {"http": {"method": "POST"}}, "headers": {"content-type": "application/json"}, "body": body, "isBase64Encoded": false});
    if let Some(req) = intake::http::HttpRequest::from_event(&event) {
        let _ = req.body_json(16_384);
    }
    // As a parsed document, through validation.
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data)
        && let Ok(valid) = validate(&v, Catalog::builtin(), &limits, now)
    {
        assert!(valid.segments.segments <= limits.max_segments);
        assert!(valid.deadline > now);
        let producer = tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer");
        let intent = Intent::from_request(valid, Origin::Api, producer.clone(), now);
        assert_eq!(intent.key, IdempotencyKey::derive(&producer, &intent.event_id, &intent.template));
        assert!(IdempotencyKey::parse(intent.key.as_str()).is_ok());
        assert!(!format!("{:?}", intent.recipient).contains(intent.recipient.expose()), "masked in Debug");
    }
});
