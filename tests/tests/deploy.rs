//! Deploying into a real account, under either SMS provider (`SmsProvider`). Under SNS the
//! delivery-status log groups belong to the account and not to one stack, and each takes at most
//! 2 subscription filters; under End User Messaging every stack owns its event path (its
//! configuration set, its event group, its one subscription) and touches nothing account-wide.
//! `template.yaml` is translated by the SAM translator and created with CloudFormation on the
//! emulator (moto's CloudFormation; AWS calls over HTTP on loopback).
//!
//! What the emulator deploys is the translated template reduced by
//! `tocsin_harness::cloudformation::deployable_on_emulator`: function code is a stub (the S3
//! artifact does not exist here), the EventBridge rule and the SMS-preferences custom resource
//! are left out (moto cannot create them), and moto itself skips types it does not know (alarms,
//! schedules, the HTTP API). Everything these tests are about — the log groups with their
//! conditions and deletion policies, the status function, its invoke permissions and its
//! subscription filters (created through moto's CloudWatch Logs backend, which enforces the quota
//! of 2 filters per log group), the escalation schedule (through moto's Scheduler backend, which
//! refuses a second schedule of one name), the End User Messaging configuration set (through the
//! stand-in in the same process, which refuses a second set of one name) — is deployed as
//! translated. A create that fails rolls back as on AWS (`moto_cfn.py`): what it made is deleted,
//! except DeletionPolicy Retain.

use std::collections::BTreeSet;

use aws_sdk_cloudwatchlogs::Client as Logs;
use aws_sdk_pinpointsmsvoicev2 as eum;
use serde_json::{Value, json};
use tocsin_harness::cloudformation::{CloudFormationEmulator, StackFailure, deployable_on_emulator};
use tocsin_harness::eum::EumControl;
use tocsin_harness::stack::{ACCOUNT, REGION};

fn success_group() -> String {
    format!("sns/{REGION}/{ACCOUNT}/DirectPublishToPhoneNumber")
}

fn failure_group() -> String {
    format!("sns/{REGION}/{ACCOUNT}/DirectPublishToPhoneNumber/Failure")
}

async fn deployable() -> Value {
    let translated = tokio::task::spawn_blocking(|| tocsin_harness::sam::translate_template_yaml(&[]))
        .await
        .expect("join")
        .expect("template.yaml translates");
    let (template, dropped) = deployable_on_emulator(&translated);
    // The reduction must not take out what these tests are about.
    for kept in [
        "SmsSuccessLogGroup",
        "SmsFailureLogGroup",
        "StatusFunction",
        "StatusFunctionDeliveredLogs",
        "StatusFunctionFailedLogs",
        "SmsEventLogGroup",
        "SmsEventsRole",
        "SmsConfigurationSet",
        "StatusFunctionSmsEvents",
        "StatusFunctionSmsEventsPermission",
    ] {
        assert!(!dropped.contains(kept), "{kept} is deployed (left out: {dropped:?})");
    }
    template
}

/// (filter destination function name) for every subscription filter on `group`.
async fn subscribers(logs: &Logs, group: &str) -> BTreeSet<String> {
    logs.describe_subscription_filters()
        .log_group_name(group)
        .send()
        .await
        .expect("DescribeSubscriptionFilters")
        .subscription_filters()
        .iter()
        .map(|f| f.destination_arn().unwrap_or_default().rsplit(':').next().unwrap_or_default().to_owned())
        .collect()
}

async fn group(logs: &Logs, name: &str) -> Option<aws_sdk_cloudwatchlogs::types::LogGroup> {
    logs.describe_log_groups()
        .log_group_name_prefix(name)
        .send()
        .await
        .expect("DescribeLogGroups")
        .log_groups()
        .iter()
        .find(|g| g.log_group_name() == Some(name))
        .cloned()
}

