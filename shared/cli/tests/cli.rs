//! The operator CLI: the real `tocsin` binary against the emulator, next to the real pipeline
//! (intake, sender, status, escalation handlers). The binary sees only the standard AWS variables
//! (`Emulator::aws_env`, signing as the operator: the IAM gate checks each call against
//! the operator policies (`shared/cli/operator-read-only-policy.json`, `operator-break-glass-policy.json`)) and `--stack tocsin-local`; every effect is read back from the emulator.
//!
//! The pipeline's test clock is advanced only in scenario 5 (to let a sender's lease lapse); no
//! assertion depends on the CLI's wall clock agreeing with it.

use serde_json::Value;
use tocsin::adapters::registry::RegistryEvent;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{DueIndex, RecipientRegistry};
use tocsin_harness::Principal;
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const STACK: &str = "tocsin-local";

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs the real binary with only the emulator's AWS environment (no other variable leaks in).
/// The command is built before the future starts, so concurrent runs borrow nothing.
fn tocsin(p: &Pipeline, args: &[&str]) -> impl std::future::Future<Output = Run> + use<> {
    tocsin_via(p, &p.emulator.endpoint(), args)
}

/// Runs the binary with its AWS endpoint at `endpoint` (a fault proxy in front of the emulator).
fn tocsin_via(p: &Pipeline, endpoint: &str, args: &[&str]) -> impl std::future::Future<Output = Run> + use<> {
    tocsin_signed(p, endpoint, &Principal::Operator, args)
}

/// Runs the binary as `principal` (a read-only operator, an operator without MFA).
fn tocsin_as(p: &Pipeline, principal: &Principal, args: &[&str]) -> impl std::future::Future<Output = Run> + use<> {
    tocsin_signed(p, &p.emulator.endpoint(), principal, args)
}

