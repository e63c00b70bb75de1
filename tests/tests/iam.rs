//! IAM as AWS enforces it, held against the SAM-translated template. Every other emulator test
//! already runs behind the IAM gate (each function signs with its own key; a call its role does
//! not allow fails the test that made it). These tests pin the gate's behaviour where a test sees
//! it, and check what AWS does with a role that no request shows (`tocsin_harness::iam::implicit`).

use tocsin_harness::Principal;
use tocsin_harness::iam::{LOCAL_STACK, coverage, implicit, principals_with};
use tocsin_tests::Pipeline;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_outside_the_functions_role_is_refused_as_aws_refuses_it_and_named_in_full() {
    let p = Pipeline::start().await;
    // The status function never deletes: its role does not allow it.
    let ddb = aws_sdk_dynamodb::Client::new(&p.sdk_of("StatusFunction").await);
    let err = ddb
        .delete_item()
        .table_name(p.stack.table("LedgerTable"))
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("INTENT#x".into()))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("INTENT".into()))
        .send()
        .await
        .expect_err("refused");
    let service = err.into_service_error();
    assert_eq!(service.meta().code(), Some("AccessDeniedException"), "{service:?}");
    assert!(service.meta().message().unwrap_or_default().contains("is not authorized to perform: dynamodb:DeleteItem"));

    let denials = p.expect_iam_denied("dynamodb:DeleteItem", ":table/tocsin-local-ledger");
    let m = &denials[0].message;
    for part in [
        "IAM denied StatusFunction: dynamodb:DeleteItem on arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-ledger",
        "role: StatusFunctionRole",
        "no statement of StatusFunctionRole allows it",
        "LedgerObserve: ",
        r#"missing statement: {"Effect": "Allow", "Action": "dynamodb:DeleteItem", "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-ledger"}"#,
        "template.yaml, StatusFunction → Properties → Policies",
    ] {
        assert!(m.contains(part), "missing {part:?} in\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_may_text_a_phone_number_but_is_explicitly_denied_every_topic() {
    let p = Pipeline::start().await;
    let sns = aws_sdk_sns::Client::new(&p.sdk_of("SenderFunction").await);
    sns.publish().phone_number("+14155550190").message("test").send().await.expect("an SMS to a number is allowed");
    let topic = p.stack.topics.get("AlarmTopic").expect("the alarm topic").clone();
    let err = sns.publish().topic_arn(&topic).message("page").send().await.expect_err("refused");
    let service = err.into_service_error();
    assert_eq!(service.meta().code(), Some("AuthorizationError"), "{service:?}");
    let denials = p.expect_iam_denied("sns:Publish", ":tocsin-local-oncall");
    assert!(
        denials[0].message.contains("explicitly denied by NeverPublishToTopicsOrEndpoints"),
        "{}",
        denials[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_access_key_is_refused_whoever_it_claims_to_be() {
    let p = Pipeline::start().await;
    // The old shared key `test`: a client that forgot to say who it is.
    let sdk = tocsin_tests::tocsin_harness::Emulator::sdk_config_for(&p.emulator.endpoint(), &Principal::Harness).await;
    let creds = aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "forgotten");
    let sqs =
        aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::config::Builder::from(&sdk).credentials_provider(creds).build());
    sqs.get_queue_attributes().queue_url(&p.stack.queue("SendQueue").url).send().await.expect_err("refused");
    let denials = p.emulator.iam().take_denials();
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert!(denials[0].message.contains("access key id \"test\" belongs to no principal"), "{}", denials[0].message);
}

/// What AWS does with each function's role without a request in any test showing it: the sender's
/// event source mapping polls its queue (and decrypts it); Lambda sends a failed asynchronous
/// invocation to its on-failure queue (encrypting it); Lambda decrypts each function's
/// environment and writes its logs — all with the function's role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_allows_what_aws_does_with_it_where_no_request_shows_it() {
    // Both SMS providers: the roles' conditional statements, and the functions that exist only
    // for one (SNS's SMS-preferences custom resource), differ between them.
    for parameters in [vec![("SmsProvider", "end-user-messaging")], vec![("SmsProvider", "sns")]] {
        let p = parameters.clone();
        let principals = tokio::task::spawn_blocking(move || principals_with(LOCAL_STACK, &p))
            .await
            .expect("join")
            .expect("translated roles");
        let required = implicit::requirements(&principals).expect("read from the translated template");
        let mapping: Vec<_> = required
            .iter()
            .filter(|i| i.principal == Principal::EventSourceMapping("SenderFunction".into()))
            .map(|i| (i.requirement.action.as_str(), i.requirement.resource.as_str()))
            .collect();
        assert_eq!(
            mapping,
            [
                ("sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send"),
                ("sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send"),
                ("sqs:GetQueueAttributes", "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send"),
                ("kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:key/tocsin-local-DataKey"),
            ],
            "the sender's mapping on the send queue, encrypted with the stack's key ({parameters:?})"
        );
        for function in ["IntakeFunction", "StatusFunction"] {
            let destination: Vec<&str> = required
                .iter()
                .filter(|i| i.principal == Principal::function(function) && i.requirement.action.starts_with("sqs:"))
                .map(|i| i.requirement.action.as_str())
                .collect();
            assert_eq!(destination, ["sqs:SendMessage"], "{function}'s on-failure destination ({parameters:?})");
        }

        let (exercised, denials) = implicit::check(&principals).expect("evaluated");
        coverage::record(&coverage::current_test(), &exercised, &denials);
        assert!(denials.is_empty(), "{parameters:?}: {}", tocsin_harness_report(&denials));
    }
}

fn tocsin_harness_report(denials: &[tocsin_tests::tocsin_harness::iam::Denial]) -> String {
    tocsin_tests::tocsin_harness::iam::gate::report(denials)
}
