//! Storm mode's digest rules, through real emulator calls: a recipient's alerts claimed in one
//! sender invocation go out as one SMS, and every member still knows whether it arrived.

use chrono::Duration;
use serde_json::Value;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{ClaimOutcome, DigestStore, DueIndex, IntentStore, RecipientRegistry};
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const SUCCESS_GROUP: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber";
const FAILURE_GROUP: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber/Failure";

fn storm_on() -> Options {
    Options { env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_STORM_MODE", "on")], ..Default::default() }
}

fn alert_due_in(event_id: &str, recipient: &str, deadline: &str) -> Value {
    let mut a = alert(event_id, recipient);
    a["deadline"] = Value::from(deadline);
    a
}

/// Submits `n` alerts to `number` (the second due in 5 minutes, the rest in 15); their keys.
async fn submit_many(p: &Pipeline, prefix: &str, number: &str, n: usize) -> Vec<IdempotencyKey> {
    let mut keys = Vec::new();
    for i in 0..n {
        let deadline = if i == 1 { "5m" } else { "15m" };
        let (status, body) = p.submit(&alert_due_in(&format!("{prefix}-{i}"), number, deadline)).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    keys
}

async fn feed(p: &Pipeline, group: &str, lines: &[LogLine]) -> status::Summary {
    p.status.handle(logs_envelope(&logs_payload(group, "DATA_MESSAGE", lines))).await.expect("status")
}

fn line(id: &str, message: String) -> LogLine {
    LogLine { id: id.into(), timestamp: chrono::Utc::now().timestamp_millis(), message }
}

/// The one SMS sent to `number`: (message id, text).
async fn only_sms_to(p: &Pipeline, number: &str) -> (String, String) {
    let to: Vec<_> =
        p.emulator.sent_sms().await.expect("sms list").into_iter().filter(|s| s.phone_number == number).collect();
    assert_eq!(to.len(), 1, "exactly one SMS to {number}: {:?}", to.iter().map(|s| &s.message).collect::<Vec<_>>());
    (to[0].message_id.clone(), to[0].message.clone())
}

/// Three alerts to `number` go out as one digest whose publish answer is lost (every member
/// `send_unknown`), and the carrier's SUCCESS record of that SMS is in the delivery-status logs:
/// the members' keys and the SMS's message id.
async fn digest_with_lost_answer(
    p: &Pipeline,
    proxy: &FaultProxy,
    prefix: &str,
    number: &str,
) -> (Vec<IdempotencyKey>, String) {
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let keys = submit_many(p, prefix, number, 3).await;
    p.run_sender().await;
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::SendUnknown);
    }
    let (id, _) = only_sms_to(p, number).await;
    let claimed = p.record(&keys[0]).await.status.claimed_at.expect("claimed");
    let record = sns_delivery_record(&id, number, true, "Message has been accepted by phone carrier", claimed);
    p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &record).await;
    (keys, id)
}

/// Writes the message index entry of the digest `member` is in, for SNS message `id`: what the
/// sender writes first once SNS answers (the facts), here landed while every state write that
/// would follow was lost.
async fn index_the_digests_sms(p: &Pipeline, member: &IdempotencyKey, id: &str) {
    let digest_id = p.record(member).await.status.digest_id.expect("the digest");
    let digest = p.ledger.get_digest(&digest_id).await.expect("digest").expect("recorded");
    p.ledger.index_digest_message(id, &digest).await.expect("indexed");
}

/// Records, as the sender's write of SNS's answer would, that `member` was accepted as SMS `id`
/// (keeping the digest it names).
async fn record_acceptance(p: &Pipeline, member: &IdempotencyKey, id: &str) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    ddb.update_item()
        .table_name(p.stack.table("LedgerTable"))
        .key("pk", AttributeValue::S(format!("INTENT#{member}")))
        .key("sk", AttributeValue::S("INTENT".into()))
        .update_expression("SET #s = :s, sns_message_id = :m, accepted_at = :a REMOVE attempt_id, lease_until")
        .expression_attribute_names("#s", "state")
        .expression_attribute_values(":s", AttributeValue::S("accepted".into()))
        .expression_attribute_values(":m", AttributeValue::S(id.to_owned()))
        .expression_attribute_values(":a", AttributeValue::S(tocsin::adapters::ledger::ts(p.clock.now_utc())))
        .send()
        .await
        .expect("the member's acceptance");
}

/// Removes from each of `members` the digest it names: their writes naming it never landed.
async fn forget_digest(p: &Pipeline, members: &[IdempotencyKey]) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    for key in members {
        ddb.update_item()
            .table_name(p.stack.table("LedgerTable"))
            .key("pk", AttributeValue::S(format!("INTENT#{}", key.as_str())))
            .key("sk", AttributeValue::S("INTENT".into()))
            .update_expression("REMOVE digest_id")
            .send()
            .await
            .expect("digest_id removed");
    }
}

/// Takes digest `id` out of the list-index, as a list-index that has not caught up with it yet
/// (it lags: AWS promises no bound).
async fn unlist_digest(p: &Pipeline, id: &tocsin::domain::digest_id::DigestId) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    ddb.update_item()
        .table_name(p.stack.table("LedgerTable"))
        .key("pk", AttributeValue::S(format!("DIGEST#{id}")))
        .key("sk", AttributeValue::S("DIGEST".into()))
        .update_expression("REMOVE list_pk, list_sk")
        .send()
        .await
        .expect("the digest out of the list-index");
}

