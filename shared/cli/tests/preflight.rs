//! `tocsin preflight --sms-provider sns`: one test per check of SNS's side, each made to fail and
//! to pass (End User Messaging's side: `preflight_eum.rs`), against the emulator
//! with moto's CloudFormation (`moto_cfn.py`: other tocsin stacks deployed from the translated
//! template hold the subscription filters, as in an account that already runs two).
//!
//! What moto 5.2.5 does not serve comes from recordings in AWS's wire format
//! (`tocsin_harness::recorded`): SNS `GetSMSSandboxAccountStatus`, `ListSMSSandboxPhoneNumbers`
//! and `ListOriginationNumbers`, Lambda `GetAccountSettings`, CloudWatch `GetMetricData`. Every
//! other call — STS, CloudWatch Logs, SNS `GetSMSAttributes` — goes to the emulator. Each test's
//! other checks see a sound account, so the lines it looks at are the only blockers.

mod common;

use common::{Run, aws_env, tocsin_with};
use serde_json::{Value, json};
use tocsin_harness::cloudformation::{CloudFormationEmulator, deployable_on_emulator};
use tocsin_harness::recorded::{Answer, Recorded};

const SUCCESS: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber";
const FAILURE: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber/Failure";

/// What the recordings say about the account; `sound()` is one nothing blocks.
#[derive(Clone)]
struct Account {
    in_sandbox: bool,
    verified: Vec<&'static str>,
    concurrency: (i32, i32),
    spend_usd: f64,
    origination: Vec<(&'static str, &'static str)>,
}

fn sound() -> Account {
    Account {
        in_sandbox: false,
        verified: vec![],
        concurrency: (1000, 1000),
        spend_usd: 0.0,
        origination: vec![("+18445550100", "US")],
    }
}

