//! Other SMS traffic in the same account (recovery scenario 8). The delivery-status log groups are
//! the account's: Cognito MFA codes and other applications' SMS arrive in the same batches as
//! tocsin's own receipts. A record tocsin does not own costs a share of one batched lookup and is
//! kept (for hours) as an orphan; only a record younger than `TOCSIN_ORPHAN_WAIT` is waited for,
//! and never past the invocation's deadline. Costs are asserted on the AWS calls the emulator
//! recorded, not on wall time.

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};
use tocsin::domain::State;
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record};
use tocsin_harness::fault_proxy::{Fault, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const SUCCESS_GROUP: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber";
const DELIVERED: &str = "Message has been accepted by phone carrier";

/// Another application's SMS: a message id tocsin never saw, to a number it never texts, logged
/// `age` ago.
fn foreign(i: usize, age: chrono::Duration) -> LogLine {
    let at = Utc::now() - age;
    LogLine {
        id: format!("3{i:08}"),
        timestamp: at.timestamp_millis(),
        message: sns_delivery_record(
            &format!("f0000000-0000-4000-8000-{i:012}"),
            &format!("+1206555{:04}", i % 10_000),
            true,
            DELIVERED,
            at,
        ),
    }
}

fn own(id: &str, number: &str, n: usize, at: chrono::DateTime<Utc>) -> LogLine {
    LogLine {
        id: format!("4{n:08}"),
        timestamp: at.timestamp_millis(),
        message: sns_delivery_record(id, number, true, DELIVERED, at),
    }
}

fn count(calls: &[String], op: &str) -> usize {
    calls.iter().filter(|c| c.as_str() == format!("DynamoDB_20120810.{op}")).count()
}

/// Calls per operation, for assertion messages.
fn tally(calls: &[String]) -> std::collections::BTreeMap<&str, usize> {
    let mut t = std::collections::BTreeMap::new();
    for c in calls {
        *t.entry(c.as_str()).or_default() += 1;
    }
    t
}

/// The `foreign_records` metric this batch emitted (test runs write EMF lines to a file).
fn foreign_records_metric(expected: f64) -> bool {
    let metrics = tocsin_tests::emitted_metrics();
    metrics
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|d| d["function"] == json!("status") && d["foreign_records"].as_f64() == Some(expected))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_two_thousand_other_applications_records_applies_tocsins_own_well_within_the_timeout() {
    // The template's own TOCSIN_ORPHAN_WAIT (2 s): nothing here is young enough to be waited for.
    let p = Pipeline::start_with(Options::default()).await;
    let numbers = ["+14155550160", "+14155550161", "+14155550162", "+14155550163"];
    let mut ours = Vec::new();
    for (i, n) in numbers.iter().enumerate() {
        let (_, body) = p.submit(&alert(&format!("foreign-own-{i}"), n)).await;
        ours.push((key_of(&body), *n));
    }
    p.run_sender().await;
    // Records reach the subscription seconds to minutes after SNS logged them.
    let mut lines: Vec<LogLine> =
        (0..2_000).map(|i| foreign(i, chrono::Duration::seconds(5 + (i % 600) as i64))).collect();
    for (n, (key, number)) in ours.iter().enumerate() {
        let id = p.record(key).await.status.sns_message_id.expect("accepted");
        lines.insert(150 + n * 500, own(&id, number, n, p.clock.now_utc() - chrono::Duration::seconds(4)));
    }
    let event = logs_envelope(&logs_payload(SUCCESS_GROUP, "DATA_MESSAGE", &lines));

    p.emulator.start_recording().await.expect("recording");
    let started = Instant::now();
    let s = p.status.handle(event).await.expect("the batch is handled in one invocation");
    let took = started.elapsed();
    let calls = p.emulator.stop_recording().await.expect("recording");

    assert_eq!((s.events, s.delivered, s.orphaned), (2_004, 4, 2_000), "{s:?}");
    for (key, _) in &ours {
        assert_eq!(p.record(key).await.status.state, State::Delivered);
    }
    // 2,004 records → 21 lookups of at most 100 ids; no per-record read, no index query, no wait.
    assert_eq!(count(&calls, "BatchGetItem"), 21, "{:?}", tally(&calls));
    assert_eq!((count(&calls, "GetItem"), count(&calls, "Query")), (0, 0), "{:?}", tally(&calls));
    // The orphans of each chunk of 100 records go 25 to a BatchWriteItem: 20 chunks of 99-100
    // orphans and one of 4 records.
    let orphan_writes = count(&calls, "BatchWriteItem");
    assert_eq!(orphan_writes, 20 * 4 + 1, "{:?}", tally(&calls));
    // No observation item: each own receipt's observation travels on its intent's state write.
    assert_eq!(count(&calls, "PutItem"), 0, "{:?}", tally(&calls));
    // Per own receipt: the intent's state (carrying its observation), and the number's last-seen
    // carrier in the registry;
    // per batch, once it has all succeeded, one traffic tally per (minute, carrier) among its
    // records (every record's, counts only: the carrier view's traffic signal).
    let tallies = lines.iter().map(|l| l.timestamp.div_euclid(60_000)).collect::<std::collections::BTreeSet<_>>().len();
    assert_eq!(
        count(&calls, "UpdateItem"),
        4 + 4 + tallies,
        "one state write and one carrier write per own receipt, and the tallies"
    );
    assert_eq!(calls.len(), 21 + orphan_writes + 4 + 4 + tallies, "nothing else");
    assert!(foreign_records_metric(2_000.0), "the foreign traffic is counted");
    // Secondary, generous: the function's timeout is 30 s (the old path needed minutes here).
    assert!(took < p.status.timeout, "took {took:?}");
}

/// Only a record younger than the wait can be ahead of the sender's MessageId write. Here one of
/// tocsin's own is, among 300 other young records: the chunk waits once (the record's time + the
/// wait), looks up again once, and finds it; the others are kept, with no search for whose they
/// might be (the status role may query no index: the IAM gate would refuse it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_record_ahead_of_the_senders_write_is_waited_for_once_per_chunk() {
    let p = Pipeline::start_with(Options { fault_seed: Some(21), ..Default::default() }).await;
    let proxy = p.proxy.as_ref().expect("proxy");
    let number = "+14155550164";
    let (_, body) = p.submit(&alert("foreign-young-1", number)).await;
    let key = key_of(&body);
    // The sender's message-index write lands one second after SNS answered.
    proxy.add_rule(
        Rule::once("DynamoDB_20120810.PutItem", Fault::Delay(Duration::from_secs(1))).when_body_contains("MSG#"),
    );
    let carrier = async {
        let id = loop {
            if let Some(sms) = p.emulator.sent_sms().await.expect("sms").first() {
                break sms.message_id.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let mut lines: Vec<LogLine> = (0..300).map(|i| foreign(i, chrono::Duration::zero())).collect();
        lines.insert(120, own(&id, number, 0, p.clock.now_utc()));
        p.emulator.start_recording().await.expect("recording");
        let s = p.status.handle(logs_envelope(&logs_payload(SUCCESS_GROUP, "DATA_MESSAGE", &lines))).await;
        (s.expect("handled"), p.emulator.stop_recording().await.expect("recording"))
    };
    let (_, (s, calls)) = tokio::join!(p.run_sender(), carrier);

    assert_eq!((s.delivered, s.orphaned), (1, 300), "{s:?}");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    // 301 records → 4 chunks, each looked up at most twice (before and after its wait; a chunk
    // taken up after the wait is over holds no young record any more).
    let lookups = count(&calls, "BatchGetItem");
    assert!((5..=8).contains(&lookups), "{lookups} lookups: {:?}", tally(&calls));
    assert_eq!(count(&calls, "GetItem"), 0);
    // 300 orphans, 25 to a write (per chunk of 100 records: ⌈orphans ÷ 25⌉); the receipt's
    // observation, plus the sender's own puts (its observation and message index) that fall
    // inside the recording.
    let orphan_writes = count(&calls, "BatchWriteItem");
    assert!((12..=16).contains(&orphan_writes), "{orphan_writes} BatchWriteItem: {:?}", tally(&calls));
    let puts = count(&calls, "PutItem");
    assert!((1..=3).contains(&puts), "{puts} PutItem: {:?}", tally(&calls));
}

/// The wait for a young record never reaches past the invocation's deadline (less a margin): a
/// wait configured far longer than the time left is cut to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_the_senders_write_never_outlasts_the_invocation() {
    let p = Pipeline::start_with(Options { env: vec![("TOCSIN_ORPHAN_WAIT", "10m")], ..Default::default() }).await;
    let lines: Vec<LogLine> = (0..50).map(|i| foreign(i, chrono::Duration::zero())).collect();
    let event = logs_envelope(&logs_payload(SUCCESS_GROUP, "DATA_MESSAGE", &lines));
    let deadline = p.clock.in_(status::DEADLINE_MARGIN + Duration::from_secs(1));
    let s = tokio::time::timeout(Duration::from_secs(60), p.status.handler.handle(event, deadline))
        .await
        .expect("no 10-minute wait")
        .expect("handled");
    assert_eq!(s.orphaned, 50, "{s:?}");
    assert!(p.clock.now_utc() < deadline, "answered before the deadline, not after a 10-minute wait");
}

/// DynamoDB may leave keys of a BatchGetItem unprocessed (throttling): they are asked again, and
/// the record is applied, not orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_ids_dynamodb_leaves_unprocessed_are_looked_up_again() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        fault_seed: Some(22),
        ..Default::default()
    })
    .await;
    let number = "+14155550165";
    let (_, body) = p.submit(&alert("foreign-unprocessed-1", number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    let table = p.stack.table("LedgerTable").to_owned();
    let unprocessed = json!({
        "Responses": {(table.clone()): []},
        "UnprocessedKeys": {(table): {"Keys": [{"pk": {"S": format!("MSG#{id}")}, "sk": {"S": "MSG"}}], "ConsistentRead": true}}
    });
    let proxy = p.proxy.as_ref().expect("proxy");
    proxy.add_rule(Rule::times(
        "DynamoDB_20120810.BatchGetItem",
        Fault::Respond { status: 200, content_type: "application/x-amz-json-1.0", body: unprocessed.to_string() },
        2,
    ));
    let lines = [own(&id, number, 0, p.clock.now_utc() - chrono::Duration::seconds(30))];
    let s = p.status.handle(logs_envelope(&logs_payload(SUCCESS_GROUP, "DATA_MESSAGE", &lines))).await.expect("ok");
    assert_eq!((s.delivered, s.orphaned), (1, 0), "{s:?}");
    assert_eq!(proxy.injected(), 2, "answered unprocessed twice, then looked up a third time");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}
