//! Where AWS is weaker than the emulator: a due-index that lags behind the table, data that must
//! expire (and a key's second life after it did), a write throttled right after the publish, a
//! send rate that would hold claims past the invocation, a sweep backlog of intents nothing can be
//! done for, and DynamoDB transaction conflicts. The emulator shows none of these by itself: each
//! test makes one happen (a fault proxy, a lagging copy of the index, a clock past retention) and
//! pins what must still hold. Real emulator calls throughout.

use std::collections::HashSet;
use std::time::Duration as StdDuration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{Duration, Utc};
use serde_json::json;
use tocsin::domain::intent::Intent;
use tocsin::domain::request::{Limits, validate};
use tocsin::domain::template::Catalog;
use tocsin::domain::{IdempotencyKey, IntentRecord, Origin, State};
use tocsin::ports::{DueIndex, IntentStore, MessageIndex};
use tocsin_harness::events::sqs_event;
use tocsin_harness::fault_proxy::{Fault, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

fn proxied() -> Options {
    Options { env: vec![("TOCSIN_ORPHAN_WAIT", "0s")], fault_seed: Some(15), ..Default::default() }
}

/// Submits one alert and sends it; returns its key and SNS message id.
async fn accepted_alert(p: &Pipeline, event_id: &str, to: &str) -> (IdempotencyKey, String) {
    let (status, body) = p.submit(&alert(event_id, to)).await;
    assert_eq!(status, 201, "{body}");
    let key = key_of(&body);
    p.run_sender().await;
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Accepted);
    (key, r.status.sns_message_id.unwrap_or_default())
}

// ------------------------------------------------------------------------- 1. a lagging index

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_the_lagging_due_index_has_not_seen_is_never_escalated() {
    let p = Pipeline::start_with(proxied()).await;
    let (key, mid) = accepted_alert(&p, "lag-1", "+14155550161").await;
    let (_, silent_mid) = accepted_alert(&p, "lag-2", "+14155550162").await;
    p.clock.advance(Duration::minutes(16));
    // The index copy says both are accepted and due; then one is delivered (the base table moves on).
    p.lag_due_index().await;
    p.carrier_reports(&mid, "+14155550161", true, "Message has been accepted by phone").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Delivered);

    let run = p.run_escalation().await;
    assert_eq!(run.read, 2, "the sweep read the lagging index, where the delivered one is still due");
    let msgs = p.escalations().await;
    assert_eq!(msgs.len(), 1, "only the silent one pages on-call: {run:?}");
    assert_eq!(msgs[0].0.sns_message_id.as_deref(), Some(silent_mid.as_str()));
    let delivered = p.record(&key).await;
    assert!(delivered.status.escalation.is_none(), "a delivered intent is never escalated");
    // Nor can any run take its escalation lease, should a delivery land between the sweep's read
    // of the intent and the lease.
    let now = p.clock.now_utc();
    let lease = p.ledger.lease_escalation(&key, "late-run", now, now + Duration::minutes(2)).await.expect("lease");
    assert!(lease.is_none(), "the lease refuses a delivered intent");
    // Nor did the sweep put the delivered intent back into the index from its stale copy.
    let item = raw_item(&p, &format!("INTENT#{key}"), "INTENT").await;
    assert!(!item.contains_key("due_at"), "the delivered intent stays out of the due-index: {:?}", item.get("due_at"));
}

// ------------------------------------------------------------------------- 2. data expires

async fn raw_item(p: &Pipeline, pk: &str, sk: &str) -> std::collections::HashMap<String, AttributeValue> {
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    ddb.get_item()
        .table_name(p.stack.table("LedgerTable"))
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .item
        .unwrap_or_default()
}

async fn scan(p: &Pipeline, logical_table: &str) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = ddb
            .scan()
            .table_name(p.stack.table(logical_table))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        out.extend(page.items().iter().cloned());
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => break,
        }
    }
    out
}

fn s_of<'a>(item: &'a std::collections::HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str).unwrap_or_default()
}