async fn table_exists(cfn: &CloudFormationEmulator, name: &str) -> bool {
    let ddb = aws_sdk_dynamodb::Client::new(&cfn.sdk_config().await);
    ddb.describe_table().table_name(name).send().await.is_ok()
}

async fn deploy_sns(
    cfn: &CloudFormationEmulator,
    template: &Value,
    name: &str,
    create_groups: bool,
    manage: bool,
) -> Result<(), StackFailure> {
    let create = if create_groups { "true" } else { "false" };
    let manage = if manage { "true" } else { "false" };
    let parameters = [("SmsProvider", "sns"), ("CreateSmsLogGroups", create), ("ManageSmsPreferences", manage)];
    cfn.create_stack(name, template, &parameters).await.expect("CloudFormation answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_deploys_into_an_account_whose_delivery_status_log_groups_already_exist() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    // Adopting groups that do not exist fails loudly too (the subscription has nothing to attach to).
    let nothing = deploy_sns(&cfn, &template, "tocsin-too-early", false, true).await.expect_err("no groups yet");
    assert_eq!(nothing.code, "ResourceNotFoundException", "{nothing}");

    // SMS delivery logging was on before: SNS created both groups (no retention, no key).
    for g in [success_group(), failure_group()] {
        logs.create_log_group().log_group_name(&g).send().await.expect("CreateLogGroup");
    }

    // Creating them again fails the deploy, naming the conflict: adopting them is a decision.
    let refused = deploy_sns(&cfn, &template, "tocsin-creates", true, true).await.expect_err("the groups exist");
    assert_eq!(refused.code, "ResourceAlreadyExistsException", "{refused}");

    deploy_sns(&cfn, &template, "tocsin-adopts", false, true).await.expect("deploys, adopting the existing groups");
    assert_eq!(cfn.stack_status("tocsin-adopts").await.expect("answers").expect("stack"), "CREATE_COMPLETE");
    for g in [success_group(), failure_group()] {
        assert_eq!(subscribers(&logs, &g).await, BTreeSet::from(["tocsin-adopts-status".to_owned()]), "{g}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stacks_share_the_accounts_delivery_logs_and_a_third_is_refused_at_deploy() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;

    deploy_sns(&cfn, &template, "tocsin-prod", true, true).await.expect("the first stack creates the groups");
    deploy_sns(&cfn, &template, "tocsin-dev", false, false).await.expect("the second adopts them");
    let both = BTreeSet::from(["tocsin-prod-status".to_owned(), "tocsin-dev-status".to_owned()]);
    for g in [success_group(), failure_group()] {
        // Each delivery record in either group reaches both stacks' status functions.
        assert_eq!(subscribers(&logs, &g).await, both, "{g}");
    }

    // CloudWatch Logs allows 2 subscription filters per log group: a third stack fails loudly.
    let third = deploy_sns(&cfn, &template, "tocsin-test", false, false).await.expect_err("no third subscriber");
    assert_eq!(third.code, "LimitExceededException", "{third}");
    for g in [success_group(), failure_group()] {
        assert_eq!(subscribers(&logs, &g).await, both, "{g}: the first two keep their subscriptions");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stack_leaves_the_delivery_log_groups_and_the_other_stacks_subscriptions() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    deploy_sns(&cfn, &template, "tocsin-prod", true, true).await.expect("first stack");
    deploy_sns(&cfn, &template, "tocsin-dev", false, false).await.expect("second stack");

    cfn.delete_stack("tocsin-prod").await.expect("answers").expect("the creating stack is deleted");

    for g in [success_group(), failure_group()] {
        let kept = group(&logs, &g).await.unwrap_or_else(|| panic!("{g} survives the stack that created it"));
        assert_eq!(kept.retention_in_days(), Some(30), "{g} keeps its retention (LogRetentionDays)");
        assert_eq!(subscribers(&logs, &g).await, BTreeSet::from(["tocsin-dev-status".to_owned()]), "{g}");
    }
    // The deleted stack's own function log groups went with it.
    assert!(group(&logs, "/aws/lambda/tocsin-prod-status").await.is_none());
    assert!(group(&logs, "/aws/lambda/tocsin-dev-status").await.is_some());
}

/// A newcomer's first deploy fails (here: `CreateSmsLogGroups=false` in an account where SMS
/// delivery logging never ran, so the subscription has no group to attach to) after the stack's
/// named tables, key and function log groups were made. The rollback must take them all, or the
/// retry collides with them ("already exists") and fails again: RetainExceptOnCreate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_deploy_that_fails_rolls_back_to_nothing_and_the_retry_under_the_same_name_succeeds() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;

    let failed = deploy_sns(&cfn, &template, "tocsin-dev", false, true).await.expect_err("no delivery-status groups");
    assert_eq!(failed.code, "ResourceNotFoundException", "{failed}");
    assert_eq!(cfn.stack_status("tocsin-dev").await.expect("answers").expect("stack"), "ROLLBACK_COMPLETE");
    for table in ["tocsin-dev-ledger", "tocsin-dev-recipients"] {
        assert!(!table_exists(&cfn, table).await, "{table} went with the rollback");
    }
    assert!(group(&logs, "/aws/lambda/tocsin-dev-status").await.is_none());

    // `sam delete` (a stack in ROLLBACK_COMPLETE can only be deleted), then deploy again, this
    // time creating the groups: nothing of the first attempt is in the way.
    cfn.delete_stack("tocsin-dev").await.expect("answers").expect("deleted");
    deploy_sns(&cfn, &template, "tocsin-dev", true, true).await.expect("the retry deploys");
    assert_eq!(cfn.stack_status("tocsin-dev").await.expect("answers").expect("stack"), "CREATE_COMPLETE");
    for table in ["tocsin-dev-ledger", "tocsin-dev-recipients"] {
        assert!(table_exists(&cfn, table).await, "{table}");
    }

    // Deleting the stack for good keeps its data (and the account's delivery-status groups).
    cfn.delete_stack("tocsin-dev").await.expect("answers").expect("deleted");
    for table in ["tocsin-dev-ledger", "tocsin-dev-recipients"] {
        assert!(table_exists(&cfn, table).await, "{table} is retained when the stack is deleted");
    }
    for g in [success_group(), failure_group()] {
        assert!(group(&logs, &g).await.is_some(), "{g} is retained");
    }
}

// ---------------------------------------------------------------- End User Messaging

const END_USER_MESSAGING: (&str, &str) = ("SmsProvider", "end-user-messaging");

/// A stack sending through End User Messaging (nothing of SNS's account-wide set-up asked for).
async fn deploy_eum(cfn: &CloudFormationEmulator, template: &Value, name: &str) -> Result<(), StackFailure> {
    cfn.create_stack(name, template, &[END_USER_MESSAGING]).await.expect("CloudFormation answers")
}

/// The stack's own event group (`SmsEventLogGroup`).
fn event_group(stack: &str) -> String {
    format!("/tocsin/{stack}/sms-events")
}

/// The log group a CloudWatch Logs ARN names (`…:log-group:NAME`, with or without `:*`).
fn group_of_arn(arn: &str) -> Option<&str> {
    let name = arn.strip_prefix(&format!("arn:aws:logs:{REGION}:{ACCOUNT}:log-group:"))?;
    Some(name.strip_suffix(":*").unwrap_or(name))
}

async fn configuration_set(
    cfn: &CloudFormationEmulator,
    name: &str,
) -> Option<eum::types::ConfigurationSetInformation> {
    let client = eum::Client::new(&cfn.sdk_config().await);
    match client.describe_configuration_sets().configuration_set_names(name).send().await {
        Ok(out) => out.configuration_sets().first().cloned(),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => None,
        Err(e) => panic!("DescribeConfigurationSets {name}: {e:?}"),
    }
}

/// (destination name, enabled, event types, group written to, role) of each event destination.
fn destinations(set: &eum::types::ConfigurationSetInformation) -> Vec<(String, bool, Vec<String>, String, String)> {
    set.event_destinations()
        .iter()
        .map(|d| {
            let cw = d.cloud_watch_logs_destination();
            (
                d.event_destination_name().to_owned(),
                d.enabled(),
                d.matching_event_types().iter().map(|t| t.as_str().to_owned()).collect(),
                cw.and_then(|c| group_of_arn(c.log_group_arn())).unwrap_or_default().to_owned(),
                cw.map(|c| c.iam_role_arn().to_owned()).unwrap_or_default(),
            )
        })
        .collect()
}

/// What a stack's own event path must be: its configuration set (named after it) sends every SMS
/// event to its own group through its events role, and that group's one subscription is its own
/// status function's.
async fn assert_own_event_path(cfn: &CloudFormationEmulator, logs: &Logs, stack: &str) {
    let set = configuration_set(cfn, stack).await.unwrap_or_else(|| panic!("{stack}'s configuration set exists"));
    let ds = destinations(&set);
    assert_eq!(ds.len(), 1, "{stack}: one event destination: {ds:?}");
    let (name, enabled, types, group, role) = &ds[0];
    assert_eq!((name.as_str(), *enabled), (format!("{stack}-status").as_str(), true), "{stack}");
    assert_eq!(types, &["TEXT_ALL"], "{stack}: every SMS event");
    assert_eq!(group, &event_group(stack), "{stack}: events go to the stack's own group");
    assert!(role.starts_with(&format!("arn:aws:iam::{ACCOUNT}:role/")), "{stack}: written through a role: {role}");
    assert_eq!(subscribers(logs, &event_group(stack)).await, BTreeSet::from([format!("{stack}-status")]), "{stack}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_a_stack_makes_its_configuration_set_event_group_and_the_status_functions_one_subscription()
 {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let sdk = cfn.sdk_config().await;
    let logs = Logs::new(&sdk);
    // The test's input reads the set's ARN too (nothing in the template does): Fn::GetAtt Arn.
    let mut template = deployable().await;
    template["Outputs"]["TestConfigurationSetArn"] = json!({
        "Condition": "UsesEndUserMessaging",
        "Value": { "Fn::GetAtt": ["SmsConfigurationSet", "Arn"] }
    });
    deploy_eum(&cfn, &template, "tocsin-prod").await.expect("deploys");
    assert_eq!(cfn.stack_status("tocsin-prod").await.expect("answers").expect("stack"), "CREATE_COMPLETE");

    let outputs = cfn.stack_outputs("tocsin-prod").await.expect("answers").expect("outputs");
    assert_eq!(outputs.get("SmsProvider").map(String::as_str), Some("end-user-messaging"));
    // Ref is the set's name (what the sender's TOCSIN_EUM_CONFIGURATION_SET gets), GetAtt Arn its ARN.
    assert_eq!(outputs.get("SmsConfigurationSetName").map(String::as_str), Some("tocsin-prod"));
    assert_eq!(
        outputs.get("TestConfigurationSetArn"),
        Some(&format!("arn:aws:sms-voice:{REGION}:{ACCOUNT}:configuration-set/tocsin-prod"))
    );
    assert_eq!(outputs.get("SmsEventLogGroupName"), Some(&event_group("tocsin-prod")));
    assert_own_event_path(&cfn, &logs, "tocsin-prod").await;

    // The event group as every group of the stack: retention, and the stack's key.
    let events = group(&logs, &event_group("tocsin-prod")).await.expect("the event group");
    let functions = group(&logs, "/aws/lambda/tocsin-prod-status").await.expect("a function's group");
    assert_eq!(events.retention_in_days(), Some(30), "LogRetentionDays");
    assert!(events.kms_key_id().is_some_and(|k| k.contains(":key/")), "{:?}", events.kms_key_id());
    assert_eq!(events.kms_key_id(), functions.kms_key_id(), "the stack's key");

    // The set works as deployed: a text sent through it puts its events in the stack's group.
    let control = EumControl::new(&cfn.moto_endpoint());
    control.production_account().await.expect("out of the sandbox");
    let number = control
        .active_phone_number(&sdk, eum::types::RequestableNumberType::TollFree, "US")
        .await
        .expect("an origination number");
    eum::Client::new(&sdk)
        .send_text_message()
        .destination_phone_number("+14155550100")
        .origination_identity(&number.id)
        .message_body("tocsin deploy check")
        .configuration_set_name("tocsin-prod")
        .send()
        .await
        .expect("SendTextMessage");
    let logged = logs.filter_log_events().log_group_name(event_group("tocsin-prod")).send().await.expect("events");
    let types: Vec<String> = logged
        .events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e.message().unwrap_or_default()).ok())
        .filter_map(|v| v["eventType"].as_str().map(str::to_owned))
        .collect();
    assert!(types.contains(&"TEXT_DELIVERED".to_owned()), "{types:?}");
}

/// SNS's delivery-status groups are the account's, with 2 subscription slots each (two SNS tocsin
/// stacks fill them). Under End User Messaging a stack creates none of them, changes none, and
/// takes no slot: here it deploys into an account whose SNS groups are full, and into one that
/// never had them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_a_stack_creates_touches_and_subscribes_to_no_account_wide_sns_log_group() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;

    deploy_eum(&cfn, &template, "tocsin-first").await.expect("deploys into a fresh account");
    let sns_groups = logs.describe_log_groups().log_group_name_prefix("sns/").send().await.expect("groups");
    assert!(sns_groups.log_groups().is_empty(), "no SNS group created: {:?}", sns_groups.log_groups());

    // Two SNS stacks take both slots of both groups.
    deploy_sns(&cfn, &template, "tocsin-a", true, true).await.expect("first SNS stack");
    deploy_sns(&cfn, &template, "tocsin-b", false, false).await.expect("second SNS stack");
    let full = BTreeSet::from(["tocsin-a-status".to_owned(), "tocsin-b-status".to_owned()]);

    deploy_eum(&cfn, &template, "tocsin-c").await.expect("no slot needed");
    assert_own_event_path(&cfn, &logs, "tocsin-c").await;
    for g in [success_group(), failure_group()] {
        assert_eq!(subscribers(&logs, &g).await, full, "{g}: its subscriptions as they were");
        let kept = group(&logs, &g).await.unwrap_or_else(|| panic!("{g}"));
        assert_eq!(kept.retention_in_days(), Some(30), "{g}: as tocsin-a made it");
    }
}

/// Under SNS a third stack in one account and region is refused (the groups' 2 subscription slots,
/// above); under End User Messaging each stack has its own set and group, so stacks deploy side by
/// side, each hearing only its own SMS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_three_stacks_deploy_side_by_side_in_one_account_and_region() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    let stacks = ["tocsin-prod", "tocsin-dev", "tocsin-test"];
    for stack in stacks {
        deploy_eum(&cfn, &template, stack).await.unwrap_or_else(|e| panic!("{stack} deploys: {e}"));
    }
    for stack in stacks {
        assert_eq!(cfn.stack_status(stack).await.expect("answers").expect("stack"), "CREATE_COMPLETE");
        assert_own_event_path(&cfn, &logs, stack).await;
    }
}

/// Deleting a stack deletes its configuration set and its event group (default DeletionPolicy).
/// CloudWatch Logs' DeleteLogGroup deletes the group's events with it whatever its retention:
/// retention bounds how long events are kept while the group exists. So the stack's SMS events
/// (numbers, and alert keys in the Context) go with the stack — unlike SNS's delivery-status
/// groups, which are the account's and retained. Other stacks keep theirs; the data is retained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_deleting_a_stack_removes_its_configuration_set_and_event_group_only() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    deploy_eum(&cfn, &template, "tocsin-prod").await.expect("first stack");
    deploy_eum(&cfn, &template, "tocsin-dev").await.expect("second stack");

    cfn.delete_stack("tocsin-prod").await.expect("answers").expect("deleted");

    assert!(configuration_set(&cfn, "tocsin-prod").await.is_none(), "the deleted stack's set is gone");
    assert!(group(&logs, &event_group("tocsin-prod")).await.is_none(), "its event group is gone");
    assert!(group(&logs, "/aws/lambda/tocsin-prod-status").await.is_none());
    for table in ["tocsin-prod-ledger", "tocsin-prod-recipients"] {
        assert!(table_exists(&cfn, table).await, "{table} is retained when the stack is deleted");
    }
    assert_own_event_path(&cfn, &logs, "tocsin-dev").await;
}

