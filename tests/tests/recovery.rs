//! The recovery scenarios every release must pass (`../shared/design/invariants.md`), each through
//! real emulator calls, with faults injected by the proxy where the scenario needs one.

use chrono::Duration;
use serde_json::Value;
use tocsin::domain::State;
use tocsin_harness::events::{http_api_post, sns_delivery_record};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Pipeline, alert, key_of};

async fn sms(p: &Pipeline) -> usize {
    p.emulator.sent_sms().await.expect("sms").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_1_the_client_loses_the_connection_before_intake_answers_and_retries_one_intent_one_sms() {
    // Storm mode off, so the item count below is the intent's alone (storm mode adds the person's
    // send log, `BUDGET#`; tests/tests/storm_digest.rs).
    let p =
        Pipeline::start_with(tocsin_tests::Options { env: vec![("TOCSIN_STORM_MODE", "off")], ..Default::default() })
            .await;
    // Intake's enqueue reaches SQS but its answer is lost: intake cannot confirm, the caller
    // hears nothing useful (or nothing at all) and retries.
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 1).await.expect("proxy");
    proxy.add_rule(Rule::once("AmazonSQS.SendMessage", Fault::DropResponse));
    let sdk = tocsin_tests::function_sdk(&proxy.endpoint(), "IntakeFunction").await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let flaky_intake = p.intake_enqueueing_to(sqs.clone(), &p.stack.queue("SendQueue").url);
    let req = alert("scenario-1", "+14155550181");
    // Intake finishes its work, but the caller's connection is gone: the answer never arrives.
    let _lost = flaky_intake.handle(http_api_post(&req.to_string())).await.expect("answered");
    assert_eq!(proxy.injected(), 1);
    assert_eq!(p.queue_depth("SendQueue").await, 2, "the SDK's retry of the lost SendMessage left a duplicate");
    let (status, body) = p.submit(&req).await;
    assert_eq!((status, body["replay"].as_bool()), (200, Some(true)));
    p.run_sender().await;
    p.run_sender().await;
    assert_eq!(sms(&p).await, 1, "one SMS although the queue held the request twice");
    assert_eq!(p.ledger_item_count().await, 4, "one intent (+ its queued and accepted observations, message index)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_2_intake_stored_the_intent_but_its_answer_was_lost_the_same_event_returns_it_and_no_second_sms() {
    let p = Pipeline::start().await;
    // Intake's enqueue is slow (2 s); the caller gives up after 1 s — as API Gateway answers 504
    // while the function runs on — and never sees intake's answer.
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 2).await.expect("proxy");
    proxy.add_rule(Rule::once("AmazonSQS.SendMessage", Fault::Delay(std::time::Duration::from_secs(2))));
    let sqs = aws_sdk_sqs::Client::new(&tocsin_tests::function_sdk(&proxy.endpoint(), "IntakeFunction").await);
    let slow_intake = p.intake_enqueueing_to(sqs, &p.stack.queue("SendQueue").url);
    let req = alert("scenario-2", "+14155550182");
    let first = tokio::spawn({
        let event = http_api_post(&req.to_string());
        async move { slow_intake.handle(event).await.map(|r| r["statusCode"].as_u64()) }
    });
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(!first.is_finished(), "the caller gave up before intake answered");
    assert_eq!(p.ledger_item_count().await, 1, "intake had stored the intent");

    // The caller sends the same event again, while the first invocation is still running.
    let (status, body) = p.submit(&req).await;
    assert_eq!((status, body["replay"].as_bool()), (200, Some(true)), "{body}");
    let lost = first.await.expect("join").expect("intake");
    assert_eq!(lost, Some(201), "the answer nobody received");
    assert_eq!(proxy.injected(), 1);

    p.run_sender().await;
    p.run_sender().await;
    assert_eq!(sms(&p).await, 1, "no second SMS");
    let (status, body) = p.submit(&req).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("accepted")));
    assert_eq!(key_of(&body), key_of(&p.submit(&req).await.1), "the same intent every time");
}