/// Moves the sweep's next look at each of `keys` `later` from now: only the others are due.
async fn check_later<'a>(p: &Pipeline, keys: impl IntoIterator<Item = &'a IdempotencyKey>, later: Duration) {
    let at = p.clock.now_utc() + later;
    for key in keys {
        p.ledger.set_next_check(key, tocsin::ports::NextCheck::At(at), None).await.expect("next check");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipients_alerts_claimed_together_go_out_as_one_digest_that_every_member_records() {
    let p = Pipeline::start_with(storm_on()).await;
    let (a, b) = ("+14155550301", "+14155550302");
    let keys = submit_many(&p, "digest", a, 4).await;
    let (_, alone) = p.submit(&alert("digest-other", b)).await;
    let alone = key_of(&alone);
    let responses = p.run_sender().await;
    assert!(responses.iter().all(|r| r.batch_item_failures.is_empty()));

    let (id, text) = only_sms_to(&p, a).await;
    assert!(text.starts_with("tocsin: 4 alerts."), "{text}");
    let first = p.record(&keys[0]).await;
    let digest_id = first.status.digest_id.clone().expect("the member names its digest");
    assert!(text.ends_with(&format!("(ref {})", digest_id.short())), "{text}");
    for key in &keys {
        let r = p.record(key).await;
        assert_eq!(r.status.state, State::Accepted);
        assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()), "every member has the digest's SMS");
        assert_eq!(r.status.digest_id.as_ref(), Some(&digest_id));
        assert_eq!(r.status.attempts, 1);
    }
    let stored = p.ledger.get_digest(&digest_id).await.expect("read").expect("the digest is recorded");
    assert_eq!(stored.members.len(), 4);
    assert_eq!(stored.members[0], keys[1], "earliest deadline first");
    assert_eq!(stored.recipient, PhoneNumber::parse(a).expect("valid"));

    // The other person's single alert is sent alone, as without storm mode.
    let (_, alone_text) = only_sms_to(&p, b).await;
    assert!(!alone_text.starts_with("tocsin:"), "{alone_text}");
    assert_eq!(p.record(&alone).await.status.digest_id, None);

    // A member's message delivered again sends nothing: never both in a digest and alone.
    p.enqueue_again(&keys[2]).await;
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_storm_mode_off_each_alert_is_its_own_sms() {
    let p = Pipeline::start_with(Options { env: vec![("TOCSIN_STORM_MODE", "off")], ..Default::default() }).await;
    let a = "+14155550303";
    let keys = submit_many(&p, "nodigest", a, 3).await;
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 3);
    assert!(sms.iter().all(|s| !s.message.starts_with("tocsin:")));
    for key in &keys {
        assert_eq!(p.record(key).await.status.digest_id, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digests_delivery_receipt_delivers_every_member_once_even_when_the_record_comes_twice() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550304";
    let keys = submit_many(&p, "receipt", a, 3).await;
    p.run_sender().await;
    let (id, _) = only_sms_to(&p, a).await;
    let delivered = sns_delivery_record(&id, a, true, "Message has been accepted by phone", p.clock.now_utc());
    let first = feed(&p, SUCCESS_GROUP, &[line("9601", delivered.clone())]).await;
    assert_eq!((first.events, first.delivered), (1, 1), "one record, counted once");
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::Delivered);
    }
    // The subscription delivers the same log event again.
    let again = feed(&p, SUCCESS_GROUP, &[line("9601", delivered)]).await;
    assert_eq!(again.duplicates, 1);
    for key in &keys {
        let receipts = p
            .timeline(key)
            .await
            .into_iter()
            .filter(|o| matches!(o.kind, ObservationKind::DeliveryStatus { .. }))
            .count();
        assert_eq!(receipts, 1, "one receipt observation per member");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digests_permanent_failure_fails_and_escalates_every_member_and_suppresses_the_number() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550305";
    let keys = submit_many(&p, "failure", a, 3).await;
    p.run_sender().await;
    let (id, _) = only_sms_to(&p, a).await;
    let failed = sns_delivery_record(&id, a, false, "Phone number is opted out", p.clock.now_utc());
    let s = feed(&p, FAILURE_GROUP, &[line("9701", failed)]).await;
    assert_eq!((s.failed, s.suppressed), (1, 1));
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::Failed);
    }
    let phone = PhoneNumber::parse(a).expect("valid");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_some(), "suppressed at once");
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 3, "every member is escalated");
    let escalated: Vec<String> = p.escalations().await.into_iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    for key in &keys {
        assert!(escalated.contains(&key.to_string()), "{key} escalated");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_whose_publish_times_out_leaves_every_member_unknown_and_is_never_resent() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_STORM_MODE", "on"), ("TOCSIN_PUBLISH_TIMEOUT", "1s")],
        ..Default::default()
    })
    .await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 7).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    proxy.add_rule(Rule::once("SNS.Publish", Fault::Delay(std::time::Duration::from_secs(3))));
    let a = "+14155550306";
    let keys = submit_many(&p, "unknown", a, 3).await;
    p.run_sender().await;
    for key in &keys {
        let r = p.record(key).await;
        assert_eq!((r.status.state, r.status.attempts), (State::SendUnknown, 1), "{key}");
        assert!(r.status.digest_id.is_some(), "the unknown outcome names its digest");
    }
    // SNS acted on it after the sender gave up: one SMS went out, and none follows.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    for key in &keys {
        p.enqueue_again(key).await;
    }
    p.make_send_queue_visible().await;
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1, "never re-sent after an unknown outcome");
    assert!(sms[0].message.starts_with("tocsin: 3 alerts."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_claimed_by_another_sender_at_the_same_moment_is_left_out_of_the_digest() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550307";
    let keys = submit_many(&p, "race", a, 3).await;
    // Another sender instance claims the second alert first.
    let now = p.clock.now_utc();
    let theirs = p.ledger.claim(&keys[1], "another-sender", now, now + Duration::minutes(2)).await.expect("claim");
    assert!(matches!(theirs, ClaimOutcome::Claimed(_)));
    p.run_sender().await;

    let (_, text) = only_sms_to(&p, a).await;
    assert!(text.starts_with("tocsin: 2 alerts."), "{text}");
    let digest_id = p.record(&keys[0]).await.status.digest_id.expect("in a digest");
    let stored = p.ledger.get_digest(&digest_id).await.expect("read").expect("recorded");
    assert_eq!(stored.members.len(), 2);
    assert!(!stored.members.contains(&keys[1]), "not ours to send");
    let other = p.record(&keys[1]).await;
    assert_eq!((other.status.state, other.status.attempt_id.as_deref()), (State::Sending, Some("another-sender")));
    assert_eq!(other.status.digest_id, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipients_backlog_spread_over_the_queue_is_pulled_into_the_same_digest() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550308";
    // More than one batch of ten: the sender's first batch holds ten, the index the rest.
    let keys = submit_many(&p, "backlog", a, 14).await;
    let responses = p.run_sender().await;
    assert!(responses.len() >= 2, "the queue was handed over in more than one batch");
    let (_, text) = only_sms_to(&p, a).await;
    assert!(text.starts_with("tocsin: 14 alerts."), "{text}");
    let digest_id = p.record(&keys[0]).await.status.digest_id.expect("in a digest");
    for key in &keys {
        let r = p.record(key).await;
        assert_eq!((r.status.state, r.status.digest_id.as_ref()), (State::Accepted, Some(&digest_id)), "{key}");
        assert_eq!(r.status.attempts, 1);
    }
    // The pulled alerts' own messages came later, found them sent and were acknowledged.
    assert!(responses.iter().all(|r| r.batch_item_failures.is_empty()));
    assert_eq!(p.queue_depth("SendQueue").await, 0);
}

/// Submits one alert to `number` due in `deadline` and runs the sender; its key.
async fn one_round(p: &Pipeline, event: &str, number: &str, deadline: &str) -> IdempotencyKey {
    let (status, body) = p.submit(&alert_due_in(event, number, deadline)).await;
    assert_eq!(status, 201, "{body}");
    p.run_sender().await;
    key_of(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipient_at_their_budget_gets_nothing_more_until_it_frees_unless_a_deadline_is_at_stake() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550309";
    // Three SMS within the window: the default budget (3 per 5 minutes).
    for i in 0..3 {
        one_round(&p, &format!("budget-{i}"), a, "15m").await;
        p.clock.advance(Duration::seconds(30));
    }
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 3);

    // A fourth with time to spare waits for the budget, unsent, its message hidden until then.
    let held = one_round(&p, "budget-held", a, "15m").await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 3, "held, not sent");
    let r = p.record(&held).await;
    assert_eq!((r.status.state, r.status.attempts), (State::Queued, 0));
    let reason = p
        .timeline(&held)
        .await
        .into_iter()
        .find_map(|o| match o.kind {
            ObservationKind::Deferred { reason, .. } => Some(reason),
            _ => None,
        })
        .expect("the hold is on the timeline");
    assert!(reason.contains("budget used up until"), "{reason}");
    assert_eq!(p.receive(&p.stack.queue("SendQueue").url, 10).await.len(), 0, "hidden until the budget frees");

    // Once the window has passed, the held alert goes out.
    p.clock.advance(Duration::minutes(5));
    p.make_send_queue_visible().await;
    p.run_sender().await;
    assert_eq!(p.record(&held).await.status.state, State::Accepted);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_an_alert_whose_deadline_cannot_wait_goes_out_at_once_in_one_digest_with_the_held_ones() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550311";
    for i in 0..3 {
        one_round(&p, &format!("over-{i}"), a, "15m").await;
        p.clock.advance(Duration::seconds(30));
    }
    let held = one_round(&p, "over-held", a, "15m").await;
    assert_eq!(p.record(&held).await.status.state, State::Queued);
    // Due in 2 minutes, before the budget frees (in 4): sent now, with the held alert.
    let urgent = one_round(&p, "over-urgent", a, "2m").await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 4);
    assert!(sms[3].message.starts_with("tocsin: 2 alerts."), "{}", sms[3].message);
    let (u, h) = (p.record(&urgent).await, p.record(&held).await);
    assert_eq!((u.status.state, h.status.state), (State::Accepted, State::Accepted));
    assert_eq!(u.status.digest_id, h.status.digest_id);
    let stored = p.ledger.get_digest(&u.status.digest_id.expect("digest")).await.expect("read").expect("recorded");
    assert_eq!(stored.members[0], urgent, "earliest deadline first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_senders_planning_an_sms_to_the_same_person_at_once_only_one_writes_the_send_log() {
    use tocsin::ports::SendBudget;
    let p = Pipeline::start_with(storm_on()).await;
    let phone = PhoneNumber::parse("+14155550310").expect("valid");
    let now = p.clock.now_utc();
    let read = p.ledger.send_log(&phone).await.expect("log");
    let until = now + Duration::minutes(5);
    assert!(p.ledger.record_send(&phone, &read, now, 3, until).await.expect("first"));
    assert!(!p.ledger.record_send(&phone, &read, now, 3, until).await.expect("second"), "the same read loses");
    let again = p.ledger.send_log(&phone).await.expect("log");
    assert_eq!(again.sent.len(), 1);
    assert!((again.sent[0] - now).num_milliseconds().abs() <= 1, "{:?} vs {now}", again.sent);
    assert!(p.ledger.record_send(&phone, &again, now + Duration::seconds(1), 3, until).await.expect("next"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_refused_for_the_accounts_spend_limit_escalates_every_member_and_never_suppresses_the_number() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550312";
    let keys = submit_many(&p, "spend", a, 3).await;
    p.run_sender().await;
    let (id, _) = only_sms_to(&p, a).await;
    let refused = sns_delivery_record(&id, a, false, "No quota left for account", p.clock.now_utc());
    let s = feed(&p, FAILURE_GROUP, &[line("9801", refused)]).await;
    assert_eq!((s.failed, s.suppressed, s.spend_exhausted), (1, 0, 1));
    let phone = PhoneNumber::parse(a).expect("valid");
    assert!(p.registry.suppression(&phone).await.expect("registry").is_none(), "the account's failure");
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::Failed);
    }
    assert_eq!(p.run_escalation().await.escalated, 3, "every member, at once");
    for (message, _) in p.escalations().await {
        assert!(message.reason.contains("SMS spend limit reached for the account"), "{}", message.reason);
    }
}

/// A digest whose publish answer was lost: its SMS went out, its record is in the logs, but no
/// member knows the message id SNS gave it, so nothing ties the record to the digest — it may be
/// another sender's SMS to the same phone. No member is settled on it; every member keeps it for
/// a human, and each is escalated at its own deadline: the digest's fate (unknown) is every
/// member's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_whose_answer_was_lost_is_never_settled_on_a_guess_and_every_member_is_escalated() {
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(storm_on()).await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let a = "+14155550313";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "lost", a).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (0, keys.len()), "{run:?}");
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::SendUnknown, "{key}");
    }
    assert_eq!(p.ledger.lookup(&id).await.expect("index"), None, "tied to no alert");
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    assert_eq!(p.escalations().await.len(), keys.len(), "every member reaches on-call");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