fn expires_of(item: &std::collections::HashMap<String, AttributeValue>) -> Option<i64> {
    item.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_modes_items_expire_too_the_digest_with_its_members_and_the_send_log_after_its_window() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_STORM_MODE", "on")],
        ..Default::default()
    })
    .await;
    for i in 0..3 {
        let (status, body) = p.submit(&alert(&format!("ttl-digest-{i}"), "+14155550176")).await;
        assert_eq!(status, 201, "{body}");
    }
    p.run_sender().await;
    let ledger = scan(&p, "LedgerTable").await;
    let intents: Vec<i64> = ledger.iter().filter(|i| s_of(i, "sk") == "INTENT").filter_map(expires_of).collect();
    assert_eq!(intents.len(), 3);
    let latest_member = intents.iter().copied().max().unwrap_or_default();
    let now = Utc::now().timestamp();
    let (mut digests, mut logs) = (0, 0);
    for item in &ledger {
        let (pk, sk) = (s_of(item, "pk"), s_of(item, "sk"));
        if (pk, sk) == ("METER#sms-parts", "STATE") {
            // The justified exception: one item, no personal data, and an open breaker must stay
            // open however long nobody looks.
            assert!(item.get("phone").is_none() && item.len() <= 8, "the meter holds counts only: {item:?}");
            continue;
        }
        let expires = expires_of(item).unwrap_or_else(|| panic!("ledger item {pk} {sk} has no expires_at"));
        if pk.starts_with("DIGEST#") || (pk.starts_with("MSG#") && item.contains_key("digest_id")) {
            assert_eq!(expires, latest_member, "{pk}: a digest expires with its latest member");
            digests += 1;
        } else if pk.starts_with("BUDGET#") {
            // The person's send log: a window (5 min) after the last send, not the intents' 30 days.
            assert!(expires > now && expires <= now + 10 * 60, "{pk}: {expires}");
            logs += 1;
        }
    }
    assert_eq!((digests, logs), (2, 1), "the digest, its message index entry, the send log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_item_tocsin_writes_expires_with_its_intent_or_is_on_the_justified_list() {
    // Storm mode off: its items (digests, send logs) are the test above's.
    let p = Pipeline::start_with(Options { env: vec![("TOCSIN_STORM_MODE", "off")], ..Default::default() }).await;
    // Delivered, failed for good (suppresses the number), silent (escalated), and a record that
    // matches nothing (orphan).
    let (_, delivered) = accepted_alert(&p, "ttl-delivered", "+14155550171").await;
    let (_, failed) = accepted_alert(&p, "ttl-failed", "+14155550172").await;
    accepted_alert(&p, "ttl-silent", "+14155550173").await;
    p.carrier_reports(&delivered, "+14155550171", true, "Message has been accepted by phone").await;
    p.carrier_reports(&failed, "+14155550172", false, "Phone number is opted out").await;
    p.carrier_reports("00000000-0000-4000-8000-000000000000", "+14155550174", true, "accepted").await;
    p.run_status().await;
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    // An audited re-enable writes the registry's history too.
    let suppressed = tocsin::domain::PhoneNumber::parse("+14155550172").expect("number");
    tocsin::ports::RecipientRegistry::re_enable(&p.registry, &suppressed, "alice", "number fixed", Utc::now())
        .await
        .expect("re-enable");
    let failed_again = tocsin::domain::PhoneNumber::parse("+14155550175").expect("number");
    let evidence = tocsin::ports::SuppressionEvidence {
        log_event_id: "ev-1".into(),
        provider_response: Some("Phone number is opted out".into()),
        at: Utc::now(),
        intent_key: "k".into(),
        table_version: "t".into(),
    };
    tocsin::ports::RecipientRegistry::suppress(&p.registry, &failed_again, &evidence).await.expect("suppress");

    let ledger = scan(&p, "LedgerTable").await;
    let intents: std::collections::HashMap<String, i64> = ledger
        .iter()
        .filter(|i| s_of(i, "sk") == "INTENT")
        .map(|i| (s_of(i, "pk").to_owned(), expires_of(i).unwrap_or_else(|| panic!("intent without TTL: {i:?}"))))
        .collect();
    assert_eq!(intents.len(), 3);
    let now = Utc::now().timestamp();
    let receipt_window = 73 * 3600;
    for item in &ledger {
        let (pk, sk) = (s_of(item, "pk"), s_of(item, "sk"));
        if (pk, sk) == ("METER#sms-parts", "STATE") {
            // The justified exception: one item, no personal data, and an open breaker must stay
            // open however long nobody looks.
            assert!(item.get("phone").is_none() && item.len() <= 8, "the meter holds counts only: {item:?}");
            continue;
        }
        let expires = expires_of(item).unwrap_or_else(|| panic!("ledger item {pk} {sk} has no expires_at"));
        if let Some(intent_expires) = intents.get(pk) {
            // An intent's observations expire with it (delivery records decided without reading
            // the intent: at most the receipt window later).
            assert!(expires <= intent_expires + receipt_window, "{pk} {sk}: {expires} > {intent_expires}");
        } else if pk.starts_with("MSG#") {
            let owner = format!("INTENT#{}", s_of(item, "key"));
            assert_eq!(Some(&expires), intents.get(&owner), "the message index expires with its intent");
        } else if pk.starts_with("ESC#") {
            let owner = format!("INTENT#{}", s_of(item, "key"));
            assert_eq!(Some(&expires), intents.get(&owner), "an open escalation expires with its intent");
        } else if pk.starts_with("ORPHAN#") {
            assert!(expires <= now + 24 * 3600, "an orphan record (phone number inside) expires within hours");
        } else if pk.starts_with("PRODUCER#") {
            assert!(expires <= now + 3 * 3600, "a producer's minute counter expires within hours: {pk} {sk}");
        } else if pk.starts_with("DIGEST#") || pk.starts_with("BUDGET#") {
            panic!("storm-mode item with storm mode off: {pk}");
        } else {
            panic!("an item of an unknown kind: {pk} {sk}");
        }
    }
    // The registry: audit events expire; a number's state item has no TTL only while it is
    // suppressed (the justified exception: a dead number must stay suppressed however long).
    let registry = scan(&p, "RecipientsTable").await;
    assert!(registry.len() >= 5, "{registry:?}");
    for item in &registry {
        let suppressed_state =
            s_of(item, "sk") == "STATE" && matches!(item.get("suppressed"), Some(AttributeValue::Bool(true)));
        // The other justified exception: a roster entry is kept until an operator removes it.
        let roster_entry = s_of(item, "pk") == "ROSTER" && s_of(item, "sk").starts_with("ENTRY#");
        match (suppressed_state || roster_entry, expires_of(item)) {
            (true, Some(_)) if roster_entry => panic!("a roster entry must not expire: {item:?}"),
            (true, None) => {}
            (true, Some(_)) => panic!("a suppressed number must not expire: {item:?}"),
            (false, Some(e)) => assert!(e > now && e <= now + 401 * 86_400, "{item:?}"),
            (false, None) => panic!("registry item without TTL: {} {}", s_of(item, "pk"), s_of(item, "sk")),
        }
    }
}

