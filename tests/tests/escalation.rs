//! Escalation: every undelivered alert past its deadline reaches on-call, once; the sweep's cost
//! follows the due intents, not the table. Real emulator calls throughout.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration as StdDuration;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use chrono::Duration;
use tocsin::adapters::ledger::DynamoLedger;

use tocsin::domain::State;
use tocsin::ports::{DueIndex, IntentStore};
use tocsin_harness::events::sqs_event;
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

/// Submits and sends `n` alerts (all accepted, none delivered).
async fn accepted(p: &Pipeline, prefix: &str, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(10) {
        let bodies: Vec<_> =
            chunk.iter().map(|i| alert(&format!("{prefix}-{i}"), &format!("+1415555{:04}", 1000 + i))).collect();
        let answers = futures::future::join_all(bodies.iter().map(|b| p.submit(b))).await;
        keys.extend(answers.iter().map(|(_, b)| key_of(b).to_string()));
    }
    p.run_sender().await;
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_overlapping_runs_over_fifty_due_intents_escalate_each_exactly_once() {
    // Fifty of one producer: above its escalation cap (20 an hour), which would fold most of them
    // (`producers.rs` pins that); here every one is paged, to count the messages.
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_PRODUCER_ESCALATIONS_PER_HOUR", "1000")],
        ..Default::default()
    })
    .await;
    let keys = accepted(&p, "overlap", 50).await;
    p.clock.advance(Duration::minutes(16));
    let (a, b) = tokio::join!(p.run_escalation(), p.run_escalation());
    assert_eq!(a.escalated + b.escalated, 50, "{a:?} {b:?}");
    let msgs = p.escalations().await;
    assert_eq!(msgs.len(), 50);
    let unique: HashSet<String> = msgs.iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    assert_eq!(unique, keys.into_iter().collect::<HashSet<_>>());
    for (m, attrs) in &msgs {
        assert_eq!(attrs.get("idempotency_key"), Some(&m.idempotency_key), "the key travels as an attribute too");
        assert!(m.recipient_masked.contains("****"));
        assert!(!m.history.is_empty() && !m.reason.is_empty());
    }
    let again = p.run_escalation().await;
    assert_eq!((again.read, again.escalated), (0, 0), "escalated intents leave the due index");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_marking_and_sending_is_recovered_by_a_later_run() {
    let p = Pipeline::start().await;
    let keys = accepted(&p, "crash-mark", 1).await;
    let key = tocsin::domain::IdempotencyKey::parse(&keys[0]).expect("key");
    p.clock.advance(Duration::minutes(16));
    // A run took the escalation lease and died before sending.
    let now = p.clock.now_utc();
    assert!(
        p.ledger.lease_escalation(&key, "crashed-run", now, now + Duration::minutes(2)).await.expect("lease").is_some()
    );
    let held = p.run_escalation().await;
    assert_eq!((held.escalated, held.escalation_lease_held_elsewhere), (0, 1));
    assert!(p.escalations().await.is_empty());
    p.clock.advance(Duration::minutes(3));
    assert_eq!(p.run_escalation().await.escalated, 1);
    assert_eq!(p.escalations().await.len(), 1);
    assert!(p.record(&key).await.status.escalation.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_sending_before_marking_sends_again_with_the_same_key() {
    let p = Pipeline::start().await;
    let keys = accepted(&p, "crash-send", 1).await;
    p.clock.advance(Duration::minutes(11));
    assert_eq!(p.run_escalation().await.delay_suspected, 1, "marked in an earlier run");
    p.clock.advance(Duration::minutes(5));
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 3).await.expect("proxy");
    let sdk = tocsin_tests::function_sdk(&proxy.endpoint(), "EscalationFunction").await;
    let crashing = escalation::Escalator {
        store: DynamoLedger::new(aws_sdk_dynamodb::Client::new(&sdk), p.stack.table("LedgerTable"))
            .with_due_shards(p.ledger.due_shard_count()),
        send_queue: p.escalation.send_queue.clone(),
        escalations: p.escalation.escalations.clone(),
        logs: p.escalation.logs.clone(),
        registry: p.escalation.registry.clone(),
        clock: p.clock.clone(),
        config: p.escalation.config.clone(),
    };
    proxy.add_rule(Rule::times(
        "DynamoDB_20120810.TransactWriteItems",
        Fault::json_error("com.amazonaws.dynamodb.v20120810#InternalServerError", "boom", 500),
        10,
    ));
    let run = crashing.run(p.clock.in_(StdDuration::from_secs(30))).await.expect("run");
    assert_eq!(run.errors, 1);
    p.clock.advance(Duration::minutes(3));
    assert_eq!(p.run_escalation().await.escalated, 1);
    let msgs = p.escalations().await;
    assert_eq!(msgs.len(), 2, "at least once: sent again rather than lost");
    assert!(msgs.iter().all(|(m, a)| m.idempotency_key == keys[0] && a.get("idempotency_key") == Some(&keys[0])));
    assert_eq!(p.run_escalation().await.escalated, 0);
}

/// Writes `n` delivered intents straight into the ledger (they never enter the due index).
async fn seed_delivered(p: &Pipeline, n: usize) {
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let table = p.stack.table("LedgerTable").to_owned();
    let filler = "x".repeat(400);
    let writes: Vec<WriteRequest> = (0..n)
        .map(|i| {
            let item = HashMap::from([
                ("pk".to_owned(), AttributeValue::S(format!("INTENT#{i:064}"))),
                ("sk".to_owned(), AttributeValue::S("INTENT".into())),
                ("state".to_owned(), AttributeValue::S("delivered".into())),
                ("intent".to_owned(), AttributeValue::S(filler.clone())),
            ]);
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(item)).build().expect("put"))
                .build()
        })
        .collect();
    for chunk in writes.chunks(25) {
        ddb.batch_write_item().request_items(&table, chunk.to_vec()).send().await.expect("batch write");
    }
}