/// A digest's SMS accepted, the sender's facts written — the digest's message index entry — and
/// every member's state write lost: their leases lapse to `send_unknown`. The index ties the
/// record to every member, so the search settles them all together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_the_index_ties_to_its_sms_is_reconciled_for_every_member_together() {
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(storm_on()).await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 5).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let a = "+14155550313";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "indexed", a).await;
    index_the_digests_sms(&p, &keys[0], &id).await;
    let run = p.run_escalation().await;
    assert!(run.reconciled >= 1, "{run:?}");
    for key in &keys {
        let r = p.record(key).await;
        assert_eq!(r.status.state, State::Delivered, "{key}");
        assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()));
    }
    let entry = p.ledger.lookup(&id).await.expect("index").expect("linked");
    for key in &keys {
        assert!(entry.covers(key), "the digest's message id is indexed for every member");
    }
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
    assert!(p.escalations().await.is_empty(), "delivered, so nobody is paged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_budget_used_up_and_no_deadline_at_stake_the_backlog_is_not_claimed_only_to_be_handed_back() {
    use tocsin_harness::events::sqs_event;
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550314";
    for i in 0..3 {
        one_round(&p, &format!("spent-{i}"), a, "15m").await;
    }
    let mut keys = Vec::new();
    for i in 0..5 {
        let (status, body) = p.submit(&alert_due_in(&format!("waiting-{i}"), a, "15m")).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    // One sender invocation with one of them: the budget is used up and every deadline can wait.
    let q = p.stack.queue("SendQueue").clone();
    let first = p.receive(&q.url, 1).await;
    let resp = p.sender.handle(sqs_event(&q.arn, &first), p.clock.invocation_deadline()).await;
    assert_eq!(resp.batch_item_failures.len(), 1, "its own alert handed back");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 3);
    let deferred = |timeline: Vec<tocsin::domain::observation::Observation>| {
        timeline.iter().filter(|o| matches!(o.kind, ObservationKind::Deferred { .. })).count()
    };
    let mut handed_back = 0;
    for key in &keys {
        let r = p.record(key).await;
        assert!(matches!(r.status.state, State::Received | State::Queued), "{key}: {}", r.status.state);
        handed_back += deferred(p.timeline(key).await);
    }
    assert_eq!(handed_back, 1, "only the batch's own alert was claimed and handed back, not the backlog");
}

