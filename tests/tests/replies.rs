//! Acknowledgement by reply (issue 37), on the emulator through End User Messaging's stand-in:
//! with `Replies=on` every SMS shows its reply code, a digest one code for all it carries, and a
//! code is marked sent once the provider accepted its SMS. A person's reply goes the way AWS sends
//! it — the stand-in publishes it to the number's two-way channel (the stack's replies topic in
//! moto), SNS delivers it to the replies queue, the replies function reads it with its own role.

use tocsin::domain::acknowledgement::AckVia;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::reply::AckSubject;
use tocsin::domain::storm::DigestId;
use tocsin::domain::{IdempotencyKey, PhoneNumber};
use tocsin::ports::{Clock, RecipientRegistry, ReplyCodes};
use tocsin_tests::{Options, Pipeline, alert, key_of};

fn replies_on() -> Options {
    let mut o = Options::end_user_messaging();
    o.parameters.push(("Replies", "on"));
    o.env.push(("TOCSIN_STORM_MODE", "off"));
    o
}

fn phone(n: &str) -> PhoneNumber {
    PhoneNumber::parse(n).expect("number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sms_shows_its_own_reply_code_and_the_code_is_marked_sent_once_accepted() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550301";
    let mut keys = Vec::new();
    for id in ["reply-a", "reply-b"] {
        let (status, body) = p.submit(&alert(id, to)).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    assert_eq!(held.len(), 2, "{held:?}");
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    assert_eq!(texts.len(), 2);
    for key in &keys {
        let code = held.iter().find(|h| h.subject == AckSubject::Alert(key.clone())).expect("a code per alert");
        assert!(code.sent_at.is_some(), "marked sent: {code:?}");
        let text = texts
            .iter()
            .find(|t| t.context.as_ref().and_then(|c| c.get("tocsin-key")) == Some(&key.to_string()))
            .expect("its SMS");
        assert!(text.body.ends_with(&format!(" - Reply {} to ack", code.code)), "{:?}", text.body);
        assert_eq!(text.encoding, "GSM", "the prompt keeps the SMS in GSM-7");
    }
    let mut codes: Vec<u16> = held.iter().map(|h| h.code.get()).collect();
    codes.sort_unstable();
    assert_eq!(codes, vec![1, 2], "two open alerts on one phone: two codes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_shows_one_code_for_everything_it_carries() {
    let mut o = replies_on();
    o.env.retain(|(k, _)| *k != "TOCSIN_STORM_MODE");
    o.env.push(("TOCSIN_STORM_MODE", "on"));
    let p = Pipeline::start_with(o).await;
    let to = "+14155550302";
    let mut keys = Vec::new();
    for i in 0..3 {
        let (status, body) = p.submit(&alert(&format!("reply-storm-{i}"), to)).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    assert_eq!(texts.len(), 1, "one digest");
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].subject, AckSubject::Digest(DigestId::derive(keys.iter())));
    assert!(held[0].sent_at.is_some());
    assert!(texts[0].body.ends_with(&format!(" - Reply {} to ack all 3", held[0].code)), "{:?}", texts[0].body);
    assert_eq!(texts[0].parts, 1, "the digest left room for its prompt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replies_no_code_is_given_and_the_sms_is_the_template_text() {
    let mut o = Options::end_user_messaging();
    o.env.push(("TOCSIN_STORM_MODE", "off"));
    let p = Pipeline::start_with(o).await;
    let to = "+14155550303";
    let (status, body) = p.submit(&alert("reply-off", to)).await;
    assert_eq!(status, 201, "{body}");
    p.run_sender().await;
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    assert!(!texts[0].body.contains("Reply"), "{:?}", texts[0].body);
    assert!(p.inspect.held_codes(&phone(to)).await.expect("codes").is_empty());
}

// ---------------------------------------------------------------------------------------------
// Replies in: the two-way topic -> the replies queue -> the replies function.
// ---------------------------------------------------------------------------------------------

async fn two_alerts(p: &Pipeline, to: &str, tag: &str) -> (IdempotencyKey, IdempotencyKey) {
    let mut keys = Vec::new();
    for i in 0..2 {
        let (status, body) = p.submit(&alert(&format!("{tag}-{i}"), to)).await;
        assert_eq!(status, 201, "{body}");
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    (keys[0].clone(), keys[1].clone())
}

async fn code_of(p: &Pipeline, to: &str, key: &IdempotencyKey) -> u16 {
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    held.iter().find(|h| h.subject == AckSubject::Alert(key.clone())).expect("a code").code.get()
}

fn acks(timeline: &[Observation]) -> Vec<(String, AckVia)> {
    timeline
        .iter()
        .filter_map(|o| match &o.kind {
            ObservationKind::Acknowledged { by, via } => Some((by.clone(), *via)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_acknowledges_by_replying_the_code_and_only_that_alert_is_spared_escalation() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550304";
    let (first, second) = two_alerts(&p, to, "reply-ack").await;
    let code = code_of(&p, to, &second).await;
    p.person_replies(to, &format!("ack {code}")).await;
    let outcomes = p.reply_outcomes().await;
    assert_eq!(outcomes, vec![replies::Outcome::Acknowledged { alerts: 1 }]);

    let acked = p.record(&second).await.status.acknowledgement.expect("acknowledged");
    assert_eq!((acked.by.as_str(), acked.via), ("+1******0304", AckVia::Reply), "by the phone, masked; by reply");
    assert!(p.record(&first).await.status.acknowledgement.is_none(), "the other alert is not");
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    let closed: Vec<bool> = [&first, &second]
        .iter()
        .map(|k| held.iter().any(|h| h.subject == AckSubject::Alert((*k).clone()) && h.closed_at.is_some()))
        .collect();
    assert_eq!(closed, vec![false, true], "only the acknowledged alert's code closed");

    p.clock.advance(chrono::Duration::minutes(16));
    p.run_escalation().await;
    let paged: Vec<String> = p.escalations().await.into_iter().map(|(m, _)| m.idempotency_key).collect();
    assert_eq!(paged, vec![first.to_string()], "the acknowledged alert is not escalated; the other is");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_delivered_twice_acknowledges_once() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550305";
    let (_, second) = two_alerts(&p, to, "reply-twice").await;
    let code = code_of(&p, to, &second).await;
    let origination = p.origination.as_ref().expect("a number").number.clone();
    p.emulator.eum().reply(to, &origination, &code.to_string(), 2).await.expect("reply").expect("published");
    let mut outcomes = p.reply_outcomes().await;
    outcomes.sort_by_key(|o| o.name());
    // The copy arrived when the first did (SNS's timestamp), before the code closed: it reaches the
    // alert, which recognises the reply.
    assert_eq!(outcomes, vec![replies::Outcome::Acknowledged { alerts: 1 }, replies::Outcome::AlreadyAcknowledged]);
    assert_eq!(acks(&p.timeline(&second).await).len(), 1, "one acknowledgement in the timeline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_ack_reaches_the_latest_alert_known_delivered_and_ack_all_the_rest() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550306";
    let (first, _) = two_alerts(&p, to, "reply-latest").await;
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    let latest = held.iter().max_by_key(|h| (h.sent_at, h.given_at, h.code)).expect("held").subject.clone();
    // Sent, but no delivery receipt read yet: which alert the person read is not guessed.
    p.person_replies(to, "ack").await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::AskedForCode]);
    let mut codes: Vec<u16> = held.iter().map(|h| h.code.get()).collect();
    codes.sort_unstable();
    let asked = confirmations_to(&p, to).await.pop().expect("an answer").body;
    assert_eq!(asked, format!("[tocsin] Which alert? Reply the code it shows: {}, {}", codes[0], codes[1]));
    assert!(p.record(&first).await.status.acknowledgement.is_none(), "nothing acknowledged");
    // The receipts say both reached the phone; a person reads and answers — tocsin counts an SMS
    // delivered in the seconds before a reply arrived as not the one answered (`READ_AND_REPLY`):
    // the receipts' times are the stand-in's real ones, so the test waits that long for real.
    p.run_status().await;
    p.person_replies(to, "ack").await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::AskedForCode], "delivered a moment ago: not yet");
    let read = tocsin::domain::reply::code::READ_AND_REPLY.to_std().expect("positive");
    tokio::time::sleep(read + std::time::Duration::from_secs(1)).await;
    p.person_replies(to, "OK").await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::Acknowledged { alerts: 1 }]);
    let AckSubject::Alert(latest) = latest else { panic!("an alert's code") };
    assert!(p.record(&latest).await.status.acknowledgement.is_some(), "the latest sent is acknowledged");
    let other = if latest == first { two_alerts_other(&p, to, &latest).await } else { first };
    assert!(p.record(&other).await.status.acknowledgement.is_none());
    p.person_replies(to, "ack all").await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::Acknowledged { alerts: 1 }]);
    assert!(p.record(&other).await.status.acknowledgement.is_some(), "ack all reaches the rest");
    p.person_replies(to, "ack").await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::NothingOpen], "nothing left open");
}