/// Someone made a configuration set of the stack's name by hand (the console's walkthrough, say):
/// the create fails with CloudFormation's AlreadyExists and rolls back. The rollback takes what the
/// stack made and never the set it did not make; once that set is gone, the retry deploys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_a_set_of_the_stacks_name_made_by_hand_fails_the_create_and_the_rollback_leaves_it_alone()
 {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let sdk = cfn.sdk_config().await;
    let logs = Logs::new(&sdk);
    let template = deployable().await;
    EumControl::new(&cfn.moto_endpoint())
        .configuration_set_logging_to(&sdk, "tocsin-dev", "by-hand")
        .await
        .expect("a set made by hand");

    let failed = deploy_eum(&cfn, &template, "tocsin-dev").await.expect_err("the name is taken");
    assert_eq!(failed.code, "AlreadyExists", "{failed}");
    assert!(
        failed.message.contains(
            "Resource of type 'AWS::SMSVOICE::ConfigurationSet' with identifier 'tocsin-dev' already exists."
        ),
        "{failed}"
    );
    assert_eq!(cfn.stack_status("tocsin-dev").await.expect("answers").expect("stack"), "ROLLBACK_COMPLETE");
    for table in ["tocsin-dev-ledger", "tocsin-dev-recipients"] {
        assert!(!table_exists(&cfn, table).await, "{table} went with the rollback");
    }
    assert!(group(&logs, &event_group("tocsin-dev")).await.is_none(), "the event group went with the rollback");
    let by_hand = configuration_set(&cfn, "tocsin-dev").await.expect("the hand-made set is still there");
    let names: Vec<String> = destinations(&by_hand).into_iter().map(|d| d.0).collect();
    assert_eq!(names, ["logs"], "untouched");

    eum::Client::new(&sdk)
        .delete_configuration_set()
        .configuration_set_name("tocsin-dev")
        .send()
        .await
        .expect("removed");
    cfn.delete_stack("tocsin-dev").await.expect("answers").expect("deleted");
    deploy_eum(&cfn, &template, "tocsin-dev").await.expect("the retry deploys");
    assert_own_event_path(&cfn, &logs, "tocsin-dev").await;
}

