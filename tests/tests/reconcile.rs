//! Reconciliation: an unknown outcome is settled from the SNS delivery-status logs only by a record
//! tied to it — its message id in the message index — never by destination and time: the phone
//! receives other senders' SMS too. A record nothing ties to the alert is kept for a human, and
//! the alert is escalated at its deadline with it attached.

use std::time::Duration as StdDuration;

use chrono::Duration;
use tocsin::adapters::sns::CloudWatchLogsSearch;

use tocsin::domain::observation::ObservationKind;
use tocsin::domain::reconcile::ReconcileState;
use tocsin::domain::{IdempotencyKey, State};
use tocsin::ports::{IntentStore, MessageIndex, RecipientRegistry};
use tocsin_harness::LogsShape;
use tocsin_harness::events::{sns_delivery_record, sqs_event};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const SUCCESS: &str = "SmsSuccessLogGroup";
const FAILURE: &str = "SmsFailureLogGroup";

/// An alert whose publish reached SNS but whose answer was lost: `send_unknown`, one SMS sent.
async fn unknown_outcome(event: &str, number: &str) -> (Pipeline, FaultProxy, IdempotencyKey, String) {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let (key, id) = answer_lost(&p, &proxy, event, number).await;
    (p, proxy, key, id)
}

/// Submits and sends an alert whose publish answer `proxy` drops: `send_unknown`, its SMS the
/// only one sent. Returns its key and SNS message id.
async fn answer_lost(p: &Pipeline, proxy: &FaultProxy, event: &str, number: &str) -> (IdempotencyKey, String) {
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let (_, body) = p.submit(&alert(event, number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    (key, sms[0].message_id.clone())
}

/// Submits and sends an alert, SNS accepting it, in an invocation of 8 s during which every
/// request `write` matches is throttled (past the SDK's retries); the fault is cleared on return.
/// Returns its key and SNS message id.
async fn published_with_a_write_lost(p: &Pipeline, write: Rule, event: &str, number: &str) -> (IdempotencyKey, String) {
    let proxy = p.proxy.clone().expect("a pipeline behind the fault proxy");
    proxy.add_rule(write);
    let (_, body) = p.submit(&alert(event, number)).await;
    let key = key_of(&body);
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.in_(StdDuration::from_secs(8))).await;
    proxy.clear_rules();
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    (key, sms[0].message_id.clone())
}

/// An alert whose SMS SNS accepted and whose sender's facts landed — the observation and the
/// message index, written first — but whose state write never did (throttled past the SDK's
/// retries until the invocation ended): its lease lapses and the sweep makes it `send_unknown`.
/// Its SMS is tied to it by the index. Returns its key and SNS message id.
async fn indexed_but_unknown(p: &Pipeline, event: &str, number: &str) -> (IdempotencyKey, String) {
    let write = Rule::sometimes("DynamoDB_20120810.UpdateItem", Fault::dynamodb_throttled(), 1.0)
        .when_body_contains(":sns_message_id");
    let (key, id) = published_with_a_write_lost(p, write, event, number).await;
    assert_eq!(p.ledger.lookup(&id).await.expect("index").map(|e| e.key), Some(key.clone()), "the index ties it");
    p.clock.advance(Duration::minutes(3));
    assert_eq!(p.run_escalation().await.lease_expired_unknown, 1);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    (key, id)
}

async fn carrier_writes(
    p: &Pipeline,
    group: &str,
    message_id: &str,
    number: &str,
    success: bool,
    at: chrono::DateTime<chrono::Utc>,
) {
    let response = if success { "Message has been accepted by phone carrier" } else { "Phone number is opted out" };
    let record = sns_delivery_record(message_id, number, success, response, at);
    p.put_log(p.stack.log_group(group), &record).await;
}

/// The message ids the latest search kept for a human.
async fn candidates_of(p: &Pipeline, key: &IdempotencyKey) -> Vec<String> {
    p.timeline(key)
        .await
        .into_iter()
        .filter_map(|o| match o.kind {
            ObservationKind::Reconciliation { candidates, .. } if !candidates.is_empty() => Some(candidates),
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.sns_message_id)
        .collect()
}

/// The case a guess gets wrong: an alert's publish never reaches SNS, and within the minute the
/// same phone receives another sender's SMS (an MFA code, another application, a second tocsin
/// stack). Neither the status function (the record arrives young, while the alert is still
/// unknown) nor the sweep's search takes it for the alert's: it is kept for a human, and the
/// alert is escalated at its deadline with the record attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_senders_sms_to_the_same_phone_never_makes_an_alert_never_sent_delivered() {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let number = "+14155550170";
    proxy.add_rule(Rule::once("SNS.Publish", Fault::Reset));
    let (_, body) = p.submit(&alert("recon-1", number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    assert!(p.emulator.sent_sms().await.expect("sms").is_empty(), "the publish never reached SNS");
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, "an-mfa-code-from-another-app", number, true, claimed + Duration::seconds(2)).await;

    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| (s.orphaned, s.delivered)).collect::<Vec<_>>(), vec![(1, 0)]);
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (0, 1), "{run:?}");
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.sns_message_id.as_deref()), (State::SendUnknown, None));
    assert_eq!(candidates_of(&p, &key).await, vec!["an-mfa-code-from-another-app".to_owned()]);

    p.clock.advance(Duration::minutes(16));
    let at_deadline = p.run_escalation().await;
    assert_eq!(at_deadline.escalated, 1, "{at_deadline:?}");
    let esc = p.escalations().await;
    assert!(esc[0].0.reason.contains("outcome is unknown"), "{:?}", esc[0].0.reason);
    assert!(
        esc[0].0.history.iter().any(|h| h.contains("an-mfa-code-from-another-app")),
        "what the search found goes to the person who looks: {:?}",
        esc[0].0.history
    );
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown, "never delivered");
}

