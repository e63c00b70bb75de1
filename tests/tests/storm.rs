//! The storm: duplicates and faults everywhere at once, and the books still balance.
//!
//! 200 intents; each request is sent to intake three times concurrently; each queue message is
//! delivered to the sender three times concurrently; every AWS call the functions make passes a
//! fault proxy that fails about one call in ten (dropped responses, resets, throttling, 5xx —
//! seeded, so a run is repeatable). Then the carrier reports, the status function and the sweep
//! run until everything settles. Exactly one SMS per intent (or, for an unknown outcome, zero or
//! one — never two); every intent ends delivered or escalated; the counts reconcile.

use std::collections::{HashMap, HashSet};

use chrono::Duration;
use futures::StreamExt;
use tocsin::domain::State;
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record, sqs_event};
use tocsin_harness::fault_proxy::{Fault, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const INTENTS: usize = 200;

fn number(i: usize) -> String {
    format!("+1415556{:04}", i)
}

fn ddb_error(t: &str) -> Fault {
    Fault::json_error(
        &format!("com.amazonaws.dynamodb.v20120810#{t}"),
        "injected",
        if t.starts_with("Internal") { 500 } else { 400 },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_duplicates_and_faults_sends_at_most_one_sms_per_intent_and_loses_nothing() {
    let p = Pipeline::start_with(Options {
        env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
        fault_seed: Some(2026),
        ..Default::default()
    })
    .await;
    let proxy = p.proxy.clone().expect("proxy");
    for op in ["PutItem", "GetItem", "UpdateItem", "TransactWriteItems", "Query"] {
        let op = format!("DynamoDB_20120810.{op}");
        proxy.add_rule(Rule::sometimes(&op, Fault::DropResponse, 0.04));
        proxy.add_rule(Rule::sometimes(&op, ddb_error("InternalServerError"), 0.03));
        proxy.add_rule(Rule::sometimes(&op, ddb_error("ProvisionedThroughputExceededException"), 0.03));
    }
    for op in ["AmazonSQS.SendMessage", "AmazonSQS.ChangeMessageVisibility"] {
        proxy.add_rule(Rule::sometimes(op, Fault::DropResponse, 0.05));
        proxy.add_rule(Rule::sometimes(op, Fault::json_error("InternalError", "injected", 500), 0.05));
    }
    proxy.add_rule(Rule::sometimes("SNS.Publish", Fault::DropResponse, 0.03));
    proxy.add_rule(Rule::sometimes("SNS.Publish", Fault::Reset, 0.02));
    proxy.add_rule(Rule::sometimes("SNS.Publish", Fault::sns_throttling(), 0.03));
    proxy.add_rule(Rule::sometimes("SNS.Publish", Fault::sns_error("InternalError", "injected", 500), 0.02));
    proxy.add_rule(Rule::sometimes(
        "Logs_20140328.FilterLogEvents",
        Fault::json_error("ThrottlingException", "Rate exceeded", 400),
        0.10,
    ));

    // 1. Intake: every request three times at once; callers retry a 503 with the same body.
    let requests: Vec<_> = (0..INTENTS).flat_map(|i| std::iter::repeat_n(i, 3)).collect();
    let answers: Vec<(usize, String)> = futures::stream::iter(requests)
        .map(|i| {
            let p = &p;
            async move {
                let req = alert(&format!("storm-{i}"), &number(i));
                for _ in 0..20 {
                    let (status, body) = p.submit(&req).await;
                    match status {
                        200 | 201 => return (i, key_of(&body).to_string()),
                        503 => continue,
                        other => panic!("request {i}: unexpected {other}: {body}"),
                    }
                }
                panic!("request {i}: still unavailable after 20 tries");
            }
        })
        .buffer_unordered(24)
        .collect()
        .await;
    let mut keys: HashMap<usize, String> = HashMap::new();
    for (i, k) in answers {
        assert_eq!(keys.entry(i).or_insert_with(|| k.clone()), &k, "one key per business event");
    }
    assert_eq!(keys.len(), INTENTS);

    // 2-4. Sender (every message three times at once), carrier reports, status.
    drive_sender(&p).await;
    let mut reported = HashSet::new();
    report_and_apply(&p, &mut reported).await;

    // 5. Eleven minutes on: lapsed leases become unknown, unknowns are reconciled from the logs,
    //    queued intents whose message was lost are re-enqueued — and sent.
    p.clock.advance(Duration::minutes(11));
    for _ in 0..10 {
        p.run_escalation().await;
    }
    drive_sender(&p).await;
    report_and_apply(&p, &mut reported).await;
    for _ in 0..10 {
        p.run_escalation().await;
    }
    // Past the deadline: whatever is not delivered goes to on-call. The schedule fires every
    // minute; a run that failed half-way holds its escalation lease for two.
    p.clock.advance(Duration::minutes(5));
    for _ in 0..20 {
        p.clock.advance(Duration::minutes(1));
        let run = p.run_escalation().await;
        if run.read == 0 {
            break;
        }
    }
    let sent = p.emulator.sent_sms().await.expect("sms");
    let mut per_number: HashMap<String, usize> = HashMap::new();
    for m in &sent {
        *per_number.entry(m.phone_number.clone()).or_default() += 1;
    }

    // The books.
    let escalations = p.escalations().await;
    let escalated_keys: HashSet<String> = escalations.iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    let mut by_state: HashMap<State, usize> = HashMap::new();
    let mut delivered = 0;
    let mut escalated = 0;
    let mut with_sms = 0;
    for (i, key) in &keys {
        let r = p.record(&tocsin::domain::IdempotencyKey::parse(key).expect("key")).await;
        *by_state.entry(r.status.state).or_default() += 1;
        let sms = per_number.get(&number(*i)).copied().unwrap_or(0);
        with_sms += usize::from(sms == 1);
        assert!(sms <= 1, "intent {i}: {sms} SMS");
        if r.status.state == State::Delivered {
            delivered += 1;
            assert_eq!(sms, 1, "intent {i} delivered without an SMS?");
        } else {
            assert!(r.status.escalation.is_some(), "intent {i} is {} and was not escalated", r.status.state);
            assert!(escalated_keys.contains(key), "intent {i}: escalated in the ledger but not on the queue");
        }
        if r.status.escalation.is_some() {
            escalated += 1;
        }
        assert_ne!(r.status.state, State::Sending, "intent {i}: a lapsed claim must become unknown");
        if matches!(r.status.state, State::Received | State::Queued) {
            assert!(r.status.escalation.as_ref().is_some_and(|e| e.reason.contains("never sent")), "intent {i}");
        }
    }
    assert!(delivered + escalated >= INTENTS, "every intent delivered or escalated");
    assert_eq!(escalated_keys.len(), escalated, "each escalated intent is on the queue, under its own key");
    assert_eq!(sent.len(), with_sms, "every SMS belongs to exactly one intent");
    eprintln!(
        "storm: {INTENTS} intents, {} intake calls, {} SMS, {} delivered, {} escalated ({} escalation messages), states {:?}, {} faults injected in {} proxied calls",
        INTENTS * 3,
        sent.len(),
        delivered,
        escalated,
        escalations.len(),
        by_state,
        proxy.injected(),
        proxy.log().len()
    );
}

/// The SQS event source, with every message handed to three senders at once. A message is gone
/// once any copy acknowledged it (as with SQS); one every copy failed comes back next round.
async fn drive_sender(p: &Pipeline) {
    let q = p.stack.queue("SendQueue").clone();
    for _round in 0..40 {
        let msgs = p.receive(&q.url, 1000).await;
        if msgs.is_empty() {
            break;
        }
        for batch in msgs.chunks(10) {
            let event = sqs_event(&q.arn, batch);
            let (a, b, c) =
                tokio::join!(p.sender.handle(event.clone()), p.sender.handle(event.clone()), p.sender.handle(event));
            let failed_everywhere: HashSet<String> = [a, b, c]
                .iter()
                .map(|r| r.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect::<HashSet<_>>())
                .reduce(|x, y| x.intersection(&y).cloned().collect())
                .unwrap_or_default();
            for m in batch {
                let handle = m.receipt_handle.clone().unwrap_or_default();
                if failed_everywhere.contains(m.message_id.as_deref().unwrap_or_default()) {
                    let _ = p
                        .sqs
                        .change_message_visibility()
                        .queue_url(&q.url)
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .send()
                        .await;
                } else {
                    let _ = p.sqs.delete_message().queue_url(&q.url).receipt_handle(handle).send().await;
                }
            }
        }
    }
}

/// The carrier reports each SMS not reported yet (one in ten fails for now); the subscription
/// hands the records to status in batches, retried when an invocation fails (as Lambda does).
async fn report_and_apply(p: &Pipeline, reported: &mut HashSet<String>) {
    let sent = p.emulator.sent_sms().await.expect("sms");
    let mut lines = Vec::new();
    for (n, m) in sent.iter().enumerate() {
        if !reported.insert(m.message_id.clone()) {
            continue;
        }
        let ok = n % 10 != 0;
        let response = if ok {
            "Message has been accepted by phone carrier"
        } else {
            "Phone is currently unreachable/unavailable"
        };
        let record = sns_delivery_record(&m.message_id, &m.phone_number, ok, response, p.clock.now_utc());
        let group = if ok { "SmsSuccessLogGroup" } else { "SmsFailureLogGroup" };
        p.put_log(p.stack.log_group(group), &record).await;
        lines.push((
            group,
            LogLine {
                id: format!("storm-{}", m.message_id),
                timestamp: chrono::Utc::now().timestamp_millis(),
                message: record,
            },
        ));
    }
    for chunk in lines.chunks(25) {
        for group in ["SmsSuccessLogGroup", "SmsFailureLogGroup"] {
            let batch: Vec<LogLine> = chunk.iter().filter(|(g, _)| *g == group).map(|(_, l)| l.clone()).collect();
            if batch.is_empty() {
                continue;
            }
            let event = logs_envelope(&logs_payload(p.stack.log_group(group), "DATA_MESSAGE", &batch));
            let mut ok = false;
            for _ in 0..8 {
                if p.status.handle(event.clone()).await.is_ok() {
                    ok = true;
                    break;
                }
            }
            assert!(ok, "a status batch kept failing");
        }
    }
}