/// Found by the simulation (long mode, seed 10137 on the code of its day): the status function
/// recorded a digest's delivery record on the digest, its write to one member then failed on every
/// retry, and Lambda parked the batch. That member learnt its digest's fate only at its next check
/// — days away for a member already escalated. Every member still waiting is now brought forward
/// in the sweep's index before the fate is recorded, so the next sweep applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_member_the_status_fan_out_never_reached_learns_the_digests_fate_at_the_next_sweep() {
    let p = Pipeline::start_with(Options { fault_seed: Some(23), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550315";
    let keys = submit_many(&p, "unreached", a, 3).await;
    p.run_sender().await;
    let (id, _) = only_sms_to(&p, a).await;
    let unreached = keys[2].clone();
    // It waits with its next check days away, as a member escalated already does.
    check_later(&p, [&unreached], Duration::days(3)).await;
    // Its receipt write (and only that one) fails, on every attempt of every retry.
    proxy.add_rule(
        Rule::sometimes("DynamoDB_20120810.UpdateItem", Fault::dynamodb_throttled(), 1.0)
            .when_body_contains(unreached.as_str())
            .when_body_contains("\"delivered\""),
    );
    let delivered = sns_delivery_record(&id, a, true, "Message has been accepted by phone", p.clock.now_utc());
    let batch = logs_envelope(&logs_payload(SUCCESS_GROUP, "DATA_MESSAGE", &[line("9701", delivered)]));
    for attempt in 0..3 {
        assert!(p.status.handle(batch.clone()).await.is_err(), "attempt {attempt}: the batch fails (then is parked)");
    }
    assert!(proxy.injected() > 0, "the member's write was refused");
    for key in &keys[..2] {
        assert_eq!(p.record(key).await.status.state, State::Delivered);
    }
    assert_eq!(p.record(&unreached).await.status.state, State::Accepted, "the fan-out never reached it");
    proxy.clear_rules();
    // Long before its own next check (the delay line): the next sweep but one.
    p.clock.advance(Duration::minutes(3));
    p.run_escalation().await;
    let r = p.record(&unreached).await;
    assert_eq!(r.status.state, State::Delivered, "{:?}", r.status);
    assert!(p.escalations().await.is_empty(), "delivered, so nobody is paged");
}

/// Found by the simulation (long mode, SNS seed 150546): a digest's delivery record overtook the
/// sender's MessageId write and was kept as an orphan. The sweep applied it to each member at that
/// member's own next check — but two members, escalated already and suspected late, had theirs
/// days away, long after the orphan is forgotten: they never learned their SMS arrived. The first
/// member the orphan reaches now spreads it to the whole digest, as the status function does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digests_record_kept_as_an_orphan_reaches_every_member_at_the_next_sweep() {
    let p = Pipeline::start_with(storm_on()).await;
    let a = "+14155550322";
    let keys = submit_many(&p, "orphaned", a, 3).await;
    p.run_sender().await;
    let (id, _) = only_sms_to(&p, a).await;
    // The record is read before the sender's MessageId write lands: its index item is away.
    let index_item = p.take_message_index(&id).await;
    let delivered = sns_delivery_record(&id, a, true, "Message has been accepted by phone", p.clock.now_utc());
    let s = feed(&p, SUCCESS_GROUP, &[line("9801", delivered)]).await;
    assert_eq!((s.orphaned, s.delivered), (1, 0), "{s:?}");
    p.put_back(index_item).await;
    // Two members wait with their next check days away, as members escalated already do.
    check_later(&p, &keys[..2], Duration::days(3)).await;

    // The third member's first check (no receipt after 10 minutes): the orphan is applied to it.
    p.clock.advance(Duration::minutes(11));
    p.run_escalation().await;
    assert_eq!(p.record(&keys[2]).await.status.state, State::Delivered);
    // The next run: its siblings too, days before their own checks, and nobody is paged.
    p.clock.advance(Duration::minutes(1));
    p.run_escalation().await;
    for key in &keys {
        let r = p.record(key).await;
        assert_eq!(r.status.state, State::Delivered, "{:?}", r.status);
    }
    assert!(p.escalations().await.is_empty(), "delivered, so nobody is paged");
}