/// A lost publish answer whose SMS did go out: its record is in the logs, but SNS's answer — the
/// message id — never reached tocsin, so nothing ties the record to the alert. It is kept for a
/// human (who may link it, audited), searched for again, and the alert escalated at its
/// deadline; never a second SMS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_publish_answer_is_never_settled_by_a_record_nothing_ties_to_it_and_is_escalated_at_its_deadline() {
    let (p, _proxy, key, id) = unknown_outcome("recon-2", "+14155550171").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, FAILURE, &id, "+14155550171", false, claimed + Duration::seconds(3)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (0, 1), "{run:?}");
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.reconcile_state), (State::SendUnknown, ReconcileState::Pending));
    assert!(r.status.reconcile_next_at.is_some(), "searched again later: the index may yet tie it");
    let phone = tocsin::domain::PhoneNumber::parse("+14155550171").expect("valid");
    assert!(
        p.registry.suppression(&phone).await.expect("registry").is_none(),
        "a record nothing ties to the alert suppresses nothing"
    );
    p.clock.advance(Duration::minutes(16));
    assert_eq!(p.run_escalation().await.escalated, 1);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_whose_sms_the_index_ties_to_it_is_settled_from_the_delivery_log() {
    let p = Pipeline::start_with(Options { fault_seed: Some(31), ..Default::default() }).await;
    let (key, id) = indexed_but_unknown(&p, "recon-3", "+14155550172").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    // Another sender's SMS to the same phone in the window changes nothing.
    carrier_writes(&p, SUCCESS, "another-senders-sms", "+14155550172", true, claimed + Duration::seconds(1)).await;
    carrier_writes(&p, SUCCESS, &id, "+14155550172", true, claimed + Duration::seconds(3)).await;
    p.clock.advance(Duration::minutes(2));
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 1, "{run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()), "its own SMS");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
    p.clock.advance(Duration::minutes(20));
    assert_eq!(p.run_escalation().await.escalated, 0, "delivered: never escalated");
}

