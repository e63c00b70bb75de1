//! Sender: at most one SMS per intent under at-least-once delivery, and an honest "unknown".
//! Real emulator calls; SNS faults come from the fault proxy in front of the emulator.

use chrono::Duration;
use tocsin::domain::State;
use tocsin::ports::{IntentStore, RecipientRegistry, SuppressionEvidence};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_harness::{Emulator, events::sqs_event};
use tocsin_tests::{Pipeline, alert, key_of};

/// A pipeline whose sender reaches SNS through a fault proxy in front of the emulator.
async fn with_sns_proxy() -> (Pipeline, FaultProxy) {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 7).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    (p, proxy)
}

async fn sms_count(e: &Emulator) -> usize {
    e.sent_sms().await.expect("sms list").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_message_delivered_twice_concurrently_sends_one_sms() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("twice-1", "+14155550111")).await;
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    assert_eq!(msgs.len(), 1);
    let (a, b) = tokio::join!(
        p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.invocation_deadline()),
        p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.invocation_deadline())
    );
    // A copy that finds the other's claim still held keeps the message (hidden until that claim's
    // lease ends: the holder might hand the intent back); one that finds it accepted drops it.
    let kept = a.batch_item_failures.len() + b.batch_item_failures.len();
    assert!(kept <= 1, "at most the copy that met the held claim keeps the message");
    assert_eq!(sms_count(&p.emulator).await, 1);
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_meets_a_claim_still_held_keeps_its_message_until_the_lease_ends() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("held-1", "+14155550113")).await;
    let key = key_of(&body);
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    // Another attempt holds the claim (a digest that pulled it from the backlog, say).
    let now = p.clock.now_utc();
    let held = p.ledger.claim(&key, "other-attempt", now, now + chrono::Duration::minutes(2)).await.expect("claim");
    assert!(matches!(held, tocsin::ports::ClaimOutcome::Claimed(_)));
    let resp = p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.invocation_deadline()).await;
    assert_eq!(resp.batch_item_failures.len(), 1, "kept: the holder may still hand it back");
    assert!(p.receive(&q.url, 10).await.is_empty(), "hidden until the holder's lease ends");
    assert_eq!(sms_count(&p.emulator).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_message_after_acceptance_does_nothing() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("redeliver-1", "+14155550112")).await;
    p.run_sender().await;
    let key = key_of(&body);
    p.enqueue_again(&key).await;
    p.run_sender().await;
    assert_eq!(sms_count(&p.emulator).await, 1);
    assert_eq!(p.record(&key).await.status.attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_then_accepted_sends_one_sms_after_a_backoff() {
    let (p, proxy) = with_sns_proxy().await;
    proxy.add_rule(Rule::once("SNS.Publish", Fault::sns_throttling()));
    let (_, body) = p.submit(&alert("throttle-1", "+14155550113")).await;
    let key = key_of(&body);
    let first = p.run_sender().await;
    assert_eq!(first[0].batch_item_failures.len(), 1, "a throttled publish is retried through the queue");
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.attempts), (State::Queued, 1));
    assert_eq!(sms_count(&p.emulator).await, 0);
    assert_eq!(p.receive(&p.stack.queue("SendQueue").url, 10).await.len(), 0, "hidden for the backoff delay");
    p.make_send_queue_visible().await;
    p.run_sender().await;
    assert_eq!(sms_count(&p.emulator).await, 1);
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.attempts), (State::Accepted, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_from_sns_is_retryable_and_retries_are_bounded() {
    // Storm mode off: on, the person's budget (3 SMS per 5 minutes, spent before each publish)
    // holds the fourth try until the window moves, which this test does not wait for.
    let p =
        Pipeline::start_with(tocsin_tests::Options { env: vec![("TOCSIN_STORM_MODE", "off")], ..Default::default() })
            .await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 7).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    proxy.add_rule(Rule::times("SNS.Publish", Fault::sns_error("InternalError", "boom", 500), 100));
    let (_, body) = p.submit(&alert("5xx-1", "+14155550114")).await;
    let key = key_of(&body);
    for _ in 0..10 {
        p.run_sender().await;
        p.make_send_queue_visible().await;
    }
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Failed, "gave up after the configured attempts");
    assert_eq!(r.status.attempts, 5);
    assert!(r.status.last_error.as_deref().unwrap_or_default().contains("5 attempts"));
    assert_eq!(sms_count(&p.emulator).await, 0);
    p.run_escalation().await;
    assert_eq!(p.escalations().await.len(), 1, "a failed intent is escalated at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_publish_response_becomes_send_unknown_and_is_never_resent() {
    let (p, proxy) = with_sns_proxy().await;
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let (_, body) = p.submit(&alert("dropped-1", "+14155550115")).await;
    let key = key_of(&body);
    let resp = p.run_sender().await;
    assert!(resp[0].batch_item_failures.is_empty(), "unknown is acknowledged, not retried");
    assert_eq!(sms_count(&p.emulator).await, 1, "the request did reach SNS");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);

    // The message comes back anyway (another copy, a replayed request): still no second SMS.
    p.enqueue_again(&key).await;
    p.run_sender().await;
    let (status, again) = p.submit(&alert("dropped-1", "+14155550115")).await;
    assert_eq!((status, again["state"].as_str()), (200, Some("send_unknown")));
    p.run_sender().await;
    assert_eq!(sms_count(&p.emulator).await, 1);

    // At the deadline it goes to a human, with the honest reason.
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    let esc = p.escalations().await;
    assert_eq!(esc.len(), 1);
    assert!(esc[0].0.reason.contains("outcome is unknown"), "{}", esc[0].0.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_refused_before_sending_is_retryable() {
    // Nothing listens on the SNS endpoint: the request provably never left.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let p = Pipeline::start().await.with_sns_endpoint(&format!("http://{closed}")).await;
    let (_, body) = p.submit(&alert("refused-1", "+14155550116")).await;
    let resp = p.run_sender().await;
    assert_eq!(resp[0].batch_item_failures.len(), 1);
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Queued);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_parameter_from_sns_fails_the_intent_for_good() {
    let (p, proxy) = with_sns_proxy().await;
    proxy.add_rule(Rule::once(
        "SNS.Publish",
        Fault::sns_error("InvalidParameter", "Invalid parameter: PhoneNumber", 400),
    ));
    let (_, body) = p.submit(&alert("invalid-1", "+14155550117")).await;
    let resp = p.run_sender().await;
    assert!(resp[0].batch_item_failures.is_empty());
    let r = p.record(&key_of(&body)).await;
    assert_eq!(r.status.state, State::Failed);
    assert!(r.status.last_error.as_deref().unwrap_or_default().contains("InvalidParameter"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suppressed_recipient_gets_no_sms_and_the_alert_is_escalated() {
    let p = Pipeline::start().await;
    let number = tocsin::domain::PhoneNumber::parse("+14155550118").expect("valid");
    let evidence = SuppressionEvidence {
        log_event_id: "earlier".into(),
        provider_response: Some("Phone number is opted out".into()),
        at: p.clock.now_utc(),
        intent_key: "0".repeat(64),
        table_version: "test".into(),
    };
    p.registry.suppress(&number, &evidence).await.expect("suppress");
    let (_, body) = p.submit(&alert("suppressed-1", "+14155550118")).await;
    p.run_sender().await;
    assert_eq!(sms_count(&p.emulator).await, 0);
    let key = key_of(&body);
    assert_eq!(p.record(&key).await.status.state, State::Suppressed);
    p.run_escalation().await;
    let esc = p.escalations().await;
    assert_eq!(esc.len(), 1, "escalated before its deadline");
    assert!(esc[0].0.reason.contains("NOT sent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_picked_up_after_its_deadline_is_not_sent_and_is_escalated() {
    let p = Pipeline::start().await;
    let mut req = alert("stale-1", "+14155550119");
    req["deadline"] = serde_json::json!("2m");
    let (_, body) = p.submit(&req).await;
    p.clock.advance(Duration::minutes(3));
    p.run_sender().await;
    assert_eq!(sms_count(&p.emulator).await, 0);
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Stale);
    p.run_escalation().await;
    assert_eq!(p.escalations().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_lease_expires_without_a_result_becomes_unknown_not_a_resend() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("crash-1", "+14155550120")).await;
    let key = key_of(&body);
    // A sender claimed and crashed (between publish and record, or before publishing: unknowable).
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "crashed-attempt", now, now + Duration::minutes(2)).await.expect("claim");
    p.clock.advance(Duration::minutes(3));
    p.run_sender().await; // the original message comes back after the visibility timeout
    assert_eq!(sms_count(&p.emulator).await, 0);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
}

/// An intent the sweep re-enqueued a while ago has its next check far ahead; a sender claims it
/// and dies at once. The claim's own write has brought the check to the lease's end, so the sweep
/// (not the message's return) finds the lapsed lease then: `send_unknown`, its moment kept.
/// Before, the check was moved by a second write after the claim, which a dying sender skipped
/// (SNS seed 142759: a chain level `sending` for 23 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_dying_right_after_claiming_a_re_enqueued_intent_leaves_it_to_the_sweep_by_the_lease_end() {
    use tocsin::ports::{DueIndex, NextCheck};
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("claim-late-check", "+14155550129")).await;
    let key = key_of(&body);
    let now = p.clock.now_utc();
    // As the sweep's re-enqueue leaves it: the next look 20 minutes on.
    p.ledger.set_next_check(&key, NextCheck::At(now + Duration::minutes(20)), None).await.expect("check");
    let lease_until = now + Duration::minutes(2);
    p.ledger.claim(&key, "died-at-once", now, lease_until).await.expect("claim");
    let check = p.record(&key).await.status.next_check.map(|c| c.timestamp_millis());
    assert_eq!(check, Some(lease_until.timestamp_millis()), "the claim moved the check to the lease's end");
    p.clock.advance(Duration::minutes(3));
    p.run_escalation().await;
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown, "the sweep found the lapsed lease");
    assert_eq!(sms_count(&p.emulator).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_record_fails_alone_and_the_good_ones_are_sent() {
    let p = Pipeline::start().await;
    p.submit(&alert("batch-good-1", "+14155550121")).await;
    let q = p.stack.queue("SendQueue").clone();
    p.sqs.send_message().queue_url(&q.url).message_body("{not json").send().await.expect("send");
    p.sqs.send_message().queue_url(&q.url).message_body(r#"{"key":"nope"}"#).send().await.expect("send");
    let msgs = p.receive(&q.url, 10).await;
    assert_eq!(msgs.len(), 3);
    let resp = p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.invocation_deadline()).await;
    assert_eq!(resp.batch_item_failures.len(), 2, "only the two bad records fail");
    assert_eq!(sms_count(&p.emulator).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_that_outlasts_the_publish_timeout_is_send_unknown_and_never_resent() {
    // SNS takes 3 s to act on the publish; the sender gives up after its 1 s publish timeout.
    let p = Pipeline::start_with(tocsin_tests::Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_PUBLISH_TIMEOUT", "1s")],
        ..Default::default()
    })
    .await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 7).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    proxy.add_rule(Rule::once("SNS.Publish", Fault::Delay(std::time::Duration::from_secs(3))));
    let (_, body) = p.submit(&alert("slow-1", "+14155550122")).await;
    let key = key_of(&body);

    let started = std::time::Instant::now();
    let resp = p.run_sender().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(3), "the sender did not wait for SNS");
    assert!(resp[0].batch_item_failures.is_empty(), "unknown is acknowledged, not retried");
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.attempts), (State::SendUnknown, 1));
    assert_eq!(r.status.sns_message_id, None);

    // SNS acted on it after the sender gave up: the SMS did go out.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert_eq!(sms_count(&p.emulator).await, 1);

    // Redelivery and a replayed request send nothing more.
    p.enqueue_again(&key).await;
    p.make_send_queue_visible().await;
    p.run_sender().await;
    let (status, again) = p.submit(&alert("slow-1", "+14155550122")).await;
    assert_eq!((status, again["state"].as_str()), (200, Some("send_unknown")));
    p.run_sender().await;
    assert_eq!(sms_count(&p.emulator).await, 1, "never a second SMS after a timeout");
    assert_eq!(p.record(&key).await.status.attempts, 1);
}

