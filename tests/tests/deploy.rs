//! Deploying into a real account, where the SNS delivery-status log groups belong to the account
//! and not to one stack. `template.yaml` is translated by the SAM translator and created with
//! CloudFormation on the emulator (moto's CloudFormation; AWS calls over HTTP on loopback).
//!
//! What the emulator deploys is the translated template reduced by
//! `tocsin_harness::cloudformation::deployable_on_emulator`: function code is a stub (the S3
//! artifact does not exist here), the EventBridge rule and the SMS-preferences custom resource
//! are left out (moto cannot create them), and moto itself skips types it does not know (alarms,
//! schedules, the HTTP API). Everything these tests are about — the log groups with their
//! conditions and deletion policies, the status function, its invoke permissions and its
//! subscription filters (created through moto's CloudWatch Logs backend, which enforces the quota
//! of 2 filters per log group), the escalation schedule (through moto's Scheduler backend, which
//! refuses a second schedule of one name) — is deployed as translated. A create that fails rolls
//! back as on AWS (`moto_cfn.py`): what it made is deleted, except DeletionPolicy Retain.

use std::collections::BTreeSet;

use aws_sdk_cloudwatchlogs::Client as Logs;
use serde_json::Value;
use tocsin_harness::cloudformation::{CloudFormationEmulator, StackFailure, deployable_on_emulator};
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
    for kept in ["SmsSuccessLogGroup", "SmsFailureLogGroup", "StatusFunction", "StatusFunctionDeliveredLogs"] {
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

async fn deploy(
    cfn: &CloudFormationEmulator,
    template: &Value,
    name: &str,
    create_groups: bool,
    manage: bool,
) -> Result<(), StackFailure> {
    let create = if create_groups { "true" } else { "false" };
    let manage = if manage { "true" } else { "false" };
    cfn.create_stack(name, template, &[("CreateSmsLogGroups", create), ("ManageSmsPreferences", manage)])
        .await
        .expect("CloudFormation answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_deploys_into_an_account_whose_delivery_status_log_groups_already_exist() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let logs = Logs::new(&cfn.sdk_config().await);
    let template = deployable().await;
    // Adopting groups that do not exist fails loudly too (the subscription has nothing to attach to).
    let nothing = deploy(&cfn, &template, "tocsin-too-early", false, true).await.expect_err("no groups yet");
    assert_eq!(nothing.code, "ResourceNotFoundException", "{nothing}");

    // SMS delivery logging was on before: SNS created both groups (no retention, no key).
    for g in [success_group(), failure_group()] {
        logs.create_log_group().log_group_name(&g).send().await.expect("CreateLogGroup");
    }

    // Creating them again fails the deploy, naming the conflict: adopting them is a decision.
    let refused = deploy(&cfn, &template, "tocsin-creates", true, true).await.expect_err("the groups exist");
    assert_eq!(refused.code, "ResourceAlreadyExistsException", "{refused}");

    deploy(&cfn, &template, "tocsin-adopts", false, true).await.expect("deploys, adopting the existing groups");
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

    deploy(&cfn, &template, "tocsin-prod", true, true).await.expect("the first stack creates the groups");
    deploy(&cfn, &template, "tocsin-dev", false, false).await.expect("the second adopts them");
    let both = BTreeSet::from(["tocsin-prod-status".to_owned(), "tocsin-dev-status".to_owned()]);
    for g in [success_group(), failure_group()] {
        // Each delivery record in either group reaches both stacks' status functions.
        assert_eq!(subscribers(&logs, &g).await, both, "{g}");
    }

    // CloudWatch Logs allows 2 subscription filters per log group: a third stack fails loudly.
    let third = deploy(&cfn, &template, "tocsin-test", false, false).await.expect_err("no third subscriber");
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
    deploy(&cfn, &template, "tocsin-prod", true, true).await.expect("first stack");
    deploy(&cfn, &template, "tocsin-dev", false, false).await.expect("second stack");

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

    let failed = deploy(&cfn, &template, "tocsin-dev", false, true).await.expect_err("no delivery-status groups");
    assert_eq!(failed.code, "ResourceNotFoundException", "{failed}");
    assert_eq!(cfn.stack_status("tocsin-dev").await.expect("answers").expect("stack"), "ROLLBACK_COMPLETE");
    for table in ["tocsin-dev-ledger", "tocsin-dev-recipients"] {
        assert!(!table_exists(&cfn, table).await, "{table} went with the rollback");
    }
    assert!(group(&logs, "/aws/lambda/tocsin-dev-status").await.is_none());

    // `sam delete` (a stack in ROLLBACK_COMPLETE can only be deleted), then deploy again, this
    // time creating the groups: nothing of the first attempt is in the way.
    cfn.delete_stack("tocsin-dev").await.expect("answers").expect("deleted");
    deploy(&cfn, &template, "tocsin-dev", true, true).await.expect("the retry deploys");
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
    for g in [success_group(), failure_group()] {
        assert_eq!(subscribers(&logs, &g).await, BTreeSet::from(["tocsin-dev-status".to_owned()]), "{g}");
    }
    let dev_deploy = samconfig("dev.deploy.parameters");
    assert!(dev_deploy.get("capabilities").is_some_and(|c| c.contains("CAPABILITY_IAM")), "{dev_deploy:?}");
}