/// CloudWatch Logs as AWS serves it: records put a moment ago are not yet searchable, and a
/// search's pages hold one event each, every other one empty with a next token. The sweep that
/// finds nothing leaves the outcome unknown and sends nothing; the next one, once the records are
/// searchable, follows the pages past another sender's record to the alert's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcomes_record_not_yet_searchable_is_found_later_through_small_and_empty_pages() {
    let p = Pipeline::start_with(Options { fault_seed: Some(32), ..Default::default() }).await;
    let (key, id) = indexed_but_unknown(&p, "recon-ingest", "+14155550173").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    let harsh = |delay| LogsShape { ingestion_delay: delay, page_events: 1, empty_every: 2 };
    p.emulator.shape_logs(harsh(StdDuration::from_secs(600))).await.expect("shape");
    carrier_writes(&p, SUCCESS, "another-senders-sms", "+14155550173", true, claimed + Duration::seconds(1)).await;
    carrier_writes(&p, SUCCESS, &id, "+14155550173", true, claimed + Duration::seconds(3)).await;
    p.clock.advance(Duration::minutes(2));
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 0, "nothing searchable yet: {run:?}");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);

    p.emulator.shape_logs(harsh(StdDuration::ZERO)).await.expect("shape");
    p.clock.advance(Duration::minutes(2));
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 1, "{run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()), "its own SMS, not the other sender's");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_the_index_ties_to_an_unknown_outcome_suppresses_the_number() {
    let p = Pipeline::start_with(Options { fault_seed: Some(32), ..Default::default() }).await;
    let (key, id) = indexed_but_unknown(&p, "recon-4", "+14155550173").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, FAILURE, &id, "+14155550173", false, claimed + Duration::seconds(3)).await;
    p.clock.advance(Duration::minutes(2));
    assert_eq!(p.run_escalation().await.reconciled, 1);
    assert_eq!(p.record(&key).await.status.state, State::Failed);
    let phone = tocsin::domain::PhoneNumber::parse("+14155550173").expect("valid");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some());
}