/// A first create that fails after the configuration set, its event group and the subscription
/// were made (here a resource added to the test's input, which waits for them and whose name is
/// taken) rolls back all of them: the retry under the same name meets no set ("AlreadyExists"),
/// no group, no table in its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_a_failed_first_create_rolls_back_to_nothing_and_the_retry_under_the_same_name_succeeds()
 {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    let mut tripped = template.clone();
    tripped["Resources"]["Tripwire"] = json!({
        "Type": "AWS::Logs::LogGroup",
        "Condition": "UsesEndUserMessaging",
        "DependsOn": ["SmsConfigurationSet", "StatusFunctionSmsEvents"],
        "Properties": { "LogGroupName": "taken" }
    });
    logs.create_log_group().log_group_name("taken").send().await.expect("CreateLogGroup");

    let failed = deploy_eum(&cfn, &tripped, "tocsin-dev").await.expect_err("the tripwire's name is taken");
    assert_eq!(failed.code, "ResourceAlreadyExistsException", "{failed}");
    assert_eq!(cfn.stack_status("tocsin-dev").await.expect("answers").expect("stack"), "ROLLBACK_COMPLETE");
    assert!(configuration_set(&cfn, "tocsin-dev").await.is_none(), "the set went with the rollback");
    assert!(group(&logs, &event_group("tocsin-dev")).await.is_none(), "so did the event group");
    for table in ["tocsin-dev-ledger", "tocsin-dev-recipients"] {
        assert!(!table_exists(&cfn, table).await, "{table} went with the rollback");
    }

    cfn.delete_stack("tocsin-dev").await.expect("answers").expect("deleted");
    deploy_eum(&cfn, &template, "tocsin-dev").await.expect("the retry deploys");
    assert_eq!(cfn.stack_status("tocsin-dev").await.expect("answers").expect("stack"), "CREATE_COMPLETE");
    assert_own_event_path(&cfn, &logs, "tocsin-dev").await;
}

