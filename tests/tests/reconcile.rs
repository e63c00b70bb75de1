//! Reconciliation: an unknown outcome is settled from the SNS delivery-status logs — found by
//! destination and time window with FilterLogEvents — instead of guessing or re-sending.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Duration;
use tocsin::adapters::cloudwatch_logs::CloudWatchLogsSearch;

use tocsin::domain::observation::ObservationKind;
use tocsin::domain::reconcile::ReconcileState;
use tocsin::domain::{IdempotencyKey, State};
use tocsin::ports::{IntentStore, MessageIndex};
use tocsin_harness::events::sns_delivery_record;
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Pipeline, alert, key_of};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_publish_answer_is_settled_from_the_delivery_log_without_a_second_sms() {
    let (p, _proxy, key, id) = unknown_outcome("recon-1", "+14155550170").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550170", true, claimed + Duration::seconds(3)).await;
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 1, "{run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()), "the message id is linked");
    assert_eq!(p.ledger.lookup(&id).await.expect("index").map(|e| e.key), Some(key.clone()));
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
    // Later records for that message now arrive through the index as usual.
    p.clock.advance(Duration::minutes(20));
    assert_eq!(p.run_escalation().await.escalated, 0, "delivered: never escalated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_found_by_reconciliation_suppresses_the_number() {
    let (p, _proxy, key, id) = unknown_outcome("recon-2", "+14155550171").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, FAILURE, &id, "+14155550171", false, claimed + Duration::seconds(3)).await;
    assert_eq!(p.run_escalation().await.reconciled, 1);
    assert_eq!(p.record(&key).await.status.state, State::Failed);
    let phone = tocsin::domain::PhoneNumber::parse("+14155550171").expect("valid");
    use tocsin::ports::RecipientRegistry;
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_records_to_the_same_number_in_the_window_are_left_to_a_human() {
    let (p, _proxy, key, id) = unknown_outcome("recon-3", "+14155550172").await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550172", true, claimed + Duration::seconds(3)).await;
    carrier_writes(
        &p,
        SUCCESS,
        "another-message-to-the-same-number",
        "+14155550172",
        true,
        claimed + Duration::seconds(40),
    )
    .await;
    let run = p.run_escalation().await;
    assert_eq!((run.ambiguous, run.reconciled), (1, 0), "{run:?}");
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.reconcile_state), (State::SendUnknown, ReconcileState::Ambiguous));
    let listed = p.timeline(&key).await.into_iter().find_map(|o| match o.kind {
        ObservationKind::Reconciliation { candidates, .. } if !candidates.is_empty() => Some(candidates),
        _ => None,
    });
    let ids: Vec<String> = listed.expect("candidates recorded").into_iter().map(|c| c.sns_message_id).collect();
    assert!(ids.contains(&id) && ids.contains(&"another-message-to-the-same-number".to_owned()), "{ids:?}");
    p.clock.advance(Duration::minutes(5));
    let again = p.run_escalation().await;
    assert_eq!(again.ambiguous + again.reconciled + again.still_unknown, 0, "not searched again: a human decides");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_linked_to_another_alert_to_the_same_number_does_not_confuse_reconciliation() {
    let (p, proxy, key, id) = unknown_outcome("recon-4", "+14155550173").await;
    // A second alert to the same number goes through normally and is linked by the sender.
    proxy.clear_rules();
    p.submit(&alert("recon-4-other", "+14155550173")).await;
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    let other = sms.iter().find(|m| m.message_id != id).map(|m| m.message_id.clone()).expect("second SMS");
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550173", true, claimed + Duration::seconds(2)).await;
    carrier_writes(&p, SUCCESS, &other, "+14155550173", true, claimed + Duration::seconds(4)).await;
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 1, "{run:?}");
    assert_eq!(p.record(&key).await.status.sns_message_id.as_deref(), Some(id.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_record_that_overtakes_the_senders_write_is_matched_not_orphaned() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("recon-5", "+14155550174")).await;
    let key = key_of(&body);
    // The sender has claimed and published; its MessageId write has not landed yet.
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "in-flight", now, now + Duration::minutes(2)).await.expect("claim");
    carrier_writes(&p, SUCCESS, "msg-before-the-sender-wrote", "+14155550174", true, now + Duration::seconds(2)).await;
    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| (s.orphaned, s.delivered)).collect::<Vec<_>>(), vec![(0, 1)]);
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered);
    assert_eq!(p.ledger.lookup("msg-before-the-sender-wrote").await.expect("index").map(|e| e.key), Some(key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_found_yet_is_searched_again_later_and_a_match_after_escalation_is_still_recorded() {
    let (p, _proxy, key, id) = unknown_outcome("recon-6", "+14155550175").await;
    let first = p.run_escalation().await;
    assert_eq!(first.still_unknown, 1);
    p.clock.advance(Duration::minutes(16));
    let at_deadline = p.run_escalation().await;
    assert_eq!(at_deadline.escalated, 1);
    let esc = p.escalations().await;
    assert!(esc[0].0.reason.contains("outcome is unknown"));
    // The record shows up late in the logs, stamped with the send time.
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550175", true, claimed + Duration::seconds(5)).await;
    p.clock.advance(Duration::hours(2));
    let later = p.run_escalation().await;
    assert_eq!(later.reconciled, 1, "{later:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered);
    assert!(r.status.escalation.is_some(), "the escalation stays a fact");
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
    assert_eq!(p.run_escalation().await.ambiguous, 1);
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

/// Two alerts to one number, both with unknown outcomes: A's publish never reached SNS, B's did
/// and its answer was lost. The logs hold one SMS to the number, in both attempts' windows. It is
/// not A's to take (A was never sent), nor provably B's: neither is linked, both are left to a
/// human with the one candidate, and an alert never sent is never called delivered — not even
/// once the other alert has moved on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sms_another_alert_with_an_open_outcome_may_own_is_not_taken_for_an_alert_never_sent() {
    let p = Pipeline::start().await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let number = "+14155550178";
    proxy.add_rule(Rule::once("SNS.Publish", Fault::Reset));
    let (_, a) = p.submit(&alert("recon-9-a", number)).await;
    p.run_sender().await;
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let (_, b) = p.submit(&alert("recon-9-b", number)).await;
    p.run_sender().await;
    let (a, b) = (key_of(&a), key_of(&b));
    assert_eq!(p.record(&a).await.status.state, State::SendUnknown);
    assert_eq!(p.record(&b).await.status.state, State::SendUnknown);
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1, "only B's SMS went out");
    let claimed = p.record(&b).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &sms[0].message_id, number, true, claimed + Duration::seconds(3)).await;

    let run = p.run_escalation().await;
    assert_eq!((run.ambiguous, run.reconciled), (2, 0), "{run:?}");
    let ra = p.record(&a).await;
    assert_eq!((ra.status.state, ra.status.reconcile_state), (State::SendUnknown, ReconcileState::Ambiguous));
    assert_eq!(ra.status.sns_message_id, None, "never sent: never delivered");
    assert_eq!(p.record(&b).await.status.reconcile_state, ReconcileState::Ambiguous);
    let said = p.timeline(&a).await.into_iter().find_map(|o| match o.kind {
        ObservationKind::Reconciliation { outcome, candidates, .. } if candidates.len() == 1 => Some(outcome),
        _ => None,
    });
    assert!(said.is_some_and(|s| s.contains("another alert")), "the search says why it linked nothing");
    assert_eq!(p.ledger.lookup(&sms[0].message_id).await.expect("index"), None, "the SMS is tied to no alert");

    p.clock.advance(Duration::minutes(5));
    let run = p.run_escalation().await;
    assert_eq!(run.ambiguous + run.reconciled + run.contested, 0, "not searched again: a human decides");

    // An operator resends B: its claim moves on, out of the SMS's window. A stays left to a human:
    // what becomes of B says nothing about whose the first SMS was.
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    ddb.update_item()
        .table_name(p.stack.table("LedgerTable"))
        .key("pk", AttributeValue::S(format!("INTENT#{b}")))
        .key("sk", AttributeValue::S("INTENT".into()))
        .update_expression("SET claimed_at = :c")
        .expression_attribute_values(":c", AttributeValue::S(tocsin::adapters::ledger::ts(p.clock.now_utc())))
        .send()
        .await
        .expect("the operator's claim");
    p.clock.advance(Duration::minutes(60));
    let run = p.run_escalation().await;
    assert_eq!(run.reconciled, 0, "{run:?}");
    assert_eq!(p.record(&a).await.status.state, State::SendUnknown, "never sent: never delivered");
}

/// B's answer was lost; A, to the same number, is claimed by a sender still at work (its lease
/// runs). The one SMS in B's window may be A's, which A's sender may yet record: B's search links
/// nothing and comes back later — and once A's outcome turns unknown too, a human decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sms_a_sender_still_at_work_may_own_is_searched_for_again_later() {
    let (p, _proxy, b, id) = unknown_outcome("recon-10-b", "+14155550179").await;
    let (_, a) = p.submit(&alert("recon-10-a", "+14155550179")).await;
    let a = key_of(&a);
    let now = p.clock.now_utc();
    p.ledger.claim(&a, "in-flight", now, now + Duration::minutes(2)).await.expect("claim");
    let claimed = p.record(&b).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, SUCCESS, &id, "+14155550179", true, claimed + Duration::seconds(3)).await;

    let run = p.run_escalation().await;
    assert_eq!((run.contested, run.reconciled, run.ambiguous), (1, 0, 0), "{run:?}");
    let rb = p.record(&b).await;
    assert_eq!((rb.status.state, rb.status.reconcile_state), (State::SendUnknown, ReconcileState::Pending));
    assert!(rb.status.reconcile_next_at.is_some(), "searched again later");

    p.clock.advance(Duration::minutes(3));
    p.run_escalation().await;
    p.clock.advance(Duration::minutes(3));
    p.run_escalation().await;
    for key in [&a, &b] {
        let r = p.record(key).await;
        assert_eq!(
            (r.status.state, r.status.reconcile_state),
            (State::SendUnknown, ReconcileState::Ambiguous),
            "{key}"
        );
    }
}