/// Found by the simulation (long mode, seed 10658 on the code of its day): the sweep's log search
/// for a digest member whose state write was lost found the digest's record, but the search's
/// time limit bounded the writes after it too. One slow write and the run moved on with one member
/// delivered and its siblings `send_unknown` until their next search, long after. Only the search
/// is bounded now: what it found is applied to every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_reconciled_from_the_logs_settles_every_member_even_when_a_write_is_slow() {
    let p = Pipeline::start_with(Options { fault_seed: Some(29), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550316";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "slow-settle", a).await;
    index_the_digests_sms(&p, &keys[0], &id).await;
    // Only the first member is due for its search in this run; its siblings' next checks are
    // later (as in the simulation's run), so nothing but its own fan-out settles them now.
    check_later(&p, &keys[1..], Duration::hours(1)).await;
    // The first member's receipt write takes longer than the search's time limit (5 s).
    proxy.add_rule(
        Rule::once("DynamoDB_20120810.UpdateItem", Fault::Delay(std::time::Duration::from_secs(6)))
            .when_body_contains("\"delivered\""),
    );
    let run = p.run_escalation().await;
    assert!(run.reconciled >= 1, "{run:?}");
    let slowed: Vec<_> = proxy.faults().iter().map(|f| (f.operation.clone(), f.what.clone())).collect();
    assert_eq!(slowed.len(), 2, "the lost answer and the slow write: {slowed:?}");
    for key in &keys {
        let r = p.record(key).await;
        assert_eq!(r.status.state, State::Delivered, "{key}: {:?}", r.status);
    }
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

/// An SMS the message index ties to one member of a digest alone is that member's, not the
/// digest's: the member may have been sent alone since (an operator's resend), its digest id
/// still naming the digest. Found by the simulation with other senders' SMS in the world (seed
/// 10137): a sibling settled on such an SMS was called delivered by an SMS that never carried it.
/// Its siblings keep the record out of their candidates and stay unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sms_indexed_to_one_digest_member_alone_never_settles_its_siblings() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(Options { fault_seed: Some(31), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550317";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "indexed-alone", a).await;
    // The message id tied to the first member only.
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let now = p.clock.now_utc();
    ddb.put_item()
        .table_name(p.stack.table("LedgerTable"))
        .item("pk", AttributeValue::S(format!("MSG#{id}")))
        .item("sk", AttributeValue::S("MSG".into()))
        .item("key", AttributeValue::S(keys[0].as_str().to_owned()))
        .item("recipient", AttributeValue::S(a.into()))
        .item("at", AttributeValue::S(now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)))
        .item("expires_at", AttributeValue::N((now + Duration::days(30)).timestamp().to_string()))
        .send()
        .await
        .expect("index the message to one member");
    assert!(!p.ledger.lookup(&id).await.expect("index").expect("entry").covers(&keys[1]));
    // Only the second member is searched for in this run.
    check_later(&p, [&keys[0], &keys[2]], Duration::hours(1)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed, run.still_unknown), (0, 0, 1), "{run:?}");
    assert_eq!(p.record(&keys[1]).await.status.state, State::SendUnknown);
    let entry = p.ledger.lookup(&id).await.expect("index").expect("entry");
    assert!(!entry.covers(&keys[1]), "never re-indexed for the digest");
}