/// Runs the first life of `event_id` to an escalation, then moves the clock past the intent's
/// retention. With `ttl_deleted`, removes every expired item as DynamoDB's TTL would; without,
/// leaves them (TTL deletes lazily, days later).
async fn first_life_expired(p: &Pipeline, event_id: &str, to: &str, ttl_deleted: bool) -> IdempotencyKey {
    let (key, _) = accepted_alert(p, event_id, to).await;
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    assert_eq!(p.escalations().await.len(), 1, "first life escalated");
    p.clock.advance(Duration::days(31));
    if ttl_deleted {
        let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
        let now = p.clock.now_utc().timestamp();
        let mut removed = 0;
        for item in scan(p, "LedgerTable").await {
            if expires_of(&item).is_some_and(|e| e < now) {
                ddb.delete_item()
                    .table_name(p.stack.table("LedgerTable"))
                    .key("pk", item["pk"].clone())
                    .key("sk", item["sk"].clone())
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                removed += 1;
            }
        }
        assert!(removed >= 4, "the intent, its observations and its message index expired ({removed})");
    }
    key
}

async fn second_life_is_clean(p: &Pipeline, event_id: &str, to: &str, first: &IdempotencyKey) {
    let (status, body) = p.submit(&alert(event_id, to)).await;
    assert_eq!(status, 201, "a replay after expiry is a new intent: {body}");
    assert_eq!(body["replay"], json!(false), "{body}");
    assert_eq!(&key_of(&body), first, "the same key, derived the same way");
    p.run_sender().await;
    assert_eq!(p.record(first).await.status.state, State::Accepted);
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    let r = p.record(first).await;
    assert!(r.status.escalation.is_some(), "the second life's escalation is recorded: {:?}", r.status);
    assert_eq!(p.escalations().await.len(), 1, "the second life escalated once");
    p.clock.advance(Duration::minutes(5));
    let again = p.run_escalation().await;
    assert_eq!((again.escalated, p.escalations().await.len()), (0, 0), "and not again: {again:?}");
    let timeline = p.timeline(first).await;
    let escalations = timeline.iter().filter(|o| o.summary().starts_with("escalated")).count();
    assert_eq!(escalations, 1, "the history is the second life's own: {timeline:#?}");
    assert!(timeline.iter().all(|o| o.at >= r.intent.created_at), "no first-life observation: {timeline:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_first_life_was_deleted_by_ttl_starts_a_clean_second_life() {
    let p = Pipeline::start().await;
    let key = first_life_expired(&p, "second-life-deleted", "+14155550181", true).await;
    second_life_is_clean(&p, "second-life-deleted", "+14155550181", &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_first_life_expired_but_was_not_yet_deleted_starts_a_clean_second_life() {
    let p = Pipeline::start().await;
    let key = first_life_expired(&p, "second-life-lazy", "+14155550182", false).await;
    second_life_is_clean(&p, "second-life-lazy", "+14155550182", &key).await;
}

// ------------------------------------------------------------------------- 3. throttled after the publish

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_recording_is_throttled_past_the_sdk_retries_is_still_recorded_as_accepted() {
    let p = Pipeline::start_with(proxied()).await;
    let proxy = p.proxy.clone().expect("proxy");
    // The message-index write after the publish is throttled six times in a row: two whole SDK
    // calls (three attempts each) fail.
    proxy.add_rule(Rule::times("DynamoDB_20120810.PutItem", Fault::dynamodb_throttled(), 6).when_body_contains("MSG#"));
    let (_, body) = p.submit(&alert("throttled-after-publish", "+14155550191")).await;
    let key = key_of(&body);
    p.run_sender().await;
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Accepted, "{:?}", r.status);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
    let injected = proxy.log().iter().filter(|(op, what)| op.ends_with("PutItem") && what != "forwarded").count();
    assert_eq!(injected, 6);
    // Its lease lapses without a false "unknown".
    p.clock.advance(Duration::minutes(3));
    p.run_escalation().await;
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
    assert!(p.escalations().await.is_empty());
}

/// The sender published and SNS answered, but its message-index write was throttled past every
/// retry: no index ties the SMS to the alert. Its delivery record, when it comes, could as well be
/// another sender's SMS to the same phone for all the status function can tell: it is kept as an
/// orphan, never matched to the alert by number and time. What ties it is the sender's own answer,
/// stored first: once the lease lapses and the outcome is searched for, the record of the message
/// id SNS gave this attempt settles it — by key, never by guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_record_of_an_sms_whose_message_id_write_never_landed_is_tied_by_the_senders_stored_answer() {
    let p = Pipeline::start_with(Options { fault_seed: Some(15), ..Default::default() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    proxy.add_rule(
        Rule::sometimes("DynamoDB_20120810.PutItem", Fault::dynamodb_throttled(), 1.0).when_body_contains("MSG#"),
    );
    let (_, body) = p.submit(&alert("never-recorded", "+14155550192")).await;
    let key = key_of(&body);
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    // A short invocation: the retries give up before its end.
    p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.in_(StdDuration::from_secs(8))).await;
    assert_eq!(p.record(&key).await.status.state, State::Sending, "published, never recorded");
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    let id = sms[0].message_id.clone();
    proxy.clear_rules();
    assert_eq!(p.ledger.lookup(&id).await.expect("index"), None, "no index names it");
    p.carrier_reports(&id, "+14155550192", true, "Message has been accepted by phone").await;
    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| (s.orphaned, s.delivered)).collect::<Vec<_>>(), vec![(1, 0)]);
    assert_eq!(p.record(&key).await.status.state, State::Sending, "never delivered on a guess");
    // The claim lapses: its outcome is unknown, and the same run searches for it.
    p.clock.advance(Duration::minutes(3));
    let run = p.run_escalation().await;
    assert_eq!((run.lease_expired_unknown, run.reconciled, run.unattributed), (1, 1, 0), "{run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered, "{:?}", r.status);
    assert_eq!(r.status.sns_message_id.as_deref(), Some(id.as_str()), "its own SMS");
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    assert!(p.escalations().await.is_empty(), "delivered: never escalated");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "never re-sent");
}

