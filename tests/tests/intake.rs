//! Intake: exactly one intent per business event, a precise answer to every caller, and bad
//! input that changes nothing. Real emulator calls throughout.

use serde_json::{Value, json};
use tocsin::domain::State;
use tocsin_harness::events::http_api_post;
use tocsin_tests::{Options, Pipeline, alert, key_of};

fn load(path: &str) -> Value {
    let text =
        std::fs::read_to_string(tocsin_harness::workspace_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_identical_requests_make_one_intent_and_one_sms() {
    let p = Pipeline::start().await;
    let req = alert("storm-1", "+14155550130");
    let answers = futures::future::join_all((0..20).map(|_| p.submit(&req))).await;
    let created = answers.iter().filter(|(s, _)| *s == 201).count();
    let replayed = answers.iter().filter(|(s, b)| *s == 200 && b["replay"] == true).count();
    assert_eq!((created, replayed), (1, 19), "{answers:?}");
    let keys: std::collections::HashSet<String> = answers.iter().map(|(_, b)| key_of(b).to_string()).collect();
    assert_eq!(keys.len(), 1);
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_with_a_different_payload_is_a_conflict_and_the_original_is_kept() {
    let p = Pipeline::start().await;
    let (s, first) = p.submit(&alert("conflict-1", "+14155550131")).await;
    assert_eq!(s, 201);
    let mut changed = alert("conflict-1", "+14155550999");
    changed["variables"]["percent"] = json!("12");
    let (s, body) = p.submit(&changed).await;
    assert_eq!(s, 409, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_conflict");
    assert_eq!(body["error"]["differing_fields"], json!(["recipient", "variables"]));
    let stored = p.record(&key_of(&first)).await;
    assert_eq!(stored.intent.recipient.expose(), "+14155550131");
    assert_eq!(stored.intent.variables.get("percent").map(String::as_str), Some("97"));
    // Same event, new template version: a new intent by design (the key includes the version).
    let mut v2 = alert("conflict-1", "+14155550131");
    v2["template"] = json!({"name": "service_down", "version": 2});
    v2["variables"] = json!({"severity": "SEV2", "service": "db", "since": "now", "runbook": "r"});
    assert_eq!(p.submit(&v2).await.0, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_after_a_failed_enqueue_re_enqueues_and_the_alert_is_sent_once() {
    let p = Pipeline::start().await;
    // The same intake, but its queue does not exist: the put lands, the enqueue fails (on AWS
    // with AccessDenied: intake's role names only the stack's queues).
    let sqs = aws_sdk_sqs::Client::new(&p.sdk_of("IntakeFunction").await);
    let broken = p.intake_enqueueing_to(sqs, &format!("{}/123456789012/no-such-queue", p.emulator.endpoint()));
    let req = alert("enqueue-fails-1", "+14155550132");
    let resp = broken.handle(http_api_post(&req.to_string())).await.expect("answers");
    assert_eq!(resp["statusCode"], 503);
    p.expect_iam_denied("sqs:SendMessage", ":no-such-queue");
    assert_eq!(resp["headers"]["retry-after"], "5");
    assert_eq!(p.queue_depth("SendQueue").await, 0);

    let (s, body) = p.submit(&req).await;
    assert_eq!((s, body["replay"].as_bool()), (200, Some(true)));
    assert_eq!(body["state"], "queued", "the replay enqueued it");
    p.run_sender().await;
    p.submit(&req).await; // a further replay does not enqueue again: it is no longer received
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_the_enqueue_forgot_is_re_enqueued_by_the_sweep_after_the_grace_period() {
    let p = Pipeline::start().await;
    let sqs = aws_sdk_sqs::Client::new(&p.sdk_of("IntakeFunction").await);
    let broken = p.intake_enqueueing_to(sqs, &format!("{}/123456789012/no-such-queue", p.emulator.endpoint()));
    let resp = broken.handle(http_api_post(&alert("forgotten-1", "+14155550133").to_string())).await.expect("answers");
    assert_eq!(resp["statusCode"], 503);
    p.expect_iam_denied("sqs:SendMessage", ":no-such-queue");
    assert_eq!(p.run_escalation().await.re_enqueued, 0, "not before the grace period");
    p.clock.advance(chrono::Duration::minutes(3));
    assert_eq!(p.run_escalation().await.re_enqueued, 1);
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_precise_errors_and_change_nothing() {
    let p = Pipeline::start().await;
    let good = alert("bad-1", "+14155550134");
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    let http = |method: &str, content_type: Option<&str>, body: &str, base64: bool| {
        let mut e = http_api_post(body);
        e["requestContext"]["http"]["method"] = json!(method);
        match content_type {
            Some(c) => e["headers"]["content-type"] = json!(c),
            None => {
                e["headers"].as_object_mut().map(|h| h.remove("content-type"));
            }
        }
        e["isBase64Encoded"] = json!(base64);
        e
    };
    let body = |v: Value| http_api_post(&v.to_string());
    let long = "x".repeat(300);
    // (case, event, status, error code, failing field)
    let cases: Vec<(&str, Value, u16, &str, &str)> = vec![
        (
            "GET instead of POST",
            http("GET", Some("application/json"), &good.to_string(), false),
            405,
            "method_not_allowed",
            "",
        ),
        ("no content type", http("POST", None, &good.to_string(), false), 415, "unsupported_media_type", ""),
        ("text/plain", http("POST", Some("text/plain"), &good.to_string(), false), 415, "unsupported_media_type", ""),
        (
            "too large",
            http("POST", Some("application/json"), &format!("{{\"event_id\":\"{}\"}}", "y".repeat(20_000)), false),
            413,
            "payload_too_large",
            "",
        ),
        ("empty body", http("POST", Some("application/json"), "", false), 400, "malformed_json", ""),
        ("not JSON", http("POST", Some("application/json"), "{\"event_id\":", false), 400, "malformed_json", ""),
        ("bad base64", http("POST", Some("application/json"), "%%%", true), 400, "malformed_body", ""),
        ("array body", body(json!([good.clone()])), 422, "invalid_type", ""),
        (
            "missing event_id",
            body(with(&|v| {
                v.as_object_mut().map(|o| o.remove("event_id"));
            })),
            422,
            "required",
            "event_id",
        ),
        ("blank event_id", body(with(&|v| v["event_id"] = json!("  "))), 422, "required", "event_id"),
        ("numeric event_id", body(with(&|v| v["event_id"] = json!(42))), 422, "invalid_type", "event_id"),
        ("event_id too long", body(with(&|v| v["event_id"] = json!(long))), 422, "too_long", "event_id"),
        ("event_id with newline", body(with(&|v| v["event_id"] = json!("a\nb"))), 422, "invalid_format", "event_id"),
        (
            "missing template",
            body(with(&|v| {
                v.as_object_mut().map(|o| o.remove("template"));
            })),
            422,
            "required",
            "template",
        ),
        ("template as string", body(with(&|v| v["template"] = json!("disk_full@v1"))), 422, "invalid_type", "template"),
        (
            "template without version",
            body(with(&|v| v["template"] = json!({"name": "disk_full"}))),
            422,
            "required",
            "template.version",
        ),
        (
            "template version 0",
            body(with(&|v| v["template"]["version"] = json!(0))),
            422,
            "out_of_range",
            "template.version",
        ),
        (
            "template version as string",
            body(with(&|v| v["template"]["version"] = json!("1"))),
            422,
            "invalid_type",
            "template.version",
        ),
        (
            "unknown template",
            body(with(&|v| v["template"]["name"] = json!("nope"))),
            422,
            "unknown_template",
            "template.name",
        ),
        (
            "unknown version",
            body(with(&|v| v["template"]["version"] = json!(99))),
            422,
            "unknown_template_version",
            "template.version",
        ),
        (
            "extra template field",
            body(with(&|v| v["template"]["locale"] = json!("en"))),
            422,
            "unknown_field",
            "template.locale",
        ),
        (
            "missing recipient",
            body(with(&|v| {
                v.as_object_mut().map(|o| o.remove("recipient"));
            })),
            422,
            "required",
            "recipient",
        ),
        (
            "recipient without +",
            body(with(&|v| v["recipient"] = json!("14155550100"))),
            422,
            "invalid_phone_number",
            "recipient",
        ),
        (
            "recipient with spaces",
            body(with(&|v| v["recipient"] = json!("+1 415 555 0100"))),
            422,
            "invalid_phone_number",
            "recipient",
        ),
        (
            "recipient too short",
            body(with(&|v| v["recipient"] = json!("+12345"))),
            422,
            "invalid_phone_number",
            "recipient",
        ),
        (
            "recipient 16 digits",
            body(with(&|v| v["recipient"] = json!("+1234567890123456"))),
            422,
            "invalid_phone_number",
            "recipient",
        ),
        (
            "missing variable",
            body(with(&|v| {
                v["variables"].as_object_mut().map(|o| o.remove("mount"));
            })),
            422,
            "missing_variable",
            "variables.mount",
        ),
        (
            "unexpected variable",
            body(with(&|v| v["variables"]["colour"] = json!("red"))),
            422,
            "unexpected_variable",
            "variables.colour",
        ),
        (
            "variable as object",
            body(with(&|v| v["variables"]["host"] = json!({"a": 1}))),
            422,
            "invalid_type",
            "variables.host",
        ),
        (
            "variable with newline",
            body(with(&|v| v["variables"]["host"] = json!("db\n1"))),
            422,
            "invalid_format",
            "variables.host",
        ),
        (
            "variable too long",
            body(with(&|v| v["variables"]["host"] = json!("h".repeat(600)))),
            422,
            "too_long",
            "variables.host",
        ),
        ("variables as list", body(with(&|v| v["variables"] = json!(["db-1"]))), 422, "invalid_type", "variables"),
        (
            "deadline in the past",
            body(with(&|v| v["deadline"] = json!("2020-01-01T00:00:00Z"))),
            422,
            "deadline_in_past",
            "deadline",
        ),
        ("deadline too soon", body(with(&|v| v["deadline"] = json!("10s"))), 422, "deadline_too_soon", "deadline"),
        ("deadline too far", body(with(&|v| v["deadline"] = json!("30days"))), 422, "deadline_too_far", "deadline"),
        ("deadline garbage", body(with(&|v| v["deadline"] = json!("soonish"))), 422, "invalid_format", "deadline"),
        ("deadline as number", body(with(&|v| v["deadline"] = json!(900))), 422, "invalid_type", "deadline"),
        (
            "bad sender id",
            body(with(&|v| v["sms"] = json!({"sender_id": "!!"}))),
            422,
            "invalid_format",
            "sms.sender_id",
        ),
        (
            "bad max price",
            body(with(&|v| v["sms"] = json!({"max_price_usd": "abc"}))),
            422,
            "out_of_range",
            "sms.max_price_usd",
        ),
        (
            "bad origination number",
            body(with(&|v| v["sms"] = json!({"origination_number": "555"}))),
            422,
            "invalid_phone_number",
            "sms.origination_number",
        ),
        (
            "unknown sms field",
            body(with(&|v| v["sms"] = json!({"priority": "high"}))),
            422,
            "unknown_field",
            "sms.priority",
        ),
        ("unknown top-level field", body(with(&|v| v["priority"] = json!("high"))), 422, "unknown_field", "priority"),
        (
            "message over the segment cap",
            body(with(&|v| v["variables"]["host"] = json!("h".repeat(500)))),
            422,
            "too_many_segments",
            "variables",
        ),
    ];
    assert!(cases.len() >= 30);
    for (case, event, status, code, field) in cases {
        let (got_status, got) = p.invoke_intake(event).await;
        assert_eq!(got_status, status, "{case}: {got}");
        if status == 422 {
            assert_eq!(got["error"]["code"], "validation_failed", "{case}");
            let fields = got["error"]["fields"].as_array().cloned().unwrap_or_default();
            assert!(
                fields.iter().any(|f| f["code"] == code && f["field"] == field),
                "{case}: expected {field}/{code} in {fields:?}"
            );
        } else {
            assert_eq!(got["error"]["code"], code, "{case}: {got}");
        }
        assert!(!got["error"]["message"].as_str().unwrap_or_default().is_empty(), "{case}: a message for humans");
    }
    assert_eq!(p.ledger_item_count().await, 0, "a rejected request writes nothing");
    assert_eq!(p.queue_depth("SendQueue").await, 0, "and enqueues nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_api_http_api_and_eventbridge_events_as_aws_writes_them_are_accepted() {
    // Storm mode off: the sample events all go to one number, which storm mode sends one digest.
    let p =
        Pipeline::start_with(tocsin_tests::Options { env: vec![("TOCSIN_STORM_MODE", "off")], ..Default::default() })
            .await;
    for file in ["events/intake/http-api-post.json", "events/intake/rest-api-post.json"] {
        let (status, body) = p.invoke_intake(load(file)).await;
        assert_eq!(status, 201, "{file}: {body}");
    }
    let eb = load("events/intake/eventbridge-alert-requested.json");
    assert_eq!(p.intake.handle(eb.clone()).await.expect("accepted"), Value::Null);
    assert_eq!(p.queue_depth("SendQueue").await, 3);
    assert_eq!(p.queue_depth("IntakeRejectsQueue").await, 0);
    // The same event again is a replay, not a second alert. Not claimed yet, it goes on the queue
    // once more (its first enqueue may have failed) and is marked `queued`; the sender's claim
    // turns the extra message away, and later replays add nothing.
    p.intake.handle(eb.clone()).await.expect("replay");
    assert_eq!(p.queue_depth("SendQueue").await, 4);
    p.intake.handle(eb).await.expect("replay");
    assert_eq!(p.queue_depth("SendQueue").await, 4);
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 3, "one SMS per alert");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_eventbridge_event_is_kept_on_the_rejects_queue_with_its_reasons() {
    let p = Pipeline::start().await;
    let mut eb = load("events/intake/eventbridge-alert-requested.json");
    eb["detail"]["recipient"] = json!("not-a-number");
    p.intake.handle(eb.clone()).await.expect("handled: kept for a human, not retried");
    let mut other = load("events/intake/eventbridge-alert-requested.json");
    other["detail-type"] = json!("Something Else");
    p.intake.handle(other).await.expect("handled");
    let rejects = p.receive(&p.stack.queue("IntakeRejectsQueue").url, 10).await;
    assert_eq!(rejects.len(), 2);
    let first: Value = serde_json::from_str(rejects[0].body.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(first["reason"], "validation_failed");
    assert_eq!(first["errors"][0]["field"], "recipient");
    assert_eq!(first["event"], eb, "the original event is kept whole");
    assert_eq!(p.ledger_item_count().await, 0);
    assert_eq!(p.queue_depth("SendQueue").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_examples_are_accepted() {
    let p = Pipeline::start().await;
    let text = std::fs::read_to_string(tocsin_harness::workspace_root().join("functions/intake/api/openapi.yaml"))
        .expect("openapi");
    let spec: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let examples = spec
        .pointer("/paths/~1alerts/post/requestBody/content/application~1json/examples")
        .and_then(Value::as_object)
        .expect("examples")
        .clone();
    assert!(examples.len() >= 3);
    for (name, ex) in examples {
        let (status, body) = p.submit(&ex["value"]).await;
        assert_eq!(status, 201, "OpenAPI example {name}: {body}");
    }
    let schema = load("functions/intake/api/alert-requested.schema.json");
    for ex in schema["examples"].as_array().expect("examples") {
        let mut event = load("events/intake/eventbridge-alert-requested.json");
        event["detail"] = ex.clone();
        p.intake.handle(event).await.expect("accepted");
    }
    assert_eq!(p.queue_depth("IntakeRejectsQueue").await, 0);
    assert_eq!(p.queue_depth("SendQueue").await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_reports_the_current_state_of_the_intent() {
    let p = Pipeline::start().await;
    let req = alert("state-1", "+14155550135");
    p.submit(&req).await;
    p.run_sender().await;
    let (s, body) = p.submit(&req).await;
    assert_eq!((s, body["state"].as_str()), (200, Some("accepted")));
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_reads_the_send_queue_length_once_per_five_seconds_not_per_alert() {
    let p = Pipeline::start().await;
    p.emulator.start_recording().await.expect("recording");
    for i in 0..3 {
        let (code, body) = p.submit(&alert(&format!("length-{i}"), "+14155550177")).await;
        assert_eq!(code, 201, "{body}");
    }
    let ops = p.emulator.stop_recording().await.expect("recording");
    let reads = ops.iter().filter(|o| o.ends_with("GetQueueAttributes")).count();
    assert_eq!(reads, 1, "{ops:?}");
}

/// A deployment with an SMS policy: a 0.50 USD ceiling per part, its own sender ID and one other a
/// request may name, no origination number of a request's own.
fn policed() -> Options {
    let mut o = Options::end_user_messaging();
    o.parameters.extend([("SmsMaxPriceUsd", "0.50"), ("SmsSenderId", "TOCSIN"), ("SmsAllowedSenderIds", "OPS")]);
    o
}

/// SMS pumping through the front door: a producer may lower the deployment's price ceiling, never
/// raise it, and names no sender ID or origination number the deployment does not allow. A
/// refused request writes nothing and sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_can_neither_raise_the_price_ceiling_nor_name_an_identity_the_deployment_does_not_allow() {
    let p = Pipeline::start_with(policed()).await;
    for (sms, field, code) in [
        (json!({"max_price_usd": "0.51"}), "sms.max_price_usd", "out_of_range"),
        (json!({"max_price_usd": "10"}), "sms.max_price_usd", "out_of_range"),
        (json!({"sender_id": "PRIZE"}), "sms.sender_id", "not_allowed"),
        (json!({"origination_number": "+18005550199"}), "sms.origination_number", "not_allowed"),
    ] {
        let mut body = alert("policy-refused-1", "+14155550140");
        body["sms"] = sms.clone();
        let (status, answer) = p.submit(&body).await;
        assert_eq!(status, 422, "{sms}: {answer}");
        let fields = answer["error"]["fields"].as_array().cloned().unwrap_or_default();
        assert!(fields.iter().any(|f| f["field"] == field && f["code"] == code), "{sms}: {fields:?}");
    }
    assert_eq!(p.ledger_item_count().await, 0, "a refused request writes nothing");
    assert_eq!(p.queue_depth("SendQueue").await, 0, "and enqueues nothing");

    let mut lower = alert("policy-lower-1", "+14155550141");
    lower["sms"] = json!({"max_price_usd": "0.05", "sender_id": "OPS"});
    let (status, answer) = p.submit(&lower).await;
    assert_eq!(status, 201, "{answer}");
    let mut plain = alert("policy-plain-1", "+14155550142");
    plain["sms"] = json!({"sender_id": "TOCSIN"});
    assert_eq!(p.submit(&plain).await.0, 201, "the deployment's own sender ID");
    p.run_sender().await;
    let mut prices: Vec<Option<String>> =
        p.emulator.eum().sent_texts().await.expect("texts").into_iter().map(|t| t.max_price).collect();
    prices.sort();
    assert_eq!(prices, [Some("0.05".to_owned()), Some("0.50".to_owned())], "a lower cap, and the ceiling");
}

/// An intent an earlier, looser deployment accepted (no ceiling, any sender ID) goes out within
/// the policy the deployment has now: at the ceiling, from the deployment's own identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_accepted_under_a_looser_policy_is_sent_within_the_policy_in_force() {
    let p = Pipeline::start_with(policed()).await;
    let mut looser = p.intake.config.clone();
    looser.limits.sms.defaults.max_price_usd = None;
    looser.limits.sms.allowed_sender_ids.insert("PRIZE".into());
    let earlier = p.intake_configured(looser);
    let mut body = alert("policy-earlier-1", "+14155550143");
    body["sms"] = json!({"max_price_usd": "9.5", "sender_id": "PRIZE"});
    let answer = earlier.handle(http_api_post(&body.to_string())).await.expect("answers");
    assert_eq!(answer["statusCode"], 201, "{answer}");
    p.run_sender().await;
    let sent = p.emulator.eum().sent_texts().await.expect("texts");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].max_price.as_deref(), Some("0.50"), "never above the ceiling in force");
}
