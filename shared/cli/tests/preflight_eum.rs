//! `tocsin preflight` under End User Messaging (the default provider): one test per blocker a
//! newcomer meets — a sandboxed account with no identity, an identity still PENDING its
//! registration, a destination not verified (and one opted out, which only the DryRun sees), the
//! spend limit reached — and a deployed stack's configuration set.
//!
//! End User Messaging is the local stand-in (`tests/harness/eum_standin.py`) behind the IAM gate,
//! which checks every call against the operator policies (`shared/cli/operator-read-only-policy.json`, `operator-break-glass-policy.json`); a fresh stand-in account is
//! what AWS gives a new one (SANDBOXED, 1 USD a month, no identity). What the emulator does not
//! serve comes from recordings in AWS's wire format: CloudWatch `GetMetricData` (the month's
//! `AWS/SMSVoice` `TextMessageMonthlySpend`) and Lambda `GetAccountSettings`.

mod common;

use aws_sdk_pinpointsmsvoicev2 as eum;
use common::{Run, aws_env, tocsin_with};
use serde_json::json;
use tocsin_harness::Emulator;
use tocsin_harness::recorded::{Answer, Recorded};
use tocsin_tests::{Options, Pipeline};

const TO: &str = "+14155550100";
const OTHER: &str = "+14155550101";

