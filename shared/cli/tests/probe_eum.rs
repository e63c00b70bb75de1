//! `tocsin doctor` on a stack that sends through End User Messaging, end to end on the emulator:
//! doctor's End User Messaging checks, `--probe NUMBER` following the alert's key through the
//! stack's event group, and `--simulator` proving success and failure from a SIMULATOR origination
//! number to AWS's simulator destinations.
//!
//! The real `tocsin` binary runs; beside it the harness plays what AWS does between its reads:
//! API Gateway (`common::api`, SigV4 checked), the SQS event source mapping (`run_sender`, whose
//! SendTextMessage reaches the End User Messaging stand-in, which writes the message's events to the
//! stack's event group), the group's subscription (`run_status`) and the escalation schedule
//! (`run_escalation`). What the emulator does not serve comes from recordings: CloudWatch
//! (`GetMetricData`, `DescribeAlarms`), the subscription filters the harness plays, the sender's
//! concurrency.

mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_pinpointsmsvoicev2 as eum;
use common::api::{stack_with_api, start_api};
use common::{Run, aws_env, tocsin_with};
use serde_json::json;
use tocsin_harness::eum::{Carrier, CarrierBehaviour};
use tocsin_harness::recorded::{Answer, Recorded};
use tocsin_tests::{Options, Pipeline};

const NUMBER: &str = "+14155550150";
const SUCCESS: &str = "+14254147755";
const FAILURE: &str = "+14254147167";
const STACK: &str = "tocsin-local";
/// The simulator number the stand-in gives the second number requested (the first is the toll-free).
const SIMULATOR_NUMBER: &str = "+12065550002";
const STATUS_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:tocsin-local-status";
const GROUP: &str = "/tocsin/tocsin-local/sms-events";

struct Setup {
    p: Arc<Pipeline>,
    _recorded: Recorded,
    recorded_front: tocsin_harness::iam::Gate,
    _api: common::api::ApiStandIn,
}

/// An End User Messaging stack whose doctor checks pass: production account, one active toll-free
/// number (`+18335550001`), the stack's configuration set and event group, an e-mail on-call.
async fn setup() -> Setup {
    // The simulator number the tests request second (after the toll-free one): doctor
    // --simulator's probes leave from it, so the stack's SMS policy must allow it.
    let mut options = Options::end_user_messaging();
    options.parameters.push(("SmsAllowedOriginationNumbers", SIMULATOR_NUMBER));
    let p = Arc::new(Pipeline::start_with(options).await);
    let api = start_api(p.clone(), "test").await;
    stack_with_api(
        &p,
        STACK,
        &api,
        &[
            ("StatusFunctionArn", STATUS_ARN),
            ("SenderFunctionName", "tocsin-local-sender"),
            ("IntakeFunctionName", "tocsin-local-intake"),
            ("StatusFunctionName", "tocsin-local-status"),
            ("EscalationFunctionName", "tocsin-local-escalation"),
        ],
    )
    .await;
    let sdk = p.emulator.sdk_config().await;
    let topic = p.stack.topics.get("AlarmTopic").expect("the on-call topic").clone();
    aws_sdk_sns::Client::new(&sdk)
        .subscribe()
        .topic_arn(topic)
        .protocol("email")
        .endpoint("oncall@example.com")
        .send()
        .await
        .expect("subscribe");
    let filters = json!({"subscriptionFilters": [{"filterName": "tocsin-local-StatusFunctionEvents", "logGroupName": GROUP,
        "filterPattern": "", "destinationArn": STATUS_ARN, "creationTime": 1_796_000_000_000_i64}]});
    let recorded = Recorded::start(
        &p.emulator.endpoint(),
        vec![
            (
                "GetMetricData",
                Answer::rpc_v2_cbor(&json!({"MetricDataResults": [{"Id": "spend", "Label": "TextMessageMonthlySpend",
                    "Timestamps": [{"$timestamp": 1_796_000_000.0}], "Values": [3.0], "StatusCode": "Complete"}], "Messages": []})),
            ),
            ("DescribeAlarms", Answer::rpc_v2_cbor(&json!({"MetricAlarms": [], "CompositeAlarms": []}))),
            ("DescribeSubscriptionFilters", Answer::json(&filters)),
            ("GetFunctionConcurrency", Answer::json(&json!({"ReservedConcurrentExecutions": 2}))),
        ],
    )
    .await
    .expect("recorded");
    let recorded_front = tocsin_harness::iam::Gate::start(&recorded.endpoint(), p.emulator.iam().principals())
        .await
        .expect("gate in front of the recorded answers");
    Setup { p, _recorded: recorded, recorded_front, _api: api }
}

