//! The urgent lane: behind a backlog, an alert whose deadline leaves less than five minutes
//! overtakes the queue (earliest deadline first), through real emulator calls.

use std::time::Duration as StdDuration;

use chrono::Duration;
use serde_json::Value;
use tocsin::domain::{IdempotencyKey, State};
use tocsin_harness::events::sqs_event;
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Pipeline, alert, key_of};

/// Submits `n` alerts with 15 minutes to spare, to distinct numbers.
async fn backlog(p: &Pipeline, prefix: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(10) {
        let bodies: Vec<_> =
            chunk.iter().map(|i| alert(&format!("{prefix}-{i}"), &format!("+1415555{:04}", 4000 + i))).collect();
        for (status, body) in futures::future::join_all(bodies.iter().map(|b| p.submit(b))).await {
            assert_eq!(status, 201, "{body}");
        }
    }
}

async fn submit_due_in(p: &Pipeline, event: &str, number: &str, deadline: &str) -> IdempotencyKey {
    let mut a = alert(event, number);
    a["deadline"] = Value::from(deadline);
    let (status, body) = p.submit(&a).await;
    assert_eq!(status, 201, "{body}");
    key_of(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_backlog_a_two_minute_alert_is_sent_by_the_next_sender_before_the_queue_ahead_of_it() {
    let p = Pipeline::start().await;
    backlog(&p, "ahead", 15).await;
    // Intake reads the queue's length at most every 5 s.
    tokio::time::sleep(StdDuration::from_millis(5_200)).await;
    let urgent = submit_due_in(&p, "urgent-1", "+14155554999", "2m").await;
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 1, "on the urgent lane too");

    // One sender invocation with the first ten messages of the send queue, which waited.
    let q = p.stack.queue("SendQueue").clone();
    let first = p.receive(&q.url, 10).await;
    assert_eq!(first.len(), 10);
    p.clock.advance(Duration::seconds(6));
    let resp = p.sender.handle(sqs_event(&q.arn, &first), p.clock.invocation_deadline()).await;
    assert!(resp.batch_item_failures.is_empty());
    let r = p.record(&urgent).await;
    assert_eq!(r.status.state, State::Accepted, "sent before the five alerts still ahead of it");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 11);
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 0, "taken and deleted by the sender");

    // Its send-queue copy, reached later, sends nothing more.
    p.acknowledge(&q.url, &first).await;
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 16, "one SMS per alert");
    assert_eq!(p.record(&urgent).await.status.attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_backlog_nothing_goes_on_the_urgent_lane() {
    let p = Pipeline::start().await;
    let key = submit_due_in(&p, "calm-1", "+14155554998", "2m").await;
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 0, "nothing to overtake");
    p.run_sender().await;
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_left_waiting_until_its_slack_is_under_five_minutes_is_re_enqueued_on_the_urgent_lane() {
    let p = Pipeline::start().await;
    let key = submit_due_in(&p, "waiting-1", "+14155554997", "15m").await;
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 0);
    // Nobody claimed it for ten minutes: the sweep re-enqueues it, now with under 5 minutes left.
    p.clock.advance(Duration::minutes(10) + Duration::seconds(30));
    let run = p.run_escalation().await;
    assert_eq!(run.re_enqueued, 1, "{run:?}");
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 1, "promoted");
    assert_eq!(p.record(&key).await.status.state, State::Queued);
}

/// A throttled publish of an urgent alert hands its urgent-lane message back with the retry delay
/// (ChangeMessageVisibility on the urgent lane, with the sender's role), not the lane's 3-minute
/// visibility timeout: the retry comes as soon as for any other throttled alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_urgent_alert_comes_back_on_the_urgent_lane_after_its_retry_delay() {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 21).await.expect("proxy");
    proxy.add_rule(Rule::once("SNS.Publish", Fault::sns_throttling()).when_body_contains("14155554996"));
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    backlog(&p, "throttled-ahead", 15).await;
    tokio::time::sleep(StdDuration::from_millis(5_200)).await;
    let urgent = submit_due_in(&p, "urgent-throttled-1", "+14155554996", "2m").await;
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 1, "on the urgent lane too");

    let q = p.stack.queue("SendQueue").clone();
    let first = p.receive(&q.url, 10).await;
    p.clock.advance(Duration::seconds(6));
    p.sender.handle(sqs_event(&q.arn, &first), p.clock.invocation_deadline()).await;
    p.assert_iam_allowed();
    assert_eq!(proxy.injected(), 1, "the urgent alert's publish was throttled");
    assert_eq!(p.record(&urgent).await.status.state, State::Queued, "handed back unsent");

    // The first retry waits TOCSIN_RETRY_BASE_DELAY (2 s), then the message is visible again.
    tokio::time::sleep(StdDuration::from_millis(2_500)).await;
    let lane = p.stack.queue("UrgentSendQueue").url.clone();
    assert_eq!(p.receive(&lane, 10).await.len(), 1, "back on the urgent lane after 2 s, not 180 s");
}
