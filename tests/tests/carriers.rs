//! Carrier incidents (issue 26), through real emulator calls: the registry keeps each number's
//! carrier from its delivery records; the sweep measures tocsin's in-flight SMS per carrier,
//! publishes it with a `carrier` dimension, and escalates the alerts caught in a degraded carrier
//! early — once; an operator's hold escalates new alerts to a carrier at once, audited. On each
//! provider: SNS's delivery-status records name the carrier (`phoneCarrier`), End User Messaging's
//! events name it too (`carrierName`, with the alert's key in their context).

use chrono::Duration;
use serde_json::{Value, json};
use tocsin::domain::carrier::{CarrierHold, CarrierSeen};
use tocsin::domain::send_context::SendContext;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::carriers::{CarrierBook, CarrierHolds, Released};
use tocsin_harness::eum::{Carrier, CarrierBehaviour};
use tocsin_harness::events::{eum_event_record, sns_delivery_record};
use tocsin_tests::{Options, Pipeline, key_of};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    Sns,
    EndUserMessaging,
}

async fn pipeline(provider: Provider) -> Pipeline {
    let p = Pipeline::start_with(match provider {
        Provider::Sns => Options::sns(),
        Provider::EndUserMessaging => Options::end_user_messaging(),
    })
    .await;
    if let Some(number) = &p.origination {
        // These tests send a dozen SMS within seconds, one sender run each: a number that takes
        // the stack's rate (SmsRatePerSecond, 20), not a toll-free number's 3 parts per second.
        p.emulator.eum().set_parts_per_second(&number.id, 20).await.expect("rate");
    }
    p
}

fn number(n: u32) -> PhoneNumber {
    PhoneNumber::parse(&format!("+1415555{n:04}")).expect("a number")
}

/// Submits an alert to `to` with `deadline` (e.g. "15m"); the sender sends it.
async fn sent(p: &Pipeline, event_id: &str, to: &PhoneNumber, deadline: &str) -> IdempotencyKey {
    let mut body = tocsin_tests::alert(event_id, to.expose());
    body["deadline"] = json!(deadline);
    if p.uses_end_user_messaging() {
        // The stand-in's carrier says nothing: the test plays it (`delivered_via`).
        p.emulator.eum().set_carrier(to.expose(), Carrier::new(CarrierBehaviour::Silent)).await.expect("carrier");
    }
    let (status, answer) = p.submit(&body).await;
    assert_eq!(status, 201, "{answer}");
    p.run_sender().await;
    let key = key_of(&answer);
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
    key
}

/// The delivery record of `key`'s SMS naming `carrier`, written `minutes_ago` before now: SNS's
/// record (found through the message index), or End User Messaging's final event (naming the
/// alert and its attempt in its context).
async fn delivered_via(p: &Pipeline, key: &IdempotencyKey, to: &PhoneNumber, carrier: &str, minutes_ago: i64) {
    let status = p.record(key).await.status;
    let id = status.sns_message_id.expect("a message id");
    let at = p.clock.now_utc() - Duration::minutes(minutes_ago);
    if p.uses_end_user_messaging() {
        let context = SendContext::alert(p.stack.name.clone(), key.clone(), status.attempt_id.expect("an attempt"));
        let mut event: Value =
            serde_json::from_str(&eum_event_record(&id, to.expose(), true, &context.entries(), at)).expect("json");
        event["carrierName"] = json!(carrier);
        event["mnc"] = json!("270");
        p.put_log(p.stack.log_group("SmsEventLogGroup"), &event.to_string()).await;
    } else {
        let mut rec: Value = serde_json::from_str(&sns_delivery_record(
            &id,
            to.expose(),
            true,
            "Message has been accepted by phone carrier",
            at,
        ))
        .expect("json");
        rec["delivery"]["phoneCarrier"] = json!(carrier);
        p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &rec.to_string()).await;
    }
    p.run_status().await;
}