/// Runs `tocsin --stack tocsin-local doctor ARGS` while the harness plays AWS beside it.
async fn doctor(s: &Setup, json: bool, args: &[&str]) -> Run {
    let mut env = aws_env(&s.p.emulator.endpoint());
    for service in ["CLOUDWATCH", "CLOUDWATCH_LOGS", "LAMBDA"] {
        env.push((format!("AWS_ENDPOINT_URL_{service}"), s.recorded_front.endpoint()));
    }
    let mut all = vec!["--stack", STACK];
    if json {
        all.push("--json");
    }
    all.push("doctor");
    all.extend_from_slice(args);
    all.extend(["--probe-hop-timeout", "20s", "--probe-poll", "200ms"]);
    let cli = tocsin_with(env, &all);
    tokio::pin!(cli);
    loop {
        tokio::select! {
            run = &mut cli => return run,
            () = async {
                s.p.run_sender().await;
                s.p.run_status().await;
                s.p.run_escalation().await;
                tokio::time::sleep(Duration::from_millis(150)).await;
            } => {}
        }
    }
}

fn lines_of<'a>(r: &'a Run, probe: &str) -> Vec<&'a str> {
    r.stdout.lines().filter(|l| l.contains(probe)).collect()
}

fn assert_masked(r: &Run) {
    for n in [NUMBER, SUCCESS, FAILURE, "+18335550001", "+12065550002"] {
        assert!(!r.stdout.contains(n) && !r.stderr.contains(n), "{n} in clear:\n{}\n{}", r.stdout, r.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_follows_its_key_through_the_stacks_event_group_and_names_the_number_it_left_from() {
    let s = setup().await;
    let r = doctor(&s, false, &["--probe", NUMBER]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let expected = [
        "ok      probe 1/4 sent through the API: intent ",
        "ok      probe 2/4 accepted by End User Messaging: message id ",
        "ok      probe 3/4 events in the stack's event group: TEXT_SUCCESSFUL → TEXT_DELIVERED (final) from \
         +1******0001, each naming tocsin-local and this alert's key in its context, in /tocsin/tocsin-local/sms-events",
        "ok      probe 4/4 applied by status: delivered to +1******0150",
    ];
    let lines = lines_of(&r, " probe ");
    assert_eq!(lines.len(), expected.len(), "{}", r.stdout);
    for (line, want) in lines.iter().zip(expected) {
        assert!(line.starts_with(want), "{line:?} should start with {want:?}");
    }
    assert!(lines[1].contains("from an identity End User Messaging chose (no SmsOriginationIdentity)"), "{}", lines[1]);
    for line in [
        "ok      End User Messaging region: us-east-1 offers End User Messaging SMS",
        "ok      SMS sandbox: account tier PRODUCTION",
        "ok      origination identity: SmsOriginationIdentity not set: End User Messaging chooses among 1: phone-",
        "ok      SMS spend: 3.00 USD this month of",
        "ok      configuration set: tocsin-local: event destination tocsin-local-status, enabled, TEXT_ALL",
        "ok      event log group: /tocsin/tocsin-local/sms-events, subscribed by tocsin-local-StatusFunctionEvents",
    ] {
        assert!(r.stdout.contains(line), "missing {line:?} in\n{}", r.stdout);
    }
    assert!(
        !r.stdout.contains("delivery-status role") && !r.stdout.contains("DirectPublishToPhoneNumber"),
        "no SNS checks:\n{}",
        r.stdout
    );
    assert!(r.stdout.trim_end().ends_with("tocsin-local: nothing to fix."), "{}", r.stdout);
    assert_masked(&r);

    // The SMS carried the alert's key in its context, through the stack's configuration set.
    let sent = s.p.emulator.eum().sent_texts().await.expect("messages");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].configuration_set.as_deref(), Some(STACK));
    assert!(sent[0].context.as_ref().is_some_and(|c| c.contains_key("tocsin-key")), "{:?}", sent[0].context);

    let doc = doctor(&s, true, &["--probe", NUMBER]).await.json();
    assert_eq!(doc["provider"], "end-user-messaging");
    assert_eq!(doc["probe"]["origination"], "+1******0001");
    assert_eq!(doc["probe"]["events"], json!(["TEXT_SUCCESSFUL", "TEXT_DELIVERED"]));
    assert_eq!(doc["probe"]["outcome"], "delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_proves_success_and_the_failure_path_from_a_simulator_number_without_a_phone() {
    let s = setup().await;
    let sdk = s.p.emulator.sdk_config().await;
    let control = s.p.emulator.eum();
    let simulator = control
        .active_phone_number(&sdk, eum::types::RequestableNumberType::Simulator, "US")
        .await
        .expect("a simulator number");
    assert_eq!(simulator.number, SIMULATOR_NUMBER, "the number the stack's SMS policy allows");
    // AWS's failure simulator answers with a failure event (the stand-in plays it as TEXT_BLOCKED).
    control.set_carrier(FAILURE, Carrier::new(CarrierBehaviour::Blocked)).await.expect("carrier");

    let r = doctor(&s, false, &["--simulator"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let success = lines_of(&r, "simulator probe (success)");
    assert_eq!(success.len(), 4, "{}", r.stdout);
    assert!(success[1].contains("(the request's origination number)"), "{}", success[1]);
    assert!(success[2].contains("TEXT_SUCCESSFUL → TEXT_DELIVERED (final) from +1******0002"), "{}", success[2]);
    assert!(
        success[3].starts_with("ok      simulator probe (success) 4/4 applied by status: delivered to +1******7755")
    );
    let failure = lines_of(&r, "simulator probe (failure)");
    assert_eq!(failure.len(), 5, "{}", r.stdout);
    assert!(failure[2].contains("TEXT_BLOCKED (final) from +1******0002"), "{}", failure[2]);
    assert!(
        failure[3].starts_with(
            "ok      simulator probe (failure) 4/5 applied by status: failed, as AWS's failure simulator must"
        ),
        "{}",
        failure[3]
    );
    assert!(
        failure[4].starts_with("ok      simulator probe (failure) 5/5 escalated and acknowledged: escalated ("),
        "{}",
        failure[4]
    );
    assert!(failure[4].contains("1 message deleted from the escalation queue"), "{}", failure[4]);
    assert_masked(&r);

    let sent = control.sent_texts().await.expect("messages");
    let pairs: Vec<(&str, &str)> = sent.iter().map(|m| (m.origination.as_str(), m.destination.as_str())).collect();
    assert_eq!(pairs, [(simulator.number.as_str(), SUCCESS), (simulator.number.as_str(), FAILURE)]);

    // The failure suppressed its number; the next run re-enables it (audited) and proves it again.
    let r = doctor(&s, true, &["--simulator"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    let outcomes: Vec<&str> =
        doc["simulator"].as_array().expect("two probes").iter().map(|p| p["outcome"].as_str().unwrap_or("?")).collect();
    assert_eq!(outcomes, ["delivered", "failed"]);
    assert_eq!(doc["simulator"][1]["acknowledged"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_simulator_number_the_simulator_probe_sends_nothing_and_says_how_to_get_one() {
    let s = setup().await;
    let r = doctor(&s, false, &["--simulator"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    let problems: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("PROBLEM")).collect();
    assert_eq!(problems.len(), 1, "{}", r.stdout);
    assert!(
        problems[0].starts_with("PROBLEM simulator probe: the account has no ACTIVE US SIMULATOR origination number")
    );
    assert!(problems[0].contains("--number-type SIMULATOR (nothing was sent)"), "{}", problems[0]);
    assert!(s.p.emulator.eum().sent_texts().await.expect("messages").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_end_user_messaging_refuses_stops_at_hop_2_and_names_the_refusal() {
    let s = setup().await;
    s.p.emulator.eum().set_spend_exhausted(true).await.expect("spent");
    let r = doctor(&s, false, &["--probe", NUMBER]).await;
    assert_eq!(r.code, 1, "{r:?}");
    let problems: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("PROBLEM")).collect();
    assert_eq!(problems.len(), 1, "{}", r.stdout);
    assert!(
        problems[0].starts_with("PROBLEM probe 2/4 accepted by End User Messaging: not sent: failed ("),
        "{}",
        problems[0]
    );
    assert!(problems[0].contains("MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT"), "{}", problems[0]);
    assert!(problems[0].ends_with("(the probe stopped at hop 2 of 4)"), "{}", problems[0]);
    assert_masked(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_is_refused_on_a_stack_that_sends_through_sns() {
    let p = Pipeline::start_with(Options::sns()).await;
    tocsin_harness::stack_outputs::publish(&p.emulator.endpoint(), &p.stack, STACK, &[]).await.expect("outputs");
    let r = tocsin_with(aws_env(&p.emulator.endpoint()), &["--stack", STACK, "doctor", "--simulator"]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("sends through SNS: AWS's SMS simulator is End User Messaging's"), "{}", r.stderr);
}
