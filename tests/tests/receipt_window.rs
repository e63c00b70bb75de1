//! The 73-hour receipt window and the per-intent retention, pinned by behaviour (the constants
//! live in `shared/src/domain/sweep.rs` and `shared/src/domain/intent.rs`; setting either to an
//! hour fails here). Carriers' delivery logs may take up to 72 hours; observations are accepted for
//! 73. Every item about an intent carries the intent's TTL: its deadline plus the retention.

use chrono::Duration;
use tocsin::domain::State;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::state::ReceiptEffect;
use tocsin_tests::{Pipeline, alert, key_of};

async fn receipt_effects(p: &Pipeline, key: &tocsin::domain::IdempotencyKey) -> Vec<ReceiptEffect> {
    p.timeline(key)
        .await
        .into_iter()
        .filter_map(|o| match o.kind {
            ObservationKind::DeliveryStatus { effect, .. } => Some(effect),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipt_window_a_delivery_record_72_hours_after_acceptance_still_applies_and_one_after_73_hours_is_late() {
    let p = Pipeline::start().await;
    let (_, a) = p.submit(&alert("window-72h", "+14155550191")).await;
    let (_, b) = p.submit(&alert("window-73h", "+14155550192")).await;
    p.run_sender().await;
    let (ka, kb) = (key_of(&a), key_of(&b));
    let id = |r: tocsin::domain::IntentRecord| r.status.sns_message_id.expect("accepted");
    let (ida, idb) = (id(p.record(&ka).await), id(p.record(&kb).await));

    // 72 hours on: neither receipt window has closed; A's record arrives and applies.
    // The sweep runs every minute; a few runs across the three days stand for all of them.
    p.clock.advance(Duration::hours(70));
    p.run_escalation().await;
    p.clock.advance(Duration::hours(2));
    p.run_escalation().await;
    p.run_escalation().await;
    assert_eq!(p.record(&kb).await.status.state, State::DelaySuspected, "72 h: still waiting for a receipt");
    p.carrier_reports(&ida, "+14155550191", true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&ka).await.status.state, State::Delivered);
    assert!(matches!(receipt_effects(&p, &ka).await.as_slice(), [ReceiptEffect::Moved { to: State::Delivered, .. }]));

    // Past 73 hours the window is closed: B expires, and its record is kept as late evidence.
    p.clock.advance(Duration::hours(1) + Duration::minutes(1));
    p.run_escalation().await;
    p.run_escalation().await;
    assert_eq!(p.record(&kb).await.status.state, State::ExpiredUnknown, "73 h: the receipt window closed");
    p.carrier_reports(&idb, "+14155550192", true, "Message has been accepted by phone carrier").await;
    p.run_status().await;
    assert_eq!(p.record(&kb).await.status.state, State::ExpiredUnknown, "final states absorb");
    assert_eq!(receipt_effects(&p, &kb).await, vec![ReceiptEffect::Late]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_an_intent_expires_30_days_after_its_deadline_and_every_item_about_it_with_it() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("retention-1", "+14155550193")).await;
    p.run_sender().await;
    let key = key_of(&body);
    let record = p.record(&key).await;
    let id = record.status.sns_message_id.clone().expect("accepted");
    p.carrier_reports(&id, "+14155550193", true, "Message has been accepted by phone carrier").await;
    p.run_status().await;

    let expected = (record.intent.deadline + Duration::days(30)).timestamp();
    assert!(
        expected >= (record.intent.deadline + Duration::hours(73)).timestamp(),
        "the key outlives the 73-hour receipt window"
    );
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let table = p.stack.table("LedgerTable").to_owned();
    let expires = |item: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>| {
        item.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<i64>().ok())
    };
    // The intent (carrying its delivery record's observation) and the sender's observation (one
    // partition), and its SNS message-id index entry.
    let items = ddb
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", aws_sdk_dynamodb::types::AttributeValue::S(format!("INTENT#{key}")))
        .send()
        .await
        .expect("query")
        .items
        .unwrap_or_default();
    assert!(items.len() >= 2, "the intent and its observations: {}", items.len());
    let index = ddb
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", aws_sdk_dynamodb::types::AttributeValue::S(format!("MSG#{id}")))
        .send()
        .await
        .expect("query")
        .items
        .unwrap_or_default();
    assert_eq!(index.len(), 1, "the message-id index entry");
    let intent = items.iter().find(|i| i.get("sk").and_then(|v| v.as_s().ok()).is_some_and(|s| s == "INTENT"));
    assert_eq!(intent.and_then(expires), Some(expected), "the intent expires 30 days after its deadline");
    let carried = intent.map_or(0, |i| i.keys().filter(|name| name.starts_with("obs#log:")).count());
    assert_eq!(carried, 1, "the delivery record's observation is on the intent, and expires with it");
    // Everything else about it lives at least through the receipt window, and goes with it.
    let floor = (record.intent.deadline + Duration::hours(73)).timestamp();
    for item in items.iter().chain(&index) {
        let what = item.get("sk").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        let at = expires(item).unwrap_or_else(|| panic!("{what}: no expires_at: kept forever"));
        assert!(at >= floor && at <= expected + 73 * 3600, "{what}: expires at {at}, the intent at {expected}");
    }
}