/// The alert of `to` that is not `not`.
async fn two_alerts_other(p: &Pipeline, to: &str, not: &IdempotencyKey) -> IdempotencyKey {
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    held.iter()
        .find_map(|h| match &h.subject {
            AckSubject::Alert(k) if k != not => Some(k.clone()),
            _ => None,
        })
        .expect("another alert")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digests_code_acknowledges_every_member() {
    let mut o = replies_on();
    o.env.retain(|(k, _)| *k != "TOCSIN_STORM_MODE");
    o.env.push(("TOCSIN_STORM_MODE", "on"));
    let p = Pipeline::start_with(o).await;
    let to = "+14155550307";
    let mut keys = Vec::new();
    for i in 0..3 {
        let (_, body) = p.submit(&alert(&format!("reply-digest-{i}"), to)).await;
        keys.push(key_of(&body));
    }
    p.run_sender().await;
    let held = p.inspect.held_codes(&phone(to)).await.expect("codes");
    p.person_replies(to, &format!("{}a", held[0].code)).await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::Acknowledged { alerts: 3 }]);
    for k in &keys {
        assert_eq!(acks(&p.timeline(k).await), vec![("+1******0307".to_owned(), AckVia::Reply)], "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_suppresses_the_number_pages_on_call_and_acknowledges_nothing() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550308";
    let (first, second) = two_alerts(&p, to, "reply-stop").await;
    p.person_replies(to, "STOP 1").await;
    let responses = p.run_replies().await;
    assert!(responses.iter().all(|r| r.batch_item_failures.is_empty()), "{responses:?}");
    let suppressed = p.registry.suppression(&phone(to)).await.expect("registry").expect("suppressed at once");
    assert_eq!(suppressed.reason, replies::OPTED_OUT_BY_REPLY);
    for k in [&first, &second] {
        assert!(p.record(k).await.status.acknowledgement.is_none(), "STOP acknowledges nothing");
    }
    let paged: f64 = tocsin_tests::emitted_metrics()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|d| d["function"] == "replies")
        .filter_map(|d| d["recipient_opted_out"].as_f64())
        .sum();
    assert!(paged >= 1.0, "the metric the RecipientOptedOutAlarm pages on");
    // End User Messaging opted the number out too (the toll-free carrier's STOP).
    let (status, body) = p.submit(&alert("reply-stop-after", to)).await;
    assert_eq!(status, 201, "{body}");
    let before = p.emulator.eum().sent_texts().await.expect("texts").len();
    p.run_sender().await;
    assert_eq!(p.emulator.eum().sent_texts().await.expect("texts").len(), before, "no SMS to a number that said STOP");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_from_a_number_tocsin_never_texted_changes_nothing() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550309";
    let (first, second) = two_alerts(&p, to, "reply-stranger").await;
    let stranger = "+14155550399";
    p.person_replies(stranger, "1").await;
    p.person_replies(stranger, "ack all").await;
    p.person_replies(stranger, "STOP").await;
    let mut outcomes = p.reply_outcomes().await;
    outcomes.sort_by_key(|o| o.name());
    assert_eq!(
        outcomes,
        vec![
            replies::Outcome::NotARecipient,
            replies::Outcome::NotARecipient,
            replies::Outcome::OptedOut { paged: false }
        ]
    );
    for k in [&first, &second] {
        assert!(p.record(k).await.status.acknowledgement.is_none());
    }
    assert!(p.registry.suppression(&phone(to)).await.expect("registry").is_none(), "the recipient is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_is_not_a_reply_fails_alone_and_the_good_one_beside_it_is_handled() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550310";
    let (_, second) = two_alerts(&p, to, "reply-bad").await;
    let code = code_of(&p, to, &second).await;
    let q = p.stack.queue("RepliesQueue").url.clone();
    p.sqs.send_message().queue_url(&q).message_body("{\"not\":\"a reply\"}").send().await.expect("send");
    p.person_replies(to, &code.to_string()).await;
    let responses = p.run_replies().await;
    let failures: usize = responses.iter().map(|r| r.batch_item_failures.len()).sum();
    assert_eq!(failures, 1, "the bad record alone is reported (it reaches the dead-letter queue)");
    assert!(p.record(&second).await.status.acknowledgement.is_some(), "the good reply in the batch is handled");
}

// ---------------------------------------------------------------------------------------------
// The confirmation SMS: once per reply, from the number texted, rate-limited, never to a stranger.
// ---------------------------------------------------------------------------------------------

/// The confirmations sent to `to` so far (SMS whose context names a reply).
async fn confirmations_to(p: &Pipeline, to: &str) -> Vec<tocsin_harness::eum::SentText> {
    p.emulator
        .eum()
        .sent_texts()
        .await
        .expect("texts")
        .into_iter()
        .filter(|t| t.destination == to && t.context.as_ref().is_some_and(|c| c.contains_key("tocsin-reply")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_is_answered_once_from_the_number_they_texted_even_when_the_reply_comes_twice() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550311";
    let (_, second) = two_alerts(&p, to, "reply-confirm").await;
    let code = code_of(&p, to, &second).await;
    let origination = p.origination.as_ref().expect("a number").number.clone();
    let inbound =
        p.emulator.eum().reply(to, &origination, &code.to_string(), 2).await.expect("reply").expect("published");
    let handled = p.replies_handled().await;
    let mut confirmed: Vec<&str> = handled.iter().filter_map(|h| h.confirmed.map(|c| c.name())).collect();
    confirmed.sort_unstable();
    assert_eq!(confirmed, vec!["confirmation_duplicate", "confirmation_sent"], "{handled:?}");
    let sent = confirmations_to(&p, to).await;
    assert_eq!(sent.len(), 1, "one confirmation for one reply");
    let c = &sent[0];
    assert_eq!(c.body, "[tocsin] Acked: disk_full - you have it");
    assert_eq!(c.origination, origination, "from the number the person texted");
    assert_eq!(c.context.as_ref().and_then(|m| m.get("tocsin-reply")), Some(&inbound));
    assert_eq!((c.parts, c.encoding.as_str()), (1, "GSM"));

    // Its delivery events name the reply, not an alert: counted, applied to nothing.
    let summaries = p.run_status().await;
    let confirmations: usize = summaries.iter().map(|s| s.confirmations).sum();
    assert!(confirmations >= 1, "{summaries:?}");
    assert!(p.record(&second).await.status.acknowledgement.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_an_alert_someone_else_acknowledged_is_told_who() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550312";
    let (_, second) = two_alerts(&p, to, "reply-who").await;
    let now = p.clock.now();
    tocsin::services::acknowledging::acknowledge_alert(&p.ledger, &second, "dana", AckVia::Operator, "req-1", now)
        .await
        .expect("ack");
    let code = code_of(&p, to, &second).await;
    p.person_replies(to, &code.to_string()).await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::AlreadyAcknowledged]);
    let sent = confirmations_to(&p, to).await;
    assert_eq!(sent.len(), 1);
    assert!(sent[0].body.starts_with("[tocsin] Already acked by dana at "), "{:?}", sent[0].body);
    assert!(sent[0].body.ends_with(" UTC: disk_full"), "{:?}", sent[0].body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_loop_is_answered_at_most_six_times_an_hour_and_a_stranger_never() {
    let p = Pipeline::start_with(replies_on()).await;
    let to = "+14155550313";
    two_alerts(&p, to, "reply-loop").await;
    // An auto-responder answering every SMS it gets.
    for i in 0..10 {
        p.person_replies(to, &format!("I am out of office ({i})")).await;
    }
    let stranger = "+14155550398";
    p.person_replies(stranger, "hello?").await;
    let handled = p.replies_handled().await;
    let count = |name: &str| handled.iter().filter(|h| h.confirmed.map(|c| c.name()) == Some(name)).count();
    assert_eq!((count("confirmation_sent"), count("confirmation_rate_limited")), (6, 4), "{handled:?}");
    let sent = confirmations_to(&p, to).await;
    assert_eq!(sent.len(), 6);
    assert!(sent.iter().all(|t| t.body.starts_with("[tocsin] Not understood. Reply the code an alert shows")));
    assert!(confirmations_to(&p, stranger).await.is_empty(), "nobody answers a stranger");
}