/// A later version of the template changes the event destination: the set is updated in place
/// (same name, same ARN, the subscription untouched); a new ConfigurationSetName replaces it
/// ("Update requires: Replacement"): the new set is made and the old one deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_an_update_changes_the_destination_in_place_and_a_new_name_replaces_the_set() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    deploy_eum(&cfn, &template, "tocsin-prod").await.expect("deploys");

    let mut narrower = template.clone();
    narrower["Resources"]["SmsConfigurationSet"]["Properties"]["EventDestinations"][0]["MatchingEventTypes"] =
        json!(["TEXT_DELIVERED", "TEXT_BLOCKED"]);
    cfn.update_stack("tocsin-prod", &narrower, &[END_USER_MESSAGING]).await.expect("answers").expect("updated");
    let set = configuration_set(&cfn, "tocsin-prod").await.expect("the same set");
    let ds = destinations(&set);
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].2, ["TEXT_DELIVERED", "TEXT_BLOCKED"]);
    assert_eq!(ds[0].3, event_group("tocsin-prod"));
    assert_eq!(
        subscribers(&logs, &event_group("tocsin-prod")).await,
        BTreeSet::from(["tocsin-prod-status".to_owned()])
    );

    let mut renamed = narrower.clone();
    renamed["Resources"]["SmsConfigurationSet"]["Properties"]["ConfigurationSetName"] =
        json!({ "Fn::Sub": "${AWS::StackName}-v2" });
    cfn.update_stack("tocsin-prod", &renamed, &[END_USER_MESSAGING]).await.expect("answers").expect("updated");
    assert!(configuration_set(&cfn, "tocsin-prod").await.is_none(), "the old set is deleted");
    let replaced = configuration_set(&cfn, "tocsin-prod-v2").await.expect("the new set");
    assert_eq!(destinations(&replaced).len(), 1);
    let outputs = cfn.stack_outputs("tocsin-prod").await.expect("answers").expect("outputs");
    assert_eq!(outputs.get("SmsConfigurationSetName").map(String::as_str), Some("tocsin-prod-v2"));
}