/// An operator resends B long after its deadline and the resend's answer is lost; A, to the same
/// number, was never sent. The resend's SMS lies in A's window, and B — its deadline long past —
/// is no longer where the pending-index shows the number's open attempts (from the window's start
/// on). The resend noted its own claim, so A's search still sees B and leaves the SMS to a human.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_resend_past_its_deadline_still_counts_as_another_alert_that_may_own_the_sms() {
    use tocsin::services::operator::{ResendRequest, operator_attempt_id, resend};
    let (p, proxy, b, _) = unknown_outcome("recon-11-b", "+14155550180").await;
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
    };
    let resent = resend(&p.ledger, &p.registry, &p.sender.gateway, &p.clock, req).await.expect("resent");
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
    assert_eq!(ra.status.reconcile_state, ReconcileState::Ambiguous, "left to a human");
}

/// A young record whose message id is in no index, and one open attempt to its number in its
/// window (A's) — but an operator's resend of B to the same number was claimed there too (past
/// B's deadline, so the pending-index does not show it) and its MessageId write was lost. The
/// record may be B's: the status function keeps it as an orphan instead of matching it to A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_an_operators_attempt_could_own_is_not_matched_to_the_one_open_attempt() {
    use tocsin::ports::UnsettledAttempts;
    let p = Pipeline::start().await;
    let number = "+14155550181";
    let (_, a) = p.submit(&alert("recon-12-a", number)).await;
    let (_, b) = p.submit(&alert("recon-12-b", number)).await;
    let (a, b) = (key_of(&a), key_of(&b));
    let now = p.clock.now_utc();
    p.ledger.claim(&a, "in-flight", now, now + Duration::minutes(2)).await.expect("claim");
    let phone = tocsin::domain::PhoneNumber::parse(number).expect("valid");
    p.ledger.note_unsettled(&phone, &b, now, now + Duration::hours(73)).await.expect("the resend's note");
    carrier_writes(&p, SUCCESS, "msg-of-the-resend", number, true, now + Duration::seconds(1)).await;
    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| (s.orphaned, s.delivered)).collect::<Vec<_>>(), vec![(1, 0)]);
    assert_eq!(p.record(&a).await.status.state, State::Sending, "not A's to take");
}