/// Under SNS the message id is the only thing that ties a delivery record to an alert, and a lost
/// answer loses it: a record that then arrives for the same number may be another sender's SMS
/// (the phone receives those too). So it is never taken for the alert's: it is attached for the
/// person the escalation reaches, and the alert is escalated at its deadline. (End User Messaging
/// echoes the alert's key in every event, which settles this case exactly.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_3_a_lost_publish_answer_is_send_unknown_never_resent_and_escalated_with_what_the_logs_hold() {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 3).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    proxy.add_rule(Rule::times("SNS.Publish", Fault::DropResponse, 2));
    let (_, a) = p.submit(&alert("scenario-3a", "+14155550183")).await;
    let (_, b) = p.submit(&alert("scenario-3b", "+14155550184")).await;
    p.run_sender().await;
    let (ka, kb) = (key_of(&a), key_of(&b));
    assert_eq!(p.record(&ka).await.status.state, State::SendUnknown);
    assert_eq!(p.record(&kb).await.status.state, State::SendUnknown);
    // Redeliveries and replays do not send again.
    p.enqueue_again(&ka).await;
    p.submit(&alert("scenario-3b", "+14155550184")).await;
    p.run_sender().await;
    assert_eq!(sms(&p).await, 2);
    // A record to A's number arrives; nothing ties it to A. B's never does.
    let sent = p.emulator.sent_sms().await.expect("sms");
    let a_id = sent.iter().find(|m| m.phone_number == "+14155550183").map(|m| m.message_id.clone()).expect("a");
    let claimed = p.record(&ka).await.status.claimed_at.expect("claimed");
    let record = sns_delivery_record(
        &a_id,
        "+14155550183",
        true,
        "Message has been accepted by phone carrier",
        claimed + Duration::seconds(2),
    );
    p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &record).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed, run.still_unknown), (0, 1, 1), "{run:?}");
    assert_eq!(p.record(&ka).await.status.state, State::SendUnknown);
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    let esc = p.escalations().await;
    let mut keys: Vec<String> = esc.iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    keys.sort();
    let mut expected = vec![ka.to_string(), kb.to_string()];
    expected.sort();
    assert_eq!(keys, expected);
    let a_escalation = esc.iter().find(|(m, _)| m.idempotency_key == ka.to_string()).expect("A's");
    assert!(a_escalation.0.history.iter().any(|h| h.contains(&a_id)), "{:?}", a_escalation.0.history);
    assert_eq!(sms(&p).await, 2, "never a third SMS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_4_a_failed_alert_is_isolated_and_the_paging_alarm_would_fire_within_the_allowed_time() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("scenario-4", "+14155550185")).await;
    p.run_sender().await;
    let key = key_of(&body);
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    p.carrier_reports(&id, "+14155550185", false, "Phone carrier is currently unreachable/unavailable").await;
    p.run_status().await;
    // Isolated: the next sweep (every minute) puts it on the escalation queue, without waiting
    // for the deadline.
    assert_eq!(p.run_escalation().await.escalated, 1);
    assert_eq!(p.queue_depth("EscalationQueue").await, 1, "ApproximateNumberOfMessages ≥ 1");
    // The alarm watching that queue pages on the first message, within one evaluation period.
    let template = tocsin_harness::stack::load_template().expect("template");
    let alarm = template
        .get("Resources")
        .and_then(|r| r.get("EscalationWaitingAlarm"))
        .and_then(|a| a.get("Properties"))
        .expect("alarm");
    let n = |k: &str| alarm.get(k).and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
    assert_eq!(alarm.get("MetricName").and_then(|v| v.as_str()), Some("ApproximateNumberOfMessagesVisible"));
    assert_eq!(alarm.get("ComparisonOperator").and_then(|v| v.as_str()), Some("GreaterThanOrEqualToThreshold"));
    assert_eq!(n("Threshold"), 1);
    assert!(n("Period") * n("EvaluationPeriods") <= 120, "fires within two minutes of the message");
    let actions = format!("{:?}", alarm.get("AlarmActions"));
    assert!(actions.contains("AlarmTopic"), "{actions}");
    let age = template.get("Resources").and_then(|r| r.get("EscalationAgeAlarm")).expect("age alarm");
    assert_eq!(
        age.get("Properties").and_then(|p| p.get("MetricName")).and_then(|v| v.as_str()),
        Some("oldest_unacknowledged_escalation_s"),
        "the age comes from the ledger (every sweep run), not from the queue"
    );
    assert_eq!(run_age(&p).await, Some(0), "escalated this run: under a minute old");
    p.clock.advance(Duration::minutes(7));
    assert_eq!(run_age(&p).await, Some(7), "unacknowledged for 7 minutes: past the 300 s threshold");
}

/// The age the sweep reports for the oldest unacknowledged escalation, in whole minutes (the
/// pipeline's clock runs on in real time besides its advances).
async fn run_age(p: &Pipeline) -> Option<u64> {
    p.run_escalation().await.oldest_unacknowledged_s.map(|s| s / 60)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_6_recovery_after_the_deadline_sends_nothing_automatically_and_goes_to_a_human() {
    let p = Pipeline::start().await;
    let mut queued = alert("scenario-6-queued", "+14155550186");
    queued["deadline"] = Value::from("5m");
    p.submit(&queued).await;
    // Another intent never reached the queue (its enqueue failed) before the outage.
    let sqs = aws_sdk_sqs::Client::new(&p.sdk_of("IntakeFunction").await);
    let broken = p.intake_enqueueing_to(sqs, &format!("{}/123456789012/gone", p.emulator.endpoint()));
    let mut forgotten = alert("scenario-6-forgotten", "+14155550187");
    forgotten["deadline"] = Value::from("5m");
    broken.handle(http_api_post(&forgotten.to_string())).await.expect("answered");
    p.expect_iam_denied("sqs:SendMessage", ":gone");
    // The outage ends after both deadlines.
    p.clock.advance(Duration::minutes(10));
    p.run_sender().await;
    let run = p.run_escalation().await;
    assert_eq!((run.escalated, run.re_enqueued), (2, 0), "nothing re-enqueued past its deadline: {run:?}");
    p.run_sender().await;
    assert_eq!(sms(&p).await, 0, "no late SMS");
    let reasons: Vec<String> = p.escalations().await.into_iter().map(|(m, _)| m.reason).collect();
    assert!(reasons.iter().any(|r| r.contains("picked up after its deadline")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("never sent")), "{reasons:?}");
}