async fn sweep_reads(delivered: usize) -> (usize, BTreeMap<String, usize>) {
    let p = Pipeline::start().await;
    // The carrier view reads its traffic tallies an hour's item at a time, and the test clock
    // runs on with the wall clock: both runs sweep at half past an hour, so neither reads one
    // hour's item more because its minutes straddle an hour's end (it did, now and then).
    let sweep_at = p.clock.now_utc() + Duration::minutes(16);
    p.clock.advance(Duration::seconds((30 * 60 - sweep_at.timestamp().rem_euclid(3600)).rem_euclid(3600)));
    accepted(&p, "flat", 20).await;
    seed_delivered(&p, delivered).await;
    p.clock.advance(Duration::minutes(16));
    p.emulator.start_recording().await.expect("record");
    // The emulator scans the whole table for every index Query (17 partitions here), so the run
    // gets time enough to finish: what is compared is the reads, not the time.
    let run = p.run_escalation_within(StdDuration::from_secs(600)).await;
    assert!(run.complete, "{run:?}");
    let ops = p.emulator.stop_recording().await.expect("recording");
    let reads = ops
        .into_iter()
        .filter(|o| {
            o.starts_with("DynamoDB_20120810.")
                && (o.ends_with("Query") || o.ends_with("Scan") || o.ends_with("GetItem"))
        })
        .fold(BTreeMap::new(), |mut m, o| {
            *m.entry(o).or_insert(0) += 1;
            m
        });
    assert_eq!(run.escalated, 20);
    (run.read, reads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_items_a_sweep_reads_are_the_same_with_1000_and_10000_delivered_intents() {
    let (read_small, ops_small) = sweep_reads(1_000).await;
    let (read_large, ops_large) = sweep_reads(10_000).await;
    assert_eq!((read_small, read_large), (20, 20));
    assert_eq!(ops_small, ops_large, "the same read calls whatever the table size");
    assert!(!ops_small.contains_key("DynamoDB_20120810.Scan"), "never a scan: {ops_small:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_intent_becomes_delay_suspected_then_expired_unknown_after_73_hours() {
    let p = Pipeline::start().await;
    let keys = accepted(&p, "silent", 1).await;
    let key = tocsin::domain::IdempotencyKey::parse(&keys[0]).expect("key");
    p.clock.advance(Duration::minutes(11));
    let run = p.run_escalation().await;
    assert_eq!((run.delay_suspected, run.escalated), (1, 0), "a warning first, not a failure");
    assert_eq!(p.record(&key).await.status.state, State::DelaySuspected);
    p.clock.advance(Duration::minutes(5));
    assert_eq!(p.run_escalation().await.escalated, 1);
    p.clock.advance(Duration::hours(73));
    assert_eq!(p.run_escalation().await.expired_unknown, 1);
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::ExpiredUnknown);
    assert_eq!(p.escalations().await.len(), 1, "escalated once only");
    for shard in p.ledger.due_shards() {
        let (records, _) = p.ledger.due(&shard, p.clock.now_utc() + Duration::days(400), 100, None).await.expect("due");
        assert!(records.is_empty(), "settled intents leave the due index");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_is_paged_and_stops_before_the_time_budget_leaving_the_rest_due() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_SWEEP_PAGE_SIZE", "7")],
        ..Default::default()
    })
    .await;
    accepted(&p, "paged", 20).await;
    p.clock.advance(Duration::minutes(16));
    let out_of_time = Box::pin(p.escalation.run(p.clock.now_utc())).await.expect("run");
    assert_eq!((out_of_time.read, out_of_time.complete), (0, false));
    let run = p.run_escalation().await;
    assert_eq!((run.read, run.escalated, run.complete), (20, 20, true), "three pages of seven in one run");
    assert_eq!(p.escalations().await.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_sender_lease_is_turned_into_send_unknown_and_escalated_at_the_deadline() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("lapsed-1", "+14155550160")).await;
    let key = key_of(&body);
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "vanished-attempt", now, now + Duration::minutes(2)).await.expect("claim");
    p.clock.advance(Duration::minutes(3));
    assert_eq!(p.run_escalation().await.lease_expired_unknown, 1);
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
    p.clock.advance(Duration::minutes(13));
    assert_eq!(p.run_escalation().await.escalated, 1);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 0, "never re-sent blindly");
}

