//! The sample events in `events/sms-preferences/` (Create, Update, Delete — in CloudFormation's
//! order) through the real `sms-preferences` binary, run under a Lambda Runtime API stand-in
//! against the local emulator and configured from template.yaml. Each event's ResponseURL is
//! pointed at a local stand-in (path and pre-signed query kept), which records the answers.

mod common;

use common::{ROLE, ResponseCapture, Running, request, sms_attributes};
use serde_json::{Value, json};
use tocsin_harness::{Emulator, Stack, workspace_root};

/// The custom resource exists only when SNS sends (it sets the account's SNS SMS preferences).
const SNS: &[(&str, &str)] = &[("SmsProvider", "sns")];

/// The `sms-preferences` binary with the environment template.yaml gives it, and `changes`.
async fn start(emulator: &Emulator, stack: &Stack, changes: &[(&str, &str)]) -> Running {
    Running::start(emulator, stack, env!("CARGO_BIN_EXE_sms-preferences"), "SmsPreferencesFunction", changes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_event_is_answered_success_through_the_runtime_interface() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config().await;
    let stack = Stack::provision_with(&sdk, "tocsin-local", SNS).await.expect("provision");
    let capture = ResponseCapture::start().await;
    let dir = workspace_root().join("events").join("sms-preferences");
    let mut events: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("events/sms-preferences")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read");
            (
                p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                serde_json::from_str(&text).expect("JSON"),
            )
        })
        .collect();
    let order = |e: &Value| ["Create", "Update", "Delete"].iter().position(|k| e["RequestType"] == *k);
    events.sort_by_key(|(_, e)| order(e));
    assert_eq!(events.len(), 3, "Create, Update and Delete samples");

    // The samples are a stack created with the template's defaults, then updated to
    // MonthlySpendLimitUsd=250: CloudFormation updates the function's environment before it
    // sends the custom resource's Update, so the Update and the Delete meet a function set to 250.
    let mut running = start(&emulator, &stack, &[]).await;
    for (i, (file, mut event)) in events.clone().into_iter().enumerate() {
        if i == 1 {
            let _ = running.child.kill().await;
            running = start(&emulator, &stack, &[("TOCSIN_MONTHLY_SPEND_LIMIT_USD", "250")]).await;
        }
        let original = event["ResponseURL"].as_str().expect("ResponseURL").to_owned();
        event["ResponseURL"] = Value::String(capture.rehost(&original));
        // CloudFormation hands over this stack's delivery-status role (the samples name another
        // stack's): the one the function's environment names too.
        for props in ["ResourceProperties", "OldResourceProperties"] {
            if event[props].get("DeliveryStatusIAMRole").is_some() {
                event[props]["DeliveryStatusIAMRole"] = Value::String(ROLE.to_owned());
            }
        }
        let returned = running.invoke(event).await;
        assert_eq!(returned["Status"], "SUCCESS", "events/sms-preferences/{file}: {returned}");
    }
    let ignored: Vec<Value> = running.log_lines().await.into_iter().filter(|l| l.get("property").is_some()).collect();
    assert!(ignored.is_empty(), "the samples ask for what the stack sets: {ignored:?}");
    let _ = running.child.kill().await;
    emulator.iam().assert_no_denials();

    let answers = capture.answers();
    assert_eq!(answers.len(), events.len(), "one answer per event");
    for ((file, event), answer) in events.iter().zip(&answers) {
        let original = event["ResponseURL"].as_str().unwrap_or_default();
        assert!(original.ends_with(&answer.path_and_query), "{file}: answered on its own ResponseURL");
        for echoed in ["StackId", "RequestId", "LogicalResourceId"] {
            assert_eq!(answer.body[echoed], event[echoed], "{file}: {echoed}");
        }
        assert_eq!(answer.body["Status"], "SUCCESS", "{file}");
        assert_eq!(answer.body["PhysicalResourceId"], "tocsin-sms-preferences-us-east-1", "{file}");
    }
    let attrs = sms_attributes(&sdk).await;
    assert_eq!(attrs.get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE));
    assert_eq!(attrs.get("DeliveryStatusSuccessSamplingRate").map(String::as_str), Some("100"));
    assert_eq!(attrs.get("DefaultSMSType").map(String::as_str), Some("Transactional"));
    assert_eq!(attrs.get("MonthlySpendLimit").map(String::as_str), Some("250"), "set by Update, kept by Delete");
}

/// Anyone allowed to invoke the function can hand it an event of their own: the binary, deployed
/// with MonthlySpendLimitUsd=5, sets 5 whatever the event asks, and says in its log that it
/// ignored the event's value — without echoing free text the event carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_invocation_asking_for_a_higher_spend_limit_sets_the_stacks_and_logs_what_it_ignored() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config().await;
    let stack = Stack::provision_with(&sdk, "tocsin-local", SNS).await.expect("provision");
    let capture = ResponseCapture::start().await;
    let mut running = start(&emulator, &stack, &[("TOCSIN_MONTHLY_SPEND_LIMIT_USD", "5")]).await;
    let abuse = request(
        "Update",
        &capture.url("req-abuse"),
        "req-abuse",
        json!({"DeliveryStatusIAMRole": "arn:aws:iam::123456789012:role/+14155550100", "MonthlySpendLimit": "100000"}),
    );

    let returned = running.invoke(abuse).await;

    assert_eq!(returned["Status"], "SUCCESS", "{returned}");
    assert_eq!(returned["Data"]["MonthlySpendLimit"], "5", "{returned}");
    let attrs = sms_attributes(&sdk).await;
    assert_eq!(attrs.get("MonthlySpendLimit").map(String::as_str), Some("5"), "not raised: {attrs:?}");
    assert_eq!(attrs.get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE), "the stack's role: {attrs:?}");
    let lines = running.log_lines().await;
    let _ = running.child.kill().await;
    emulator.iam().assert_no_denials();
    let ignored: Vec<&Value> = lines.iter().filter(|l| l.get("property").is_some()).collect();
    let limit = ignored.iter().find(|l| l["property"] == "MonthlySpendLimit").expect("the limit's line");
    assert_eq!((limit["event_value"].as_str(), limit["applied"].as_str()), (Some("100000"), Some("5")), "{limit}");
    assert_eq!(limit["level"], "WARN", "{limit}");
    assert!(ignored.iter().any(|l| l["property"] == "DeliveryStatusIAMRole"), "{ignored:?}");
    let text = lines.iter().map(Value::to_string).collect::<String>();
    assert!(!text.contains("4155550100"), "no phone number from the event in the logs: {text}");
}