/// An alert published by a sender whose "accepted" state write (the only update that carries
/// the SNS message id) is throttled until the invocation ends; the fault is cleared on return.
async fn published_with_its_state_write_lost(seed: u64, event_id: &str, number: &str) -> (Pipeline, IdempotencyKey) {
    let p = Pipeline::start_with(Options { fault_seed: Some(seed), ..Default::default() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    proxy.add_rule(
        Rule::sometimes("DynamoDB_20120810.UpdateItem", Fault::dynamodb_throttled(), 1.0)
            .when_body_contains(":sns_message_id"),
    );
    let (_, body) = p.submit(&alert(event_id, number)).await;
    let key = key_of(&body);
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.in_(StdDuration::from_secs(8))).await;
    proxy.clear_rules();
    (p, key)
}

/// The sender and the sweep both record a lapsed lease, as one fact (`lease:<attempt>:expired`).
/// The sender writes it in order (the fact, then the state): when its state write never lands
/// (throttled past the SDK's retries, and the message gone to the dead-letter queue), the sweep's
/// transaction finds the fact stored. It completes the state under its own conditions rather than
/// taking the stored fact for the change — else the intent is `sending` for ever. (Found by the
/// simulator: seed 10161 of `tests/sim/tests/regressions.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_the_sender_recorded_without_its_state_is_completed_by_the_sweep() {
    let p = Pipeline::start_with(Options { fault_seed: Some(18), ..Default::default() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let (_, body) = p.submit(&alert("lapsed-half-written", "+14155550197")).await;
    let key = key_of(&body);
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "vanished-attempt", now, now + Duration::minutes(2)).await.expect("claim");
    p.clock.advance(Duration::minutes(3));
    // The message comes round again; the sender finds the lease lapsed and records it, and its
    // state write (the only UpdateItem naming the attempt) is throttled.
    proxy.add_rule(
        Rule::sometimes("DynamoDB_20120810.UpdateItem", Fault::dynamodb_throttled(), 1.0)
            .when_body_contains("vanished-attempt"),
    );
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.in_(StdDuration::from_secs(8))).await;
    proxy.clear_rules();
    assert_eq!(p.record(&key).await.status.state, State::Sending, "the fact is stored, the state is not");
    let history = p.ledger.observations(&key).await.expect("history");
    assert!(history.iter().any(|o| o.id == "lease:vanished-attempt:expired"), "{history:?}");
    let run = p.run_escalation().await;
    assert_eq!(run.lease_expired_unknown, 1, "{run:?}");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 0, "never re-sent blindly");
}

