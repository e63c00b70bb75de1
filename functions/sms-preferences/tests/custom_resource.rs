//! The custom resource against the emulator: what it sets in the account (read back with
//! GetSMSAttributes), and what it answers on CloudFormation's ResponseURL in every case.

mod common;

use std::time::{Duration, Instant};

use common::{GENEROUS, ROLE, ResponseCapture, STACK_ID, request, sms_attributes};
use serde_json::json;
use sms_preferences::adapters::{HttpResponder, SnsSmsAttributes};
use sms_preferences::{Invocation, Preferences, RetryPolicy, SmsPreferences, SmsPreferencesError};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_harness::{Emulator, Principal};

/// The custom resource exists only when SNS sends (it sets the account's SNS SMS preferences).
const SNS: &[(&str, &str)] = &[("SmsProvider", "sns")];

/// The custom resource's own credentials: its calls are checked against its role.
fn me() -> Principal {
    Principal::function("SmsPreferencesFunction")
}

/// The function as the template's defaults configure it: this stack's role, no spend limit.
fn function(sdk: &aws_config::SdkConfig, retry: RetryPolicy) -> SmsPreferences<SnsSmsAttributes, HttpResponder> {
    function_with_limit(sdk, None, retry)
}

/// The function of a stack deployed with `MonthlySpendLimitUsd` = `limit`.
fn function_with_limit(
    sdk: &aws_config::SdkConfig,
    limit: Option<&str>,
    retry: RetryPolicy,
) -> SmsPreferences<SnsSmsAttributes, HttpResponder> {
    SmsPreferences {
        sns: SnsSmsAttributes::new(sdk),
        responder: HttpResponder::new().expect("http client"),
        preferences: Ok(Preferences::new(ROLE, limit).expect("the stack's preferences")),
        physical_id: "tocsin-sms-preferences-us-east-1".into(),
        retry,
    }
}

