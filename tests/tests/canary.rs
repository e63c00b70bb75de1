//! The canary (`CanaryNumber`, `CanarySchedule`): the safety net testing itself. Every run of the
//! schedule hands intake an "Alert Requested" event for the canary's number; the status function
//! counts `canary_delivered` when its delivery record comes back, and the canary-not-delivered
//! alarm pages on a window without one (its shape is checked on the translated template,
//! `translated_template.rs`). Here the loop runs on the emulator: the harness plays Scheduler (the
//! schedule's input from template.yaml, context attributes filled in), the event source mapping,
//! the carrier and the log subscription; everything else is the real functions.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use tocsin::domain::{IdempotencyKey, State};
use tocsin::ports::IntentStore;
use tocsin_tests::{Options, Pipeline, alert, emitted_metrics, key_of};

const CANARY: &str = "+14155550142";

async fn with_canary() -> Pipeline {
    Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        parameters: vec![("CanaryNumber", CANARY)],
        ..Default::default()
    })
    .await
}

/// `canary_delivered` counts the status function emitted in this test.
fn canaries_delivered() -> usize {
    emitted_metrics()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|d| d["function"] == "status")
        .filter_map(|d| d["canary_delivered"].as_f64())
        .map(|n| n as usize)
        .sum()
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).expect("time")
}

/// The intent one scheduled run made: the key intake derives from its event id and template.
async fn canary_intent(p: &Pipeline, event: &Value) -> tocsin::domain::IntentRecord {
    let key = IdempotencyKey::derive(
        &tocsin::domain::producer::ProducerName::canary(),
        event["detail"]["event_id"].as_str().expect("event id"),
        &tocsin::domain::template::TemplateRef { name: "tocsin_canary".into(), version: 1 },
    );
    p.inspect.get(&key).await.expect("read").expect("the run made an intent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_run_goes_round_the_whole_loop_and_its_delivery_is_counted_once_per_run() {
    let p = with_canary().await;
    let run = p.run_canary_schedule(at("2026-12-01T10:00:00Z")).await.expect("the stack has a canary");
    assert_eq!(run["detail"]["event_id"], "canary-2026-12-01T10:00:00Z");
    let intent = canary_intent(&p, &run).await;
    assert_eq!(intent.intent.recipient.expose(), CANARY);
    assert_eq!(intent.intent.template.name, "tocsin_canary");

    // Scheduler retries the same run (its answer was lost): a replay of one intent, not a second SMS.
    p.run_canary_schedule(at("2026-12-01T10:00:00Z")).await.expect("replay");
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1, "{sms:?}");
    assert!(sms[0].message.starts_with("tocsin canary 2026-12-01T10:00:00Z"), "{}", sms[0].message);

    let accepted = p.record(&intent.intent.key).await;
    assert_eq!(accepted.status.state, State::Accepted);
    assert_eq!(canaries_delivered(), 0, "accepted is not delivered");
    let id = accepted.status.sns_message_id.clone().expect("message id");
    p.carrier_reports(&id, CANARY, true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&intent.intent.key).await.status.state, State::Delivered);
    assert_eq!(canaries_delivered(), 1, "the alarm's metric: one delivered canary");

    // The next run is another intent and another SMS.
    let next = p.run_canary_schedule(at("2026-12-01T11:00:00Z")).await.expect("next run");
    assert_ne!(canary_intent(&p, &next).await.intent.key, intent.intent.key);
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_is_not_delivered_counts_nothing_and_escalates_at_its_deadline() {
    let p = with_canary().await;
    let run = p.run_canary_schedule(Utc::now()).await.expect("canary");
    let key = canary_intent(&p, &run).await.intent.key;
    p.run_sender().await;
    // The carrier never answers; another alert to another number is delivered meanwhile.
    let (status, body) = p.submit(&alert("canary-other-1", "+14155550143")).await;
    assert_eq!(status, 201, "{body}");
    p.run_sender().await;
    let other = p.record(&key_of(&body)).await.status.sns_message_id.expect("sent");
    p.carrier_reports(&other, "+14155550143", true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Delivered);
    assert_eq!(canaries_delivered(), 0, "only a delivery to the canary's number counts");

    // Past its 10-minute deadline the sweep escalates it like any alert that did not arrive.
    p.clock.advance(Duration::minutes(11));
    p.run_escalation().await;
    let escalated = p.escalations().await;
    assert!(escalated.iter().any(|(m, _)| m.idempotency_key == key.as_str()), "{escalated:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_canary_number_there_is_no_schedule_and_no_delivery_counts() {
    let p = Pipeline::start().await;
    assert!(p.run_canary_schedule(Utc::now()).await.is_none(), "CanaryRun's condition is false");
    let (_, body) = p.submit(&alert("no-canary-1", CANARY)).await;
    p.run_sender().await;
    let id = p.record(&key_of(&body)).await.status.sns_message_id.expect("sent");
    p.carrier_reports(&id, CANARY, true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Delivered);
    assert_eq!(canaries_delivered(), 0);
}
