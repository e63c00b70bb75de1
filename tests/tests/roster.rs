//! The recipients roster (issue 36): under `RecipientPolicy=roster` (the default) intake accepts
//! an alert only to a number a roster entry covers — a whole number or a prefix — and refuses any
//! other before any write; a change of the roster takes effect within a minute; a stack deployed
//! open accepts any valid number. The local stack's roster is `+1` and `+44`
//! (`tocsin_harness::stack::LOCAL_ROSTER`). On End User Messaging, the stack's country allow-list
//! (`SmsAllowedCountries`, enforced by AWS through its protect configuration) is the last word,
//! whatever the roster covers.

use serde_json::{Value, json};
use tocsin::domain::roster::RosterEntry;
use tocsin_harness::events::alert_requested;
use tocsin_tests::{Options, Pipeline, alert};

const FRENCH: &str = "+33612345678";

fn refused_recipient(status: u16, body: &Value) -> bool {
    status == 422
        && body["error"]["fields"]
            .as_array()
            .is_some_and(|f| f.iter().any(|e| e["field"] == "recipient" && e["code"] == "not_allowed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_no_roster_entry_covers_is_refused_and_nothing_is_written() {
    let p = Pipeline::start().await;
    for (n, stranger) in [FRENCH, "+881234567890", "+2348012345678"].into_iter().enumerate() {
        let (status, body) = p.submit(&alert(&format!("stranger-{n}"), stranger)).await;
        assert!(refused_recipient(status, &body), "{stranger}: {status} {body}");
    }
    // The same on the bus: kept on the rejects queue with the reason.
    p.intake.handle(alert_requested("monitoring", "123456789012", alert("stranger-bus", FRENCH))).await.expect("kept");
    let rejects = p.receive(&p.stack.queue("IntakeRejectsQueue").url, 10).await;
    let kept: Value = serde_json::from_str(rejects[0].body.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(
        (kept["reason"].as_str(), kept["errors"][0]["code"].as_str()),
        (Some("validation_failed"), Some("not_allowed"))
    );
    assert_eq!(p.ledger_item_count().await, 0, "nothing written, no producer quota spent");

    // Covered by a prefix (+1, +44): accepted.
    assert_eq!(p.submit(&alert("friend-1", "+14155550150")).await.0, 201);
    assert_eq!(p.submit(&alert("friend-2", "+447700900123")).await.0, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_person_an_escalation_chain_names_must_be_on_the_roster_too() {
    let p = Pipeline::start().await;
    let mut body = alert("chain-stranger", "+14155550151");
    body["chain"] = json!({"wait": "5m", "then": [{"to": "+14155550152", "wait": "5m"}, {"to": FRENCH, "wait": "5m"}]});
    let (status, answer) = p.submit(&body).await;
    assert_eq!(status, 422, "{answer}");
    let fields: Vec<(&str, &str)> = answer["error"]["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["field"].as_str()?, e["code"].as_str()?)))
        .collect();
    assert_eq!(fields, vec![("chain.then[1].to", "not_allowed")], "{answer}");
    assert!(!answer.to_string().contains(FRENCH), "the number is not echoed: {answer}");
    assert_eq!(p.ledger_item_count().await, 0, "nothing written");
    body["chain"]["then"][1]["to"] = json!("+447700900124");
    assert_eq!(p.submit(&body).await.0, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roster_change_reaches_intake_within_a_minute_both_ways() {
    let p = Pipeline::start().await;
    let french = RosterEntry::parse(FRENCH).expect("entry");
    assert!(refused_recipient(p.submit(&alert("fr-1", FRENCH)).await.0, &p.submit(&alert("fr-1", FRENCH)).await.1));
    let now = chrono::Utc::now();
    assert!(p.registry.allow(&french, "alice", "on call in Lyon", now).await.expect("allow"));
    assert!(!p.registry.allow(&french, "alice", "twice", now).await.expect("allow"), "an entry is added once");
    p.clock.advance(chrono::Duration::seconds(61));
    let (status, body) = p.submit(&alert("fr-2", FRENCH)).await;
    assert_eq!(status, 201, "{body}");

    assert!(p.registry.remove(&french, "bob", "left the rota", now).await.expect("remove"));
    p.clock.advance(chrono::Duration::seconds(61));
    let (status, body) = p.submit(&alert("fr-3", FRENCH)).await;
    assert!(refused_recipient(status, &body), "{status} {body}");
    // Both changes are in the roster's audit trail, with who and why.
    let history = p.registry.roster_history().await.expect("history");
    let changes: Vec<(String, String)> =
        history.iter().filter(|h| h.2 == FRENCH).map(|h| (h.3.clone(), h.4.clone())).collect();
    assert_eq!(changes, [("alice".into(), "on call in Lyon".into()), ("bob".into(), "left the rota".into())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_deployed_open_texts_any_valid_number() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        parameters: vec![("RecipientPolicy", "open")],
        ..Default::default()
    })
    .await;
    let (status, body) = p.submit(&alert("open-1", FRENCH)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(json!(p.ledger_item_count().await > 0), json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_whose_recipient_left_the_roster_before_its_send_is_not_sent_and_is_escalated() {
    let p = Pipeline::start().await;
    let french = RosterEntry::parse(FRENCH).expect("entry");
    let now = chrono::Utc::now();
    assert!(p.registry.allow(&french, "alice", "on call in Lyon", now).await.expect("allow"));
    let (status, body) = p.submit(&alert("fr-left-1", FRENCH)).await;
    assert_eq!(status, 201, "{body}");
    let key = tocsin_tests::key_of(&body);
    // Removed before the sender gets to it: the sender reads the roster in force, not intake's.
    assert!(p.registry.remove(&french, "bob", "left the rota", now).await.expect("remove"));
    p.clock.advance(chrono::Duration::seconds(61));
    p.run_sender().await;
    assert!(p.emulator.sent_sms().await.expect("sms").is_empty(), "nothing sent to a number off the roster");
    let record = p.record(&key).await;
    assert_eq!(record.status.state, tocsin::domain::State::Suppressed);
    let timeline = format!("{:?}", p.timeline(&key).await);
    assert!(timeline.contains("recipients roster"), "the reason is on the record: {timeline}");
    p.clock.advance(chrono::Duration::minutes(16));
    p.run_escalation().await;
    assert_eq!(p.escalations().await.len(), 1, "on-call hears the alert went nowhere, once");
    // Everyone else on the roster is still texted.
    assert_eq!(p.submit(&alert("friend-after", "+14155550151")).await.0, 201);
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

/// CloudFormation's part at deploy: the `Custom::SmsCountryRules` resource, run as its own role
/// with the environment template.yaml gives it (`SmsAllowedCountries`: US, the default).
async fn apply_country_rules(p: &Pipeline) {
    use sms_preferences::adapters::EumProtectConfigurations;
    use sms_preferences::country_rules::{CountryRules, SmsCountryRules};
    use sms_preferences::{Invocation, ResponseError, ResponseUrl, RetryPolicy};
    struct Answered;
    impl ResponseUrl for Answered {
        async fn put(&self, _url: &str, _body: Vec<u8>) -> Result<(), ResponseError> {
            Ok(())
        }
    }
    let env = p.stack.function_env("SmsCountryRulesFunction").expect("the function's environment");
    let rules = CountryRules::from_env(&mut tocsin::config::Env::from_map(env));
    let sdk = p.emulator.sdk_config_as(&tocsin_harness::Principal::function("SmsCountryRulesFunction")).await;
    let resource = SmsCountryRules {
        protect: EumProtectConfigurations::new(&sdk),
        responder: Answered,
        rules,
        physical_id: "tocsin-sms-country-rules-us-east-1".into(),
        retry: RetryPolicy::default(),
    };
    let event = json!({
        "RequestType": "Create",
        "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tocsin-local/1",
        "RequestId": "1",
        "LogicalResourceId": "SmsCountryRules",
        "ResourceType": "Custom::SmsCountryRules",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:f"},
    });
    let answer = resource.handle(event, &Invocation::with_timeout(std::time::Duration::from_secs(60))).await;
    let answer = answer.expect("answered");
    assert_eq!(format!("{:?}", answer.status), "Success", "{:?}", answer.reason);
}

/// SMS pumping through a roster entry too wide (`+44` covers every UK number, premium ones
/// included) stops at AWS: a stack deployed with `SmsAllowedCountries=US` has every other country
/// blocked in its protect configuration, so End User Messaging refuses the send before any
/// carrier (and before any charge); the alert fails with that reason and on-call is told. A US
/// alert beside it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_country_outside_the_stacks_allowed_countries_is_refused_by_aws_even_where_the_roster_covers_it() {
    let p = Pipeline::start_with(Options::end_user_messaging()).await;
    apply_country_rules(&p).await;
    let (status, body) = p.submit(&alert("uk-1", "+447700900123")).await;
    assert_eq!(status, 201, "the roster (+44) lets intake take it: {body}");
    let uk = tocsin_tests::key_of(&body);
    assert_eq!(p.submit(&alert("us-1", "+14155550150")).await.0, 201);
    p.run_sender().await;
    let sent = p.emulator.eum().sent_texts().await.expect("texts");
    assert_eq!(sent.len(), 1, "only the US alert left");
    assert!(sent[0].destination.starts_with("+1"), "the US alert");
    let record = p.record(&uk).await;
    assert_eq!(record.status.state, tocsin::domain::State::Failed);
    let timeline = format!("{:?}", p.timeline(&uk).await);
    assert!(timeline.contains("DESTINATION_COUNTRY_BLOCKED_BY_PROTECT_CONFIGURATION"), "{timeline}");
    p.clock.advance(chrono::Duration::minutes(16));
    p.run_escalation().await;
    let escalated: Vec<String> = p.escalations().await.iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    assert!(escalated.contains(&uk.to_string()), "on-call hears the UK alert was never sent: {escalated:?}");
    p.assert_iam_allowed();
}