/// Found by the simulation with Lambda throttling in the world (End User Messaging seed 4833): the
/// sweep wrote its next look at an intent a whole schedule period after the moment it wrote it —
/// just after the next run's start — so the next run skipped an intent due at its deadline; the
/// run after that failed and the next ones were throttled: escalated past promise 7's bound. A
/// next check now lands just ahead of the run that writes it, and a run reads what was due when
/// it started: the next run escalates it, even one that starts a little under a period later
/// (the schedule's jitter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_due_after_a_run_is_escalated_by_the_next_run_even_one_starting_a_little_under_a_period_later() {
    let p = Pipeline::start().await;
    let mut a = alert("next-run-1", "+14155550161");
    a["deadline"] = serde_json::Value::from("3m");
    let (_, body) = p.submit(&a).await;
    let key = key_of(&body);
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "vanished-attempt", now, now + Duration::minutes(2)).await.expect("claim");
    // The lease has lapsed, the deadline is 10 s away: the run makes it send_unknown.
    p.clock.advance(Duration::seconds(170));
    let run = p.run_escalation().await;
    assert_eq!((run.lease_expired_unknown, run.escalated), (1, 0), "{run:?}");
    // The next run, 59 s later.
    p.clock.advance(Duration::seconds(59));
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 1, "escalated by the first run past its deadline: {run:?}");
    assert!(p.record(&key).await.status.escalation.is_some());
}

