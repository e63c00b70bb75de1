//! `tocsin doctor --probe NUMBER` end to end on the emulator: the real `tocsin` binary sends one
//! alert through the stack's API and follows it through real AWS reads — the ledger (accepted by
//! SNS), the delivery-status log groups (`FilterLogEvents`), the ledger again (applied by status).
//!
//! The harness plays what AWS does between those reads, in a loop beside the running binary: API
//! Gateway (`common::api`, SigV4 checked), the SQS event source mapping (`run_sender`), SNS and the
//! carrier writing the delivery-status record (`carrier_reports`), and the log group's
//! subscription (`run_status`). Leaving one of them out is how a hop breaks; the probe must say
//! which. Doctor's other checks see a sound stack: what moto cannot answer (the sandbox, CloudWatch,
//! the subscription filters the harness plays, the sender's concurrency) comes from recordings.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::api::{stack_with_api, start_api};
use common::{Run, aws_env, tocsin_with};
use serde_json::json;
use tocsin_harness::recorded::{Answer, Recorded};
use tocsin_tests::Pipeline;

const NUMBER: &str = "+14155550150";
/// The pipeline's own stack: the operator policy the IAM gate applies is written for it.
const STACK: &str = "tocsin-local";
const STATUS_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:tocsin-local-status";

/// Which of AWS's parts the harness plays while the probe runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum World {
    /// Everything: the sender runs, the carrier delivers, the subscription hands the record on.
    Sound,
    /// The send queue is never consumed.
    NoSender,
    /// SNS never writes a delivery-status record (logging off, or a silent carrier).
    NoRecord,
    /// The record is written but the subscription never hands it to the status function.
    NoSubscription,
    /// The carrier reports a failure.
    CarrierFails,
}

/// One pass of the world: what AWS would have done by now.
async fn step(p: &Pipeline, world: World, reported: &mut Vec<String>) {
    if world == World::NoSender {
        return;
    }
    p.run_sender().await;
    if world == World::NoRecord {
        return;
    }
    for sms in p.emulator.sent_sms().await.expect("sms") {
        if sms.phone_number == NUMBER && !reported.contains(&sms.message_id) {
            let (ok, response) = match world {
                World::CarrierFails => (false, "Phone is currently unreachable/unavailable"),
                _ => (true, "Message has been accepted by phone carrier"),
            };
            p.carrier_reports(&sms.message_id, NUMBER, ok, response).await;
            reported.push(sms.message_id);
        }
    }
    if world != World::NoSubscription {
        p.run_status().await;
    }
}

struct Setup {
    p: Arc<Pipeline>,
    /// The recorded answers' server, alive as long as the setup (reached through `recorded_front`).
    _recorded: Recorded,
    /// The recorded answers behind the same IAM gate as the emulator: the operator's policy
    /// must allow every call doctor makes, recorded or not.
    recorded_front: tocsin_harness::iam::Gate,
    _api: common::api::ApiStandIn,
}

/// A stack whose doctor checks pass, its API at the stand-in (`secret`: what it checks
/// signatures with; `test` is the caller's).
async fn setup(secret: &'static str) -> Setup {
    let p = Arc::new(Pipeline::start().await);
    let api = start_api(p.clone(), secret).await;
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
    let sns = aws_sdk_sns::Client::new(&sdk);
    sns.set_sms_attributes()
        .attributes("DeliveryStatusIAMRole", "arn:aws:iam::123456789012:role/tocsin-local-SmsDeliveryStatusRole")
        .attributes("DeliveryStatusSuccessSamplingRate", "100")
        .attributes("DefaultSMSType", "Transactional")
        .attributes("MonthlySpendLimit", "10")
        .send()
        .await
        .expect("SetSMSAttributes");
    let topic = p.stack.topics.get("AlarmTopic").expect("the on-call topic").clone();
    sns.subscribe().topic_arn(topic).protocol("email").endpoint("oncall@example.com").send().await.expect("subscribe");
    let filters = json!({"subscriptionFilters": [{"filterName": "tocsin-local-StatusFunctionLogs", "logGroupName": "sns",
        "filterPattern": "", "destinationArn": STATUS_ARN, "creationTime": 1_796_000_000_000_i64}]});
    let recorded = Recorded::start(
        &p.emulator.endpoint(),
        vec![
            ("GetSMSSandboxAccountStatus", Answer::sns_query("GetSMSSandboxAccountStatus", "<IsInSandbox>false</IsInSandbox>")),
            (
                "GetMetricData",
                Answer::rpc_v2_cbor(&json!({"MetricDataResults": [{"Id": "spend", "Label": "SMSMonthToDateSpentUSD",
                    "Timestamps": [{"$timestamp": 1_796_000_000.0}], "Values": [1.0], "StatusCode": "Complete"}], "Messages": []})),
            ),
            ("DescribeAlarms", Answer::rpc_v2_cbor(&json!({"MetricAlarms": [], "CompositeAlarms": []}))),
            ("DescribeSubscriptionFilters", Answer::json(&filters)),
            ("GetFunctionConcurrency", Answer::json(&json!({"ReservedConcurrentExecutions": 2}))),
            (
                "ListOriginationNumbers",
                Answer::sns_query(
                    "ListOriginationNumbers",
                    "<PhoneNumbers><member><PhoneNumber>+18445550100</PhoneNumber><Status>ACTIVE</Status>\
                     <Iso2CountryCode>US</Iso2CountryCode><RouteType>Transactional</RouteType>\
                     <NumberCapabilities><member>SMS</member></NumberCapabilities></member></PhoneNumbers>",
                ),
            ),
        ],
    )
    .await
    .expect("recorded");
    let recorded_front = tocsin_harness::iam::Gate::start(&recorded.endpoint(), p.emulator.iam().principals())
        .await
        .expect("gate in front of the recorded answers");
    Setup { p, _recorded: recorded, recorded_front, _api: api }
}

