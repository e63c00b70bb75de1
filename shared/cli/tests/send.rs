//! `tocsin send`: an alert through the deployed intake, SigV4-signed.
//!
//! moto does not serve API Gateway invoking a Lambda function, so these tests stand in for API
//! Gateway with a local HTTP server: it checks the request's SigV4 `Authorization` header the way
//! API Gateway's IAM authoriser does (shape, service `execute-api`, region, and the signature
//! recomputed from the request with the caller's secret key), answers 403 when it does not hold,
//! and otherwise hands the body — as the HTTP API's event — to the real intake handler of the
//! pipeline (`Pipeline::invoke_intake`), answering with its status code and body. The stack's
//! `AlertApiUrl` output points at that server; everything else is the emulator.

mod common;

use std::sync::Arc;

use common::api::{ApiStandIn, start_api};
use common::{Run, aws_env, tocsin_with};
use tocsin::domain::{IdempotencyKey, State};
use tocsin_tests::Pipeline;

async fn tocsin(p: &Pipeline, stack: &str, args: &[&str]) -> Run {
    let mut all = vec!["--stack", stack];
    all.extend_from_slice(args);
    tocsin_with(aws_env(&p.emulator.endpoint()), &all).await
}

async fn stack_with_api(p: &Pipeline, name: &str, api: &ApiStandIn) {
    common::api::stack_with_api(p, name, api, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_submits_a_signed_alert_through_intake_and_a_second_send_is_a_replay() {
    let p = Arc::new(Pipeline::start().await);
    let api = start_api(p.clone(), tocsin_harness::iam::SECRET).await;
    stack_with_api(&p, "tocsin-local", &api).await;
    let args = [
        "send",
        "--event-id",
        "first-alert-1",
        "--template",
        "disk_full@1",
        "--var",
        "host=db-1",
        "--var",
        "mount=/var",
        "--var",
        "percent=97",
        "--to",
        "+14155550160",
        "--deadline",
        "15m",
    ];
    let r = tocsin(&p, "tocsin-local", &args).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("201 created: intent "), "{}", r.stdout);
    let auth = api.seen.lock().expect("lock")[0].clone();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=OPERATOR/")
            && auth.contains("/us-east-1/execute-api/aws4_request"),
        "{auth}"
    );

    let doc = tocsin(&p, "tocsin-local", &[&["--json"][..], &args[..]].concat()).await.json();
    assert_eq!(doc["status"], 200, "the same event again is a replay: {doc}");
    assert_eq!(doc["answer"]["replay"], true);
    let key = IdempotencyKey::parse(doc["answer"]["idempotency_key"].as_str().expect("key")).expect("key");
    assert_eq!(p.record(&key).await.intent.event_id, "first-alert-1");

    p.run_sender().await;
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    assert_eq!(sms[0].phone_number, "+14155550160");
    assert!(sms[0].message.contains("db-1"), "{}", sms[0].message);

    // A request document from a file is sent as is; intake's refusal comes back with its fields.
    let file = std::env::temp_dir().join(format!("tocsin-send-{}.json", std::process::id()));
    std::fs::write(
        &file,
        r#"{"event_id": "bad-1", "template": {"name": "disk_full", "version": 1}, "recipient": "0800"}"#,
    )
    .expect("write");
    let bad = tocsin(&p, "tocsin-local", &["--json", "send", "--file", file.to_str().expect("path")]).await;
    assert_eq!(bad.code, 1, "{bad:?}");
    assert_eq!(bad.json()["status"], 422);
    assert!(bad.stdout.contains("recipient"), "{}", bad.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_the_api_does_not_accept_is_a_403_that_names_the_permission_and_creates_nothing() {
    let p = Arc::new(Pipeline::start().await);
    // The stand-in expects another secret for the operator's key: the signature cannot match.
    let api = start_api(p.clone(), "not-the-callers-secret").await;
    stack_with_api(&p, "tocsin-local", &api).await;
    let r = tocsin(
        &p,
        "tocsin-local",
        &["send", "--event-id", "denied-1", "--template", "disk_full@1", "--to", "+14155550161"],
    )
    .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("403") && r.stderr.contains("execute-api:Invoke"), "{r:?}");
    assert!(r.stdout.contains("the signature does not match"), "{r:?}");
    assert_eq!(p.ledger_item_count().await, 0, "nothing reached intake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_needs_the_stacks_api_url_and_says_which_output_is_missing() {
    let p = Pipeline::start().await;
    // tocsin-local's outputs hold no AlertApiUrl: the emulator hosts no HTTP API.
    let r =
        tocsin(&p, "tocsin-local", &["send", "--event-id", "x-1", "--template", "disk_full@1", "--to", "+14155550162"])
            .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("stack tocsin-local has no output AlertApiUrl"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_who_is_no_producer_is_refused_and_told_how_to_become_one() {
    // A stack whose only producer is the monitoring user: the operator's role is not listed.
    let p = Arc::new(
        Pipeline::start_with(tocsin_tests::Options {
            parameters: vec![("Producers", tocsin_harness::stack::LOCAL_PRODUCER)],
            ..Default::default()
        })
        .await,
    );
    let api = start_api(p.clone(), tocsin_harness::iam::SECRET).await;
    stack_with_api(&p, "tocsin-local", &api).await;
    let r = tocsin(
        &p,
        "tocsin-local",
        &["send", "--event-id", "not-a-producer-1", "--template", "disk_full@1", "--to", "+14155550163"],
    )
    .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("producer_unknown") && r.stderr.contains("Producers parameter"), "{r:?}");
    assert_eq!(p.ledger_item_count().await, 0, "nothing written");

    // The show of an accepted alert names its producer.
    let (status, answer) = p.submit(&tocsin_tests::alert("named-1", "+14155550164")).await;
    assert_eq!(status, 201, "{answer}");
    let key = answer["idempotency_key"].as_str().expect("key").to_owned();
    let table = tocsin(&p, "tocsin-local", &["show", &key]).await;
    assert!(table.stdout.contains("producer") && table.stdout.contains("monitoring"), "{}", table.stdout);
}