async fn seed_carrier(p: &Pipeline, to: &PhoneNumber, carrier: &str) {
    let seen = CarrierSeen { carrier: carrier.into(), mcc: Some("310".into()), mnc: None, at: p.clock.now_utc() };
    p.registry.record_carrier(to, &seen).await.expect("seeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_record_keeps_the_numbers_carrier_and_an_older_record_never_replaces_a_newer_one() {
    Box::pin(a_delivery_record_keeps_the_numbers_carrier_and_an_older_record_never_replaces_a_newer_one_through(
        Provider::Sns,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_a_delivery_record_keeps_the_numbers_carrier_and_an_older_record_never_replaces_a_newer_one()
 {
    Box::pin(a_delivery_record_keeps_the_numbers_carrier_and_an_older_record_never_replaces_a_newer_one_through(
        Provider::EndUserMessaging,
    ))
    .await;
}

async fn a_delivery_record_keeps_the_numbers_carrier_and_an_older_record_never_replaces_a_newer_one_through(
    provider: Provider,
) {
    let p = pipeline(provider).await;
    let to = number(2601);
    let first = sent(&p, "carrier-1", &to, "15m").await;
    delivered_via(&p, &first, &to, "Verizon Wireless", 0).await;
    let kept = p.registry.carriers_of(std::slice::from_ref(&to)).await.expect("read");
    let seen = &kept[to.expose()];
    assert_eq!(
        (seen.carrier.as_str(), seen.mcc.as_deref(), seen.mnc.as_deref()),
        ("Verizon Wireless", Some("310"), Some("270"))
    );
    // A late record of an earlier SMS names the number's old carrier: the newer one is kept.
    let second = sent(&p, "carrier-2", &to, "15m").await;
    delivered_via(&p, &second, &to, "Ported Away Mobile", 30).await;
    let kept = p.registry.carriers_of(std::slice::from_ref(&to)).await.expect("read");
    assert_eq!(kept[to.expose()].carrier, "Verizon Wireless");
    // A number no record has named is the unknown slice: absent.
    let other = number(2602);
    assert!(p.registry.carriers_of(&[other]).await.expect("read").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_call_numbers_next_records_write_its_carrier_only_when_it_changes_or_an_hour_has_passed() {
    Box::pin(an_on_call_numbers_next_records_write_its_carrier_only_when_it_changes_or_an_hour_has_passed_through(
        Provider::Sns,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_an_on_call_numbers_next_records_write_its_carrier_only_when_it_changes_or_an_hour_has_passed()
 {
    Box::pin(an_on_call_numbers_next_records_write_its_carrier_only_when_it_changes_or_an_hour_has_passed_through(
        Provider::EndUserMessaging,
    ))
    .await;
}

/// The registry's `CARRIER` item is written by the number's first record, then again only for
/// news: another carrier at once, the same one an hour on (its retention counts from it). The
/// records between are applied to their alerts all the same.
async fn an_on_call_numbers_next_records_write_its_carrier_only_when_it_changes_or_an_hour_has_passed_through(
    provider: Provider,
) {
    let p = pipeline(provider).await;
    let to = number(2611);
    let kept = async |p: &Pipeline| {
        let mut kept = p.registry.carriers_of(std::slice::from_ref(&to)).await.expect("read");
        kept.remove(to.expose()).expect("the number's carrier is kept")
    };
    let first = sent(&p, "rewrite-1", &to, "15m").await;
    delivered_via(&p, &first, &to, "Verizon Wireless", 0).await;
    let written = kept(&p).await;
    assert_eq!(written.carrier, "Verizon Wireless");

    p.clock.advance(Duration::minutes(20));
    let second = sent(&p, "rewrite-2", &to, "15m").await;
    delivered_via(&p, &second, &to, "Verizon Wireless", 0).await;
    assert_eq!(p.record(&second).await.status.state, State::Delivered);
    assert_eq!(kept(&p).await, written, "the same carrier 20 minutes later: nothing written");

    p.clock.advance(Duration::minutes(41));
    let third = sent(&p, "rewrite-3", &to, "15m").await;
    delivered_via(&p, &third, &to, "Verizon Wireless", 0).await;
    let rewritten = kept(&p).await;
    assert_eq!(rewritten.carrier, "Verizon Wireless");
    assert!(rewritten.at > written.at + Duration::minutes(60), "an hour on, written again: {rewritten:?}");

    p.clock.advance(Duration::minutes(1));
    let fourth = sent(&p, "rewrite-4", &to, "15m").await;
    delivered_via(&p, &fourth, &to, "Ported Away Mobile", 0).await;
    assert_eq!(kept(&p).await.carrier, "Ported Away Mobile", "another carrier: written at once");
}

/// An alert storm to one carrier's numbers stops with its incident: the status function tallies
/// tocsin's own records apart from other applications', so the traffic baseline never learns a
/// storm's rate as the carrier's and never judges its end a silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tocsins_own_delivery_records_are_tallied_apart_from_other_applications() {
    Box::pin(tocsins_own_delivery_records_are_tallied_apart_from_other_applications_through(Provider::Sns)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_tocsins_own_delivery_records_are_tallied_apart_from_other_applications() {
    Box::pin(tocsins_own_delivery_records_are_tallied_apart_from_other_applications_through(
        Provider::EndUserMessaging,
    ))
    .await;
}

async fn tocsins_own_delivery_records_are_tallied_apart_from_other_applications_through(provider: Provider) {
    use tocsin::domain::carrier_traffic::minute_of;
    use tocsin::ports::carriers::CarrierTraffic;
    let p = pipeline(provider).await;
    let to = number(2611);
    let key = sent(&p, "tallied-apart", &to, "15m").await;
    delivered_via(&p, &key, &to, "StormTel", 0).await;
    let minute = minute_of(p.clock.now_utc());
    if !p.uses_end_user_messaging() {
        // Another application's SMS through the same carrier in the same minute: no index names it.
        let at = p.clock.now_utc();
        let mut rec: Value = serde_json::from_str(&sns_delivery_record(
            "f0000000-0000-4000-8000-000000002611",
            "+14155559911",
            true,
            "Message has been accepted by phone carrier",
            at,
        ))
        .expect("json");
        rec["delivery"]["phoneCarrier"] = json!("StormTel");
        p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &rec.to_string()).await;
        p.run_status().await;
    }
    p.assert_iam_allowed();
    let stored = p.registry.tallies(minute - 1, minute).await.expect("tallies");
    let storm: Vec<_> = stored.iter().filter(|((_, carrier, _), _)| carrier == "StormTel").map(|(_, t)| *t).collect();
    let (records, tocsin) = storm.iter().fold((0, 0), |(r, o), t| (r + t.records, o + t.tocsin));
    let others = if p.uses_end_user_messaging() { 0 } else { 1 };
    assert_eq!((records, tocsin), (1 + others, 1), "the alert's record is tocsin's, the other one not: {stored:?}");
    assert_eq!(storm.iter().map(|t| t.others_on_time()).sum::<u64>(), others, "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_caught_in_a_degraded_carrier_that_cannot_make_their_deadline_are_escalated_early_once() {
    Box::pin(alerts_caught_in_a_degraded_carrier_that_cannot_make_their_deadline_are_escalated_early_once_through(
        Provider::Sns,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_alerts_caught_in_a_degraded_carrier_that_cannot_make_their_deadline_are_escalated_early_once()
 {
    Box::pin(alerts_caught_in_a_degraded_carrier_that_cannot_make_their_deadline_are_escalated_early_once_through(
        Provider::EndUserMessaging,
    ))
    .await;
}

/// Four SMS to SlowTel (numbers `first`…) and four to FastTel (`first + 10`…), an hour's deadline
/// each; FastTel delivers, SlowTel says nothing; eleven minutes on, SlowTel reads as degraded.
async fn slow_tel_delays_and_fast_tel_delivers(p: &Pipeline, prefix: &str, first: u32) {
    let mut fast = Vec::new();
    for n in 0..4 {
        let (slow_to, fast_to) = (number(first + n), number(first + 10 + n));
        seed_carrier(p, &slow_to, "SlowTel").await;
        seed_carrier(p, &fast_to, "FastTel").await;
        sent(p, &format!("{prefix}slow-{n}"), &slow_to, "60m").await;
        fast.push((sent(p, &format!("{prefix}fast-{n}"), &fast_to, "60m").await, fast_to));
    }
    for (key, to) in &fast {
        delivered_via(p, key, to, "FastTel", 0).await;
    }
    p.clock.advance(Duration::minutes(11));
}

/// Someone has the alert (issue 37, promise 17): a degraded carrier is no reason to escalate it
/// early either — found by the simulator, whose early escalation ignored the acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_alert_caught_in_a_degraded_carrier_is_not_escalated_early() {
    use tocsin::domain::acknowledgement::AckVia;
    use tocsin::services::acknowledging::acknowledge_alert;
    let p = pipeline(Provider::Sns).await;
    slow_tel_delays_and_fast_tel_delivers(&p, "ack-", 2710).await;
    let (taken_to, open_to) = (number(2715), number(2716));
    seed_carrier(&p, &taken_to, "SlowTel").await;
    seed_carrier(&p, &open_to, "SlowTel").await;
    let taken = sent(&p, "ack-slow-taken", &taken_to, "5m").await;
    let open = sent(&p, "ack-slow-open", &open_to, "5m").await;
    let now = p.clock.now_utc();
    acknowledge_alert(&p.ledger, &taken, "dana", AckVia::Operator, "req-early", now).await.expect("ack");
    p.clock.advance(Duration::minutes(2));

    let run = p.run_escalation().await;
    let early: Vec<String> = p
        .escalations()
        .await
        .into_iter()
        .filter(|(m, _)| m.reason.starts_with("carrier "))
        .map(|(m, _)| m.idempotency_key)
        .collect();
    assert_eq!(early, vec![open.to_string()], "only the unanswered alert is escalated early ({run:?})");
    assert!(p.record(&taken).await.status.escalation.is_none(), "the acknowledged alert is not escalated");
}

async fn alerts_caught_in_a_degraded_carrier_that_cannot_make_their_deadline_are_escalated_early_once_through(
    provider: Provider,
) {
    let p = pipeline(provider).await;
    slow_tel_delays_and_fast_tel_delivers(&p, "", 2610).await;
    // A new alert to each carrier, five minutes to its deadline.
    let caught_to = number(2615);
    seed_carrier(&p, &caught_to, "SlowTel").await;
    let caught = sent(&p, "slow-new", &caught_to, "5m").await;
    let healthy_to = number(2625);
    seed_carrier(&p, &healthy_to, "FastTel").await;
    let healthy = sent(&p, "fast-new", &healthy_to, "5m").await;
    // Not while it is fresh (a recovered carrier would deliver it in seconds): two minutes on.
    assert_eq!(p.run_escalation().await.escalated_early, 0, "never in its first two minutes");
    p.clock.advance(Duration::minutes(2));

    let run = p.run_escalation().await;
    assert_eq!((run.escalated_early, run.carriers_degraded), (1, 1), "{run:?}");
    let msgs = p.escalations().await;
    let early: Vec<_> = msgs.iter().filter(|(m, _)| m.reason.starts_with("carrier ")).collect();
    assert_eq!(early.len(), 1, "{msgs:?}");
    let (m, _) = early[0];
    assert_eq!(m.idempotency_key, caught.to_string());
    assert!(
        m.reason.starts_with("carrier SlowTel delayed: 4 of 4 SMS in the last 10 min not delivered; p95 1"),
        "{}",
        m.reason
    );
    assert_eq!(m.state, State::Accepted, "escalated while in flight");
    assert!(p.record(&healthy).await.status.escalation.is_none(), "a healthy carrier's alert waits for its deadline");

    // Metrics per carrier, the carrier named, no number.
    let metrics = tocsin_tests::emitted_metrics();
    let doc = |carrier: &str| -> Value {
        metrics
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|d| d["carrier"] == json!(carrier) && d["function"] == "escalation")
            .unwrap_or_else(|| panic!("an EMF document for {carrier}"))
    };
    let slow = doc("SlowTel");
    assert_eq!(
        (slow["carrier_degraded"].as_f64(), slow["carrier_in_flight"].as_f64(), slow["carrier_delayed_share"].as_f64()),
        (Some(1.0), Some(5.0), Some(100.0))
    );
    assert_eq!(slow["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0], json!(["function", "carrier"]));
    assert_eq!(doc("FastTel")["carrier_degraded"].as_f64(), Some(0.0));
    assert!(!metrics.contains(caught_to.expose()), "no phone number in metrics");

    // Never twice: not by the next run, nor at the deadline; the receipt is still recorded.
    assert_eq!(p.run_escalation().await.escalated_early, 0);
    delivered_via(&p, &caught, &caught_to, "SlowTel", 0).await;
    let record = p.record(&caught).await;
    assert_eq!(record.status.state, State::Delivered, "still eligible for its receipt");
    assert!(record.status.escalation.is_some());
    p.clock.advance(Duration::minutes(6));
    p.run_escalation().await;
    let again = p.escalations().await;
    assert!(again.iter().all(|(m, _)| m.idempotency_key != caught.to_string()), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carrier_hold_escalates_new_alerts_to_it_at_once_while_the_sms_goes_out_and_is_audited_until_released() {
    Box::pin(
        a_carrier_hold_escalates_new_alerts_to_it_at_once_while_the_sms_goes_out_and_is_audited_until_released_through(
            Provider::Sns,
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_a_carrier_hold_escalates_new_alerts_to_it_at_once_while_the_sms_goes_out_and_is_audited_until_released()
 {
    Box::pin(
        a_carrier_hold_escalates_new_alerts_to_it_at_once_while_the_sms_goes_out_and_is_audited_until_released_through(
            Provider::EndUserMessaging,
        ),
    )
    .await;
}

async fn a_carrier_hold_escalates_new_alerts_to_it_at_once_while_the_sms_goes_out_and_is_audited_until_released_through(
    provider: Provider,
) {
    let p = pipeline(provider).await;
    let to = number(2630);
    seed_carrier(&p, &to, "HeldTel").await;
    let now = p.clock.now_utc();
    let hold = CarrierHold {
        carrier: "HeldTel".into(),
        operator: "arn:aws:iam::123456789012:user/ana".into(),
        reason: "vendor incident 4711".into(),
        since: now,
        until: now + Duration::hours(2),
    };
    p.registry.hold(&hold).await.expect("held");
    assert_eq!(p.registry.active_holds(now).await.expect("holds"), vec![hold.clone()]);

    let key = sent(&p, "held-1", &to, "60m").await; // the SMS goes out (accepted by SNS)
    let run = p.run_escalation().await;
    assert_eq!(run.escalated_early, 1, "{run:?}");
    let msgs = p.escalations().await;
    assert_eq!(msgs.len(), 1);
    assert!(
        msgs[0].0.reason.starts_with("carrier HeldTel on hold by arn:aws:iam::123456789012:user/ana"),
        "{}",
        msgs[0].0.reason
    );
    assert!(msgs[0].0.reason.contains("vendor incident 4711"));
    assert_eq!(p.record(&key).await.status.state, State::Accepted);

    p.clock.advance(Duration::minutes(1));
    let released = p.registry.release("HeldTel", "bob", "vendor resolved", p.clock.now_utc()).await.expect("release");
    assert_eq!(released, Released::Released(hold));
    assert_eq!(
        p.registry.release("HeldTel", "bob", "again", p.clock.now_utc()).await.expect("release"),
        Released::NotHeld
    );
    let history = p.registry.hold_history("HeldTel").await.expect("history");
    assert_eq!(history.len(), 2, "{history:?}");
    assert!(
        history[0].contains("hold by arn:aws:iam::123456789012:user/ana")
            && history[0].contains("vendor incident 4711")
    );
    assert!(history[1].contains("released by bob: vendor resolved"));
    // After the release, a new alert to the carrier waits for its deadline like any other.
    sent(&p, "held-2", &to, "60m").await;
    assert_eq!(p.run_escalation().await.escalated_early, 0);
}