/// Found by the simulation (long mode, End User Messaging seed 129228): an alert failed by its
/// carrier at its deadline owed its escalation at once, but Lambda was throttled and no sweep ran;
/// an operator then resent it, and the resend's claim put the alert's next check at the lease's
/// end — the sweeps that could act at last skipped it, and it was escalated only once the lease
/// lapsed. A claim never postpones an escalation the alert owes: the next run escalates it while
/// the resend still holds the claim, and nothing is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_resend_of_an_alert_owing_its_escalation_does_not_postpone_it() {
    let p = Pipeline::start().await;
    let mut a = alert("resend-owes-escalation", "+14155550162");
    a["deadline"] = serde_json::Value::from("3m");
    let (_, body) = p.submit(&a).await;
    let key = key_of(&body);
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.expect("sms");
    assert_eq!(sms.len(), 1);
    p.clock.advance(Duration::minutes(3));
    p.carrier_reports(&sms[0].message_id, "+14155550162", false, "Unknown error attempting to reach phone").await;
    p.run_status().await;
    assert_eq!(p.record(&key).await.status.state, State::Failed);
    // No sweep ran (throttled); ten minutes on, an operator resends it, and the resend's publish
    // never reports back (its process died): the claim holds for two minutes.
    p.clock.advance(Duration::minutes(10));
    let now = p.clock.now_utc();
    let claim = tocsin::services::operator::OperatorClaim {
        key: &key,
        attempt_id: "operator:died-while-publishing",
        operator: "alice",
        reason: "carrier failure",
        now,
        lease_until: now + Duration::minutes(2),
    };
    let claimed = tocsin::services::operator::claim_for_operator(&p.ledger, claim).await.expect("claim");
    assert!(matches!(claimed, tocsin::services::operator::OperatorClaimOutcome::Claimed(_)), "{claimed:?}");
    p.clock.advance(Duration::seconds(30));
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 1, "escalated while the resend holds its claim: {run:?}");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Sending, "the resend's claim is untouched");
    assert!(r.status.escalation.is_some());
    assert_eq!(p.escalations().await.len(), 1);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1, "nothing sent again");
}