/// Found by the simulation (long mode, SNS seed 227966): a sender published an alert alone and
/// stored SNS's answer (its observation, written first), then its message-index write failed every
/// try until the invocation ended, and its state write never came. The SMS's permanent failure
/// found no index entry and was kept as an orphan; the lapsed claim became `send_unknown`, and no
/// search tied the record to it — so the dead number was never suppressed. The attempt's stored
/// answer ties it by key: the search settles the alert `failed` and suppresses the number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_of_an_sms_whose_index_write_never_landed_suppresses_its_number_once_searched() {
    let number = "+14155550188";
    let p = Pipeline::start_with(Options { fault_seed: Some(34), ..Default::default() }).await;
    let index_write =
        Rule::sometimes("DynamoDB_20120810.PutItem", Fault::dynamodb_throttled(), 1.0).when_body_contains("MSG#");
    let (key, id) = published_with_a_write_lost(&p, index_write, "recon-index-lost", number).await;
    assert_eq!(p.ledger.lookup(&id).await.expect("index"), None, "no index names it");
    assert_eq!(p.record(&key).await.status.state, State::Sending);
    p.carrier_reports(&id, number, false, "Phone number is opted out").await;
    let status = p.run_status().await;
    assert_eq!(status.iter().map(|s| (s.orphaned, s.suppressed)).collect::<Vec<_>>(), vec![(1, 0)]);

    // The claim lapses: its outcome is unknown, and the same run searches for it.
    p.clock.advance(Duration::minutes(3));
    let run = p.run_escalation().await;
    assert_eq!((run.lease_expired_unknown, run.reconciled, run.unattributed), (1, 1, 0), "{run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Failed, "{:?}", r.status);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()), "its own SMS");
    let phone = tocsin::domain::PhoneNumber::parse(number).expect("valid");
    let sup = p.registry.suppression(&phone).await.expect("registry").expect("the dead number is suppressed");
    assert_eq!(sup.reason, "Phone number is opted out");
    p.clock.advance(Duration::minutes(1));
    assert_eq!(p.run_escalation().await.escalated, 1, "a failed alert is escalated");
    assert!(p.escalations().await[0].0.reason.contains("delivery failed"));
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never re-sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_several_sms_to_the_number_are_all_kept_for_a_human_and_searched_for_again() {
    let (p, _proxy, key, id) = unknown_outcome("recon-5", "+14155550174").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550174", true, claimed + Duration::seconds(3)).await;
    carrier_writes(&p, SUCCESS, "another-message", "+14155550174", true, claimed + Duration::seconds(40)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.unattributed, run.reconciled), (1, 0), "{run:?}");
    let mut ids = candidates_of(&p, &key).await;
    ids.sort();
    let mut expected = vec![id, "another-message".to_owned()];
    expected.sort();
    assert_eq!(ids, expected);
    p.clock.advance(Duration::minutes(2));
    let again = p.run_escalation().await;
    assert_eq!((again.unattributed, again.reconciled), (1, 0), "searched again: {again:?}");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_index_ties_to_another_alert_to_the_same_number_is_no_candidate() {
    let (p, proxy, key, id) = unknown_outcome("recon-6", "+14155550175").await;
    // A second alert to the same number goes through normally and is linked by the sender.
    proxy.clear_rules();
    p.submit(&alert("recon-6-other", "+14155550175")).await;
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    let other = sms.iter().find(|m| m.message_id != id).map(|m| m.message_id.clone()).expect("second SMS");
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550175", true, claimed + Duration::seconds(2)).await;
    carrier_writes(&p, SUCCESS, &other, "+14155550175", true, claimed + Duration::seconds(4)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (0, 1), "{run:?}");
    assert_eq!(candidates_of(&p, &key).await, vec![id], "the other alert's SMS is not a candidate");
}

/// A young record whose message id is in no index while an alert to its number is being sent:
/// it may be that alert's, ahead of the sender's MessageId write — or another sender's. The
/// status function waits, looks it up again, and keeps it as an orphan: it is applied (by the
/// sweep) only once the index ties it to an alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_record_no_index_names_is_kept_as_an_orphan_never_matched_to_an_alert_being_sent() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("recon-7", "+14155550176")).await;
    let key = key_of(&body);
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "in-flight", now, now + Duration::minutes(2)).await.expect("claim");
    carrier_writes(&p, SUCCESS, "msg-nothing-ties", "+14155550176", true, now + Duration::seconds(2)).await;
    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| (s.orphaned, s.delivered)).collect::<Vec<_>>(), vec![(1, 0)]);
    assert_eq!(p.record(&key).await.status.state, State::Sending, "not delivered on a guess");
    assert_eq!(p.ledger.lookup("msg-nothing-ties").await.expect("index"), None);
    assert_eq!(p.ledger.orphans_of("msg-nothing-ties").await.expect("orphans").len(), 1, "kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_found_yet_is_searched_again_later_and_escalated_at_its_deadline() {
    let (p, _proxy, key, _id) = unknown_outcome("recon-8", "+14155550177").await;
    let first = p.run_escalation().await;
    assert_eq!(first.still_unknown, 1);
    assert!(p.record(&key).await.status.reconcile_next_at.is_some());
    p.clock.advance(Duration::minutes(16));
    let at_deadline = p.run_escalation().await;
    assert_eq!(at_deadline.escalated, 1);
    let esc = p.escalations().await;
    assert!(esc[0].0.reason.contains("outcome is unknown"));
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_log_search_is_deferred_and_the_escalation_run_still_completes() {
    let (p, _sns_proxy, key, _id) = unknown_outcome("recon-7", "+14155550176").await;
    p.submit(&alert("recon-7-silent", "+14155550177")).await;
    p.run_sender().await;
    let logs_proxy = FaultProxy::start(&p.emulator.endpoint(), 9).await.expect("proxy");
    logs_proxy.add_rule(Rule::sometimes(
        "Logs_20140328.FilterLogEvents",
        Fault::json_error("ThrottlingException", "Rate exceeded", 400),
        1.0,
    ));
    let sdk = tocsin_tests::function_sdk(&logs_proxy.endpoint(), "EscalationFunction").await;
    let throttled = escalation::Escalator {
        store: p.escalation.store.clone(),
        send_queue: p.escalation.send_queue.clone(),
        escalations: p.escalation.escalations.clone(),
        logs: CloudWatchLogsSearch::new(
            aws_sdk_cloudwatchlogs::Client::new(&sdk),
            p.stack.log_group(SUCCESS),
            p.stack.log_group(FAILURE),
        ),
        registry: p.escalation.registry.clone(),
        clock: p.clock.clone(),
        config: p.escalation.config.clone(),
    };
    p.clock.advance(Duration::minutes(16));
    let run = throttled.run(p.clock.in_(std::time::Duration::from_secs(45))).await.expect("run");
    assert_eq!(run.escalated, 2, "both escalations went out: {run:?}");
    assert!(run.complete && run.reconcile_deferred >= 1, "{run:?}");
    assert!(logs_proxy.injected() >= 1);
    assert_eq!(p.record(&key).await.status.reconcile_attempts, 0, "a throttled search is not a search");
    assert_eq!(p.escalations().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_the_candidates_and_links_one_with_an_audited_reason() {
    use tocsin::services::reconcile::{ManualError, candidates, link};
    let (p, _proxy, key, id) = unknown_outcome("recon-8", "+14155550178").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550178", true, claimed + Duration::seconds(3)).await;
    carrier_writes(&p, SUCCESS, "look-alike", "+14155550178", true, claimed + Duration::seconds(30)).await;
    assert_eq!(p.run_escalation().await.unattributed, 1, "nothing ties either record to the alert");
    let margin = p.escalation.config.reconcile_margin;
    let listed = candidates(&p.ledger, &p.escalation.logs, &key, margin, p.clock.now_utc()).await.expect("candidates");
    assert_eq!(listed.len(), 2);
    let refused =
        link(&p.ledger, &p.registry, &p.escalation.logs, &key, &id, "alice@ops", " ", margin, p.clock.now_utc()).await;
    assert!(matches!(refused, Err(ManualError::NoReason)));
    let state = link(
        &p.ledger,
        &p.registry,
        &p.escalation.logs,
        &key,
        &id,
        "alice@ops",
        "carrier confirmed by phone",
        margin,
        p.clock.now_utc(),
    )
    .await
    .expect("linked");
    assert_eq!(state, State::Delivered);
    let audited = p.timeline(&key).await.into_iter().any(|o| {
        matches!(o.kind, ObservationKind::Operator { ref operator, ref reason, .. } if operator == "alice@ops" && reason.contains("confirmed"))
    });
    assert!(audited, "who and why are recorded");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

/// An operator resends B long after its deadline and the resend's answer is lost; A, to the same
/// number, was never sent. The resend's SMS lies in A's window and nothing ties it to either: A's
/// search keeps it for a human and never calls A delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_resend_to_the_same_number_is_never_taken_for_an_alert_never_sent() {
    use tocsin::services::operator::{ResendRequest, operator_attempt_id, resend};
    let (p, proxy, b, _) = Box::pin(unknown_outcome("recon-11-b", "+14155550180")).await;
    let number = "+14155550180";
    // Three quarters of an hour on: B's deadline (15 min) and first claim are before any window
    // of now.
    p.clock.advance(Duration::minutes(45));
    proxy.add_rule(Rule::once("SNS.Publish", Fault::Reset));
    let (_, a) = p.submit(&alert("recon-11-a", number)).await;
    p.run_sender().await;
    let a = key_of(&a);
    assert_eq!(p.record(&a).await.status.state, State::SendUnknown, "A never reached SNS");

    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let attempt = operator_attempt_id("recon-11");
    let req = ResendRequest {
        key: &b,
        operator: "arn:aws:iam::123456789012:user/on-call",
        reason: "called: not received",
        attempt_id: &attempt,
        lease: std::time::Duration::from_secs(120),
        defaults: &Default::default(),
        stack: tocsin_tests::tocsin_harness::iam::LOCAL_STACK,
    };
    let resent = Box::pin(resend(&p.ledger, &p.registry, &p.sender.gateway, &p.clock, req)).await.expect("resent");
    assert!(resent.recorded.is_ok(), "{resent:?}");
    assert_eq!(p.record(&b).await.status.state, State::SendUnknown, "the resend's answer was lost");
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 2, "B's first SMS and its resend");
    // The carrier's record of the resend, logged at this clock's time.
    let at = p.clock.now_utc() + Duration::seconds(1);
    let record =
        sns_delivery_record(&sms[1].message_id, number, true, "Message has been accepted by phone carrier", at);
    let group = p.stack.log_group(SUCCESS).to_owned();
    let _ = p.logs.create_log_stream().log_group_name(&group).log_stream_name("resend").send().await;
    p.logs
        .put_log_events()
        .log_group_name(&group)
        .log_stream_name("resend")
        .log_events(
            aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
                .timestamp(at.timestamp_millis())
                .message(record)
                .build()
                .expect("event"),
        )
        .send()
        .await
        .expect("logged");

    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 0, "{run:?}");
    let ra = p.record(&a).await;
    assert_eq!((ra.status.state, ra.status.sns_message_id), (State::SendUnknown, None), "never sent: never delivered");
    assert_eq!(candidates_of(&p, &a).await, vec![sms[1].message_id.clone()], "kept for a human");
}

/// The sweep's search finds a permanent failure the index ties to an unknown outcome, and the state write lands
/// with its answer lost (every SDK attempt's): the intent is `failed`, so it has left
/// `send_unknown` and no later search tries the record again. The number is suppressed all the
/// same: the registry is written before the state, not after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciled_permanent_failure_suppresses_the_number_even_when_the_state_writes_answer_is_lost() {
    let number = "+14155550178";
    let p = Pipeline::start_with(tocsin_tests::Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        fault_seed: Some(16),
        ..Default::default()
    })
    .await;
    let proxy = p.proxy.clone().expect("proxy");
    let (key, id) = indexed_but_unknown(&p, "recon-lost-state", number).await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, FAILURE, &id, number, false, claimed + Duration::seconds(3)).await;
    p.clock.advance(Duration::minutes(2));

    // Each of the SDK's three attempts is applied (or refused as applied) and its answer lost.
    proxy
        .add_rule(Rule::times("DynamoDB_20120810.UpdateItem", Fault::DropResponse, 3).when_body_contains("\"failed\""));
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 0, "the run saw its write fail: {run:?}");
    assert_eq!(p.record(&key).await.status.state, State::Failed, "the write landed");
    let phone = tocsin::domain::PhoneNumber::parse(number).expect("valid");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some(), "suppressed before the state write");
    // Nothing tries the record again: the intent is final.
    p.clock.advance(Duration::minutes(2));
    let later = p.run_escalation().await;
    assert_eq!((later.reconciled, later.still_unknown), (0, 0), "{later:?}");
}