/// The emulator's `AWS::SMSVOICE::ConfigurationSet` refuses what CloudFormation's schema check, the
/// service's prerequisites and cfn-lint refuse (`moto_cfn.py` cites each), and a refused set leaves
/// nothing behind: each broken input below fails, and the sound template then deploys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_refuses_a_configuration_set_that_cloudformation_or_the_service_would_refuse() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    let destination = "/Resources/SmsConfigurationSet/Properties/EventDestinations/0";
    let broken: [(&str, &str, Value, &str); 4] = [
        (
            "an unknown property",
            "/Resources/SmsConfigurationSet/Properties/Colour",
            json!("blue"),
            "extraneous key [Colour]",
        ),
        ("no Enabled", &format!("{destination}/Enabled"), Value::Null, "required key [Enabled] not found"),
        (
            "a role ARN that is no role's",
            &format!("{destination}/CloudWatchLogsDestination/IamRoleArn"),
            json!({ "Fn::GetAtt": ["SmsEventLogGroup", "Arn"] }),
            "is not an IAM role ARN",
        ),
        (
            "a log group that does not exist",
            &format!("{destination}/CloudWatchLogsDestination/LogGroupArn"),
            json!({ "Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:nowhere:*" }),
            "log group nowhere does not exist",
        ),
    ];
    for (i, (what, pointer, value, says)) in broken.into_iter().enumerate() {
        let mut t = template.clone();
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
        let holder = t.pointer_mut(parent).and_then(Value::as_object_mut).expect("the parent exists");
        if value.is_null() {
            holder.remove(key);
        } else {
            holder.insert(key.to_owned(), value);
        }
        let name = format!("tocsin-broken-{i}");
        let refused = deploy_eum(&cfn, &t, &name).await.expect_err(what);
        assert_eq!(refused.code, "InvalidRequest", "{what}: {refused}");
        assert!(refused.message.contains(says), "{what}: {refused}");
        assert!(configuration_set(&cfn, &name).await.is_none(), "{what}: no set is left");
    }
    deploy_eum(&cfn, &template, "tocsin-sound").await.expect("the template as it is deploys");
    assert_own_event_path(&cfn, &logs, "tocsin-sound").await;
}