async fn suppressed_then_re_enabled(p: &Pipeline, number: &str) {
    let phone = tocsin::domain::PhoneNumber::parse(number).expect("number");
    let evidence = SuppressionEvidence {
        log_event_id: format!("ev-{number}"),
        provider_response: Some("Phone number is opted out".into()),
        at: p.clock.now_utc(),
        intent_key: "earlier".into(),
        table_version: "t".into(),
    };
    p.registry.suppress(&phone, &evidence).await.expect("suppress");
    assert!(
        p.registry
            .re_enable(&phone, "alice@ops", "asked to be paged again", p.clock.now_utc())
            .await
            .expect("re-enable")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_enabled_number_that_sns_still_holds_as_opted_out_is_not_sent_to_and_says_why() {
    let p = Pipeline::start().await;
    // The emulator holds every number ending in 99 as opted out.
    suppressed_then_re_enabled(&p, "+14155550199").await;
    let (_, body) = p.submit(&alert("re-enabled-opted-out", "+14155550199")).await;
    let key = key_of(&body);
    p.run_sender().await;
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Suppressed, "{:?}", r.status);
    assert_eq!(sms_count(&p.emulator).await, 0, "SNS would have accepted and dropped it");
    let why = p.timeline(&key).await.iter().map(|o| o.summary()).collect::<Vec<_>>().join(" | ");
    assert!(why.contains("reply START"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_enabled_number_is_checked_with_sns_once_then_sent_to_as_usual() {
    let p = Pipeline::start().await;
    suppressed_then_re_enabled(&p, "+14155550123").await;
    p.emulator.start_recording().await.expect("record");
    for i in 0..2 {
        let (_, body) = p.submit(&alert(&format!("re-enabled-{i}"), "+14155550123")).await;
        p.run_sender().await;
        assert_eq!(p.record(&key_of(&body)).await.status.state, State::Accepted);
    }
    let ops = p.emulator.stop_recording().await.expect("recording");
    let checks = ops.iter().filter(|o| o.ends_with("CheckIfPhoneNumberIsOptedOut")).count();
    assert_eq!(checks, 1, "asked before the first send only: {ops:?}");
    assert_eq!(sms_count(&p.emulator).await, 2);
}
