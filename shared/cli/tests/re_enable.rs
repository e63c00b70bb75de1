//! `tocsin re-enable`: the SMS provider's opt-out list is asked first, and a re-enabled number is
//! flagged for the sender to ask the provider again before its first send. `--opt-in` records the
//! request with the audited re-enable and the **sender** takes the number off the list before its
//! next SMS: no operator role may call OptInPhoneNumber or DeleteOptedOutNumber. Under SNS, moto
//! reports every number ending in 99 as opted out (CheckIfPhoneNumberIsOptedOut) and serves
//! OptInPhoneNumber; under End User Messaging the stand-in keeps the stack's opt-out list
//! (DescribeOptedOutNumbers, DeleteOptedOutNumber).

mod common;

use common::{Run, aws_env, tocsin_with};
use tocsin::adapters::registry::RegistryEvent;
use tocsin::domain::{PhoneNumber, State};
use tocsin::ports::{RecipientRegistry, SuppressionEvidence};
use tocsin_harness::Principal;
use tocsin_tests::{Options, Pipeline, alert, key_of};

async fn tocsin(p: &Pipeline, args: &[&str]) -> Run {
    let mut all = vec!["--stack", "tocsin-local"];
    all.extend_from_slice(args);
    tocsin_with(aws_env(&p.emulator.endpoint()), &all).await
}