/// The sweep's search finds a permanent failure for an unknown outcome, and the state write lands
/// with its answer lost (every SDK attempt's): the intent is `failed`, so it has left
/// `send_unknown` and no later search tries the record again. The number is suppressed all the
/// same: the registry is written before the state, not after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciled_permanent_failure_suppresses_the_number_even_when_the_state_writes_answer_is_lost() {
    use tocsin::ports::RecipientRegistry;
    let number = "+14155550178";
    let p = Pipeline::start_with(tocsin_tests::Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        fault_seed: Some(16),
        ..Default::default()
    })
    .await;
    let proxy = p.proxy.clone().expect("proxy");
    let (key, id) = answer_lost(&p, &proxy, "recon-lost-state", number).await;
    let claimed = p.record(&key).await.status.claimed_at.expect("claimed");
    carrier_writes(&p, FAILURE, &id, number, false, claimed + Duration::seconds(3)).await;

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
/// unknown outcome whose record was logged after its search window (the claim + 15 minutes) is
/// still settled: the logs are searched until now, and the record's own time is held to the
/// window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_logged_long_after_its_sms_still_settles_an_unknown_outcome() {
    let number = "+14155550176";
    let p = Pipeline::start().await;
    // The handlers' clock runs 40 minutes behind the emulator's, which stamps a log event with
    // the wall clock when it is written: the SMS goes out 40 minutes before its record is logged.
    p.clock.advance(Duration::minutes(-40));
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let (key, id) = answer_lost(&p, &proxy, "recon-late-log", number).await;
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