/// Found by the simulation (long mode, seed 50776): a digest's answer was lost for all but one
/// member, whose write recorded SNS's acceptance. The sweep reconciled another member from the
/// logs and applied the record to every member — but the accepted member's write failed. It
/// waits for a receipt, so no search of its own ever comes, and its next check was days away: it
/// stayed `accepted` while its siblings were delivered. Reconciliation now records the digest's
/// fate on the digest first, and brings every waiting member forward, as the status function
/// does: the next sweep applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_member_a_reconciled_fan_out_did_not_reach_learns_the_fate_at_the_next_sweep() {
    let p = Pipeline::start_with(Options { fault_seed: Some(37), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550318";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "fan-out-missed", a).await;
    // The sender's facts landed (the digest's message index entry, written first), and so did the
    // third member's own write of SNS's answer: accepted, its next check days away.
    record_acceptance(&p, &keys[2], &id).await;
    index_the_digests_sms(&p, &keys[0], &id).await;
    check_later(&p, &keys[1..], Duration::days(3)).await;
    // The fan-out's write to the accepted member fails (its receipt, to delivered).
    // (Throttled past the SDK's retries.)
    proxy.add_rule(
        Rule::times("DynamoDB_20120810.UpdateItem", Fault::dynamodb_throttled(), 10)
            .when_body_contains(keys[2].as_str())
            .when_body_contains("delivered"),
    );
    let run = p.run_escalation().await;
    assert_eq!(run.errors, 1, "the member's write failed: {run:?}");
    proxy.clear_rules();
    assert_eq!(p.record(&keys[0]).await.status.state, State::Delivered);
    assert_eq!(p.record(&keys[2]).await.status.state, State::Accepted, "not reached");

    p.clock.advance(Duration::minutes(2));
    p.run_escalation().await;
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::Delivered, "{key}");
    }
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