/// An attempt's SMS was accepted but its state write lost; its lease lapses to `send_unknown`, an
/// operator resends, and the first SMS's delivery record arrives while the operator's attempt
/// holds the claim. SNS took that SMS before the claim began: it is the earlier attempt's —
/// stored, never applied — and the operator's attempt still records its own outcome. (Found by the
/// simulator's long mode, seed 13698.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_attempts_receipt_arriving_during_an_operator_resend_never_settles_the_resend() {
    let (p, key) = published_with_its_state_write_lost(19, "resend-meets-old-receipt", "+14155550198").await;
    let published_at = p.clock.now_utc();
    let first = p.emulator.sent_sms().await.expect("sms")[0].message_id.clone();
    p.clock.advance(Duration::minutes(3));
    assert_eq!(p.run_escalation().await.lease_expired_unknown, 1);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    let now = p.clock.now_utc();
    let claim = tocsin::services::operator::OperatorClaim {
        key: &key,
        attempt_id: "operator:test-resend",
        operator: "alice",
        reason: "phone replaced",
        now,
        lease_until: now + Duration::minutes(2),
    };
    let claimed = tocsin::services::operator::claim_for_operator(&p.ledger, claim).await.expect("claim");
    assert!(matches!(claimed, tocsin::services::operator::OperatorClaimOutcome::Claimed(_)), "{claimed:?}");
    let record = tocsin_harness::events::sns_delivery_record(
        &first,
        "+14155550198",
        true,
        "Message has been accepted by phone carrier",
        published_at,
    );
    p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &record).await;
    p.run_status().await;
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Sending, "the earlier SMS's receipt does not settle the operator's attempt");
    assert_eq!(r.status.attempt_id.as_deref(), Some("operator:test-resend"));
    let history = p.ledger.observations(&key).await.expect("history");
    assert!(history.iter().any(|o| o.id.starts_with("log:")), "the receipt is stored as evidence: {history:?}");
}

/// The sender stores what SNS answered (observation and message index) before the intent's state:
/// when that state write never lands, the delivery record finds the intent by its message id,
/// still `sending`, and settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_record_found_by_message_id_settles_an_intent_whose_state_write_never_landed() {
    let (p, key) = published_with_its_state_write_lost(16, "state-never-recorded", "+14155550194").await;
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Sending, "published, state never recorded");
    assert!(r.status.sns_message_id.is_none());
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    let history = p.ledger.observations(&key).await.expect("history");
    assert!(
        history.iter().any(|o| o.id.ends_with(":accepted")),
        "the accepted observation is stored although the state is not: {history:?}"
    );
    p.carrier_reports(&sms[0].message_id, "+14155550194", true, "Message has been accepted by phone").await;
    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| s.orphaned).sum::<usize>(), 0, "found by the message index: {summaries:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered, "the delivery record settles the intent");
    assert_eq!(r.status.sns_message_id.as_deref(), Some(sms[0].message_id.as_str()));
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

/// The same sender stopped for good after SNS answered: its lease lapses and the sweep makes the
/// intent `send_unknown`; the delivery record still finds it by message id, settles it and
/// records the message id the state write never did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_record_found_by_message_id_settles_an_unknown_outcome_and_records_its_message_id() {
    let (p, key) = published_with_its_state_write_lost(17, "state-never-recorded-2", "+14155550195").await;
    p.clock.advance(Duration::minutes(3));
    let run = p.run_escalation().await;
    assert_eq!(run.lease_expired_unknown, 1, "{run:?}");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    p.carrier_reports(&sms[0].message_id, "+14155550195", true, "Message has been accepted by phone").await;
    p.run_status().await;
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered, "the unknown outcome is settled by its delivery record");
    assert_eq!(r.status.sns_message_id.as_deref(), Some(sms[0].message_id.as_str()), "and its message id recorded");
    assert!(p.escalations().await.is_empty(), "nothing to page about");
}

/// The claim keeps intake's earlier due-index check (one index move saved per alert); when the
/// indexed check is later than the lease's end (an intent re-enqueued a while ago), the sender
/// moves it, so a sender that dies holding the claim is still found when the lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_intent_is_due_by_its_lease_end_even_when_its_indexed_check_was_later() {
    let p = Pipeline::start_with(Options { fault_seed: Some(15), ..Default::default() }).await;
    let proxy = p.proxy.clone().expect("proxy");
    let (_, body) = p.submit(&alert("late-check", "+14155550193")).await;
    let key = key_of(&body);
    let later = p.clock.now_utc() + Duration::minutes(10);
    p.ledger.set_next_check(&key, tocsin::ports::NextCheck::At(later), None).await.expect("next check");
    // The sender publishes, then its record never lands (as if it died there).
    proxy.add_rule(
        Rule::sometimes("DynamoDB_20120810.PutItem", Fault::dynamodb_throttled(), 1.0).when_body_contains("MSG#"),
    );
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.in_(StdDuration::from_secs(8))).await;
    proxy.clear_rules();
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Sending);
    let (lease_until, next_check) = (r.status.lease_until.expect("lease"), r.status.next_check.expect("due"));
    assert!(next_check <= lease_until, "due by the lease's end ({lease_until}), not at {next_check}");
    p.clock.advance(Duration::minutes(3));
    let run = p.run_escalation().await;
    assert_eq!(run.lease_expired_unknown, 1, "{run:?}");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
}