/// Runs `tocsin doctor --probe NUMBER` while the harness plays `world` beside it.
async fn probe(s: &Setup, world: World, hop_timeout: &str, json: bool) -> Run {
    let mut env = aws_env(&s.p.emulator.endpoint());
    for service in ["SNS", "CLOUDWATCH", "CLOUDWATCH_LOGS", "LAMBDA"] {
        env.push((format!("AWS_ENDPOINT_URL_{service}"), s.recorded_front.endpoint()));
    }
    let mut args = vec!["--stack", STACK];
    if json {
        args.push("--json");
    }
    args.extend(["doctor", "--probe", NUMBER, "--probe-hop-timeout", hop_timeout, "--probe-poll", "200ms"]);
    let cli = tocsin_with(env, &args);
    tokio::pin!(cli);
    let mut reported = Vec::new();
    loop {
        tokio::select! {
            run = &mut cli => return run,
            () = async {
                step(&s.p, world, &mut reported).await;
                tokio::time::sleep(Duration::from_millis(150)).await;
            } => {}
        }
    }
}

fn probe_lines(r: &Run) -> Vec<&str> {
    r.stdout.lines().filter(|l| l.contains(" probe ")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_follows_one_sms_round_the_whole_loop_and_doctor_passes() {
    let s = setup("test").await;
    let r = probe(&s, World::Sound, "20s", false).await;
    assert_eq!(r.code, 0, "{r:?}");
    let lines = probe_lines(&r);
    let expected = [
        "ok      probe 1/4 sent through the API: intent ",
        "ok      probe 2/4 accepted by SNS: message id ",
        "ok      probe 3/4 delivery record in the log group: SUCCESS (Message has been accepted by phone carrier) in sns/us-east-1/123456789012/DirectPublishToPhoneNumber",
        "ok      probe 4/4 applied by status: delivered to +1******0150",
    ];
    assert_eq!(lines.len(), expected.len(), "{}", r.stdout);
    for (line, want) in lines.iter().zip(expected) {
        assert!(line.starts_with(want), "{line:?} should start with {want:?}");
    }
    assert!(r.stdout.trim_end().ends_with("tocsin-local: nothing to fix."), "{}", r.stdout);
    assert!(!r.stdout.contains(NUMBER) && !r.stderr.contains(NUMBER), "the number stays masked");
    let sms = s.p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1, "one SMS: {sms:?}");
    assert!(sms[0].message.starts_with("tocsin probe "), "{}", sms[0].message);
}

/// Each hop that does not happen is where the probe stops: one PROBLEM line naming it and what
/// usually breaks there, no line for the hops after it, exit 1.
async fn stops_at(world: World, secret: &'static str, hop: usize, says: &str) {
    let s = setup(secret).await;
    let r = probe(&s, world, "3s", false).await;
    assert_eq!(r.code, 1, "{r:?}");
    let problems: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("PROBLEM")).collect();
    assert_eq!(problems.len(), 1, "only the probe's hop is a problem:\n{}", r.stdout);
    assert!(problems[0].starts_with(&format!("PROBLEM probe {hop}/4 ")), "{}", problems[0]);
    assert!(problems[0].contains(says), "{:?} should say {says:?}", problems[0]);
    assert!(problems[0].ends_with(&format!("(the probe stopped at hop {hop} of 4)")), "{}", problems[0]);
    let lines = probe_lines(&r);
    assert_eq!(lines.len(), hop, "hops 1..{hop} reported, none after:\n{}", r.stdout);
    assert!(!r.stdout.contains(NUMBER), "the number stays masked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_the_api_refuses_stops_at_hop_1_and_names_the_permission() {
    stops_at(World::Sound, "not-the-callers-secret", 1, "execute-api:Invoke").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_no_sender_publishes_stops_at_hop_2() {
    stops_at(World::NoSender, "test", 2, "no SNS message id after 3s (state received): the sender has not sent it")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_whose_delivery_record_never_reaches_the_log_group_stops_at_hop_3() {
    stops_at(World::NoRecord, "test", 3, "SNS is not logging SMS delivery status").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_whose_record_the_status_function_never_gets_stops_at_hop_4() {
    stops_at(World::NoSubscription, "test", 4, "the status function has not applied it").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_the_carrier_fails_goes_round_the_loop_and_says_the_sms_did_not_arrive() {
    let s = setup("test").await;
    let r = probe(&s, World::CarrierFails, "20s", true).await;
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["probe"]["stopped_at"], serde_json::Value::Null, "{doc}");
    assert_eq!(doc["probe"]["outcome"], "failed");
    assert_eq!(doc["probe"]["recipient"], "+1******0150");
    let hops: Vec<(&str, &str)> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["check"].as_str().is_some_and(|n| n.starts_with("probe ")))
        .map(|c| (c["check"].as_str().unwrap_or_default(), c["verdict"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        hops,
        [
            ("probe 1/4 sent through the API", "ok"),
            ("probe 2/4 accepted by SNS", "ok"),
            ("probe 3/4 delivery record in the log group", "ok"),
            ("probe 4/4 applied by status", "problem"),
        ]
    );
    assert!(r.stdout.contains("Phone is currently unreachable/unavailable"), "{}", r.stdout);
}