/// Runs `tocsin ARGS` against `endpoint`, with the month's text spend `spent` (None: no data yet).
async fn tocsin(endpoint: &str, spent: Option<f64>, args: &[&str]) -> Run {
    let values: Vec<f64> = spent.into_iter().collect();
    let recorded = Recorded::start(
        endpoint,
        vec![
            (
                "GetMetricData",
                Answer::rpc_v2_cbor(&json!({"MetricDataResults": [{"Id": "spend", "Label": "TextMessageMonthlySpend",
                    "Timestamps": values.iter().map(|_| json!({"$timestamp": 1_796_000_000.0})).collect::<Vec<_>>(),
                    "Values": values, "StatusCode": "Complete"}], "Messages": []})),
            ),
            (
                "GetAccountSettings",
                Answer::json(
                    &json!({"AccountLimit": {"TotalCodeSize": 80_530_636_800_i64, "CodeSizeUnzipped": 262_144_000,
                    "CodeSizeZipped": 52_428_800, "ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 1000},
                    "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0}}),
                ),
            ),
        ],
    )
    .await
    .expect("recorded");
    let mut env = aws_env(endpoint);
    for service in ["CLOUDWATCH", "LAMBDA"] {
        env.push((format!("AWS_ENDPOINT_URL_{service}"), recorded.endpoint()));
    }
    tocsin_with(env, args).await
}

async fn preflight(endpoint: &str, spent: Option<f64>, args: &[&str]) -> Run {
    let mut all = vec!["preflight"];
    all.extend_from_slice(args);
    tocsin(endpoint, spent, &all).await
}

fn blockers(r: &Run) -> Vec<&str> {
    r.stdout.lines().filter(|l| l.starts_with("BLOCKER")).collect()
}

fn assert_masked(r: &Run) {
    for n in [TO, OTHER, "+18335550001", "+12065550001"] {
        assert!(!r.stdout.contains(n) && !r.stderr.contains(n), "{n} in clear:\n{}\n{}", r.stdout, r.stderr);
    }
}

async fn client(e: &Emulator) -> eum::Client {
    eum::Client::new(&e.sdk_config().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_account_is_sandboxed_without_an_identity_and_is_told_to_get_one_first() {
    let e = Emulator::start().await.expect("emulator");
    let r = preflight(&e.endpoint(), None, &["--to", TO]).await;
    assert_eq!(r.code, 1, "{r:?}");
    let b = blockers(&r);
    assert_eq!(b.len(), 2, "{}", r.stdout);
    assert!(
        b[0].starts_with(
            "BLOCKER SMS sandbox: account tier SANDBOXED, and no ACTIVE origination identity to verify a destination \
             from: first get one"
        ),
        "{}",
        b[0]
    );
    assert!(b[0].contains("AWS's order: 1. an ACTIVE origination identity"), "{}", b[0]);
    assert!(
        b[1].starts_with("BLOCKER origination identity: the account has no origination identity in us-east-1"),
        "{}",
        b[1]
    );
    assert!(b[1].contains("--number-type TOLL_FREE") && b[1].contains("up to 15 business days"), "{}", b[1]);
    assert!(
        r.stdout.contains("ok      End User Messaging region: us-east-1 offers End User Messaging SMS"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("WARN    SMS spend: no spend recorded in the last day; the limit is 1 USD (the account's): inside the sandbox the limit stays 1 USD"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.trim_end().ends_with(
            "account 123456789012, us-east-1, SmsProvider=end-user-messaging: 2 blockers to fix before deploying."
        ),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("DryRun"), "no DryRun where the reads already say why it would fail");
    assert_masked(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_pending_its_registration_blocks_and_names_the_registration() {
    let e = Emulator::start().await.expect("emulator");
    let requested = client(&e)
        .await
        .request_phone_number()
        .iso_country_code("US")
        .message_type(eum::types::MessageType::Transactional)
        .number_capabilities(eum::types::NumberCapability::Sms)
        .number_type(eum::types::RequestableNumberType::TollFree)
        .registration_id("registration-0a1b2c")
        .send()
        .await
        .expect("RequestPhoneNumber");
    let id = requested.phone_number_id.expect("an id");
    let r = preflight(&e.endpoint(), None, &["--to", TO, "--origination-identity", &id]).await;
    assert_eq!(r.code, 1, "{r:?}");
    let line = blockers(&r)
        .into_iter()
        .find(|l| l.starts_with("BLOCKER origination identity:"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    let identity = format!("{id} (TOLL_FREE, +1******0001, US), PENDING, registration registration-0a1b2c");
    for says in [
        identity.as_str(),
        "not ACTIVE, a new number stays PENDING until its registration is approved (US toll-free: up to 15 business days",
        "2.00 USD a month",
    ] {
        assert!(line.contains(says), "{says:?} in {line}");
    }

    // Approved: the identity passes, and what is left is the sandbox's next step.
    e.eum().set_phone_number_status(&id, "ACTIVE").await.expect("approve");
    let r = preflight(&e.endpoint(), None, &["--to", TO, "--origination-identity", &id]).await;
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(blockers(&r)[0].contains("account tier SANDBOXED, and +1******0100 not verified"), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!("ok      origination identity: +1******0100 (US/CA): sent from {id}")),
        "{}",
        r.stdout
    );
    assert_masked(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_sandbox_an_unverified_number_blocks_and_the_dry_run_finds_an_opted_out_one() {
    let e = Emulator::start().await.expect("emulator");
    let sdk = e.sdk_config().await;
    let eum_control = e.eum();
    eum_control.active_phone_number(&sdk, eum::types::RequestableNumberType::TollFree, "US").await.expect("number");
    eum_control.verify_destinations(&[TO]).await.expect("verify");

    let r = preflight(&e.endpoint(), None, &["--to", TO, "--to", OTHER]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    let line = blockers(&r)[0];
    assert!(line.starts_with("BLOCKER SMS sandbox: account tier SANDBOXED, and +1******0101 not verified"), "{line}");
    assert!(
        line.contains("create-verified-destination-number") && line.contains("verify-destination-number"),
        "{line}"
    );

    // Only the verified number: nothing blocks, and End User Messaging's own checks pass it.
    let r = preflight(&e.endpoint(), None, &["--to", TO]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("WARN    SMS sandbox: account tier SANDBOXED: only the 1 verified destination number(s)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("ok      DryRun: +1******0100: SendTextMessage with DryRun passed"), "{}", r.stdout);

    // The person replied STOP: no read above shows it; the DryRun does, and says what to do.
    client(&e)
        .await
        .put_opted_out_number()
        .opt_out_list_name("Default")
        .opted_out_number(TO)
        .send()
        .await
        .expect("opt out");
    let r = preflight(&e.endpoint(), None, &["--to", TO]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        blockers(&r),
        [
            "BLOCKER DryRun: +1******0100: refused (ConflictException DESTINATION_PHONE_NUMBER_OPTED_OUT: +1******0100 is \
          opted out in Default): the person opted out (replied STOP): only they opt back in, by replying; remove the \
          number from the list (delete-opted-out-number) only at their request"
        ]
    );
    assert!(eum_control.sent_texts().await.expect("messages").is_empty(), "a DryRun sends nothing");

    // An opt-out list the identity does not use, and that does not exist.
    let r = preflight(&e.endpoint(), None, &["--opt-out-list", "alerts"]).await;
    let b = blockers(&r);
    assert!(
        b.iter().any(|l| l.starts_with("BLOCKER opt-out list: SmsOptOutListName=alerts does not exist")),
        "{}",
        r.stdout
    );
    assert_masked(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_limit_reached_or_near_blocks_before_on_call_loses_its_sms() {
    let e = Emulator::start().await.expect("emulator");
    let sdk = e.sdk_config().await;
    let control = e.eum();
    control.production_account().await.expect("production");
    control.set_spend_limit(10).await.expect("limit");
    control.active_phone_number(&sdk, eum::types::RequestableNumberType::TollFree, "US").await.expect("number");

    let r = preflight(&e.endpoint(), Some(10.0), &[]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        blockers(&r),
        ["BLOCKER SMS spend: 10.00 USD this month of enforced 10 USD of the account's 1000 USD (100 %): End User \
          Messaging has stopped sending SMS, on-call's included; raise the enforced limit (aws pinpoint-sms-voice-v2 \
          set-text-message-spend-limit-override --monthly-limit N, up to the account's 1000 USD)"]
    );
    let r = preflight(&e.endpoint(), Some(8.5), &[]).await;
    assert!(
        blockers(&r).iter().any(|l| l.contains("(85 %): End User Messaging stops sending at 100 %")),
        "{}",
        r.stdout
    );
    let r = preflight(&e.endpoint(), Some(1.0), &[]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("ok      SMS sandbox: account tier PRODUCTION"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployed_stacks_configuration_set_must_send_every_event_to_its_group() {
    let p = Pipeline::start_with(Options::end_user_messaging()).await;
    tocsin_harness::stack_outputs::publish(&p.emulator.endpoint(), &p.stack, "tocsin-local", &[])
        .await
        .expect("outputs");
    let endpoint = p.emulator.endpoint();
    let r = tocsin(&endpoint, None, &["--stack", "tocsin-local", "preflight", "--to", TO]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(
            "ok      configuration set: tocsin-local: event destination tocsin-local-status, enabled, TEXT_ALL, writing \
             to /tocsin/tocsin-local/sms-events"
        ),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("ok      DryRun: +1******0100"), "{}", r.stdout);

    // Someone disabled the event destination by hand: no event would reach tocsin.
    let sms = eum::Client::new(&p.emulator.sdk_config().await);
    sms.update_event_destination()
        .configuration_set_name("tocsin-local")
        .event_destination_name("tocsin-local-status")
        .enabled(false)
        .send()
        .await
        .expect("UpdateEventDestination");
    let r = tocsin(&endpoint, None, &["--stack", "tocsin-local", "preflight"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(blockers(&r).len(), 1, "{}", r.stdout);
    assert!(
        blockers(&r)[0]
            .starts_with("BLOCKER configuration set: tocsin-local's event destination tocsin-local-status is disabled"),
        "{}",
        r.stdout
    );

    // A flag that contradicts the deployed stack is refused, not half-applied.
    let r = tocsin(&endpoint, None, &["--stack", "tocsin-local", "preflight", "--sms-provider", "sns"]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("sends through end-user-messaging: --sms-provider contradicts it"), "{}", r.stderr);
}