// ------------------------------------------------------------------------- 4. a claim is never held across a wait past the invocation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_one_sms_per_second_a_batch_of_three_part_messages_is_sent_or_handed_back_never_left_unknown() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_SMS_RATE_PER_SECOND", "1")],
        ..Default::default()
    })
    .await;
    let runbook = format!("https://runbooks.example.com/{}", "service-down-".repeat(27));
    let mut keys = Vec::new();
    for i in 0..10 {
        let body = json!({
            "event_id": format!("rate-{i}"),
            "template": {"name": "service_down", "version": 1},
            "variables": {"service": format!("orders-{i}"), "since": "22:00", "runbook": runbook},
            "recipient": format!("+141555502{i:02}"),
            "deadline": "15m"
        });
        let (status, answer) = p.submit(&body).await;
        assert_eq!(status, 201, "{answer}");
        keys.push(key_of(&answer));
    }
    assert_eq!(p.record(&keys[0]).await.intent.segments.segments, 3, "three-part messages");
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    assert_eq!(msgs.len(), 10);
    // One invocation with the functions' 30 s timeout; this instance's share is half a part per
    // second (1 part/s over the 2 sender instances the template allows).
    let deadline = p.clock.invocation_deadline();
    let resp = p.sender.handle(sqs_event(&q.arn, &msgs), deadline).await;
    // Lambda ends the invocation at its deadline: whatever is still claimed then stays claimed.
    assert!(p.clock.now_utc() < deadline, "the batch finished within the invocation");
    let retried = resp.batch_item_failures.len();
    let mut states = Vec::new();
    for k in &keys {
        states.push(p.record(k).await.status.state);
    }
    let sent = states.iter().filter(|s| **s == State::Accepted).count();
    let handed_back = states.iter().filter(|s| **s == State::Queued).count();
    assert_eq!(sent + handed_back, 10, "each sent or back on the queue, none left claimed: {states:?}");
    assert!(sent >= 1, "some were sent: {states:?}");
    assert_eq!(retried, handed_back, "the handed-back ones are retried by SQS");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), sent);
    // The lease would have lapsed by now: nothing becomes "unknown".
    p.clock.advance(Duration::minutes(3));
    p.run_escalation().await;
    for k in &keys {
        let s = p.record(k).await.status.state;
        assert!(matches!(s, State::Accepted | State::Queued), "{s}");
    }
}

// ------------------------------------------------------------------------- 5. nothing-to-do intents do not crowd the sweep