/// Found by the simulation (long mode, seed 101905): a digest's publish answer was lost and so
/// were the members' own writes of which digest they were in. A sibling's reconciliation linked
/// the SMS and indexed it for the whole digest; a member it did not reach searched on its own and
/// found the same SMS — but its siblings, `send_unknown` and naming no digest, looked like other
/// alerts that might own it, and it was left to a human while its siblings were delivered. An SMS
/// the index already ties to the intent (its digest's entry names it) is its own: no rival counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_sms_the_index_already_ties_to_it_is_settled_whatever_its_siblings_say() {
    use tocsin::ports::{DigestStore, MessageIndex};
    let p = Pipeline::start_with(Options { fault_seed: Some(32), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550318";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "indexed-digest", a).await;
    let digest_id = p.record(&keys[0]).await.status.digest_id.expect("the digest");
    let digest = p.ledger.get_digest(&digest_id).await.expect("digest").expect("recorded");
    // The members' writes naming their digest never landed.
    forget_digest(&p, &keys).await;
    // A sibling's reconciliation indexed the SMS for the whole digest.
    p.ledger.index_digest_message(&id, &digest).await.expect("indexed");
    let entry = p.ledger.lookup(&id).await.expect("index").expect("entry");
    assert!(keys.iter().all(|k| entry.covers(k)));
    check_later(&p, &keys[1..], Duration::hours(1)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (1, 0), "{run:?}");
    assert_eq!(p.record(&keys[0]).await.status.state, State::Delivered);
}

/// Found by the simulation with Lambda throttling in the world (SNS seed 1411): the sender's write
/// of the digest's message index gave up at its deadline, one member's own write of SNS's answer
/// landed (accepted, the SMS's message id, its digest) and the function ended before the others'.
/// A member that never learnt which digest it was in searched the logs: its sibling knew the SMS,
/// but only a message id *indexed* as the digest's counted, so the delivery record looked like
/// another sender's and the member was escalated as unknown while its sibling was delivered. A
/// message id nothing indexes is the digest's when the sibling that recorded it was not claimed
/// again after the digest was made (a resend would have been).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_settled_from_its_siblings_record_of_the_sms_even_when_the_message_id_was_never_indexed() {
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(Options { fault_seed: Some(33), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550319";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "never-indexed", a).await;
    // The first member's write of SNS's answer landed: accepted, with the SMS's message id.
    record_acceptance(&p, &keys[0], &id).await;
    // The others' writes, naming their digest, never did.
    forget_digest(&p, &keys[1..]).await;
    assert!(p.ledger.lookup(&id).await.expect("index").is_none(), "the message id was never indexed");
    // Only the second member is searched for in this run.
    check_later(&p, [&keys[0], &keys[2]], Duration::hours(1)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (1, 0), "{run:?}");
    let r = p.record(&keys[1]).await;
    assert_eq!(r.status.state, State::Delivered, "settled from the record of its digest's SMS");
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()));
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

/// Found by the simulator's long mode (SNS seed 127064 at 330 alerts, storm to many, a fault that
/// kept failing every member's state write): the sender's index entry of the digest's SMS landed,
/// no member's write naming the digest did, and the list-index (which lags) did not show the
/// recipient's digest yet. The first member searched found its record through the index, but,
/// knowing no digest, settled itself alone — and tied the SMS to itself alone, so its siblings'
/// searches found a record "of another alert" and were escalated as unknown. An SMS the index
/// names as a digest's is that digest's: its records reach every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_sms_the_index_names_as_its_digests_settles_every_member_though_the_digest_is_not_listed_yet() {
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(Options { fault_seed: Some(34), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550320";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "unlisted-digest", a).await;
    let digest_id = p.record(&keys[0]).await.status.digest_id.expect("the digest");
    // The sender's index entry of the digest's SMS landed; no member's write naming it did.
    index_the_digests_sms(&p, &keys[0], &id).await;
    forget_digest(&p, &keys).await;
    // The list-index has not caught up with the digest yet (it lags: AWS promises no bound).
    unlist_digest(&p, &digest_id).await;
    // Only the first member is searched for in this run.
    check_later(&p, &keys[1..], Duration::hours(1)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (1, 0), "{run:?}");
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::Delivered, "every member: {key}");
    }
    let entry = p.ledger.lookup(&id).await.expect("index").expect("entry");
    assert!(keys.iter().all(|k| entry.covers(k)), "the SMS stays the whole digest's");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never a second SMS");
}

/// Records digest `members` to `number` made at `created_at`, never sent: what a sender leaves
/// behind when its write of the digest landed with its answer lost — it hands its claims back
/// unsent, and the members are claimed again a moment later, by another sender, into another
/// digest.
async fn unsent_digest(
    p: &Pipeline,
    number: &str,
    members: &[&IdempotencyKey],
    created_at: chrono::DateTime<chrono::Utc>,
) {
    use tocsin::domain::digest_id::DigestId;
    use tocsin::ports::DigestRecord;
    let d = DigestRecord {
        id: DigestId::derive(members.iter().copied()),
        recipient: PhoneNumber::parse(number).expect("number"),
        members: members.iter().map(|k| (*k).clone()).collect(),
        segments: 1,
        created_at,
        expires_at: created_at + Duration::days(30),
        outcome: None,
    };
    p.ledger.put_digest(&d).await.expect("the unsent digest recorded");
}

/// Found by the simulator's long mode (SNS seed 189177 at 330 alerts, storm to one phone): a
/// sender's write of a digest landed with its answer lost, so it handed its claims back unsent;
/// a moment later another sender claimed some of those alerts into a digest of its own, sent it,
/// indexed its SMS and ended before recording it on any member. Searching for a member, the sweep
/// took the digest listed by the recipient and time — the unsent one — over the one the SMS's
/// index entry names, re-indexed the SMS to it, and called its members delivered: seven alerts
/// that SMS never carried. The index ties an SMS to its digest by key; a digest listed by time is
/// a guess it overrides. Here the unsent digest is listed as made at the member's claim (another
/// sender's clock a few milliseconds ahead: by time, it cannot be told from the member's own) and
/// the sent one is not listed yet (the list-index lags).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_listed_by_time_never_takes_an_sms_its_index_entry_gives_to_another_digest() {
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(Options { fault_seed: Some(36), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550322";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "index-over-listing", a).await;
    let sent_digest = p.record(&keys[0]).await.status.digest_id.expect("the digest");
    // Another alert to the same phone, sent alone, its answer lost too.
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let (status, body) = p.submit(&alert_due_in("index-over-listing-other", a, "15m")).await;
    assert_eq!(status, 201, "{body}");
    let other = key_of(&body);
    p.run_sender().await;
    assert_eq!(p.record(&other).await.status.state, State::SendUnknown);
    // The sender indexed the digest's SMS; no member's write naming it landed; the list-index
    // has not caught up with it.
    index_the_digests_sms(&p, &keys[0], &id).await;
    forget_digest(&p, &keys).await;
    unlist_digest(&p, &sent_digest).await;
    // The unsent digest of the first member and the other alert, listed at the member's claim.
    let claimed = p.record(&keys[0]).await.status.claimed_at.expect("claimed");
    unsent_digest(&p, a, &[&keys[0], &other], claimed + Duration::milliseconds(3)).await;
    // Only the first member is searched for in this run.
    check_later(&p, [&keys[1], &keys[2], &other], Duration::hours(1)).await;
    let run = p.run_escalation().await;
    let r = p.record(&other).await;
    assert_eq!(r.status.state, State::SendUnknown, "that SMS never carried it: {:?}", r.status);
    assert_eq!((run.reconciled, run.unattributed), (1, 0), "{run:?}");
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::Delivered, "its digest's SMS: {key}");
    }
    let entry = p.ledger.lookup(&id).await.expect("index").expect("entry");
    assert!(keys.iter().all(|k| entry.covers(k)) && !entry.covers(&other), "the SMS stays its digest's: {entry:?}");
}