/// A delivery record is logged when the carrier's receipt comes — up to 72 hours after the SMS —
/// and its log event carries that time; only the record's own timestamp says when SNS sent it. An
/// unknown outcome the index ties to its SMS, whose record was logged after its search window
/// (the claim + 15 minutes), is still settled: the logs are searched until now, and the record's
/// own time is held to the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_logged_long_after_its_sms_still_settles_an_unknown_outcome() {
    let number = "+14155550179";
    let p = Pipeline::start_with(Options { fault_seed: Some(33), ..Default::default() }).await;
    // The handlers' clock runs 40 minutes behind the emulator's, which stamps a log event with
    // the wall clock when it is written: the SMS goes out 40 minutes before its record is logged.
    p.clock.advance(Duration::minutes(-40));
    let (key, id) = indexed_but_unknown(&p, "recon-late-log", number).await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    // SNS sent it 3 s after the claim; the receipt is logged now, 40 minutes later.
    carrier_writes(&p, SUCCESS, &id, number, true, claimed + Duration::seconds(3)).await;
    p.clock.advance(Duration::minutes(40));

    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 1, "{run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered, "{:?}", r.status);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()));
}

/// `n` alerts (`{event}-{i}` to `{number}{i}`) whose publish answers were lost, ten seconds apart,
/// on a stack whose runs search one unknown outcome each (`TOCSIN_RECONCILE_BATCH` 1); a minute
/// on, every one is due a search.
async fn unknown_outcomes_one_search_a_run(
    event: &str,
    number: &str,
    n: usize,
) -> (Pipeline, FaultProxy, Vec<IdempotencyKey>) {
    let mut options = Options::sns();
    options.env.push(("TOCSIN_RECONCILE_BATCH", "1"));
    let p = Pipeline::start_with(options).await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let mut keys = Vec::new();
    for i in 0..n {
        proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
        let (_, body) = p.submit(&alert(&format!("{event}-{i}"), &format!("{number}{i}"))).await;
        p.run_sender().await;
        let key = key_of(&body);
        assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
        keys.push(key);
        p.clock.advance(Duration::seconds(10));
    }
    p.clock.advance(Duration::minutes(1));
    (p, proxy, keys)
}

