//! The sample events in `events/sms-preferences/` (Create, Update, Delete — in CloudFormation's
//! order) through the real `sms-preferences` binary, run under a Lambda Runtime API stand-in
//! against the local emulator and configured from template.yaml. Each event's ResponseURL is
//! pointed at a local stand-in (path and pre-signed query kept), which records the answers.

mod common;

use std::time::Duration;

use common::{ROLE, ResponseCapture, sms_attributes};
use serde_json::Value;
use tocsin_harness::runtime_api::{Invocation, RuntimeApi};
use tocsin_harness::{Emulator, Principal, Stack, workspace_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_event_is_answered_success_through_the_runtime_interface() {
    let emulator = Emulator::start().await.expect("emulator");
    let sdk = emulator.sdk_config().await;
    let stack = Stack::provision(&sdk, "tocsin-local").await.expect("provision");
    let api = RuntimeApi::start().await.expect("runtime API");
    let capture = ResponseCapture::start().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sms-preferences"))
        .env_clear()
        .envs(stack.function_env("SmsPreferencesFunction").expect("function env from template.yaml"))
        .envs(emulator.aws_env(&Principal::function("SmsPreferencesFunction")))
        .envs(api.lambda_env("SmsPreferencesFunction"))
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
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

    for (file, mut event) in events.clone() {
        let original = event["ResponseURL"].as_str().expect("ResponseURL").to_owned();
        event["ResponseURL"] = Value::String(capture.rehost(&original));
        // CloudFormation hands over this stack's delivery-status role (the samples name another
        // stack's): the only role the function's own role may pass to SNS.
        for props in ["ResourceProperties", "OldResourceProperties"] {
            if event[props].get("DeliveryStatusIAMRole").is_some() {
                event[props]["DeliveryStatusIAMRole"] = Value::String(ROLE.to_owned());
            }
        }
        let answer = tokio::select! {
            a = api.invoke(event, Duration::from_secs(60)) => a.expect("answer"),
            status = child.wait() => panic!("sms-preferences exited ({status:?}); init error: {:?}", api.init_error()),
        };
        let Invocation::Response(returned) = &answer else { panic!("events/sms-preferences/{file}: {answer:?}") };
        assert_eq!(returned["Status"], "SUCCESS", "events/sms-preferences/{file}: {returned}");
    }
    let _ = child.kill().await;
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