fn tocsin_signed(
    p: &Pipeline,
    endpoint: &str,
    principal: &Principal,
    args: &[&str],
) -> impl std::future::Future<Output = Run> + use<> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tocsin"));
    cmd.env_clear()
        .envs(p.emulator.aws_env(principal))
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["--stack", STACK])
        .args(args);
    async move {
        let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("join").expect("run tocsin");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

async fn sms_count(p: &Pipeline) -> usize {
    p.emulator.sent_sms().await.expect("sms list").len()
}

/// Submits and sends one alert: accepted by SNS. Returns its key and SNS message id.
async fn accepted(p: &Pipeline, event: &str, number: &str) -> (IdempotencyKey, String) {
    let (_, body) = p.submit(&alert(event, number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    (key, id)
}

/// An alert whose carrier reports the number opted out: the intent fails, the number is suppressed.
async fn opted_out(p: &Pipeline, event: &str, number: &str) -> IdempotencyKey {
    let (key, id) = accepted(p, event, number).await;
    p.carrier_reports(&id, number, false, "Phone number is opted out").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Failed);
    key
}

/// A pipeline whose sender reaches SNS through a fault proxy (kept alive with it), and an intent in
/// `send_unknown`: the proxy forwarded the publish (one SMS went out) and dropped the answer.
async fn send_unknown(event: &str, number: &str) -> (Pipeline, FaultProxy, IdempotencyKey) {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 11).await.expect("proxy");
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let (_, body) = p.submit(&alert(event, number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    assert_eq!(sms_count(&p).await, 1, "the dropped publish did reach SNS");
    (p, proxy, key)
}

async fn caller_arn(p: &Pipeline) -> String {
    let sts = aws_sdk_sts::Client::new(&p.emulator.sdk_config().await);
    sts.get_caller_identity().send().await.expect("sts").arn.expect("arn")
}

fn operator_observations(timeline: &[tocsin::domain::observation::Observation]) -> Vec<(String, String, String)> {
    timeline
        .iter()
        .filter_map(|o| match &o.kind {
            ObservationKind::Operator { operator, action, reason } => {
                Some((operator.clone(), action.clone(), reason.clone()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prints_the_intent_and_its_timeline_with_the_number_masked() {
    let p = Pipeline::start().await;
    let number = "+14155550120";
    let (key, msg_id) = accepted(&p, "show-1", number).await;

    let table = tocsin(&p, &["show", key.as_str()]).await;
    assert_eq!(table.code, 0, "{table:?}");
    for expected in
        ["show-1", "disk_full@v1", "+1******0120", "accepted", msg_id.as_str(), "accepted by the SMS provider"]
    {
        assert!(table.stdout.contains(expected), "missing {expected:?} in\n{}", table.stdout);
    }
    assert!(!table.stdout.contains(number) && !table.stderr.contains(number), "the number leaked:\n{}", table.stdout);
    // The request named no origination number: show says where it comes from instead.
    assert!(
        table.stdout.contains("no origination number named: the stack's SmsOriginationNumber, or SNS picks a route"),
        "{}",
        table.stdout
    );

    let doc = tocsin(&p, &["--json", "show", key.as_str()]).await.json();
    assert_eq!(doc["intent"]["key"], key.as_str());
    assert_eq!(doc["intent"]["state"], "accepted");
    assert_eq!(doc["intent"]["recipient"], "+1******0120");
    assert_eq!(doc["intent"]["sns_message_id"], msg_id.as_str());
    let timeline = doc["timeline"].as_array().expect("timeline");
    let stored = p.timeline(&key).await;
    assert_eq!(timeline.len(), stored.len());
    let states: Vec<&str> = timeline.iter().filter_map(|o| o["state_after"].as_str()).collect();
    assert_eq!(states.last(), Some(&"accepted"), "oldest first: {states:?}");
    assert!(timeline.iter().all(|o| o["summary"].is_string() && o["at"].is_string()));
    assert!(!doc.to_string().contains(number));
    assert_eq!(
        doc["intent"]["sms"],
        serde_json::json!({"origination_number": null, "sender_id": null, "max_price_usd": null})
    );

    // A unique prefix finds it too.
    let short = tocsin(&p, &["--json", "show", key.short()]).await.json();
    assert_eq!(short["intent"]["key"], key.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_of_a_digest_member_names_its_digest_and_siblings() {
    let p = Pipeline::start_with(tocsin_tests::Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_STORM_MODE", "on")],
        ..Default::default()
    })
    .await;
    let number = "+14155550129";
    let mut keys = Vec::new();
    for i in 0..3 {
        let (_, body) = p.submit(&alert(&format!("digest-show-{i}"), number)).await;
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    let digest = p.record(&keys[0]).await.status.digest_id.expect("sent in a digest");

    let table = tocsin(&p, &["show", keys[1].as_str()]).await;
    assert_eq!(table.code, 0, "{table:?}");
    assert!(table.stdout.contains(&format!("storm-mode digest ref {}", digest.short())), "{}", table.stdout);
    assert!(table.stdout.contains("3 alerts in one SMS"), "{}", table.stdout);
    for sibling in [&keys[0], &keys[2]] {
        assert!(table.stdout.contains(&sibling.as_str()[..12]), "sibling {sibling} missing in\n{}", table.stdout);
    }
    assert!(!table.stdout.contains(number), "the number leaked");

    let doc = tocsin(&p, &["--json", "show", keys[1].as_str()]).await.json();
    assert_eq!(doc["digest"]["id"], digest.as_str());
    assert_eq!(doc["digest"]["reference"], digest.short());
    let members: Vec<&str> =
        doc["digest"]["members"].as_array().expect("members").iter().filter_map(Value::as_str).collect();
    assert_eq!(members.len(), 3);
    for k in &keys {
        assert!(members.contains(&k.as_str()));
    }
    // A single alert has no digest section.
    let (alone, _) = accepted(&p, "digest-show-alone", "+14155550128").await;
    assert!(tocsin(&p, &["--json", "show", alone.as_str()]).await.json().get("digest").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_of_an_unknown_key_exits_1_with_a_clear_message() {
    let p = Pipeline::start().await;
    let missing = "ab".repeat(32);
    let r = tocsin(&p, &["show", &missing]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("no intent with key {missing}")), "{r:?}");
    assert!(r.stdout.is_empty());

    let j = tocsin(&p, &["--json", "show", &missing]).await;
    assert_eq!((j.code, j.json()["error"]["kind"].as_str()), (1, Some("not_found")));

    let bad = tocsin(&p, &["show", "not-a-key"]).await;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("not an idempotency key"), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_recent_intents_newest_first_and_filters_by_state() {
    let p = Pipeline::start().await;
    let (sent, _) = accepted(&p, "list-1", "+14155550121").await;
    let (_, b) = p.submit(&alert("list-2", "+14155550122")).await;
    let (_, c) = p.submit(&alert("list-3", "+14155550123")).await;
    let (b, c) = (key_of(&b), key_of(&c));

    p.emulator.start_recording().await.expect("recording");
    let waiting = tocsin(&p, &["--json", "list", "--state", "received"]).await.json();
    let calls = p.emulator.stop_recording().await.expect("recording");
    assert!(!calls.iter().any(|c| c.ends_with(".Scan")), "an index Query, never a table scan: {calls:?}");
    assert!(calls.iter().any(|c| c.ends_with(".Query")), "{calls:?}");
    let keys: Vec<&str> = waiting.as_array().expect("array").iter().filter_map(|i| i["key"].as_str()).collect();
    assert_eq!(keys, vec![c.as_str(), b.as_str()], "only the unclaimed ones, newest first");

    let accepted = tocsin(&p, &["--json", "list", "--state", "accepted"]).await.json();
    assert_eq!(accepted.as_array().map(Vec::len), Some(1));
    assert_eq!(accepted[0]["key"], sent.as_str());

    let one = tocsin(&p, &["--json", "list", "--limit", "1"]).await.json();
    assert_eq!(one.as_array().map(|a| a.len()), Some(1));
    assert_eq!(one[0]["key"], c.as_str());

    let table = tocsin(&p, &["list"]).await;
    assert_eq!(table.code, 0, "{table:?}");
    for k in [&sent, &b, &c] {
        assert!(table.stdout.contains(k.as_str()), "{}", table.stdout);
    }
    assert!(table.stdout.contains("+1******0122") && !table.stdout.contains("+14155550122"));

    let none = tocsin(&p, &["list", "--state", "delivered"]).await;
    assert_eq!(none.code, 0);
    assert!(none.stdout.contains("no delivered intents"), "{none:?}");

    let bad = tocsin(&p, &["list", "--state", "lost"]).await;
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("send_unknown"), "lists the states: {bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suppressed_recipients_are_masked_unless_revealed() {
    let p = Pipeline::start().await;
    let number = "+14155550124";
    opted_out(&p, "suppressed-1", number).await;

    let masked = tocsin(&p, &["suppressed"]).await;
    assert_eq!(masked.code, 0, "{masked:?}");
    assert!(masked.stdout.contains("+1******0124"), "{}", masked.stdout);
    assert!(masked.stdout.contains("Phone number is opted out"));
    assert!(!masked.stdout.contains(number), "the number in clear without --reveal:\n{}", masked.stdout);

    let doc = tocsin(&p, &["--json", "suppressed"]).await.json();
    assert_eq!(doc[0]["recipient"], "+1******0124");
    assert_eq!(doc[0]["reason"], "Phone number is opted out");
    assert!(doc[0]["since"].is_string());

    let revealed = tocsin(&p, &["suppressed", "--reveal"]).await;
    assert!(revealed.stdout.contains(number), "{}", revealed.stdout);
    let doc = tocsin(&p, &["--json", "suppressed", "--reveal"]).await.json();
    assert_eq!(doc[0]["recipient"], number);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_enable_requires_a_reason_and_records_the_operator_arn_from_sts() {
    let p = Pipeline::start().await;
    let number = "+14155550125";
    opted_out(&p, "reenable-1", number).await;
    let phone = PhoneNumber::parse(number).expect("valid");

    let no_reason = tocsin(&p, &["re-enable", number]).await;
    assert_eq!(no_reason.code, 2, "{no_reason:?}");
    assert!(no_reason.stderr.contains("--reason"), "{no_reason:?}");
    let blank = tocsin(&p, &["re-enable", number, "--reason", "   "]).await;
    assert_eq!(blank.code, 2, "{blank:?}");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some(), "still suppressed");

    let r = tocsin(&p, &["re-enable", number, "--reason", "confirmed by phone: opted back in"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let arn = caller_arn(&p).await;
    assert!(arn.starts_with("arn:aws:"), "{arn}");
    assert!(r.stdout.contains("re-enabled") && r.stdout.contains(&arn), "{}", r.stdout);
    assert!(r.stdout.contains("suppressed") && r.stdout.contains("Phone number is opted out"), "the trail is shown");
    assert!(!r.stdout.contains(number), "{}", r.stdout);
    assert!(p.registry.suppression(&phone).await.expect("registry").is_none());
    let history = p.registry.history(&phone).await.expect("history");
    assert!(
        matches!(history.last(), Some(RegistryEvent::ReEnabled { operator, reason, .. })
            if *operator == arn && reason == "confirmed by phone: opted back in"),
        "{history:?}"
    );

    let again = tocsin(&p, &["--json", "re-enable", number, "--reason", "again"]).await;
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("+1******0125 is not suppressed"), "{again:?}");
    assert_eq!(p.registry.history(&phone).await.expect("history").len(), history.len(), "nothing recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_is_refused_while_the_automation_owns_the_intent() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("owned-1", "+14155550126")).await;
    let key = key_of(&body);
    assert_eq!(p.record(&key).await.status.state, State::Received);

    let r = tocsin(&p, &["resend", key.as_str(), "--reason", "impatient"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("the automation owns it (state received)"), "{r:?}");
    assert_eq!(sms_count(&p).await, 0);
    assert!(operator_observations(&p.timeline(&key).await).is_empty(), "a refusal records nothing");

    // The automation goes on as if nothing happened.
    p.run_sender().await;
    assert_eq!(sms_count(&p).await, 1);
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_is_refused_once_sns_accepted_and_after_delivery() {
    let p = Pipeline::start().await;
    let number = "+14155550127";
    let (key, msg_id) = accepted(&p, "taken-1", number).await;

    let r = tocsin(&p, &["resend", key.as_str(), "--reason", "no receipt yet"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("SNS already took it") && r.stderr.contains(&msg_id), "{r:?}");
    assert!(r.stderr.contains("Wait for the delivery receipt"), "{r:?}");

    p.carrier_reports(&msg_id, number, true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    let r = tocsin(&p, &["--json", "resend", key.as_str(), "--reason", "just in case"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("it was delivered"), "{r:?}");
    assert_eq!(r.json()["error"]["kind"], "refused");

    assert_eq!(sms_count(&p).await, 1, "nothing more was sent");
    assert!(operator_observations(&p.timeline(&key).await).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_after_send_unknown_sends_exactly_one_more_sms_and_records_who_and_why() {
    let number = "+14155550128";
    let (p, _proxy, key) = send_unknown("unknown-1", number).await;

    let r = tocsin(&p, &["--json", "resend", key.as_str(), "--reason", "called: not received"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(sms_count(&p).await, 2, "exactly one more SMS");
    let doc = r.json();
    assert_eq!((doc["outcome"].as_str(), doc["state"].as_str()), (Some("accepted"), Some("accepted")));
    let attempt_id = doc["attempt_id"].as_str().expect("attempt id");
    assert!(attempt_id.starts_with("operator:"), "{attempt_id}");

    let record = p.record(&key).await;
    let msg_id = record.status.sns_message_id.clone().expect("message id recorded");
    assert_eq!(doc["sns_message_id"], msg_id.as_str());
    assert_eq!((record.status.state, record.status.attempts), (State::Accepted, 2));
    assert_eq!(record.status.lease_until, None, "the claim is released");
    assert_eq!(record.status.attempt_id.as_deref(), Some(attempt_id), "the last attempt is kept");
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!((sms[1].message_id.as_str(), sms[1].phone_number.as_str()), (msg_id.as_str(), number));

    let timeline = p.timeline(&key).await;
    let arn = caller_arn(&p).await;
    assert_eq!(
        operator_observations(&timeline),
        vec![(arn.clone(), "resend".to_owned(), "called: not received".to_owned())]
    );
    assert!(timeline.iter().any(|o| matches!(&o.kind,
        ObservationKind::Accepted { attempt_id: a, sns_message_id } if a == attempt_id && *sns_message_id == msg_id)));

    // SNS has it now: a second resend is refused, and the receipt matches the resent message.
    let again = tocsin(&p, &["resend", key.as_str(), "--reason", "twice"]).await;
    assert_eq!(again.code, 1, "{again:?}");
    assert_eq!(sms_count(&p).await, 2);
    p.carrier_reports(&msg_id, number, true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Delivered);

    let shown = tocsin(&p, &["show", key.as_str()]).await;
    assert!(shown.stdout.contains("resend (called: not received)"), "{}", shown.stdout);
}

/// The operator policy is two documents: what every operator may read
/// (`operator-read-only-policy.json`), and the break-glass actions, each allowed only in a session
/// signed in with MFA (`operator-break-glass-policy.json`). A read-only operator looks; a resend —
/// an SMS to a person — needs break-glass with MFA; a refused one sends and records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_operator_looks_and_a_resend_needs_break_glass_with_mfa() {
    let (p, _proxy, key) = send_unknown("break-glass-1", "+14155550127").await;
    let shown = tocsin_as(&p, &Principal::ReadOnlyOperator, &["show", key.as_str()]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    for principal in [Principal::ReadOnlyOperator, Principal::OperatorWithoutMfa] {
        let r = tocsin_as(&p, &principal, &["resend", key.as_str(), "--reason", "called: not received"]).await;
        assert_ne!(r.code, 0, "{principal}: {r:?}");
        assert!(r.stderr.contains("AccessDenied") || r.stdout.contains("AccessDenied"), "{principal}: {r:?}");
        p.expect_iam_denied("dynamodb:UpdateItem", "-ledger");
        assert_eq!(sms_count(&p).await, 1, "{principal}: nothing sent");
        assert!(operator_observations(&p.timeline(&key).await).is_empty(), "{principal}: nothing recorded");
    }
    let r = tocsin(&p, &["resend", key.as_str(), "--reason", "called: not received"]).await;
    assert_eq!(r.code, 0, "with MFA: {r:?}");
    assert_eq!(sms_count(&p).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_resend_sends_nothing_marks_the_intent_failed_and_may_be_run_again() {
    let (p, _sender_proxy, key) = send_unknown("throttled-resend-1", "+14155550134").await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 12).await.expect("proxy");
    proxy.add_rule(Rule::once("SNS.Publish", Fault::sns_throttling()));

    let r = tocsin_via(&p, &proxy.endpoint(), &["resend", key.as_str(), "--reason", "first try"]).await;
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stdout.contains("nothing was sent") && r.stdout.contains("run the same command again"), "{r:?}");
    assert_eq!(sms_count(&p).await, 1, "throttled: SNS sent nothing");
    let record = p.record(&key).await;
    assert_eq!((record.status.state, record.status.lease_until), (State::Failed, None), "the claim is released");
    let attempt = record.status.attempt_id.as_deref().unwrap_or_default();
    assert!(attempt.starts_with("operator:"), "the last attempt is the operator's: {record:?}");
    assert!(record.status.last_error.as_deref().unwrap_or_default().contains("retryable"), "{record:?}");

    let again = tocsin_via(&p, &proxy.endpoint(), &["resend", key.as_str(), "--reason", "second try"]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(sms_count(&p).await, 2);
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
    assert_eq!(operator_observations(&p.timeline(&key).await).len(), 2, "both attempts are on the record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_whose_answer_is_lost_becomes_send_unknown_again_and_is_not_retried() {
    let (p, _sender_proxy, key) = send_unknown("lost-resend-1", "+14155550135").await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 13).await.expect("proxy");
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));

    let r = tocsin_via(&p, &proxy.endpoint(), &["--json", "resend", key.as_str(), "--reason", "lost"]).await;
    assert_eq!(r.code, 4, "{r:?}");
    let doc = r.json();
    assert_eq!((doc["outcome"].as_str(), doc["state"].as_str()), (Some("unknown"), Some("send_unknown")));
    assert!(doc["message"].as_str().unwrap_or_default().contains("Do not resend blindly"), "{doc}");
    assert_eq!(sms_count(&p).await, 2, "the publish reached SNS once, and was not retried");
    let record = p.record(&key).await;
    assert_eq!((record.status.state, record.status.attempts, record.status.lease_until), (State::SendUnknown, 2, None));
    assert!(record.status.attempt_id.as_deref().unwrap_or_default().starts_with("operator:"), "the last attempt, kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_racing_the_automation_sends_nothing() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("race-1", "+14155550129")).await;
    let key = key_of(&body);
    let (cli, _) = tokio::join!(tocsin(&p, &["resend", key.as_str(), "--reason", "racing"]), p.run_sender());
    assert_eq!(cli.code, 1, "the operator never claims a queued intent: {cli:?}");
    assert_eq!(sms_count(&p).await, 1, "only the sender's SMS");
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
    assert!(operator_observations(&p.timeline(&key).await).is_empty());
}

/// Scenario 5, staged so that the operator's conditional claim is the only thing between the two
/// paths and a second SMS. The automatic retry of a throttled publish claims the intent and
/// publishes; SNS is slow, the sender's lease lapses and the sweep marks the intent
/// `send_unknown` — resendable, and that is what the operator's command reads. Its claim reaches
/// the ledger only after the retry's publish was accepted and recorded: the claim must be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_5_an_operator_resend_racing_an_automatic_retry_publishes_one_sms() {
    let p = Pipeline::start().await;
    let sns = FaultProxy::start(&p.emulator.endpoint(), 15).await.expect("proxy");
    sns.add_rule(Rule::once("SNS.Publish", Fault::sns_throttling()));
    sns.add_rule(Rule::once("SNS.Publish", Fault::Delay(std::time::Duration::from_secs(3))));
    let p = p.with_sns_endpoint(&sns.endpoint()).await;
    let number = "+14155550130";
    let (_, body) = p.submit(&alert("scenario-5", number)).await;
    let key = key_of(&body);
    p.run_sender().await;
    assert_eq!(p.record(&key).await.status.state, State::Queued, "throttled: back on the queue for a retry");
    p.make_send_queue_visible().await;

    // The operator's claim (a transaction) is held 5 s by the proxy; its reads go straight through.
    let ledger = FaultProxy::start(&p.emulator.endpoint(), 16).await.expect("proxy");
    ledger
        .add_rule(Rule::once("DynamoDB_20120810.TransactWriteItems", Fault::Delay(std::time::Duration::from_secs(5))));
    let retry = p.run_sender();
    let operator = async {
        // The retry has claimed and is waiting on SNS; its lease lapses (the pipeline's clock moves
        // past it) and the sweep gives up on it.
        tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
        assert_eq!(p.record(&key).await.status.state, State::Sending, "the retry holds the claim");
        p.clock.advance(chrono::Duration::minutes(3));
        assert_eq!(p.run_escalation().await.lease_expired_unknown, 1);
        assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
        tocsin_via(&p, &ledger.endpoint(), &["resend", key.as_str(), "--reason", "operator and retry"]).await
    };
    let (_, cli) = tokio::join!(retry, operator);
    assert_eq!(ledger.injected(), 1, "the operator's claim went through the held transaction");

    assert_eq!(cli.code, 1, "the claim is refused: {cli:?}");
    // It read `send_unknown` (resendable), and the ledger had moved on when its claim arrived.
    assert!(cli.stderr.contains("SNS already took it") && cli.stderr.contains("changed while claiming"), "{cli:?}");
    assert_eq!(sms_count(&p).await, 1, "the retry's SMS only");
    let record = p.record(&key).await;
    assert_eq!((record.status.state, record.status.lease_until), (State::Accepted, None));
    let attempt = record.status.attempt_id.as_deref().unwrap_or_default();
    assert!(
        !attempt.starts_with("operator:"),
        "the last attempt is the retry's, never the refused operator's: {attempt}"
    );
    assert!(operator_observations(&p.timeline(&key).await).is_empty(), "a refused claim records nothing");
}

/// A sweep leases an alert to escalate it and decides on the intent as its lease read it; the page
/// (or a chain's next level) follows. A resend in between would slip under that decision: long
/// mode, SNS seed 170134, texted a chain's next person a second after an operator's resend texted
/// the first anew. So the resend is refused while the lease is held, says why, and sends and
/// records nothing; once the lease is gone (the run finished, or died and its lease lapsed), it
/// goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_while_a_sweep_is_escalating_the_alert_is_refused_and_says_so() {
    let (p, _proxy, key) = send_unknown("being-escalated-1", "+14155550136").await;
    // The sweep's lease, taken as a run takes it, held for 15 s of real time (the command reads
    // the system clock); the run then dies.
    let until = chrono::Utc::now() + chrono::Duration::seconds(15);
    let leased = p.ledger.lease_escalation(&key, "run-escalating", chrono::Utc::now(), until).await.expect("lease");
    assert_eq!(leased.map(|r| r.status.state), Some(State::SendUnknown));

    let r = tocsin(&p, &["resend", key.as_str(), "--reason", "meanwhile"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("is being escalated right now") && r.stderr.contains("nothing was sent"), "{r:?}");
    let lease_end = until.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    assert!(r.stderr.contains(&lease_end), "says until when the run holds it ({lease_end}): {r:?}");
    assert_eq!(sms_count(&p).await, 1, "nothing more was sent");
    assert!(operator_observations(&p.timeline(&key).await).is_empty(), "a refused claim records nothing");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);

    // The run died: once its lease lapses, the resend goes out.
    let left = (until - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + std::time::Duration::from_millis(200)).await;
    let again = tocsin(&p, &["resend", key.as_str(), "--reason", "after the lease"]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(sms_count(&p).await, 2, "one more SMS");
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operators_resending_at_once_send_one_sms() {
    let (p, _proxy, key) = send_unknown("two-ops-1", "+14155550131").await;
    let (a, b) = tokio::join!(
        tocsin(&p, &["resend", key.as_str(), "--reason", "alice"]),
        tocsin(&p, &["resend", key.as_str(), "--reason", "bob"])
    );
    let mut codes = vec![a.code, b.code];
    codes.sort();
    assert_eq!(codes, vec![0, 1], "one claims, the other is refused: {a:?} {b:?}");
    assert_eq!(sms_count(&p).await, 2);
    assert_eq!(operator_observations(&p.timeline(&key).await).len(), 1, "only the claim that won is recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_is_refused_for_a_suppressed_recipient_until_it_is_re_enabled() {
    let p = Pipeline::start().await;
    let number = "+14155550132";
    let key = opted_out(&p, "resend-suppressed-1", number).await;

    let r = tocsin(&p, &["resend", key.as_str(), "--reason", "try again"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("+1******0132 is suppressed") && r.stderr.contains("re-enable"), "{r:?}");
    assert!(!r.stderr.contains(number));
    assert_eq!(sms_count(&p).await, 1);
    assert_eq!(p.record(&key).await.status.state, State::Failed, "untouched");

    assert_eq!(tocsin(&p, &["re-enable", number, "--reason", "opted back in"]).await.code, 0);
    let r = tocsin(&p, &["resend", key.as_str(), "--reason", "re-enabled, sending again"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("SNS accepted it"), "{}", r.stdout);
    assert_eq!(sms_count(&p).await, 2);
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalations_are_shown_and_left_on_the_queue_unless_acknowledged() {
    let p = Pipeline::start().await;
    let number = "+14155550133";
    let key = opted_out(&p, "escalate-1", number).await;
    p.run_escalation().await;
    assert_eq!(p.queue_depth("EscalationQueue").await, 1);

    let shown = tocsin(&p, &["escalations"]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    for expected in [&key.as_str()[..12], "escalate-1", "+1******0133", "failed", "delivery failed"] {
        assert!(shown.stdout.contains(expected), "missing {expected:?} in\n{}", shown.stdout);
    }
    assert!(!shown.stdout.contains(number));
    assert!(shown.stdout.contains("left on the queue"));

    // Looking reads the ledger: the message is not touched.
    let doc = tocsin(&p, &["--json", "escalations"]).await.json();
    let list = doc["escalations"].as_array().expect("escalations");
    assert_eq!(list.len(), 1, "{doc}");
    assert_eq!((list[0]["idempotency_key"].as_str(), list[0]["state"].as_str()), (Some(key.as_str()), Some("failed")));
    assert_eq!(doc["acknowledged"], false);
    assert_eq!(p.queue_depth("EscalationQueue").await, 1);

    let no_reason = tocsin(&p, &["escalations", "--ack"]).await;
    assert_eq!(no_reason.code, 2, "--ack needs --reason: {no_reason:?}");
    assert_eq!(p.queue_depth("EscalationQueue").await, 1);

    let acked = tocsin(&p, &["--json", "escalations", "--ack", "--reason", "all handled"]).await;
    assert_eq!(acked.code, 0, "{acked:?}");
    assert_eq!(acked.json()["acknowledged"], true);
    assert_eq!(acked.json()["escalations"].as_array().map(Vec::len), Some(1));
    assert_eq!(acked.json()["deleted"], 1);
    assert_eq!(p.queue_depth("EscalationQueue").await, 0, "acknowledged = deleted");

    let empty = tocsin(&p, &["escalations"]).await;
    assert_eq!(empty.code, 0);
    assert!(empty.stdout.contains("no escalations waiting"), "{empty:?}");
    // Acknowledging is recorded in the ledger: who and why.
    let ops = operator_observations(&p.timeline(&key).await);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!((ops[0].1.as_str(), ops[0].2.as_str()), ("acknowledged escalation", "all handled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_is_required_and_may_come_from_the_environment() {
    let p = Pipeline::start().await;
    let out = tokio::task::spawn_blocking({
        let env = p.emulator.aws_env(&Principal::Operator);
        move || std::process::Command::new(env!("CARGO_BIN_EXE_tocsin")).env_clear().envs(env).args(["list"]).output()
    })
    .await
    .expect("join")
    .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stack"));

    let out = tokio::task::spawn_blocking({
        let env = p.emulator.aws_env(&Principal::Operator);
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_tocsin"))
                .env_clear()
                .envs(env)
                .env("TOCSIN_STACK", STACK)
                .args(["--json", "list"])
                .output()
        }
    })
    .await
    .expect("join")
    .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_receipt_for_the_message_before_a_resend_does_not_move_the_resent_intent() {
    let p = Pipeline::start().await;
    let (key, first) = accepted(&p, "resent-late-1", "+14155550139").await;
    p.carrier_reports(&first, "+14155550139", false, "Phone is currently unreachable/unavailable").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Failed);
    let cli = tocsin(&p, &["resend", key.as_str(), "--reason", "phone back on"]).await;
    assert_eq!(cli.code, 0, "{cli:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Accepted);
    assert_ne!(r.status.sns_message_id.as_deref(), Some(first.as_str()), "a new message");
    // Another record about the first message arrives late: stored, but it says nothing about
    // the resent one.
    p.carrier_reports(&first, "+14155550139", false, "Unknown error attempting to reach phone").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_lists_the_candidate_records_and_links_one_with_a_reason() {
    let (p, _proxy, key) = send_unknown("reconcile-cli-1", "+14155550141").await;
    let first = p.emulator.sent_sms().await.expect("sms")[0].message_id.clone();
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    for (id, secs) in [(first.as_str(), 3), ("look-alike-message", 30)] {
        let record = tocsin_harness::events::sns_delivery_record(
            id,
            "+14155550141",
            true,
            "Message has been accepted by phone carrier",
            claimed + chrono::Duration::seconds(secs),
        );
        p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &record).await;
    }
    let listing = tocsin(&p, &["reconcile", key.as_str()]).await;
    assert_eq!(listing.code, 0, "{listing:?}");
    assert!(listing.stdout.contains(&first) && listing.stdout.contains("look-alike-message"), "{}", listing.stdout);
    assert!(!listing.stdout.contains("+14155550141"), "the number stays masked");
    let json = tocsin(&p, &["--json", "reconcile", key.as_str()]).await;
    let docs: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(docs.as_array().map(Vec::len), Some(2));
    let no_reason = tocsin(&p, &["reconcile", key.as_str(), "--link", &first]).await;
    assert_eq!(no_reason.code, 2, "--link needs --reason");
    let linked =
        tocsin(&p, &["reconcile", key.as_str(), "--link", &first, "--reason", "timestamps match the attempt"]).await;
    assert_eq!(linked.code, 0, "{linked:?}");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    let ops = operator_observations(&p.timeline(&key).await);
    assert!(ops.iter().any(|(_, action, reason)| action.contains(&first) && reason.contains("timestamps")), "{ops:?}");
    assert_eq!(sms_count(&p).await, 1, "reconciling never sends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_names_the_sms_settings_a_request_gave_with_the_origination_number_masked() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        parameters: vec![("SmsAllowedOriginationNumbers", "+18445550100")],
        ..Default::default()
    })
    .await;
    let mut body = alert("show-sms-1", "+14155550121");
    body["sms"] = serde_json::json!({"origination_number": "+18445550100", "max_price_usd": "0.50"});
    let (status, answer) = p.submit(&body).await;
    assert_eq!(status, 201, "{answer}");
    let key = key_of(&answer);
    let table = tocsin(&p, &["show", key.as_str()]).await;
    assert!(
        table.stdout.contains("from +1******0100, at most 0.50 USD (the rest from the stack's defaults)"),
        "{}",
        table.stdout
    );
    assert!(!table.stdout.contains("+18445550100"), "{}", table.stdout);
    let doc = tocsin(&p, &["--json", "show", key.as_str()]).await.json();
    assert_eq!(doc["intent"]["sms"]["origination_number"], "+1******0100");
}

/// B's publish reached SNS and its answer was lost; A's, to the same number, never reached SNS.
/// An operator resends B. B's first SMS is now tied to no alert, and lies in A's reconciliation
/// window: nothing ties it to A, so A's search keeps it for a human and never calls A — never
/// sent — delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_alerts_first_sms_is_never_taken_for_another_alerts_to_the_same_number() {
    let number = "+14155550139";
    let (p, proxy, b) = send_unknown("unsettled-b", number).await;
    let first = p.emulator.sent_sms().await.expect("sms")[0].message_id.clone();
    let sent_at = p.clock.now_utc();
    proxy.add_rule(Rule::once("SNS.Publish", Fault::Reset));
    let (_, a) = p.submit(&alert("unsettled-a", number)).await;
    p.run_sender().await;
    let a = key_of(&a);
    assert_eq!(p.record(&a).await.status.state, State::SendUnknown);
    assert_eq!(sms_count(&p).await, 1, "A's publish never reached SNS");

    p.clock.advance(chrono::Duration::minutes(5));
    let r = tocsin(&p, &["resend", b.as_str(), "--reason", "called: not received"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(sms_count(&p).await, 2);
    // The carrier's record of B's first SMS, stamped when SNS took it.
    let record = tocsin_harness::events::sns_delivery_record(
        &first,
        number,
        true,
        "Message has been accepted by phone carrier",
        sent_at + chrono::Duration::seconds(1),
    );
    p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &record).await;
    p.run_status().await;

    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (0, 1), "{run:?}");
    let ra = p.record(&a).await;
    assert_eq!(ra.status.state, State::SendUnknown, "never sent: never delivered");
    assert_eq!(ra.status.sns_message_id, None);
}

/// The recipients roster (issue 36): listed by any operator, changed only with break-glass and
/// MFA, every change audited with who and why; intake sees a change within a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roster_is_read_by_any_operator_and_changed_only_with_break_glass_and_audited() {
    let p = Pipeline::start().await;
    let listed = tocsin_as(&p, &Principal::ReadOnlyOperator, &["--json", "recipients"]).await;
    assert_eq!(listed.code, 0, "{listed:?}");
    let entries: Vec<String> = listed
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|e| e["entry"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(entries, ["+44", "+1"], "the local roster, most specific first");

    let allow = ["recipients", "allow", "+33612345678", "--reason", "on call in Lyon"];
    for principal in [Principal::ReadOnlyOperator, Principal::OperatorWithoutMfa] {
        let r = tocsin_as(&p, &principal, &allow).await;
        assert_ne!(r.code, 0, "{principal}: {r:?}");
        assert!(r.stderr.contains("AccessDenied") || r.stdout.contains("AccessDenied"), "{principal}: {r:?}");
        p.expect_iam_denied("dynamodb:PutItem", "-recipients");
    }
    let (status, _) = p.submit(&tocsin_tests::alert("lyon-1", "+33612345678")).await;
    assert_eq!(status, 422, "not on the roster");

    let r = tocsin(&p, &allow).await;
    assert_eq!(r.code, 0, "with MFA: {r:?}");
    assert!(r.stdout.contains("+3******5678 allowed by") && r.stdout.contains("within a minute"), "{}", r.stdout);
    let again = tocsin(&p, &allow).await;
    assert_eq!(again.code, 1, "once: {again:?}");
    let masked = tocsin(&p, &["recipients"]).await;
    assert!(masked.stdout.contains("+3******5678") && !masked.stdout.contains("+33612345678"), "{}", masked.stdout);
    p.clock.advance(chrono::Duration::seconds(61));
    let (status, body) = p.submit(&tocsin_tests::alert("lyon-2", "+33612345678")).await;
    assert_eq!(status, 201, "{body}");

    let removed = tocsin(&p, &["recipients", "remove", "+33612345678", "--reason", "left the rota"]).await;
    assert_eq!(removed.code, 0, "{removed:?}");
    let history = p.registry.roster_history().await.expect("history");
    let lyon: Vec<&str> = history.iter().filter(|h| h.2 == "+33612345678").map(|h| h.4.as_str()).collect();
    assert_eq!(lyon, ["on call in Lyon", "left the rota"]);
    assert!(history.iter().filter(|h| h.2 == "+33612345678").all(|h| h.3.contains("arn:")), "who: an identity");
}

/// Templates' chains (issue 37): listed by any operator, set and removed only with break-glass
/// and MFA, each change audited; a chain is checked as a request's is and names only people on
/// the roster; an alert of the template that names no chain takes it, and `show` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_templates_chain_is_set_only_with_break_glass_checked_audited_and_taken_by_its_alerts() {
    let p = Pipeline::start().await;
    let none = tocsin_as(&p, &Principal::ReadOnlyOperator, &["chains"]).await;
    assert_eq!(none.code, 0, "{none:?}");
    assert!(none.stdout.contains("no template has a chain"), "{}", none.stdout);

    let chain = r#"{"wait": "5m", "then": [{"to": "+14155550188", "wait": "10m"}]}"#;
    let set = ["chains", "set", "disk_full", "--chain", chain, "--reason", "storage rota"];
    for principal in [Principal::ReadOnlyOperator, Principal::OperatorWithoutMfa] {
        let r = tocsin_as(&p, &principal, &set).await;
        assert_ne!(r.code, 0, "{principal}: {r:?}");
        assert!(r.stderr.contains("AccessDenied") || r.stdout.contains("AccessDenied"), "{principal}: {r:?}");
        p.expect_iam_denied("dynamodb:PutItem", "-recipients");
    }
    // Checked before anything is written: the template, the chain, the roster.
    for (args, says) in [
        (["chains", "set", "disk_ful", "--chain", chain, "--reason", "r"], "no template is named 'disk_ful'"),
        (["chains", "set", "tocsin_canary", "--chain", chain, "--reason", "r"], "tocsin's own template"),
        (["chains", "set", "disk_full", "--chain", r#"{"wait": "5s"}"#, "--reason", "r"], "from 1m to 24h"),
        (["chains", "set", "disk_full", "--chain", "{wait", "--reason", "r"], "--chain is not JSON"),
        (
            [
                "chains",
                "set",
                "disk_full",
                "--chain",
                r#"{"wait": "5m", "then": [{"to": "+33612345678", "wait": "5m"}]}"#,
                "--reason",
                "r",
            ],
            "not on the recipients roster: chain.then[0].to (+3******5678)",
        ),
    ] {
        let r = tocsin(&p, &args).await;
        assert_ne!(r.code, 0, "{args:?}: {r:?}");
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
    assert!(p.registry.chain_policy_history().await.expect("history").is_empty(), "nothing written");

    let r = tocsin(&p, &set).await;
    assert_eq!(r.code, 0, "with MFA: {r:?}");
    assert!(r.stdout.contains("recipient 5m → +1******0188 10m → on-call"), "{}", r.stdout);
    let listed = tocsin_as(&p, &Principal::ReadOnlyOperator, &["chains"]).await;
    assert!(listed.stdout.contains("disk_full") && !listed.stdout.contains("+14155550188"), "{}", listed.stdout);

    let (status, body) = p.submit(&alert("cli-policy-1", "+14155550187")).await;
    assert_eq!(status, 201, "{body}");
    let shown = tocsin(&p, &["show", key_of(&body).as_str()]).await;
    assert!(shown.stdout.contains("then on-call; template disk_full's policy, as set"), "{}", shown.stdout);

    let remove = ["chains", "remove", "disk_full", "--reason", "rota ended"];
    assert_eq!(tocsin(&p, &remove).await.code, 0);
    assert_eq!(tocsin(&p, &remove).await.code, 1, "removed once");
    let history = tocsin(&p, &["--json", "chains", "history"]).await.json();
    let changes: Vec<(&str, &str)> = history
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|e| Some((e["change"].as_str()?, e["reason"].as_str()?)))
        .collect();
    assert_eq!(changes, [("set", "storage rota"), ("remove", "rota ended")]);
    assert!(history[0]["operator"].as_str().is_some_and(|o| o.contains("arn:")), "who: an identity: {history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sms_breaker_is_seen_by_any_operator_and_resumed_only_with_break_glass_and_audited() {
    use tocsin::domain::spend::{Spend, SpendCeiling};
    use tocsin::ports::SpendMeter;
    let p = Pipeline::start().await;
    let closed = tocsin_as(&p, &Principal::ReadOnlyOperator, &["breaker"]).await;
    assert_eq!(closed.code, 0, "{closed:?}");
    assert!(closed.stdout.contains("closed: 0 parts this hour"), "{}", closed.stdout);
    // Opened as the sender opens it: a send that would pass the ceiling.
    let opened = p.ledger.spend(5, chrono::Utc::now(), SpendCeiling { parts_per_hour: 4 }).await.expect("meter");
    assert!(matches!(opened, Spend::Withheld { opened_here: true, .. }), "{opened:?}");

    let open = tocsin_as(&p, &Principal::ReadOnlyOperator, &["--json", "breaker"]).await;
    assert_eq!(open.code, 0, "{open:?}");
    assert_eq!(open.json()["open"]["refused_parts"], 5, "{}", open.stdout);
    let resume = ["breaker", "resume", "--reason", "pumping ruled out: a producer's runaway loop, fixed"];
    for principal in [Principal::ReadOnlyOperator, Principal::OperatorWithoutMfa] {
        let r = tocsin_as(&p, &principal, &resume).await;
        assert_ne!(r.code, 0, "{principal}: {r:?}");
        assert!(r.stderr.contains("AccessDenied") || r.stdout.contains("AccessDenied"), "{principal}: {r:?}");
        p.expect_iam_denied("dynamodb:UpdateItem", "-ledger");
    }
    assert!(p.ledger.spend_meter().await.expect("meter").open.is_some(), "still open");

    let r = tocsin(&p, &resume).await;
    assert_eq!(r.code, 0, "with MFA: {r:?}");
    assert!(r.stdout.contains("resumed by arn:") && r.stdout.contains("tocsin resend"), "{}", r.stdout);
    let again = tocsin(&p, &resume).await;
    assert_eq!(again.code, 1, "a closed breaker is not resumed: {again:?}");
    let shown = tocsin(&p, &["breaker"]).await;
    assert!(
        shown.stdout.contains("closed: 0 parts this hour") && shown.stdout.contains("runaway loop"),
        "{}",
        shown.stdout
    );
    let history = p.ledger.breaker_history().await.expect("history");
    assert_eq!(history.len(), 1);
    assert!(history[0].operator.contains("arn:"), "who: an identity, {history:?}");
}