/// More unknown outcomes are due than a run may search (`TOCSIN_RECONCILE_BATCH`): the one that
/// has waited longest is searched first, and one searched goes to the back, so each is searched in
/// turn — never starved by chance. (Found by the simulator's long mode, SNS seed 129865: drawn at
/// random from about 300 due, 10 a run, one was never searched in 113 runs, its digest's sibling
/// delivered.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_more_unknown_outcomes_due_than_a_run_searches_the_longest_waiting_goes_first() {
    let (p, _proxy, keys) = unknown_outcomes_one_search_a_run("starve", "+1415555023", 4).await;
    for (run, expected) in keys.iter().enumerate() {
        let summary = p.run_escalation().await;
        assert_eq!(summary.still_unknown + summary.unattributed, 1, "one search a run: {summary:?}");
        let mut searched = Vec::new();
        for key in &keys {
            if p.record(key).await.status.reconcile_attempts > 0 {
                searched.push(key.clone());
            }
        }
        assert_eq!(searched, keys[..=run], "run {run}: the longest waiting, {expected}, searched next");
        p.clock.advance(Duration::seconds(30));
    }
}

/// Unknown outcomes waiting their turn for a search (a run searches `TOCSIN_RECONCILE_BATCH`) are
/// due in the index already: each run reads them and writes nothing for them. Moving each one a
/// second on cost a write and its index entry's delete and put, every run, for every one of an
/// outage's backlog (seen profiling the simulator: about 22,000 of 490,000 calls in 30 End User
/// Messaging seeds). They are still searched in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcomes_waiting_their_turn_for_a_search_are_read_but_never_rewritten_by_each_run() {
    let (p, _proxy, keys) = unknown_outcomes_one_search_a_run("backlog", "+1415555024", 3).await;
    assert_eq!(p.run_escalation().await.reconcile_deferred, 2);
    p.clock.advance(Duration::seconds(30));
    p.emulator.start_recording().await.expect("recording");
    let run = p.run_escalation().await;
    let requests = p.emulator.stop_recording_requests().await.expect("recording");
    assert_eq!((run.still_unknown + run.unattributed, run.reconcile_deferred), (1, 1), "{run:?}");
    let mut waiting = Vec::new();
    for key in &keys {
        if p.record(key).await.status.reconcile_attempts == 0 {
            waiting.push(key.clone());
        }
    }
    assert_eq!(waiting, keys[2..], "the longest waiting searched first");
    let touches = |key: &IdempotencyKey, op: &str| {
        requests.iter().filter(|r| r.operation.ends_with(op) && r.body.to_string().contains(key.as_str())).count()
    };
    let waiting = &keys[2];
    assert_eq!(touches(waiting, "GetItem"), 1, "read once by the run");
    for op in ["UpdateItem", "PutItem", "TransactWriteItems", "DeleteItem"] {
        assert_eq!(touches(waiting, op), 0, "{op}: nothing written for an outcome waiting its turn");
    }
    p.clock.advance(Duration::seconds(30));
    let third = p.run_escalation().await;
    assert_eq!(third.still_unknown + third.unattributed, 1, "{third:?}");
    assert!(p.record(waiting).await.status.reconcile_attempts > 0, "searched in its turn");
}