fn intent_record(event_id: &str, to: &str, now: chrono::DateTime<Utc>) -> IntentRecord {
    let limits = Limits {
        default_deadline: StdDuration::from_secs(900),
        min_deadline: StdDuration::from_secs(60),
        max_deadline: StdDuration::from_secs(86_400),
        max_segments: 3,
        reply_prompt: false,
        sms: Default::default(),
    };
    let req = validate(&alert(event_id, to), Catalog::builtin(), &limits, now).expect("valid");
    let mut r = IntentRecord {
        intent: Intent::from_request(
            req,
            Origin::Api,
            tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer"),
            now,
        ),
        status: tocsin::domain::intent::Status::new(),
    };
    r.status.state = State::Queued;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalated_intents_still_on_the_queue_are_not_read_by_every_sweep_ahead_of_new_ones() {
    let p = Pipeline::start().await;
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let table = p.stack.table("LedgerTable").to_owned();
    let past = p.clock.now_utc() - Duration::minutes(40);
    // 1,000 intents a backlog kept from being sent: escalated ("never sent by its deadline"),
    // still queued, with a next check that a sweep once wrote in the past.
    for chunk in (0..1000).collect::<Vec<usize>>().chunks(50) {
        futures::future::join_all(chunk.iter().map(|i| {
            let (ddb, table) = (ddb.clone(), table.clone());
            let ledger = p.inspect.clone();
            async move {
                let r = intent_record(&format!("backlog-{i}"), &format!("+1415557{i:04}"), past);
                ledger.put_new(&r, past).await.expect("put");
                ddb.update_item()
                    .table_name(&table)
                    .key("pk", AttributeValue::S(format!("INTENT#{}", r.intent.key)))
                    .key("sk", AttributeValue::S("INTENT".into()))
                    .update_expression("SET escalated_at = :e, escalation_reason = :r, enqueued_at = :q, due_at = :d")
                    .expression_attribute_values(
                        ":e",
                        AttributeValue::S(tocsin::adapters::ledger::ts(past + Duration::minutes(16))),
                    )
                    .expression_attribute_values(":r", AttributeValue::S("never sent by its deadline".into()))
                    .expression_attribute_values(":q", AttributeValue::S(tocsin::adapters::ledger::ts(past)))
                    .expression_attribute_values(
                        ":d",
                        AttributeValue::N((past + Duration::minutes(20)).timestamp_millis().to_string()),
                    )
                    .send()
                    .await
                    .expect("update");
            }
        }))
        .await;
    }
    // What is read is the point, not how fast: a loaded machine gets the time it needs.
    let first = p.run_escalation_within(std::time::Duration::from_secs(600)).await;
    assert_eq!((first.read, first.escalated), (1000, 0), "{first:?}");
    // A minute later a new alert is due (sent, silent past its deadline).
    let (key, _) = accepted_alert(&p, "new-one", "+14155550199").await;
    p.clock.advance(Duration::minutes(16));
    let second = p.run_escalation().await;
    assert_eq!(second.escalated, 1, "{second:?}");
    assert!(second.read <= 2, "the backlog is not read again: {second:?}");
    assert!(p.record(&key).await.status.escalation.is_some());
    let due: HashSet<String> = scan(&p, "LedgerTable")
        .await
        .iter()
        .filter(|i| i.contains_key("due_at"))
        .filter_map(|i| {
            let due = i.get("due_at")?.as_n().ok()?.parse::<i64>().ok()?;
            (due <= p.clock.now_utc().timestamp_millis()).then(|| s_of(i, "pk").to_owned())
        })
        .collect();
    assert!(due.is_empty(), "no next check is left in the past: {} items", due.len());
}

// ------------------------------------------------------------------------- 6. transaction conflicts

fn transaction_conflict() -> Fault {
    Fault::Respond {
        status: 400,
        content_type: "application/x-amz-json-1.0",
        body: json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "Message": "Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict, None]",
            "CancellationReasons": [
                {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"},
                {"Code": "None"}
            ]
        })
        .to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_cancelled_by_a_conflict_are_tried_again_and_the_intent_ends_correct() {
    let p = Pipeline::start_with(proxied()).await;
    let proxy = p.proxy.clone().expect("proxy");
    let (key, mid) = accepted_alert(&p, "conflict-1", "+14155550201").await;
    p.carrier_reports(&mid, "+14155550201", true, "Message has been accepted by phone").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    // A FAILURE record after the SUCCESS is conflicting evidence: stored and counted in one
    // transaction, which meets a concurrent transaction twice.
    proxy.add_rule(
        Rule::times("DynamoDB_20120810.TransactWriteItems", transaction_conflict(), 2).when_body_contains("OBS#log:"),
    );
    p.carrier_reports(&mid, "+14155550201", false, "Phone carrier has blocked this message").await;
    let summaries = p.run_status().await;
    assert_eq!(summaries.iter().map(|s| s.conflicting).sum::<usize>(), 1, "{summaries:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered, "conflicting evidence never flips the state");
    assert_eq!(r.status.conflicts, 1, "counted once");
    let conflicts = proxy.log().iter().filter(|(_, what)| what.contains("TransactionConflict")).count();
    assert_eq!(conflicts, 2, "the conflict was met twice");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
}

// ------------------------------------------------------------------------- 7. the due-index has no hot partition

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_alerts_spread_their_due_index_writes_evenly_over_the_partitions() {
    // One producer, a thousand alerts in a few minutes: far above the default producer rate.
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_PRODUCER_RATE_PER_MINUTE", "2000")],
        ..Default::default()
    })
    .await;
    let shards = p.ledger.due_shard_count() as usize;
    assert_eq!(shards, 16, "the template's TOCSIN_DUE_SHARDS");
    for chunk in (0..1000).collect::<Vec<usize>>().chunks(20) {
        let answers = futures::future::join_all(chunk.iter().map(|i| {
            let p = &p;
            async move { p.submit(&alert(&format!("spread-{i}"), &format!("+1415558{i:04}"))).await.0 }
        }))
        .await;
        assert!(answers.iter().all(|s| *s == 201), "{answers:?}");
    }
    let mut per_shard = std::collections::BTreeMap::<String, usize>::new();
    for item in scan(&p, "LedgerTable").await.iter().filter(|i| s_of(i, "sk") == "INTENT") {
        *per_shard.entry(s_of(item, "due_shard").to_owned()).or_default() += 1;
    }
    assert_eq!(per_shard.len(), shards, "every partition used: {per_shard:?}");
    assert_eq!(per_shard.values().sum::<usize>(), 1000);
    let ceiling = 1000 * 12 / (shards * 10);
    assert!(per_shard.values().all(|n| *n <= ceiling), "none above 1/S + 20 % ({ceiling}): {per_shard:?}");
    // The writes that follow (claim, a moved next check, …) keep each intent in its partition.
    let one = scan(&p, "LedgerTable").await.into_iter().find(|i| s_of(i, "sk") == "INTENT").expect("an intent");
    let key = IdempotencyKey::parse(s_of(&one, "pk").trim_start_matches("INTENT#")).expect("key");
    let now = p.clock.now_utc();
    let claimed = p.ledger.claim(&key, "attempt-spread", now, now + Duration::minutes(2)).await.expect("claim");
    assert!(matches!(claimed, tocsin::ports::ClaimOutcome::Claimed(_)));
    let claimed = raw_item(&p, s_of(&one, "pk"), "INTENT").await;
    assert_eq!(claimed.get("due_at"), one.get("due_at"), "the claim keeps intake's earlier check");
    p.ledger
        .set_next_check(&key, tocsin::ports::NextCheck::At(now + Duration::minutes(1)), None)
        .await
        .expect("next check");
    let after = raw_item(&p, s_of(&one, "pk"), "INTENT").await;
    assert_eq!(s_of(&after, "due_shard"), s_of(&one, "due_shard"), "an intent's index entries stay in its partition");
    assert_ne!(after.get("due_at"), one.get("due_at"), "the next check moved");
}

// ------------------------------------------------------------------------- 6. only indexes read eventually

/// `f`'s AWS calls, as the emulator's recorder saw them (the harness's own reads stay outside).
async fn recorded<F: std::future::Future>(p: &Pipeline, f: F) -> (F::Output, Vec<tocsin_harness::RecordedRequest>) {
    p.emulator.start_recording().await.expect("recording");
    let out = f.await;
    (out, p.emulator.stop_recording_requests().await.expect("recording"))
}

/// A delivered alert and an escalated one through every function, on `options`' provider: every
/// DynamoDB read of a table is strongly consistent. A GSI cannot be read so (AWS refuses
/// `ConsistentRead` on one): an index only ever tells a function where to look, and what it
/// decides on is read from the table, never an eventually consistent copy that a write of the
/// last second may not have reached.
async fn every_table_read_of_a_lifecycle_is_strongly_consistent(options: Options, delivered_to: &str, silent_to: &str) {
    let p = Pipeline::start_with(options).await;
    let mut calls = Vec::new();
    if p.uses_end_user_messaging() {
        // The stand-in's carrier never answers for this one: it is escalated at its deadline.
        let silent = tocsin_harness::eum::Carrier::new(tocsin_harness::eum::CarrierBehaviour::Silent);
        p.emulator.eum().set_carrier(silent_to, silent).await.expect("carrier");
    }
    let ((delivered, silent), c) = recorded(&p, async {
        (p.submit(&alert("consistent-1", delivered_to)).await, p.submit(&alert("consistent-2", silent_to)).await)
    })
    .await;
    calls.extend(c);
    let (delivered, silent) = (key_of(&delivered.1), key_of(&silent.1));
    calls.extend(recorded(&p, p.run_sender()).await.1);
    if !p.uses_end_user_messaging() {
        let mid = p.record(&delivered).await.status.sns_message_id.expect("a message id");
        p.carrier_reports(&mid, delivered_to, true, "Message has been accepted by phone").await;
    }
    calls.extend(recorded(&p, p.run_status()).await.1);
    assert_eq!(p.record(&delivered).await.status.state, State::Delivered);
    p.clock.advance(Duration::minutes(16));
    calls.extend(recorded(&p, p.run_escalation()).await.1);
    assert!(p.record(&silent).await.status.escalation.is_some(), "the silent alert is escalated");

    let (mut table_reads, mut index_reads, mut eventual) = (0, 0, Vec::new());
    for r in &calls {
        let Some(op) = r.operation.strip_prefix("DynamoDB_20120810.") else { continue };
        let consistent = |req: &serde_json::Value| req.get("ConsistentRead").and_then(serde_json::Value::as_bool);
        match op {
            "GetItem" | "Query" | "Scan" if r.body.get("IndexName").is_some() => index_reads += 1,
            "GetItem" | "Query" | "Scan" => {
                table_reads += 1;
                if consistent(&r.body) != Some(true) {
                    eventual.push(format!("{op} of {}", r.body["TableName"]));
                }
            }
            "BatchGetItem" => {
                for (table, req) in r.body["RequestItems"].as_object().into_iter().flatten() {
                    table_reads += 1;
                    if consistent(req) != Some(true) {
                        eventual.push(format!("{op} of {table}"));
                    }
                }
            }
            _ => {}
        }
    }
    assert!(eventual.is_empty(), "table reads without ConsistentRead: {eventual:?}");
    assert!(
        table_reads >= 3 && index_reads >= 1,
        "the lifecycle read the tables ({table_reads}) and an index ({index_reads})"
    );
    p.assert_iam_allowed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_read_a_function_decides_on_is_strongly_consistent_only_indexes_lag() {
    every_table_read_of_a_lifecycle_is_strongly_consistent(Options::sns(), "+14155550181", "+14155550182").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_end_user_messaging_every_table_read_a_function_decides_on_is_strongly_consistent_only_indexes_lag() {
    every_table_read_of_a_lifecycle_is_strongly_consistent(
        Options::end_user_messaging(),
        "+14155550183",
        "+14155550184",
    )
    .await;
}