/// Found by the simulation (long mode, seed 24286): an alert escalated past its deadline has no
/// next check; re-enqueued, it was claimed, and the sender died before the separate write that
/// puts the lease's end in the due-index. It stayed `sending`, where no sweep ever looked. The
/// claim itself now gives an intent with no next check the lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_that_dies_right_after_claiming_an_intent_with_no_next_check_leaves_it_to_the_sweep() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("claimed-unindexed", "+14155550161")).await;
    let key = key_of(&body);
    p.ledger.set_next_check(&key, tocsin::ports::NextCheck::Remove, None).await.expect("no next check");
    let now = p.clock.now_utc();
    p.ledger.claim(&key, "died-after-claim", now, now + Duration::minutes(2)).await.expect("claim");
    p.clock.advance(Duration::minutes(3));
    assert_eq!(p.run_escalation().await.lease_expired_unknown, 1, "the sweep found the lapsed lease");
    assert_eq!(p.record(&key).await.status.state, State::SendUnknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_the_backlog_cannot_get_out_by_its_deadline_is_escalated_at_once_and_stays_eligible() {
    // One SMS part per second for the account. Ten alerts wait on the send queue; then 70 alerts due
    // in 2 minutes, which go on the urgent lane too (a backlog, under 5 minutes of slack). Storm
    // mode off: intake's lateness estimate is made only then (digests make the queue's length
    // overstate the wait; with storm mode on the sender's hand-back verdict says late).
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_SMS_RATE_PER_SECOND", "1"), ("TOCSIN_STORM_MODE", "off")],
        ..Default::default()
    })
    .await;
    let submit_all = |prefix: &'static str, from: usize, n: usize, deadline: &'static str| {
        let p = &p;
        async move {
            for chunk in (from..from + n).collect::<Vec<_>>().chunks(10) {
                let bodies: Vec<_> = chunk
                    .iter()
                    .map(|i| {
                        let mut a = alert(&format!("{prefix}-{i}"), &format!("+1415555{:04}", 3000 + i));
                        a["deadline"] = serde_json::Value::from(deadline);
                        a
                    })
                    .collect();
                for (status, body) in futures::future::join_all(bodies.iter().map(|b| p.submit(b))).await {
                    assert_eq!(status, 201, "{body}");
                }
            }
        }
    };
    submit_all("backlog", 0, 10, "15m").await;
    // Intake reads each queue's length at most every 5 s.
    tokio::time::sleep(StdDuration::from_millis(5_200)).await;
    submit_all("urgent", 10, 70, "2m").await;
    assert_eq!(p.queue_depth("UrgentSendQueue").await, 70);
    tokio::time::sleep(StdDuration::from_millis(5_200)).await;
    let mut late = alert("backlog-late", "+14155553999");
    late["deadline"] = serde_json::Value::from("1m");
    let (status, body) = p.submit(&late).await;
    assert_eq!(status, 201, "{body}");
    let late_key = key_of(&body);
    let (_, body) = p.submit(&alert("backlog-on-time", "+14155553998")).await;
    let on_time_key = key_of(&body);

    // The 1-minute alert overtakes the send queue on the urgent lane, but 70 urgent parts are ahead
    // of it there at 1 part/s: expected in 70 s, due in 60 s. On-call hears now, not in a minute.
    // The 2-minute ones had no urgent backlog ahead when they came: not said late.
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 1, "{run:?}");
    let msgs = p.escalations().await;
    let [(message, _)] = msgs.as_slice() else { panic!("one escalation: {msgs:?}") };
    assert_eq!(message.idempotency_key, late_key.as_str());
    assert!(message.reason.starts_with("SMS backlog: expected "), "{}", message.reason);
    assert!(message.reason.contains("it may yet be sent"), "{}", message.reason);
    let r = p.record(&late_key).await;
    assert!(matches!(r.status.state, State::Received | State::Queued), "still eligible: {}", r.status.state);
    assert!(r.status.escalation.is_some());
    assert!(p.record(&on_time_key).await.status.escalation.is_none(), "15 minutes is time enough");

    // Neither the next sweep nor the deadline escalates it a second time.
    assert_eq!(p.run_escalation().await.escalated, 0);
    p.clock.advance(Duration::seconds(61));
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 0, "{run:?}");
    assert!(p.escalations().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_the_sender_hands_back_for_longer_than_its_deadline_allows_is_escalated_at_once() {
    // Half a part per second for this instance (1 part/s over 2 instances); a 3-part message.
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_SMS_RATE_PER_SECOND", "1")],
        ..Default::default()
    })
    .await;
    let runbook = format!("https://runbooks.example.com/{}", "service-down-".repeat(27));
    let body = serde_json::json!({
        "event_id": "handed-back-late",
        "template": {"name": "service_down", "version": 1},
        "variables": {"service": "orders", "since": "22:00", "runbook": runbook},
        "recipient": "+14155553997",
        "deadline": "1m"
    });
    let (status, answer) = p.submit(&body).await;
    assert_eq!(status, 201, "{answer}");
    let key = key_of(&answer);
    assert_eq!(p.record(&key).await.intent.segments.segments, 3);
    // 4 s before its deadline, an invocation with too little time left to publish (14 s, of
    // which the publish timeout and the recording reserve take 13) hands it back for 6 s.
    p.clock.advance(Duration::seconds(56));
    let q = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&q.url, 10).await;
    let resp = p.sender.handle(sqs_event(&q.arn, &msgs), p.clock.in_(StdDuration::from_secs(14))).await;
    assert_eq!(resp.batch_item_failures.len(), 1, "handed back to the queue");
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Queued);
    assert!(r.status.late_expected.is_some_and(|e| e > r.intent.deadline), "{:?}", r.status.late_expected);
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 1, "{run:?}");
    let msgs = p.escalations().await;
    assert!(msgs[0].0.reason.starts_with("SMS backlog: expected "), "{}", msgs[0].0.reason);
}
