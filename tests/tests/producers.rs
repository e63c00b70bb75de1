//! Producers (issue 36): only the deployment's producers can make tocsin text anyone, each is
//! recognised on both doors (the HTTP API's signed caller, the bus event's source and account),
//! and two producers' equal event ids are two alerts. A refused request writes nothing and loses
//! nothing: the HTTP caller is told why, a bus event is kept on the rejects queue with its reason.

use serde_json::{Value, json};
use tocsin_harness::events::{alert_requested, http_api_post_by};
use tocsin_harness::stack::{LOCAL_OPERATOR_ROLE, LOCAL_PRODUCER};
use tocsin_tests::{Pipeline, alert, key_of};

const ACCOUNT: &str = "123456789012";

fn rejects_reasons(messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| serde_json::from_str::<Value>(m.body.as_deref().unwrap_or_default()).expect("json"))
        .map(|v| v["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_caller_who_is_no_producer_is_refused_and_nothing_is_written() {
    let p = Pipeline::start().await;
    let body = alert("stranger-1", "+14155550140").to_string();
    for caller in [
        // Same name as a producer, another account; a producer's name but another kind; a role
        // nobody listed; the account's root.
        "arn:aws:iam::210987654321:user/monitoring",
        "arn:aws:sts::123456789012:assumed-role/monitoring/session",
        "arn:aws:sts::123456789012:assumed-role/Admin/alice",
        "arn:aws:iam::123456789012:root",
    ] {
        let (status, answer) = p.invoke_intake(http_api_post_by(&body, caller)).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("producer_unknown")), "{caller}: {answer}");
    }
    let mut unsigned = http_api_post_by(&body, LOCAL_PRODUCER);
    unsigned["requestContext"]["authorizer"] = Value::Null;
    let (status, answer) = p.invoke_intake(unsigned).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("producer_unknown")), "{answer}");
    assert_eq!(p.ledger_item_count().await, 0, "nothing written");
    assert_eq!(p.queue_depth("SendQueue").await, 0);

    // The producer itself, a user, and a session of the operator's role: accepted.
    assert_eq!(p.invoke_intake(http_api_post_by(&body, LOCAL_PRODUCER)).await.0, 201);
    let session = "arn:aws:sts::123456789012:assumed-role/tocsin-operator/alice";
    let other = alert("stranger-2", "+14155550140").to_string();
    let (status, answer) = p.invoke_intake(http_api_post_by(&other, session)).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        p.record(&key_of(&answer)).await.intent.producer.map(|n| n.to_string()).as_deref(),
        Some("tocsin-operator")
    );
    assert!(LOCAL_OPERATOR_ROLE.ends_with("/tocsin-operator"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_event_no_producer_sent_is_kept_on_the_rejects_queue_and_nothing_is_written() {
    let p = Pipeline::start().await;
    let detail = alert("bus-stranger-1", "+14155550141");
    for (source, account) in [
        ("com.example.monitoring", ACCOUNT), // the old placeholder source
        ("monitoring", "210987654321"),      // a producer's name from another account
        ("aws.events", ACCOUNT),             // nobody's
    ] {
        p.intake.handle(alert_requested(source, account, detail.clone())).await.expect("kept, not retried");
    }
    let rejects = p.receive(&p.stack.queue("IntakeRejectsQueue").url, 10).await;
    assert_eq!(rejects_reasons(&rejects), ["producer_unknown"; 3]);
    let kept: Value = serde_json::from_str(rejects[0].body.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(kept["event"]["detail"], detail, "the event is kept whole");
    assert_eq!(p.ledger_item_count().await, 0, "nothing written");

    p.intake.handle(alert_requested("monitoring", ACCOUNT, detail)).await.expect("accepted");
    assert_eq!(p.queue_depth("SendQueue").await, 1, "the producer's own event is an alert");
    assert!(p.receive(&p.stack.queue("IntakeRejectsQueue").url, 10).await.is_empty(), "and no reject");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_producers_with_the_same_event_id_make_two_alerts_and_neither_blocks_the_other() {
    let p = Pipeline::start().await;
    // A predictable event id, claimed first by another producer with another recipient: before
    // producers were part of the key, the real alert got a 409.
    let squatter = alert("deploy-failed:2026-12-03", "+14155550142");
    let real = alert("deploy-failed:2026-12-03", "+14155550143");
    let session = "arn:aws:sts::123456789012:assumed-role/tocsin-operator/alice";
    let (s1, first) = p.invoke_intake(http_api_post_by(&squatter.to_string(), session)).await;
    let (s2, second) = p.invoke_intake(http_api_post_by(&real.to_string(), LOCAL_PRODUCER)).await;
    assert_eq!((s1, s2), (201, 201), "{first} {second}");
    assert_ne!(key_of(&first), key_of(&second));
    let record = p.record(&key_of(&second)).await;
    assert_eq!(record.intent.recipient.expose(), "+14155550143");
    assert_eq!(record.intent.producer.map(|n| n.to_string()).as_deref(), Some("monitoring"));
    // The same producer on the other door is the same producer: a replay, not a second alert.
    p.intake.handle(alert_requested("monitoring", ACCOUNT, real)).await.expect("replay");
    assert_eq!(p.queue_depth("IntakeRejectsQueue").await, 0);
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 2, "one SMS per producer's alert");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_source_may_send_only_the_canary_template() {
    let p = Pipeline::start().await;
    let detail = alert("canary-abuse-1", "+14155550144");
    p.intake.handle(alert_requested("tocsin.canary", ACCOUNT, detail)).await.expect("kept, not retried");
    let rejects = p.receive(&p.stack.queue("IntakeRejectsQueue").url, 10).await;
    assert_eq!(rejects_reasons(&rejects), ["validation_failed"]);
    let kept: Value = serde_json::from_str(rejects[0].body.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(kept["errors"][0]["field"], json!("template.name"));
    assert_eq!(kept["errors"][0]["code"], json!("not_allowed"));
    assert_eq!(p.ledger_item_count().await, 0);
}

/// Moves the pipeline's clock to one second into the next minute, so a test's requests fall in
/// one producer window (the window is the UTC minute).
fn at_the_start_of_a_minute(p: &Pipeline) {
    use tocsin::ports::Clock;
    let now = p.clock.now();
    let window = tocsin::domain::producer::ProducerRate::window(now);
    p.clock.advance(window.next - now + chrono::Duration::seconds(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_producers_flood_is_shed_at_its_rate_and_another_producer_is_untouched() {
    let p = Pipeline::start_with(tocsin_tests::Options {
        env: vec![("TOCSIN_PRODUCER_RATE_PER_MINUTE", "3"), ("TOCSIN_STORM_MODE", "off")],
        ..Default::default()
    })
    .await;
    at_the_start_of_a_minute(&p);
    // Five at once: the counter's conditional write lets exactly three through.
    let answers = futures::future::join_all((0..5).map(|n| {
        let body = alert(&format!("flood-{n}"), &format!("+1415555017{n}")).to_string();
        let p = &p;
        async move { p.invoke_intake(http_api_post_by(&body, LOCAL_PRODUCER)).await }
    }))
    .await;
    let mut statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 201, 201, 429, 429], "{answers:?}");
    let refused = answers.iter().find(|(s, _)| *s == 429).map(|(_, b)| b.clone()).unwrap_or_default();
    assert_eq!(refused["error"]["code"], "producer_rate_limited");
    // The other producer, in the same minute: untouched.
    let session = "arn:aws:sts::123456789012:assumed-role/tocsin-operator/alice";
    let (status, body) = p.invoke_intake(http_api_post_by(&alert("real-1", "+14155550179").to_string(), session)).await;
    assert_eq!(status, 201, "{body}");
    // The flooding producer's bus event in that minute fails, so Lambda retries it later.
    let shed = p.intake.handle(alert_requested("monitoring", ACCOUNT, alert("flood-bus", "+14155550178"))).await;
    assert!(shed.is_err_and(|e| e.to_string().contains("over its rate")), "a failed invocation, retried");
    assert_eq!(p.queue_depth("SendQueue").await, 4, "three of the flood and the other producer's one");

    // The next minute admits the producer again: the retried event goes through.
    p.clock.advance(chrono::Duration::seconds(60));
    p.intake
        .handle(alert_requested("monitoring", ACCOUNT, alert("flood-bus", "+14155550178")))
        .await
        .expect("admitted");
    assert_eq!(p.queue_depth("SendQueue").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_with_a_rate_of_its_own_is_held_to_it_and_the_others_keep_the_default() {
    let p = Pipeline::start_with(tocsin_tests::Options {
        env: vec![("TOCSIN_PRODUCER_RATE_PER_MINUTE", "3"), ("TOCSIN_STORM_MODE", "off")],
        parameters: vec![("ProducerRates", "tocsin-operator=1")],
        ..Default::default()
    })
    .await;
    at_the_start_of_a_minute(&p);
    let session = "arn:aws:sts::123456789012:assumed-role/tocsin-operator/alice";
    let mut operator = Vec::new();
    let mut monitoring = Vec::new();
    for n in 0..3 {
        let body = alert(&format!("own-{n}"), &format!("+1415555015{n}")).to_string();
        operator.push(p.invoke_intake(http_api_post_by(&body, session)).await.0);
        let body = alert(&format!("default-{n}"), &format!("+1415555014{n}")).to_string();
        monitoring.push(p.invoke_intake(http_api_post_by(&body, LOCAL_PRODUCER)).await.0);
    }
    assert_eq!(operator, [201, 429, 429], "its own rate: one a minute");
    assert_eq!(monitoring, [201, 201, 201], "the default: three a minute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_producers_flood_of_escalations_is_folded_past_its_cap_and_another_producers_page_is_not() {
    let p = Pipeline::start_with(tocsin_tests::Options {
        // Two pages per producer and hour; one due intent at a time, so the order is the index's.
        env: vec![
            ("TOCSIN_PRODUCER_ESCALATIONS_PER_HOUR", "2"),
            ("TOCSIN_SWEEP_CONCURRENCY", "1"),
            ("TOCSIN_STORM_MODE", "off"),
        ],
        ..Default::default()
    })
    .await;
    // Five alerts of one producer and one of another; no carrier ever answers for any of them.
    let mut flood = Vec::new();
    for n in 0..5 {
        let (status, body) = p.submit(&alert(&format!("noisy-{n}"), &format!("+1415555016{n}"))).await;
        assert_eq!(status, 201, "{body}");
        flood.push(key_of(&body));
    }
    let other = alert("real-incident", "+14155550169").to_string();
    let session = "arn:aws:sts::123456789012:assumed-role/tocsin-operator/alice";
    let (status, body) = p.invoke_intake(http_api_post_by(&other, session)).await;
    assert_eq!(status, 201, "{body}");
    let real = key_of(&body);
    p.run_sender().await;
    p.clock.advance(chrono::Duration::minutes(16));
    p.run_escalation().await;

    let messages = p.escalations().await;
    let of = |producer: &str| messages.iter().filter(|(m, _)| m.producer.as_deref() == Some(producer)).count();
    assert_eq!(of("monitoring"), 3, "two pages, then the notice: {messages:?}");
    assert_eq!(of("tocsin-operator"), 1, "another producer's page is untouched");
    let notices: Vec<_> = messages.iter().filter(|(m, _)| m.producer_cap_reached).collect();
    assert_eq!(notices.len(), 1, "{messages:?}");
    assert!(notices[0].0.reason.contains("producer monitoring reached its cap of 2"), "{}", notices[0].0.reason);
    // Every one of the flood is escalated all the same: on the intent, two of them folded.
    let mut folded = 0;
    for key in &flood {
        let e = p.record(key).await.status.escalation.unwrap_or_else(|| panic!("{key} not escalated"));
        if e.folded {
            folded += 1;
            assert!(e.reason.contains("[folded: producer monitoring"), "{}", e.reason);
        }
    }
    assert_eq!(folded, 2);
    assert!(p.record(&real).await.status.escalation.is_some_and(|e| !e.folded));
    // The folded ones stay on the open list: the oldest open escalation is as old as the flood's.
    let oldest = tocsin::ports::EscalationBacklog::oldest_open_escalation(&p.ledger).await.expect("backlog");
    assert!(oldest.is_some());
}
