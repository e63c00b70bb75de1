//! The country allow-list custom resource against the emulator (End User Messaging stand-in, IAM
//! enforced): what it leaves in the stack's protect configuration (read back with
//! GetProtectConfigurationCountryRuleSet), what AWS then refuses, and what it answers
//! CloudFormation. Through the library (as CloudFormation's invocation would) and through the
//! binary under the Runtime API with the environment template.yaml gives it.

mod common;

use std::collections::BTreeMap;

use aws_sdk_pinpointsmsvoicev2 as eum;
use common::{GENEROUS, ResponseCapture, Running, STACK_ID};
use serde_json::{Value, json};
use sms_preferences::adapters::{EumProtectConfigurations, HttpResponder};
use sms_preferences::country_rules::{AllowedCountries, CountryRules, SmsCountryRules};
use sms_preferences::{Invocation, RetryPolicy};
use tocsin_harness::{Emulator, Principal, Stack, workspace_root};

fn me() -> Principal {
    Principal::function("SmsCountryRulesFunction")
}

const PHYSICAL_ID: &str = "tocsin-sms-country-rules-us-east-1";

/// The function of a stack deployed with `SmsAllowedCountries` = `allowed`, its rules for
/// protect configuration `id`.
fn function(
    sdk: &aws_config::SdkConfig,
    id: &str,
    allowed: &str,
) -> SmsCountryRules<EumProtectConfigurations, HttpResponder> {
    SmsCountryRules {
        protect: EumProtectConfigurations::new(sdk),
        responder: HttpResponder::new().expect("http client"),
        rules: AllowedCountries::parse(allowed)
            .map(|allowed| CountryRules { protect_configuration_id: id.to_owned(), allowed })
            .map_err(|e| tocsin::config::ConfigError(vec![e.to_string()])),
        physical_id: PHYSICAL_ID.into(),
        retry: RetryPolicy::default(),
    }
}

fn request(kind: &str, url: &str, properties: Value) -> Value {
    let token = "arn:aws:lambda:us-east-1:123456789012:function:tocsin-local-sms-country-rules";
    let mut props = properties;
    props["ServiceToken"] = json!(token);
    let mut e = json!({
        "RequestType": kind,
        "ServiceToken": token,
        "ResponseURL": url,
        "StackId": STACK_ID,
        "RequestId": format!("{kind}-1"),
        "LogicalResourceId": "SmsCountryRules",
        "ResourceType": "Custom::SmsCountryRules",
        "ResourceProperties": props,
    });
    if kind != "Create" {
        e["PhysicalResourceId"] = json!(PHYSICAL_ID);
    }
    if kind == "Update" {
        e["OldResourceProperties"] = json!({"ServiceToken": token});
    }
    e
}

/// The protect configuration's SMS rules, read back as an administrator.
async fn rules(sdk: &aws_config::SdkConfig, id: &str) -> BTreeMap<String, String> {
    eum::Client::new(sdk)
        .get_protect_configuration_country_rule_set()
        .protect_configuration_id(id)
        .number_capability(eum::types::NumberCapability::Sms)
        .send()
        .await
        .expect("GetProtectConfigurationCountryRuleSet")
        .country_rule_set
        .into_iter()
        .map(|(iso, r)| (iso, r.protect_status.as_str().to_owned()))
        .collect()
}

fn blocked(rules: &BTreeMap<String, String>) -> Vec<&str> {
    rules.iter().filter(|(_, s)| *s == "BLOCK").map(|(c, _)| c.as_str()).collect()
}