/// Retries as in production, but with short pauses (for failures that are meant to persist).
fn quick() -> RetryPolicy {
    RetryPolicy {
        first_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(50),
        answer_delay: Duration::from_millis(20),
        ..RetryPolicy::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_turns_on_delivery_status_logging_for_every_success_and_answers_success() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::start().await;
    let f = function(&sdk, RetryPolicy::default());
    let event = request(
        "Create",
        &capture.url("req-create"),
        "req-create",
        json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": ""}),
    );

    let returned = f.handle(event, &Invocation::with_timeout(GENEROUS)).await.expect("answered");
    let stacks_role = emulator.iam().principals().template.get_att("SmsDeliveryStatusRole", "Arn");
    assert_eq!(stacks_role.as_deref(), Ok(ROLE), "the role this stack hands the function");

    let attrs = sms_attributes(&emulator.sdk_config().await).await;
    assert_eq!(attrs.get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE));
    assert_eq!(attrs.get("DeliveryStatusSuccessSamplingRate").map(String::as_str), Some("100"));
    assert_eq!(attrs.get("DefaultSMSType").map(String::as_str), Some("Transactional"));
    assert!(!attrs.contains_key("MonthlySpendLimit"), "no limit given, none set: {attrs:?}");

    let answer = capture.only_answer();
    assert_eq!(answer.method, "PUT");
    assert!(answer.path_and_query.contains("req-create?X-Amz-Algorithm="), "the pre-signed URL is used as given");
    assert_eq!(answer.content_type, None, "no Content-Type: the URL is signed without one");
    let body = &answer.body;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["PhysicalResourceId"], "tocsin-sms-preferences-us-east-1");
    assert_eq!(body["StackId"], STACK_ID);
    assert_eq!(body["RequestId"], "req-create");
    assert_eq!(body["LogicalResourceId"], "SmsPreferences");
    assert_eq!(body["Data"]["DeliveryStatusSuccessSamplingRate"], "100");
    assert_eq!(serde_json::to_value(&returned).expect("encode"), *body, "the function returns what it sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_without_a_spend_limit_keeps_the_accounts_limit() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    aws_sdk_sns::Client::new(&emulator.sdk_config().await)
        .set_sms_attributes()
        .attributes("MonthlySpendLimit", "40")
        .send()
        .await
        .expect("raised by hand earlier");
    let capture = ResponseCapture::start().await;
    let event = request("Create", &capture.url("req-1"), "req-1", json!({"DeliveryStatusIAMRole": ROLE}));

    function(&sdk, RetryPolicy::default()).handle(event, &Invocation::with_timeout(GENEROUS)).await.expect("answered");

    assert_eq!(capture.only_answer().body["Status"], "SUCCESS");
    let attrs = sms_attributes(&emulator.sdk_config().await).await;
    assert_eq!(attrs.get("MonthlySpendLimit").map(String::as_str), Some("40"));
    assert_eq!(attrs.get("DeliveryStatusSuccessSamplingRate").map(String::as_str), Some("100"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_a_new_spend_limit_sets_it_and_keeps_the_physical_id() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::start().await;
    let f = function(&sdk, RetryPolicy::default());
    let create = request("Create", &capture.url("req-c"), "req-c", json!({"DeliveryStatusIAMRole": ROLE}));
    f.handle(create, &Invocation::with_timeout(GENEROUS)).await.expect("created");
    // The stack updated to MonthlySpendLimitUsd=250: CloudFormation sets the function's
    // environment first, then sends the custom resource's Update.
    let f = function_with_limit(&sdk, Some("250"), RetryPolicy::default());
    let update = request(
        "Update",
        &capture.url("req-u"),
        "req-u",
        json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "250"}),
    );

    f.handle(update, &Invocation::with_timeout(GENEROUS)).await.expect("updated");

    let attrs = sms_attributes(&emulator.sdk_config().await).await;
    assert_eq!(attrs.get("MonthlySpendLimit").map(String::as_str), Some("250"));
    assert_eq!(attrs.get("DeliveryStatusSuccessSamplingRate").map(String::as_str), Some("100"));
    let answers = capture.answers();
    assert_eq!(answers.len(), 2);
    let body = &answers[1].body;
    assert_eq!((body["Status"].as_str(), body["RequestId"].as_str()), (Some("SUCCESS"), Some("req-u")));
    assert_eq!(body["PhysicalResourceId"], answers[0].body["PhysicalResourceId"], "no replacement");
    assert_eq!(body["Data"]["MonthlySpendLimit"], "250");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_answers_success_and_leaves_the_account_preferences_untouched() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::start().await;
    let f = function_with_limit(&sdk, Some("100"), RetryPolicy::default());
    let create = request(
        "Create",
        &capture.url("req-c"),
        "req-c",
        json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "100"}),
    );
    f.handle(create, &Invocation::with_timeout(GENEROUS)).await.expect("created");
    let before = sms_attributes(&emulator.sdk_config().await).await;
    emulator.start_recording().await.expect("record");
    let delete = request(
        "Delete",
        &capture.url("req-d"),
        "req-d",
        json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "100"}),
    );

    f.handle(delete, &Invocation::with_timeout(GENEROUS)).await.expect("deleted");

    let calls = emulator.stop_recording().await.expect("recording");
    assert!(calls.is_empty(), "Delete makes no AWS call: {calls:?}");
    assert_eq!(sms_attributes(&emulator.sdk_config().await).await, before);
    let body = &capture.answers()[1].body;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["PhysicalResourceId"], "tocsin-sms-preferences-us-east-1", "the id CloudFormation sent back");
    assert_eq!(body["RequestId"], "req-d");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_succeeds_even_when_its_properties_are_malformed_or_sns_is_unreachable() {
    // SNS on a port nobody listens on: Delete must not even try it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let sdk = Emulator::sdk_config_for(&format!("http://127.0.0.1:{closed}"), &me()).await;
    let capture = ResponseCapture::start().await;
    let mut delete = request("Delete", &capture.url("req-d"), "req-d", json!({"Unexpected": 1}));
    delete.as_object_mut().expect("object").remove("StackId");

    function(&sdk, quick()).handle(delete, &Invocation::with_timeout(GENEROUS)).await.expect("answered");

    let body = capture.only_answer().body;
    assert_eq!(body["Status"], "SUCCESS", "a stack delete is never blocked: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_set_sms_attributes_answers_failed_with_sns_reason() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let proxy = FaultProxy::start(&emulator.endpoint(), 1).await.expect("proxy");
    proxy.add_rule(Rule::once(
        "SNS.SetSMSAttributes",
        Fault::sns_error(
            "InvalidParameter",
            "Invalid parameter: DeliveryStatusIAMRole Reason: role cannot be assumed",
            400,
        ),
    ));
    let sdk = Emulator::sdk_config_for(&proxy.endpoint(), &me()).await;
    let capture = ResponseCapture::start().await;
    let event = request("Create", &capture.url("req-1"), "req-1", json!({"DeliveryStatusIAMRole": ROLE}));

    f_handle(&sdk, RetryPolicy::default(), event).await.expect("answered");

    let body = capture.only_answer().body;
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap_or_default();
    assert!(reason.contains("InvalidParameter") && reason.contains("role cannot be assumed"), "{reason}");
    assert_eq!(body["PhysicalResourceId"], "tocsin-sms-preferences-us-east-1");
    assert_eq!(body["RequestId"], "req-1");
    assert_eq!(proxy.log().iter().filter(|(op, _)| op == "SNS.SetSMSAttributes").count(), 1, "not retried");
    assert!(sms_attributes(&emulator.sdk_config().await).await.is_empty(), "nothing was set");
}

async fn f_handle(
    sdk: &aws_config::SdkConfig,
    retry: RetryPolicy,
    event: serde_json::Value,
) -> Result<sms_preferences::Response, SmsPreferencesError> {
    function(sdk, retry).handle(event, &Invocation::with_timeout(GENEROUS)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_sns_answers_failed_after_a_bounded_number_of_attempts() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let sdk = Emulator::sdk_config_for(&format!("http://127.0.0.1:{closed}"), &me()).await;
    let capture = ResponseCapture::start().await;
    let event = request("Update", &capture.url("req-u"), "req-u", json!({"DeliveryStatusIAMRole": ROLE}));

    f_handle(&sdk, quick(), event).await.expect("answered");

    let body = capture.only_answer().body;
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap_or_default();
    assert!(reason.contains("after 4 attempt(s)"), "{reason}");
    assert_eq!(body["PhysicalResourceId"], "tocsin-sms-preferences-us-east-1", "an Update keeps its id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_no_faster_than_the_one_call_per_second_quota() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let proxy = FaultProxy::start(&emulator.endpoint(), 2).await.expect("proxy");
    proxy.add_rule(Rule::times("SNS.SetSMSAttributes", Fault::sns_throttling(), 2));
    let sdk = Emulator::sdk_config_for(&proxy.endpoint(), &me()).await;
    let capture = ResponseCapture::start().await;
    let event = request("Create", &capture.url("req-1"), "req-1", json!({"DeliveryStatusIAMRole": ROLE}));
    let started = Instant::now();

    f_handle(&sdk, RetryPolicy::default(), event).await.expect("answered");

    assert!(started.elapsed() >= Duration::from_millis(1100 + 2200), "paced: {:?}", started.elapsed());
    let calls = proxy.log().iter().filter(|(op, _)| op == "SNS.SetSMSAttributes").count();
    assert_eq!(calls, 3, "two throttled, the third accepted");
    assert_eq!(capture.only_answer().body["Status"], "SUCCESS");
    let attrs = sms_attributes(&emulator.sdk_config().await).await;
    assert_eq!(attrs.get("DeliveryStatusSuccessSamplingRate").map(String::as_str), Some("100"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_in_time_to_answer_before_the_function_times_out() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let proxy = FaultProxy::start(&emulator.endpoint(), 3).await.expect("proxy");
    proxy.add_rule(Rule::sometimes("SNS.SetSMSAttributes", Fault::sns_throttling(), 1.0));
    let sdk = Emulator::sdk_config_for(&proxy.endpoint(), &me()).await;
    let capture = ResponseCapture::start().await;
    let event = request("Create", &capture.url("req-1"), "req-1", json!({"DeliveryStatusIAMRole": ROLE}));
    let retry = RetryPolicy { max_attempts: 100, answer_reserve: Duration::from_secs(2), ..RetryPolicy::default() };
    let started = Instant::now();

    function(&sdk, retry).handle(event, &Invocation::with_timeout(Duration::from_secs(5))).await.expect("answered");

    assert!(started.elapsed() < Duration::from_secs(5), "answered within the invocation: {:?}", started.elapsed());
    let body = capture.only_answer().body;
    assert_eq!(body["Status"], "FAILED");
    assert!(body["Reason"].as_str().unwrap_or_default().contains("Throttling: Rate exceeded"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_event_still_gets_a_failed_answer_naming_the_problem() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::start().await;
    let cases = [
        ("req-type", {
            let mut e = request("Create", &capture.url("req-type"), "req-type", json!({"DeliveryStatusIAMRole": ROLE}));
            e["RequestType"] = json!("Upgrade");
            e
        }),
        ("req-noprops", {
            let mut e = request("Create", &capture.url("req-noprops"), "req-noprops", json!({}));
            e.as_object_mut().expect("object").remove("ResourceProperties");
            e
        }),
        (
            "req-typo",
            request(
                "Update",
                &capture.url("req-typo"),
                "req-typo",
                json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendlimit": "5"}),
            ),
        ),
    ];
    emulator.start_recording().await.expect("record");

    for (_, event) in &cases {
        f_handle(&sdk, RetryPolicy::default(), event.clone()).await.expect("answered");
    }

    assert!(emulator.stop_recording().await.expect("recording").is_empty(), "nothing was set");
    let answers = capture.answers();
    assert_eq!(answers.len(), cases.len());
    let expected =
        ["unknown variant `Upgrade`", "missing field `ResourceProperties`", "unknown field `MonthlySpendlimit`"];
    for ((id, _), (answer, words)) in cases.iter().zip(answers.iter().zip(expected)) {
        let body = &answer.body;
        assert_eq!(body["Status"], "FAILED", "{id}: {body}");
        assert_eq!(body["RequestId"], *id);
        assert_eq!(body["StackId"], STACK_ID);
        assert!(body["Reason"].as_str().unwrap_or_default().contains(words), "{id}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_refused_by_the_response_url_is_sent_again() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::refusing_first(2).await;
    let event = request("Create", &capture.url("req-1"), "req-1", json!({"DeliveryStatusIAMRole": ROLE}));

    f_handle(&sdk, quick(), event).await.expect("delivered on the third PUT");

    assert_eq!(capture.only_answer().body["Status"], "SUCCESS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_cannot_be_delivered_fails_the_invocation_so_lambda_retries_it() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::refusing_first(u32::MAX).await;
    let event = request("Create", &capture.url("req-1"), "req-1", json!({"DeliveryStatusIAMRole": ROLE}));

    let err = f_handle(&sdk, quick(), event).await.expect_err("not delivered");

    assert!(matches!(err, SmsPreferencesError::ResponseNotDelivered { attempts: 3, .. }), "{err}");
    assert!(err.to_string().contains("HTTP 500"), "{err}");
    assert!(!err.to_string().contains("X-Amz-Signature"), "the pre-signed URL is never echoed: {err}");
    let diagnostic = lambda_runtime::Diagnostic::from(err);
    assert_eq!(diagnostic.error_type, "tocsin.sms_preferences.ResponseNotDelivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_without_a_response_url_is_an_invocation_error() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;

    let err = f_handle(&sdk, quick(), json!({"RequestType": "Create"})).await.expect_err("nothing to answer");

    assert!(matches!(err, SmsPreferencesError::Unanswerable), "{err}");
    assert!(sms_attributes(&emulator.sdk_config().await).await.is_empty(), "nothing was set");
}

/// The abuse the function's role allows: anyone who may invoke it hands it an event asking for a
/// higher spend limit (or another delivery-status role). The stack's values are set instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocation_carrying_a_higher_monthly_spend_limit_does_not_raise_the_accounts_limit() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    let capture = ResponseCapture::start().await;
    let f = function_with_limit(&sdk, Some("5"), RetryPolicy::default());
    let abuse = request(
        "Update",
        &capture.url("req-abuse"),
        "req-abuse",
        json!({"DeliveryStatusIAMRole": "arn:aws:iam::123456789012:role/someone-elses", "MonthlySpendLimit": "100000"}),
    );

    f.handle(abuse, &Invocation::with_timeout(GENEROUS)).await.expect("answered");

    let attrs = sms_attributes(&emulator.sdk_config().await).await;
    assert_eq!(attrs.get("MonthlySpendLimit").map(String::as_str), Some("5"), "the stack's limit: {attrs:?}");
    assert_eq!(attrs.get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE), "the stack's role: {attrs:?}");
    let body = capture.only_answer().body;
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["Data"]["MonthlySpendLimit"], "5", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocation_naming_a_limit_where_the_stack_sets_none_leaves_the_accounts_limit_as_it_is() {
    let emulator = Emulator::start_for(SNS).await.expect("emulator");
    let sdk = emulator.sdk_config_as(&me()).await;
    aws_sdk_sns::Client::new(&emulator.sdk_config().await)
        .set_sms_attributes()
        .attributes("MonthlySpendLimit", "40")
        .send()
        .await
        .expect("raised by hand earlier");
    let capture = ResponseCapture::start().await;
    let cases = [
        ("req-higher", json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "100000"})),
        ("req-malformed", json!({"DeliveryStatusIAMRole": "my-role", "MonthlySpendLimit": "12.50"})),
        ("req-bare", json!({})),
    ];

    for (id, props) in cases {
        let event = request("Create", &capture.url(id), id, props);
        f_handle(&sdk, RetryPolicy::default(), event).await.expect("answered");
    }

    let attrs = sms_attributes(&emulator.sdk_config().await).await;
    assert_eq!(attrs.get("MonthlySpendLimit").map(String::as_str), Some("40"), "{attrs:?}");
    assert_eq!(attrs.get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE));
    for answer in capture.answers() {
        assert_eq!(answer.body["Status"], "SUCCESS", "the stack's preferences were set: {}", answer.body);
    }
}
