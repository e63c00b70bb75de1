//! `tocsin doctor` against a stack deployed from `template.yaml` (SAM-translated, created by
//! CloudFormation on the emulator, with its subscription filters and queues).
//!
//! What moto 5.2.5 does not serve is answered from recordings by `tocsin_harness::recorded`,
//! reached through the SDK's standard per-service endpoint variables, in the wire format AWS
//! uses so the real SDK parses it: SNS `GetSMSSandboxAccountStatus` and
//! `ListSMSSandboxPhoneNumbers` (not implemented by moto), and CloudWatch `GetMetricData` and
//! `DescribeAlarms` (moto does not speak the RPC v2 CBOR protocol of `aws-sdk-cloudwatch`).
//! Every other call — SNS GetSMSAttributes, CloudWatch Logs, SQS, CloudFormation — goes to the
//! emulator. The CLI signs as the operator: each call, recorded answers included, passes an IAM
//! gate that checks it against the operator policies (`shared/cli/operator-read-only-policy.json`, `operator-break-glass-policy.json`) for the deployed stack.

mod common;

use std::collections::BTreeMap;

use common::{Run, aws_env, tocsin_with};
use serde_json::json;
use tocsin_harness::cloudformation::{CloudFormationEmulator, deployable_on_emulator};
use tocsin_harness::recorded::{Answer, Recorded};

const STACK: &str = "tocsin-doc";

/// A stack on SNS (these checks read SNS's account settings and its delivery-status log groups).
async fn deployed() -> (CloudFormationEmulator, BTreeMap<String, String>) {
    deployed_with(&[]).await
}

async fn deployed_with(parameters: &[(&str, &str)]) -> (CloudFormationEmulator, BTreeMap<String, String>) {
    let translated = tokio::task::spawn_blocking(|| tocsin_harness::sam::translate_template_yaml(&[]))
        .await
        .expect("join")
        .expect("template.yaml translates");
    let (template, _) = deployable_on_emulator(&translated);
    let cfn = CloudFormationEmulator::start().await.expect("emulator");
    let mut parameters = parameters.to_vec();
    if !parameters.iter().any(|(k, _)| *k == "SmsProvider") {
        parameters.push(("SmsProvider", "sns"));
    }
    cfn.create_stack(STACK, &template, &parameters).await.expect("CloudFormation answers").expect("stack created");
    let client = aws_sdk_cloudformation::Client::new(&cfn.sdk_config().await);
    let stacks = client.describe_stacks().stack_name(STACK).send().await.expect("describe");
    let outputs = stacks.stacks()[0]
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
        .collect();
    (cfn, outputs)
}

async fn set_sms_attributes(cfn: &CloudFormationEmulator, attrs: &[(&str, &str)]) {
    let sns = aws_sdk_sns::Client::new(&cfn.sdk_config().await);
    let mut req = sns.set_sms_attributes();
    for (k, v) in attrs {
        req = req.attributes(*k, *v);
    }
    req.send().await.expect("SetSMSAttributes");
}

fn sandbox(in_sandbox: bool) -> (&'static str, Answer) {
    (
        "GetSMSSandboxAccountStatus",
        Answer::sns_query("GetSMSSandboxAccountStatus", &format!("<IsInSandbox>{in_sandbox}</IsInSandbox>")),
    )
}

fn spend(usd: f64) -> (&'static str, Answer) {
    let doc = json!({"MetricDataResults": [{"Id": "spend", "Label": "SMSMonthToDateSpentUSD",
        "Timestamps": [{"$timestamp": 1_796_000_000.0}], "Values": [usd], "StatusCode": "Complete"}], "Messages": []});
    ("GetMetricData", Answer::rpc_v2_cbor(&doc))
}

/// The account's origination numbers (SNS ListOriginationNumbers): one active US toll-free number.
fn origination() -> (&'static str, Answer) {
    (
        "ListOriginationNumbers",
        Answer::sns_query(
            "ListOriginationNumbers",
            "<PhoneNumbers><member><PhoneNumber>+18445550100</PhoneNumber><Status>ACTIVE</Status>\
             <Iso2CountryCode>US</Iso2CountryCode><RouteType>Transactional</RouteType>\
             <NumberCapabilities><member>SMS</member></NumberCapabilities></member></PhoneNumbers>",
        ),
    )
}

fn alarms(in_alarm: &[(&str, &str)]) -> (&'static str, Answer) {
    let list: Vec<_> =
        in_alarm.iter().map(|(n, why)| json!({"AlarmName": n, "StateValue": "ALARM", "StateReason": why})).collect();
    ("DescribeAlarms", Answer::rpc_v2_cbor(&json!({"MetricAlarms": list, "CompositeAlarms": []})))
}

