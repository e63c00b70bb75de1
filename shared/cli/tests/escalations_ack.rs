//! `tocsin escalations` and `tocsin escalations ack KEY --reason`, the real binary against the
//! emulator next to the real pipeline. The stack's outputs come from template.yaml (the harness
//! registers them with the emulator's CloudFormation), so the CLI finds the queue and tables as
//! it does on AWS.

mod common;

use common::{Run, aws_env, tocsin_with};
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::{IdempotencyKey, State};
use tocsin_tests::{Pipeline, alert, key_of};

const STACK: &str = "tocsin-local";

async fn tocsin(p: &Pipeline, args: &[&str]) -> Run {
    let mut all = vec!["--stack", STACK];
    all.extend_from_slice(args);
    tocsin_with(aws_env(&p.emulator.endpoint()), &all).await
}

/// An alert whose number the carrier reports opted out: failed, then escalated by the sweep.
async fn escalated(p: &Pipeline, event: &str, number: &str) -> IdempotencyKey {
    let (_, body) = p.submit(&alert(event, number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    p.carrier_reports(&id, number, false, "Phone number is opted out").await;
    p.run_status().await;
    p.run_escalation().await;
    assert!(p.record(&key).await.status.escalation.is_some(), "escalated");
    key
}

/// For each message on the escalation queue: its intent's key and how many times it was received
/// before (the ApproximateReceiveCount SQS reports, minus this receive). Released at once.
async fn on_the_queue(p: &Pipeline) -> Vec<(String, u32)> {
    let url = p.stack.queue("EscalationQueue").url.clone();
    let msgs = p.receive(&url, 10).await;
    let counts = msgs
        .iter()
        .map(|m| {
            let n = m
                .attributes()
                .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|v| v.parse::<u32>().ok())
                .expect("receive count");
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap_or_default()).expect("json");
            (body["idempotency_key"].as_str().unwrap_or_default().to_owned(), n - 1)
        })
        .collect();
    for m in msgs {
        p.sqs
            .change_message_visibility()
            .queue_url(&url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .visibility_timeout(0)
            .send()
            .await
            .expect("release");
    }
    counts
}

fn acks(timeline: &[tocsin::domain::observation::Observation]) -> Vec<(String, String, String)> {
    timeline
        .iter()
        .filter_map(|o| match &o.kind {
            ObservationKind::Operator { operator, action, reason } if action == "acknowledged escalation" => {
                Some((operator.clone(), reason.clone(), format!("{:?}", o.state_after)))
            }
            _ => None,
        })
        .collect()
}

/// SQS leaves a message received three times or more out of ApproximateAgeOfOldestMessage (which
/// the age alarm once read, and a queue integration still may). Looking at escalations never
/// receives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looking_at_escalations_never_receives_them_so_the_age_alarm_still_sees_them() {
    let p = Pipeline::start().await;
    let key = escalated(&p, "look-1", "+14155550150").await;
    for _ in 0..4 {
        let r = tocsin(&p, &["escalations"]).await;
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains(&key.as_str()[..12]) && r.stdout.contains("look-1"), "{}", r.stdout);
        assert!(r.stdout.contains("1 visible"), "the queue's depth is shown: {}", r.stdout);
        assert!(!r.stdout.contains("+14155550150"));
    }
    let doc = tocsin(&p, &["--json", "escalations"]).await.json();
    assert_eq!(doc["escalations"][0]["idempotency_key"], key.as_str());
    assert_eq!(doc["escalations"][0]["state"], "failed");
    assert_eq!(doc["queue_visible"], 1);
    assert_eq!(on_the_queue(&p).await, vec![(key.to_string(), 0)], "five looks, and the message was never received");
    assert_eq!(p.queue_depth("EscalationQueue").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_deletes_that_escalation_only_and_records_who_when_and_why_in_the_ledger() {
    let p = Pipeline::start().await;
    let first = escalated(&p, "ack-1", "+14155550151").await;
    let second = escalated(&p, "ack-2", "+14155550152").await;
    assert_eq!(p.queue_depth("EscalationQueue").await, 2);

    let no_reason = tocsin(&p, &["escalations", "ack", first.as_str()]).await;
    assert_eq!(no_reason.code, 2, "{no_reason:?}");
    assert_eq!(p.queue_depth("EscalationQueue").await, 2);

    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    let r =
        tocsin(&p, &["--json", "escalations", "ack", first.short(), "--reason", "called the DBA; disk cleaned"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!((doc["recorded"].as_bool(), doc["deleted"].as_u64()), (Some(true), Some(1)), "{doc}");
    assert_eq!(p.queue_depth("EscalationQueue").await, 1, "only its message is gone");
    let left = on_the_queue(&p).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, second.as_str(), "the other escalation is still there");

    let sts = aws_sdk_sts::Client::new(&p.emulator.sdk_config().await);
    let arn = sts.get_caller_identity().send().await.expect("sts").arn.expect("arn");
    let timeline = p.timeline(&first).await;
    assert_eq!(
        acks(&timeline),
        vec![(arn.clone(), "called the DBA; disk cleaned".to_owned(), "Some(Failed)".to_owned())],
        "who and why, with the state it was in"
    );
    let at = timeline.iter().find(|o| matches!(o.kind, ObservationKind::Operator { .. })).expect("ack").at;
    assert!(at >= before && at <= chrono::Utc::now(), "when: {at}");
    assert_eq!(p.record(&first).await.status.state, State::Failed, "delivery truth untouched");
    assert!(acks(&p.timeline(&second).await).is_empty());

    // The acknowledged one leaves the listing; the other stays.
    let look = tocsin(&p, &["--json", "escalations"]).await.json();
    let keys: Vec<&str> =
        look["escalations"].as_array().expect("list").iter().filter_map(|e| e["idempotency_key"].as_str()).collect();
    assert_eq!(keys, vec![second.as_str()]);
    let shown = tocsin(&p, &["show", first.as_str()]).await;
    assert!(shown.stdout.contains("acknowledged escalation (called the DBA"), "{}", shown.stdout);

    // Again: the first acknowledgement stands, nothing new is recorded.
    let again = tocsin(&p, &["escalations", "ack", first.as_str(), "--reason", "twice"]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("already acknowledged by") && again.stdout.contains(&arn), "{}", again.stdout);
    assert_eq!(acks(&p.timeline(&first).await).len(), 1);
    assert_eq!(p.queue_depth("EscalationQueue").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_an_intent_that_was_not_escalated_is_refused_and_changes_nothing() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("not-escalated-1", "+14155550153")).await;
    let key = key_of(&body);
    let r = tocsin(&p, &["escalations", "ack", key.as_str(), "--reason", "oops"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("was not escalated"), "{r:?}");
    assert!(acks(&p.timeline(&key).await).is_empty());
}

/// The age alarm reads the sweep's report of the oldest unacknowledged escalation, from the
/// ledger: looking changes nothing, an acknowledgement takes that escalation out of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_age_alarm_sees_an_escalation_until_it_is_acknowledged_however_often_it_is_looked_at() {
    let p = Pipeline::start().await;
    let first = escalated(&p, "age-1", "+14155550153").await;
    p.clock.advance(chrono::Duration::minutes(2));
    let second = escalated(&p, "age-2", "+14155550154").await;
    p.clock.advance(chrono::Duration::minutes(4));
    // The pipeline's clock runs on in real time besides the advances: ages within a minute.
    let age = || async { p.run_escalation().await.oldest_unacknowledged_s.map(|s| s / 60) };
    assert_eq!(age().await, Some(6), "the first, escalated 6 minutes ago");
    for _ in 0..4 {
        assert_eq!(tocsin(&p, &["escalations"]).await.code, 0);
    }
    assert_eq!(age().await, Some(6), "looking hides nothing");
    let r = tocsin(&p, &["escalations", "ack", first.as_str(), "--reason", "handled by phone"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(age().await, Some(4), "now the second, escalated 4 minutes ago");
    let listed = tocsin(&p, &["--json", "escalations"]).await.json();
    let keys: Vec<&str> =
        listed["escalations"].as_array().into_iter().flatten().filter_map(|e| e["idempotency_key"].as_str()).collect();
    assert_eq!(keys, [second.as_str()]);
    let r = tocsin(&p, &["escalations", "ack", &second.as_str()[..10], "--reason", "handled"]).await;
    assert_eq!(r.code, 0, "a key prefix is found through the open escalations: {r:?}");
    assert_eq!(age().await, Some(0), "none left");
}