/// The stack as deployed locally: its protect configuration id.
async fn deployed(emulator: &Emulator) -> (aws_config::SdkConfig, Stack, String) {
    let sdk = emulator.sdk_config().await;
    let stack = Stack::provision_with(&sdk, "tocsin-local", &[]).await.expect("provision");
    let id =
        stack.protect_configurations.get("SmsProtectConfiguration").expect("the stack's protect configuration").clone();
    (sdk, stack, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_blocks_every_country_but_the_stacks_and_aws_then_refuses_a_send_to_a_blocked_one() {
    let emulator = Emulator::start().await.expect("emulator");
    let (admin, stack, id) = deployed(&emulator).await;
    let before = rules(&admin, &id).await;
    assert!(before.len() > 200 && blocked(&before).is_empty(), "a new protect configuration allows every country");

    let capture = ResponseCapture::start().await;
    let f = function(&emulator.sdk_config_as(&me()).await, &id, "US,CA");
    // The event asks for more countries than the stack allows: the stack's are applied.
    let event = request(
        "Create",
        &capture.url("create"),
        json!({"ProtectConfigurationId": id, "AllowedCountries": "US,CA,NG"}),
    );
    let answer = f.handle(event, &Invocation::with_timeout(GENEROUS)).await.expect("answered");
    assert_eq!(answer.status, aws_lambda_events::cloudformation::CloudFormationCustomResourceResponseStatus::Success);
    assert_eq!(capture.only_answer().body["Status"], "SUCCESS");
    assert_eq!(capture.only_answer().body["PhysicalResourceId"], PHYSICAL_ID);

    let after = rules(&admin, &id).await;
    assert_eq!(after.len(), before.len());
    assert_eq!(after.get("US").map(String::as_str), Some("ALLOW"));
    assert_eq!(after.get("CA").map(String::as_str), Some("ALLOW"));
    assert_eq!(blocked(&after).len(), after.len() - 2, "every other country blocked, NG (asked for by the event) too");

    // AWS refuses a send through the stack's configuration set to a blocked country, before any
    // carrier (and before the sandbox's own check), naming the protect configuration.
    let err = eum::Client::new(&admin)
        .send_text_message()
        .destination_phone_number("+447700900123")
        .message_body("pumped")
        .configuration_set_name(stack.configuration_sets.get("SmsConfigurationSet").expect("set"))
        .send()
        .await
        .expect_err("GB is blocked");
    let text = format!("{:?}", err.into_service_error());
    assert!(text.contains("DestinationCountryBlockedByProtectConfiguration"), "{text}");
    emulator.iam().assert_no_denials();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_country_aws_does_not_know_fails_the_resource_and_changes_nothing() {
    let emulator = Emulator::start().await.expect("emulator");
    let (admin, _stack, id) = deployed(&emulator).await;
    let capture = ResponseCapture::start().await;
    let f = function(&emulator.sdk_config_as(&me()).await, &id, "US,UK");
    let event =
        request("Create", &capture.url("create"), json!({"ProtectConfigurationId": id, "AllowedCountries": "US,UK"}));
    f.handle(event, &Invocation::with_timeout(GENEROUS)).await.expect("answered");
    let answer = capture.only_answer();
    assert_eq!(answer.body["Status"], "FAILED");
    let reason = answer.body["Reason"].as_str().unwrap_or_default();
    assert!(reason.contains("UK") && reason.contains("GB, not UK"), "{reason}");
    assert!(blocked(&rules(&admin, &id).await).is_empty(), "nothing was changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_opens_a_newly_allowed_country_and_delete_leaves_the_rules_to_the_stack() {
    let emulator = Emulator::start().await.expect("emulator");
    let (admin, _stack, id) = deployed(&emulator).await;
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::start().await;
    let props = |c: &str| json!({"ProtectConfigurationId": id, "AllowedCountries": c});
    function(&sdk, &id, "US")
        .handle(request("Create", &capture.url("c"), props("US")), &Invocation::with_timeout(GENEROUS))
        .await
        .expect("create");
    assert_eq!(rules(&admin, &id).await.get("GB").map(String::as_str), Some("BLOCK"));
    function(&sdk, &id, "US,GB")
        .handle(request("Update", &capture.url("u"), props("US,GB")), &Invocation::with_timeout(GENEROUS))
        .await
        .expect("update");
    let updated = rules(&admin, &id).await;
    assert_eq!(updated.get("GB").map(String::as_str), Some("ALLOW"));
    assert_eq!(blocked(&updated).len(), updated.len() - 2);
    function(&sdk, &id, "US,GB")
        .handle(request("Delete", &capture.url("d"), props("US,GB")), &Invocation::with_timeout(GENEROUS))
        .await
        .expect("delete");
    assert_eq!(
        rules(&admin, &id).await,
        updated,
        "Delete changes nothing: the protect configuration goes with the stack"
    );
    let statuses: Vec<String> =
        capture.answers().iter().map(|a| a.body["Status"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(statuses, ["SUCCESS", "SUCCESS", "SUCCESS"]);
    emulator.iam().assert_no_denials();
}

/// The binary with the environment template.yaml gives it answers every sample event
/// (`events/sms-country-rules/`) SUCCESS, as `cargo lambda invoke` would hand them to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_event_is_answered_success_by_the_binary_with_the_templates_environment() {
    let emulator = Emulator::start().await.expect("emulator");
    let (admin, stack, id) = deployed(&emulator).await;
    let capture = ResponseCapture::start().await;
    let env = stack.function_env("SmsCountryRulesFunction").expect("function env from template.yaml");
    assert_eq!(env.get("TOCSIN_PROTECT_CONFIGURATION_ID"), Some(&id));
    let mut running =
        Running::start(&emulator, &stack, env!("CARGO_BIN_EXE_sms-country-rules"), "SmsCountryRulesFunction", &[])
            .await;
    let dir = workspace_root().join("events").join("sms-country-rules");
    for kind in ["create", "update", "delete"] {
        let text = std::fs::read_to_string(dir.join(format!("{kind}.json"))).expect("sample");
        let mut event: Value = serde_json::from_str(&text).expect("JSON");
        event["ResponseURL"] = Value::String(capture.rehost(event["ResponseURL"].as_str().expect("ResponseURL")));
        let returned = running.invoke(event).await;
        assert_eq!(returned["Status"], "SUCCESS", "events/sms-country-rules/{kind}.json: {returned}");
    }
    let lines = running.log_lines().await;
    let _ = running.child.kill().await;
    // The samples name another stack's protect configuration and, on Update, more countries:
    // the function applied its own (US, the template's default) and said what it ignored.
    let after = rules(&admin, &id).await;
    assert_eq!(blocked(&after).len(), after.len() - 1);
    assert_eq!(after.get("US").map(String::as_str), Some("ALLOW"));
    let ignored: Vec<String> = lines.iter().filter(|l| l.get("property").is_some()).map(Value::to_string).collect();
    assert!(ignored.iter().any(|l| l.contains("AllowedCountries") && l.contains("CA,US")), "{ignored:?}");
    assert!(ignored.iter().all(|l| !l.contains("protect-0123")), "an event's id is not echoed: {ignored:?}");
    emulator.iam().assert_no_denials();
}