async fn doctor(cfn: &CloudFormationEmulator, recorded: &Recorded, json: bool) -> Run {
    // The recorded answers are authorized too: an IAM gate with the stack's policies before them.
    let front = cfn.gate_in_front_of(&recorded.endpoint()).await.expect("gate");
    let mut env = aws_env(&cfn.endpoint());
    env.push(("AWS_ENDPOINT_URL_SNS".into(), front.endpoint()));
    env.push(("AWS_ENDPOINT_URL_CLOUDWATCH".into(), front.endpoint()));
    let args: &[&str] = if json { &["--stack", STACK, "--json", "doctor"] } else { &["--stack", STACK, "doctor"] };
    tocsin_with(env, args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_stack_whose_sms_settings_logs_queues_and_alarms_are_sound() {
    let (cfn, outputs) = deployed_with(&[
        ("AlarmEmail", "oncall@example.com"),
        ("ReserveSenderConcurrency", "true"),
        ("ReserveFunctionConcurrency", "true"),
        ("Producers", tocsin_harness::stack::LOCAL_PRODUCER),
    ])
    .await;
    let role = outputs.get("SmsDeliveryStatusRoleArn").expect("the role output").clone();
    set_sms_attributes(
        &cfn,
        &[
            ("DeliveryStatusIAMRole", role.as_str()),
            ("DeliveryStatusSuccessSamplingRate", "100"),
            ("DefaultSMSType", "Transactional"),
            ("MonthlySpendLimit", "10"),
        ],
    )
    .await;
    // The roster, as an operator fills it after the deploy.
    let registry = tocsin::adapters::registry::DynamoRegistry::new(
        aws_sdk_dynamodb::Client::new(&cfn.sdk_config().await),
        outputs.get("RecipientsTableName").expect("the table output"),
    );
    let prefix = tocsin::domain::roster::RosterEntry::parse("+1").expect("entry");
    registry.allow(&prefix, "alice", "NANP on-call", chrono::Utc::now()).await.expect("allow");
    let recorded = Recorded::start(&cfn.endpoint(), vec![sandbox(false), spend(1.25), origination(), alarms(&[])])
        .await
        .expect("recorded");

    let r = doctor(&cfn, &recorded, false).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("PROBLEM"), "{}", r.stdout);
    for line in [
        &format!("ok      delivery-status role: {role}"),
        "ok      success sampling: 100 %",
        "ok      SMS sandbox: out of the sandbox",
        "ok      SMS spend: 1.25 of 10.00 USD this month (12 %)",
        "ok      origination number: SmsOriginationNumber not set: SNS chooses among 1: +1******0100 (US, Transactional)",
        "ok      delivered log group: sns/us-east-1/123456789012/DirectPublishToPhoneNumber, subscribed by",
        "ok      failed log group: sns/us-east-1/123456789012/DirectPublishToPhoneNumber/Failure, subscribed by",
        "ok      escalation queue: tocsin-doc-escalations: 0 visible, 0 in flight",
        "ok      alarms: none of tocsin-doc-* in ALARM",
        "ok      on-call subscriptions: 1 confirmed: o…@example.com",
        "ok      sender concurrency: 2 reserved for tocsin-doc-sender",
        "ok      function concurrency: reserved: 10 for tocsin-doc-intake, 5 for tocsin-doc-status, 2 for tocsin-doc-escalation",
        "producers: 1: monitoring",
        "ok      recipients roster: 1 entry: 0 whole numbers, 1 prefixes",
    ] {
        assert!(r.stdout.contains(line), "missing {line:?} in\n{}", r.stdout);
    }
    let log = recorded.log();
    for (op, from_recording) in [
        ("GetSMSAttributes", false),
        ("GetSMSSandboxAccountStatus", true),
        ("GetMetricData", true),
        ("DescribeAlarms", true),
    ] {
        assert!(log.contains(&(op.to_owned(), from_recording)), "{op}: {log:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_exits_1_with_one_line_per_problem() {
    let (cfn, outputs) = deployed().await;
    let sdk = cfn.sdk_config().await;
    // No delivery-status role, sampling at 50 %, the account's default limit of 1 USD.
    set_sms_attributes(
        &cfn,
        &[("DeliveryStatusSuccessSamplingRate", "50"), ("DefaultSMSType", "Promotional"), ("MonthlySpendLimit", "1")],
    )
    .await;
    // Someone removed the status function's filter from the success group.
    let logs = aws_sdk_cloudwatchlogs::Client::new(&sdk);
    let group = outputs.get("SmsSuccessLogGroupName").expect("output").clone();
    let filters = logs.describe_subscription_filters().log_group_name(&group).send().await.expect("filters");
    for f in filters.subscription_filters() {
        logs.delete_subscription_filter()
            .log_group_name(&group)
            .filter_name(f.filter_name().unwrap_or_default())
            .send()
            .await
            .expect("delete filter");
    }
    // A dead-lettered send request.
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    sqs.send_message()
        .queue_url(outputs.get("SendDeadLetterQueueUrl").expect("output"))
        .message_body("{\"key\":\"x\"}")
        .send()
        .await
        .expect("send");
    let pending = Answer::sns_query(
        "ListSMSSandboxPhoneNumbers",
        "<PhoneNumbers><member><PhoneNumber>+14155550170</PhoneNumber><Status>Pending</Status></member></PhoneNumbers>",
    );
    let recorded = Recorded::start(
        &cfn.endpoint(),
        vec![
            sandbox(true),
            ("ListSMSSandboxPhoneNumbers", pending),
            spend(0.95),
            origination(),
            alarms(&[("tocsin-doc-escalation-waiting", "Threshold Crossed: 1 datapoint [1.0] was >= 1.0")]),
            // The e-mail subscription SNS is still waiting to have confirmed pages nobody.
            (
                "ListSubscriptionsByTopic",
                Answer::sns_query(
                    "ListSubscriptionsByTopic",
                    "<Subscriptions><member><TopicArn>arn:aws:sns:us-east-1:123456789012:tocsin-doc-oncall</TopicArn>\
                     <Protocol>email</Protocol><SubscriptionArn>PendingConfirmation</SubscriptionArn>\
                     <Owner>123456789012</Owner><Endpoint>oncall@example.com</Endpoint></member></Subscriptions>",
                ),
            ),
        ],
    )
    .await
    .expect("recorded");

    let r = doctor(&cfn, &recorded, false).await;
    assert_eq!(r.code, 1, "{r:?}");
    let problems: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("PROBLEM")).collect();
    let expected = [
        "PROBLEM delivery-status role: not set",
        "PROBLEM success sampling: 50 %",
        "PROBLEM SMS sandbox: in the sandbox with no verified number (1 pending)",
        "PROBLEM SMS spend: 0.95 of 1.00 USD this month (95 %)",
        "PROBLEM delivered log group: sns/us-east-1/123456789012/DirectPublishToPhoneNumber has no subscription filter to",
        "PROBLEM send dead-letter queue: tocsin-doc-send-dlq: 1 visible",
        "PROBLEM alarm: tocsin-doc-escalation-waiting (Threshold Crossed",
        "PROBLEM on-call subscriptions: nobody confirmed and reachable on tocsin-doc-oncall: every alarm pages nobody; \
         waiting for confirmation: o…@example.com",
        // Deployed with the template's defaults: no producer, an empty roster — nobody can send.
        "PROBLEM producers: none: intake refuses every alert",
        "PROBLEM recipients roster: empty: intake refuses every alert",
    ];
    assert_eq!(problems.len(), expected.len(), "one line per problem:\n{}", r.stdout);
    for (line, want) in problems.iter().zip(expected) {
        assert!(line.starts_with(want), "{line:?} should start with {want:?}\n{}", r.stdout);
    }
    assert!(r.stdout.contains("WARN    default SMS type: Promotional"), "{}", r.stdout);
    assert!(r.stdout.contains("ok      failed log group"), "the other group is fine:\n{}", r.stdout);
    assert!(r.stdout.contains("WARN    sender concurrency: none reserved for tocsin-doc-sender"), "{}", r.stdout);
    assert!(
        r.stdout.contains(
            "WARN    function concurrency: none reserved for tocsin-doc-intake, tocsin-doc-status, tocsin-doc-escalation"
        ),
        "{}",
        r.stdout
    );
    assert!(r.stdout.trim_end().ends_with("tocsin-doc: 10 problems to fix."), "{}", r.stdout);
    assert!(!r.stdout.contains("+14155550170"), "numbers stay masked");
    assert!(!r.stdout.contains("oncall@example.com"), "so do e-mail addresses");

    let doc = doctor(&cfn, &recorded, true).await;
    assert_eq!(doc.code, 1);
    let doc = doc.json();
    assert_eq!((doc["ok"].as_bool(), doc["problems"].as_u64()), (Some(false), Some(10)), "{doc}");
    assert!(
        doc["checks"].as_array().expect("checks").iter().all(|c| c["check"].is_string() && c["detail"].is_string())
    );
}