async fn suppressed(p: &Pipeline, number: &str) -> PhoneNumber {
    let phone = PhoneNumber::parse(number).expect("valid");
    let evidence = SuppressionEvidence {
        log_event_id: "38000000000000000000000000000000000000000000000000000001".into(),
        provider_response: Some("Phone number is opted out".into()),
        at: chrono::Utc::now(),
        intent_key: "ab".repeat(32),
        table_version: "test".into(),
    };
    p.registry.suppress(&phone, &evidence).await.expect("suppress");
    phone
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_sns_still_has_opted_out_is_not_re_enabled_without_opt_in_and_the_person_is_told_to_reply_start() {
    let p = Pipeline::start().await;
    let phone = suppressed(&p, "+14155550199").await;
    let r = tocsin(&p, &["re-enable", "+14155550199", "--reason", "says it works again"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("opted out at SNS") && r.stderr.contains("reply START"), "{r:?}");
    assert!(r.stderr.contains("--opt-in") && r.stderr.contains("once per 30 days"), "{r:?}");
    assert!(!r.stderr.contains("+14155550199"), "masked: {r:?}");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some(), "still suppressed");
    assert_eq!(p.registry.history(&phone).await.expect("history").len(), 1, "nothing recorded");

    p.emulator.start_recording().await.expect("record");
    let r = tocsin(&p, &["--json", "re-enable", "+14155550199", "--reason", "asked; opting in", "--opt-in"]).await;
    let calls = p.emulator.stop_recording().await.expect("recording");
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!((doc["opted_out"].as_bool(), doc["opt_in_requested"].as_bool()), (Some(true), Some(true)), "{doc}");
    assert!(!calls.iter().any(|c| c == "SNS.OptInPhoneNumber"), "the operator opts nobody in: {calls:?}");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_none());
    assert!(matches!(
        p.registry.history(&phone).await.expect("history").last(),
        Some(RegistryEvent::ReEnabled { opt_in: true, .. })
    ));
    assert!(p.registry.needs_opt_out_check(&phone).await.expect("flag"), "the sender must ask SNS before sending");

    // The next alert to it: the sender opts it back in, as the audited re-enable asked, and sends.
    let (status, body) = p.submit(&alert("after-opt-in", "+14155550199")).await;
    assert_eq!(status, 201, "{body}");
    p.emulator.start_recording().await.expect("record");
    p.run_sender().await;
    let calls = p.emulator.stop_recording().await.expect("recording");
    assert!(calls.iter().any(|c| c == "SNS.OptInPhoneNumber") && calls.iter().any(|c| c == "SNS.Publish"), "{calls:?}");
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Accepted);
    assert!(!p.registry.needs_opt_out_check(&phone).await.expect("flag"), "asked once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_operator_may_opt_a_number_back_in_directly_only_the_audited_re_enable_can() {
    let p = Pipeline::start_with(Options::end_user_messaging()).await;
    for principal in [Principal::Operator, Principal::ReadOnlyOperator, Principal::OperatorWithoutMfa] {
        let sdk = p.emulator.sdk_config_as(&principal).await;
        let sns = aws_sdk_sns::Client::new(&sdk);
        let denied = sns.opt_in_phone_number().phone_number("+14155550199").send().await;
        assert!(denied.is_err(), "{principal}: SNS OptInPhoneNumber must be denied");
        p.expect_iam_denied("sns:OptInPhoneNumber", "*");
        let eum = aws_sdk_pinpointsmsvoicev2::Client::new(&sdk);
        let denied =
            eum.delete_opted_out_number().opt_out_list_name("Default").opted_out_number("+14155550199").send().await;
        assert!(denied.is_err(), "{principal}: DeleteOptedOutNumber must be denied");
        p.expect_iam_denied("sms-voice:DeleteOptedOutNumber", "opt-out-list/Default");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_enabled_number_is_flagged_until_a_send_has_asked_sns_about_it() {
    let p = Pipeline::start().await;
    let phone = suppressed(&p, "+14155550163").await;
    assert!(!p.registry.needs_opt_out_check(&phone).await.expect("flag"), "a suppressed number is not flagged");
    p.emulator.start_recording().await.expect("record");
    let r = tocsin(&p, &["--json", "re-enable", "+14155550163", "--reason", "carrier fixed it"]).await;
    let calls = p.emulator.stop_recording().await.expect("recording");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["opted_out"], false);
    assert!(calls.iter().any(|c| c == "SNS.CheckIfPhoneNumberIsOptedOut"), "{calls:?}");
    assert!(!calls.iter().any(|c| c == "SNS.OptInPhoneNumber"), "not opted out: no opt-in spent");
    assert!(p.registry.needs_opt_out_check(&phone).await.expect("flag"));

    p.registry.opt_out_checked(&phone).await.expect("checked");
    assert!(!p.registry.needs_opt_out_check(&phone).await.expect("flag"), "cleared once SNS was asked");
    // Suppressed again: the flag cannot be cleared back into a suppressed number's state.
    let phone = suppressed(&p, "+14155550163").await;
    p.registry.opt_out_checked(&phone).await.expect("no error");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_the_stacks_opt_out_list_is_asked_and_opt_in_takes_the_number_off_it() {
    let p = Pipeline::start_with(Options::end_user_messaging()).await;
    let number = "+14155550177";
    let eum = aws_sdk_pinpointsmsvoicev2::Client::new(&p.emulator.sdk_config().await);
    eum.put_opted_out_number().opt_out_list_name("Default").opted_out_number(number).send().await.expect("STOP");
    let phone = suppressed(&p, number).await;

    p.emulator.start_recording().await.expect("record");
    let r = tocsin(&p, &["re-enable", number, "--reason", "says it works again"]).await;
    let calls = p.emulator.stop_recording().await.expect("recording");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("opted out at End User Messaging opt-out list Default"), "{r:?}");
    assert!(r.stderr.contains("DeleteOptedOutNumber") && r.stderr.contains("reply START"), "{r:?}");
    assert!(!r.stderr.contains(number), "masked: {r:?}");
    assert!(
        !calls.iter().any(|c| c.ends_with(".CheckIfPhoneNumberIsOptedOut")),
        "SNS's list is not this stack's: {calls:?}"
    );
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some(), "still suppressed");

    let r = tocsin(&p, &["--json", "re-enable", number, "--reason", "asked; opting in", "--opt-in"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["opt_out_list"], "End User Messaging opt-out list Default", "{doc}");
    assert_eq!((doc["opted_out"].as_bool(), doc["opt_in_requested"].as_bool()), (Some(true), Some(true)), "{doc}");
    let listed =
        |out: aws_sdk_pinpointsmsvoicev2::operation::describe_opted_out_numbers::DescribeOptedOutNumbersOutput| {
            out.opted_out_numbers().iter().any(|n| n.opted_out_number() == number)
        };
    let list = eum.describe_opted_out_numbers().opt_out_list_name("Default").send().await.expect("list");
    assert!(listed(list), "still on the list: the operator takes nobody off it");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_none());
    assert!(p.registry.needs_opt_out_check(&phone).await.expect("flag"), "the sender asks again before sending");
    // The next alert to it: the sender takes it off the list, then sends.
    let (status, body) = p.submit(&alert("after-opt-in-eum", number)).await;
    assert_eq!(status, 201, "{body}");
    p.run_sender().await;
    let list = eum.describe_opted_out_numbers().opt_out_list_name("Default").send().await.expect("list");
    assert!(!listed(list), "taken off the list by the sender");
    assert_eq!(p.record(&key_of(&body)).await.status.state, State::Accepted);

    // A number not on the list is re-enabled without spending the once-in-30-days opt-in.
    let other = suppressed(&p, "+14155550178").await;
    let r = tocsin(&p, &["--json", "re-enable", "+14155550178", "--reason", "carrier fixed it"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!((r.json()["opted_out"].as_bool(), r.json()["opt_in_requested"].as_bool()), (Some(false), Some(false)));
    assert!(p.registry.suppression(&other).await.expect("registry").is_none());
}