/// `key = "value"` lines of one `[table]` of samconfig.toml (the file is flat: no nested values).
fn samconfig(table: &str) -> std::collections::BTreeMap<String, String> {
    let text =
        std::fs::read_to_string(tocsin_harness::workspace_root().join("samconfig.toml")).expect("samconfig.toml");
    let mut inside = false;
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{table}]");
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            let v = v.split(" #").next().unwrap_or_default().trim().trim_matches('"');
            out.insert(k.trim().to_owned(), v.to_owned());
        }
    }
    out
}

/// README's deploy, `sam deploy --config-env dev --parameter-overrides AlarmEmail=…`, in an account
/// where nothing of SMS was ever set up: the dev environment's parameters (the command line's
/// overrides replace samconfig's string, so only what README passes) deploy as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_environment_of_samconfig_deploys_into_a_fresh_account() {
    let dev = samconfig("dev.global.parameters");
    assert_eq!(dev.get("stack_name").map(String::as_str), Some("tocsin-dev"));
    let overrides = dev.get("parameter_overrides").cloned().unwrap_or_default();
    let mut parameters: Vec<(&str, &str)> = overrides.split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
    parameters.push(("AlarmEmail", "oncall@example.com"));
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    cfn.create_stack("tocsin-dev", &template, &parameters)
        .await
        .expect("answers")
        .expect("dev deploys on a fresh account");
    // Whichever provider dev gets (samconfig's, or the template's default), its delivery events
    // reach the status function.
    let provider = parameters
        .iter()
        .find(|(k, _)| *k == "SmsProvider")
        .map(|(_, v)| (*v).to_owned())
        .or_else(|| template["Parameters"]["SmsProvider"]["Default"].as_str().map(str::to_owned))
        .expect("SmsProvider has a default");
    match provider.as_str() {
        "sns" => {
            for g in [success_group(), failure_group()] {
                assert_eq!(subscribers(&logs, &g).await, BTreeSet::from(["tocsin-dev-status".to_owned()]), "{g}");
            }
        }
        "end-user-messaging" => assert_own_event_path(&cfn, &logs, "tocsin-dev").await,
        other => panic!("SmsProvider {other}"),
    }
    let dev_deploy = samconfig("dev.deploy.parameters");
    assert!(dev_deploy.get("capabilities").is_some_and(|c| c.contains("CAPABILITY_IAM")), "{dev_deploy:?}");
}