async fn recorded(endpoint: &str, a: &Account) -> Recorded {
    let verified: String = a
        .verified
        .iter()
        .map(|n| format!("<member><PhoneNumber>{n}</PhoneNumber><Status>Verified</Status></member>"))
        .collect();
    let origination: String = a
        .origination
        .iter()
        .map(|(n, c)| {
            format!(
                "<member><PhoneNumber>{n}</PhoneNumber><Status>ACTIVE</Status><Iso2CountryCode>{c}</Iso2CountryCode>\
                 <RouteType>Transactional</RouteType><NumberCapabilities><member>SMS</member></NumberCapabilities></member>"
            )
        })
        .collect();
    let (limit, unreserved) = a.concurrency;
    Recorded::start(
        endpoint,
        vec![
            (
                "GetSMSSandboxAccountStatus",
                Answer::sns_query("GetSMSSandboxAccountStatus", &format!("<IsInSandbox>{}</IsInSandbox>", a.in_sandbox)),
            ),
            (
                "ListSMSSandboxPhoneNumbers",
                Answer::sns_query("ListSMSSandboxPhoneNumbers", &format!("<PhoneNumbers>{verified}</PhoneNumbers>")),
            ),
            (
                "ListOriginationNumbers",
                Answer::sns_query("ListOriginationNumbers", &format!("<PhoneNumbers>{origination}</PhoneNumbers>")),
            ),
            (
                "GetAccountSettings",
                Answer::json(&json!({"AccountLimit": {"TotalCodeSize": 80_530_636_800_i64, "CodeSizeUnzipped": 262_144_000,
                    "CodeSizeZipped": 52_428_800, "ConcurrentExecutions": limit, "UnreservedConcurrentExecutions": unreserved},
                    "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0}})),
            ),
            (
                "GetMetricData",
                Answer::rpc_v2_cbor(&json!({"MetricDataResults": [{"Id": "spend", "Label": "SMSMonthToDateSpentUSD",
                    "Timestamps": [{"$timestamp": 1_796_000_000.0}], "Values": [a.spend_usd], "StatusCode": "Complete"}],
                    "Messages": []})),
            ),
        ],
    )
    .await
    .expect("recorded")
}

/// An emulator whose account has raised its SMS spend limit (as a sound account would).
async fn account() -> CloudFormationEmulator {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    sms_attributes(&cfn, &[("MonthlySpendLimit", "100")]).await;
    cfn
}

async fn sms_attributes(cfn: &CloudFormationEmulator, attrs: &[(&str, &str)]) {
    let sns = aws_sdk_sns::Client::new(&cfn.sdk_config().await);
    let mut req = sns.set_sms_attributes();
    for (k, v) in attrs {
        req = req.attributes(*k, *v);
    }
    req.send().await.expect("SetSMSAttributes");
}

async fn preflight(cfn: &CloudFormationEmulator, a: &Account, args: &[&str]) -> Run {
    let rec = recorded(&cfn.endpoint(), a).await;
    let mut env = aws_env(&cfn.endpoint());
    for service in ["SNS", "CLOUDWATCH", "LAMBDA"] {
        env.push((format!("AWS_ENDPOINT_URL_{service}"), rec.endpoint()));
    }
    let mut all = vec!["preflight", "--sms-provider", "sns"];
    all.extend_from_slice(args);
    tocsin_with(env, &all).await
}

fn blockers(r: &Run) -> Vec<&str> {
    r.stdout.lines().filter(|l| l.starts_with("BLOCKER")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sound_account_has_nothing_blocking_and_preflight_needs_no_stack() {
    let cfn = account().await;
    let r = preflight(&cfn, &sound(), &["--to", "+14155550100"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(blockers(&r).is_empty(), "{}", r.stdout);
    assert!(
        r.stdout.trim_end().ends_with("account 123456789012, us-east-1, SmsProvider=sns: nothing blocks a deploy."),
        "{}",
        r.stdout
    );
    let doc = preflight(&cfn, &sound(), &["--json"]).await;
    let doc = doc.json();
    assert_eq!((doc["ok"].as_bool(), doc["blockers"].as_u64()), (Some(true), Some(0)), "{doc}");
    assert!(doc["checks"].as_array().is_some_and(|c| c.len() >= 6), "{doc}");
}

/// Which `CreateSmsLogGroups` to choose, and the 2-filter limit: an account that already runs two
/// tocsin stacks has both groups, each with two subscription filters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_status_log_groups_say_which_create_sms_log_groups_and_whether_a_filter_is_left() {
    let cfn = account().await;
    // A fresh account: the groups do not exist.
    let r = preflight(&cfn, &sound(), &[]).await;
    assert!(
        r.stdout.contains(&format!(
            "ok      delivery-status log groups: {SUCCESS} and {FAILURE} do not exist: CreateSmsLogGroups=true"
        )),
        "{}",
        r.stdout
    );
    let r = preflight(&cfn, &sound(), &["--create-sms-log-groups", "false"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(blockers(&r)[0].contains("do not exist: deploy with CreateSmsLogGroups=true"), "{}", r.stdout);

    // One group only (someone created it by hand): neither value deploys.
    let logs = aws_sdk_cloudwatchlogs::Client::new(&cfn.sdk_config().await);
    logs.create_log_group().log_group_name(SUCCESS).send().await.expect("create");
    let r = preflight(&cfn, &sound(), &[]).await;
    assert!(blockers(&r).iter().any(|l| l.contains(&format!("only {SUCCESS} exists"))), "{}", r.stdout);
    logs.delete_log_group().log_group_name(SUCCESS).send().await.expect("delete");

    // Two tocsin stacks already run here.
    let translated = tokio::task::spawn_blocking(|| tocsin_harness::sam::translate_template_yaml(&[]))
        .await
        .expect("join")
        .expect("translates");
    let (template, _) = deployable_on_emulator(&translated);
    for (stack, create, manage) in [("tocsin-prod", "true", "true"), ("tocsin-dev", "false", "false")] {
        cfn.create_stack(
            stack,
            &template,
            &[("SmsProvider", "sns"), ("CreateSmsLogGroups", create), ("ManageSmsPreferences", manage)],
        )
        .await
        .expect("answers")
        .expect("deployed");
    }
    let r = preflight(&cfn, &sound(), &[]).await;
    let b = blockers(&r);
    assert_eq!(b.len(), 3, "{}", r.stdout);
    assert!(b[0].contains("exist (SMS delivery logging ran here before, or another stack made them): deploy with CreateSmsLogGroups=false"), "{}", b[0]);
    for (line, group) in b[1..].iter().zip([SUCCESS, FAILURE]) {
        assert!(line.starts_with(&format!("BLOCKER subscription filters: {group} has 2 already (tocsin-")), "{line}");
        assert!(line.contains("LimitExceededException"), "{line}");
    }
    let r = preflight(&cfn, &sound(), &["--create-sms-log-groups", "false"]).await;
    assert_eq!(blockers(&r).len(), 2, "only the filters now:\n{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sms_attributes_the_stack_would_overwrite_are_shown_as_a_diff() {
    let cfn = account().await;
    sms_attributes(
        &cfn,
        &[
            ("DeliveryStatusIAMRole", "arn:aws:iam::123456789012:role/someone-elses"),
            ("DeliveryStatusSuccessSamplingRate", "50"),
            ("DefaultSMSType", "Promotional"),
        ],
    )
    .await;
    let r = preflight(&cfn, &sound(), &["--monthly-spend-limit-usd", "100"]).await;
    assert_eq!(r.code, 0, "a diff is to know, not a blocker: {r:?}");
    let line =
        r.stdout.lines().find(|l| l.starts_with("WARN    SMS preferences:")).unwrap_or_else(|| panic!("{}", r.stdout));
    for change in [
        "DeliveryStatusIAMRole arn:aws:iam::123456789012:role/someone-elses → this stack's SmsDeliveryStatusRole",
        "DeliveryStatusSuccessSamplingRate 50 → 100",
        "DefaultSMSType Promotional → Transactional",
        "deploy with ManageSmsPreferences=false",
    ] {
        assert!(line.contains(change), "{change:?} in {line}");
    }
    assert!(!line.contains("MonthlySpendLimit"), "100 is what the account has: {line}");
    let doc = preflight(&cfn, &sound(), &["--json"]).await.json();
    let diff: Vec<(&str, Option<&str>)> = doc["sms_preferences_diff"]
        .as_array()
        .expect("diff")
        .iter()
        .map(|c| (c["attribute"].as_str().unwrap_or_default(), c["current"].as_str()))
        .collect();
    assert_eq!(
        diff,
        [
            ("DeliveryStatusIAMRole", Some("arn:aws:iam::123456789012:role/someone-elses")),
            ("DeliveryStatusSuccessSamplingRate", Some("50")),
            ("DefaultSMSType", Some("Promotional"))
        ]
    );

    // Leaving them to another stack works only if delivery-status logging is on without this one.
    let r = preflight(&cfn, &sound(), &["--manage-sms-preferences", "false"]).await;
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(
        blockers(&r)[0].contains("delivery-status logging is not on (role set, success sampling 50)"),
        "{}",
        r.stdout
    );
    sms_attributes(&cfn, &[("DeliveryStatusSuccessSamplingRate", "100")]).await;
    let r = preflight(&cfn, &sound(), &["--manage-sms-preferences", "false"]).await;
    assert_eq!(r.code, 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_accounts_concurrency_quota_refuses_a_reservation() {
    let cfn = account().await;
    let new_account = Account { concurrency: (10, 10), ..sound() };
    let r = preflight(&cfn, &new_account, &["--reserve-sender-concurrency", "true"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(
        blockers(&r)[0]
            .starts_with("BLOCKER Lambda concurrency: quota 10, 10 unreserved: ReserveSenderConcurrency=true"),
        "{}",
        r.stdout
    );
    let r = preflight(&cfn, &new_account, &[]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("WARN    Lambda concurrency: quota 10"), "{}", r.stdout);
    let r = preflight(&cfn, &sound(), &["--reserve-sender-concurrency", "true"]).await;
    assert!(r.stdout.contains("ok      Lambda concurrency: quota 1000, 1000 unreserved"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_sandbox_every_destination_must_be_verified() {
    let cfn = account().await;
    let sandboxed = Account { in_sandbox: true, verified: vec!["+14155550100"], ..sound() };
    let r = preflight(&cfn, &sandboxed, &["--to", "+14155550100", "--to", "+14155550101"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(blockers(&r)[0].contains("in the sandbox, and +1******0101 not verified"), "{}", r.stdout);
    assert!(!r.stdout.contains("+14155550101") && !r.stdout.contains("+14155550100"), "numbers stay masked");
    let r = preflight(&cfn, &sandboxed, &["--to", "+14155550100"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("WARN    SMS sandbox: in the sandbox: only the 1 verified number(s)"), "{}", r.stdout);
    let nobody = Account { in_sandbox: true, verified: vec![], ..sound() };
    let r = preflight(&cfn, &nobody, &[]).await;
    assert!(blockers(&r).iter().any(|l| l.contains("in the sandbox with no verified number")), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spend_limit_and_this_months_spend() {
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    // A new account: no limit set means 1 USD.
    let r = preflight(&cfn, &sound(), &["--monthly-spend-limit-usd", "50"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("WARN    SMS spend: MonthlySpendLimitUsd=50 is above the account's 1 USD"),
        "{}",
        r.stdout
    );
    let r = preflight(&cfn, &sound(), &[]).await;
    assert!(
        r.stdout
            .contains("WARN    SMS spend: the limit is 1 USD (a new account's; inside the SMS sandbox it stays 1 USD)"),
        "{}",
        r.stdout
    );
    let spent = Account { spend_usd: 0.95, ..sound() };
    let r = preflight(&cfn, &spent, &[]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        blockers(&r),
        [
            "BLOCKER SMS spend: 0.95 of 1.00 USD this month (95 %): SNS stops sending at 100 %; raise the limit (AWS support case) now"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_us_destination_needs_an_origination_number_in_the_us() {
    let cfn = account().await;
    let none = Account { origination: vec![], ..sound() };
    let r = preflight(&cfn, &none, &["--to", "+14155550100", "--to", "+447911123456"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(
        blockers(&r)[0].starts_with(
            "BLOCKER origination numbers: +1******0100 (US/CA): the account has no active SMS origination number"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("WARN    origination numbers: +4*******3456 (GB): no origination number there"),
        "{}",
        r.stdout
    );
    let r = preflight(&cfn, &sound(), &["--to", "+14155550100"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("ok      origination numbers: +1******0100 (US/CA): +1******0100 (US, Transactional)"),
        "{}",
        r.stdout
    );
    let j = preflight(&cfn, &none, &["--json", "--to", "+14155550100"]).await.json();
    let check: &Value = j["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["check"] == "origination numbers")
        .expect("the origination check");
    assert_eq!(check["verdict"], "problem");
}