/// The same race, with the unsent digest listed as made just before the member's claim (the
/// clocks agree) and the sent one listed too, at the claim: the member never recorded its digest,
/// and the digest its current attempt made is the latest holding it made at or after the claim —
/// not the first the listing shows (which left the member `send_unknown` though its sibling had
/// recorded the SMS, and, with the message id indexed, settled the unsent digest's members).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_never_recorded_its_digest_is_settled_with_the_digest_its_current_attempt_made() {
    use tocsin::ports::MessageIndex;
    let p = Pipeline::start_with(Options { fault_seed: Some(37), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550323";
    let (keys, id) = digest_with_lost_answer(&p, &proxy, "current-digest", a).await;
    // The first member's write of SNS's answer landed; the others' never did.
    record_acceptance(&p, &keys[0], &id).await;
    forget_digest(&p, &keys[1..]).await;
    assert!(p.ledger.lookup(&id).await.expect("index").is_none(), "the message id was never indexed");
    // An earlier attempt's unsent digest of the second and third members, made 100 ms before
    // their claim: within the search window, which opens a moment before the claim.
    let claimed = p.record(&keys[1]).await.status.claimed_at.expect("claimed");
    unsent_digest(&p, a, &[&keys[1], &keys[2]], claimed - Duration::milliseconds(100)).await;
    // Only the second member is searched for in this run.
    check_later(&p, [&keys[0], &keys[2]], Duration::hours(1)).await;
    let run = p.run_escalation().await;
    assert_eq!((run.reconciled, run.unattributed), (1, 0), "{run:?}");
    let r = p.record(&keys[1]).await;
    assert_eq!(r.status.state, State::Delivered, "settled from its sibling's record of the SMS: {:?}", r.status);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()));
}

/// Found by the simulator's long mode (SNS seed 128945 at 330 alerts, storm to one): a digest of
/// fifteen went out with its answer lost; an operator resent one member, and the resend's SMS —
/// indexed to that member alone — was delivered while a sweep that had read the member before the
/// resend was searching for its unknown outcome. The search found the resend's SMS tied to the
/// member and, the member still naming its digest, applied it to all fifteen: fourteen alerts that
/// SMS never carried were called delivered. An SMS tied to a member alone settles that member
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_resend_found_by_a_search_that_read_it_before_the_resend_never_settles_its_siblings() {
    use tocsin::services::operator::{ResendRequest, operator_attempt_id, resend};
    let p = Pipeline::start_with(Options { fault_seed: Some(35), ..storm_on() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let a = "+14155550321";
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    let keys = submit_many(&p, "resent-member", a, 3).await;
    p.run_sender().await;
    for key in &keys {
        assert_eq!(p.record(key).await.status.state, State::SendUnknown);
    }
    // Only the first member is searched for in the next run; the log search is slow.
    p.clock.advance(Duration::minutes(2));
    check_later(&p, &keys[1..], Duration::hours(1)).await;
    proxy.add_rule(Rule::once("Logs_20140328.FilterLogEvents", Fault::Delay(std::time::Duration::from_secs(4))));
    let operator = async {
        // Once the run's search is held up (it read the member before), an operator resends the
        // first member; its SMS is delivered.
        let searching = || proxy.faults().iter().any(|f| f.operation.ends_with("FilterLogEvents"));
        for _ in 0..1000 {
            if searching() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(searching(), "the run searched the logs");
        let attempt = operator_attempt_id("resent-member");
        let req = ResendRequest {
            key: &keys[0],
            operator: "arn:aws:iam::123456789012:user/on-call",
            reason: "called: not received",
            attempt_id: &attempt,
            lease: std::time::Duration::from_secs(120),
            defaults: &Default::default(),
            stack: tocsin_tests::tocsin_harness::iam::LOCAL_STACK,
        };
        let resent = Box::pin(resend(&p.ledger, &p.registry, &p.sender.gateway, &p.clock, req)).await.expect("resent");
        assert!(resent.recorded.is_ok(), "{resent:?}");
        let sms = p.emulator.sent_sms().await.expect("sms");
        let record = sns_delivery_record(
            &sms[1].message_id,
            a,
            true,
            "Message has been accepted by phone carrier",
            p.clock.now_utc(),
        );
        p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &record).await;
    };
    let (run, ()) = tokio::join!(p.run_escalation(), operator);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 2, "the digest and the resend: {run:?}");
    for key in &keys[1..] {
        let r = p.record(key).await;
        assert_eq!(r.status.state, State::SendUnknown, "the resend never carried {key}: {run:?}");
    }
}
