//! The storm: duplicates and faults everywhere at once, and the books still balance — on each
//! provider.
//!
//! `TOCSIN_STORM_INTENTS` intents (60 by default, the size CI runs; the bench command runs 200);
//! each request is sent to intake three times concurrently; each queue message is delivered to
//! the sender three times concurrently; every AWS call the functions make passes a fault proxy
//! that fails about one call in ten (dropped responses, resets, throttling, 5xx — each a function
//! of the seed and the request, see `fault_proxy`). Then the carrier reports (one SMS in ten
//! fails), the status function and the sweep run until everything settles.
//!
//! Upper bound: one SMS per intent at most (an unknown outcome: zero or one, never two); every
//! intent ends delivered or escalated. Lower bound, from the proxy's own fault log: an intent
//! with no SMS must have met a fault that can keep it from the provider (`can_stop_an_intent`),
//! and an intent with an SMS ends as the carrier reported it. The providers differ in one place,
//! and the storm pins it: under SNS a fault that lost what SNS answered (the message id, the only
//! tie between the SMS and the alert) leaves the intent unknown, never settled on a record nothing
//! ties to it, and escalated; under End User Messaging every event names its alert by key, so no
//! intent with an SMS stays unknown — each ends exactly as its carrier reported it. So delivered ≥
//! intents − (kept from the provider by a fault + failed by the carrier + unknown after a fault,
//! SNS only). A sender that never sends fails here. The books: SMS sent = delivered + failed by a
//! receipt + accepted without a receipt + unknown after a fault.

use std::collections::{HashMap, HashSet};

use chrono::Duration;
use futures::StreamExt;
use tocsin::domain::State;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::spend::hour_of;
use tocsin::domain::state::ReceiptEffect;
use tocsin_harness::eum::{Carrier, CarrierBehaviour};
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record, sqs_event};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Proxied, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

/// The storm's size: `TOCSIN_STORM_INTENTS`, or 60 — enough for every fault kind to hit several
/// intents at these rates (about 120 sends, 400 ledger writes) in about a minute.
fn intents() -> usize {
    match std::env::var("TOCSIN_STORM_INTENTS") {
        Ok(v) => v
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or_else(|| panic!("TOCSIN_STORM_INTENTS must be a positive number of intents, not {v:?}")),
        Err(_) => 60,
    }
}

/// The fault seed: `TOCSIN_STORM_SEED`, or 2026.
fn seed() -> u64 {
    std::env::var("TOCSIN_STORM_SEED").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(2026)
}

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

/// Whether intent `i`'s SMS fails at the carrier: one in ten.
fn carrier_fails(i: usize) -> bool {
    i.is_multiple_of(10)
}

/// The provider the storm sends through, and what differs with it: the send call and its faults,
/// the carrier, the record of what went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    Sns,
    EndUserMessaging,
}

impl Provider {
    fn options(self) -> Options {
        let base = match self {
            Provider::Sns => Options::sns(),
            Provider::EndUserMessaging => Options::end_user_messaging(),
        };
        // One producer's storm of duplicates and retries: far above the default producer rate,
        // which is not what this test is about (tests/tests/producers.rs is).
        Options {
            env: vec![("TOCSIN_ORPHAN_WAIT", "0s"), ("TOCSIN_PRODUCER_RATE_PER_MINUTE", "100000")],
            fault_seed: Some(seed()),
            ..base
        }
    }

    /// The operation that sends an SMS, as the fault proxy names it.
    fn send_operation(self) -> &'static str {
        match self {
            Provider::Sns => "SNS.Publish",
            Provider::EndUserMessaging => "PinpointSMSVoiceV2.SendTextMessage",
        }
    }

    fn add_send_faults(self, proxy: &FaultProxy) {
        let op = self.send_operation();
        proxy.add_rule(Rule::sometimes(op, Fault::DropResponse, 0.03));
        proxy.add_rule(Rule::sometimes(op, Fault::Reset, 0.02));
        match self {
            Provider::Sns => {
                proxy.add_rule(Rule::sometimes(op, Fault::sns_throttling(), 0.03));
                proxy.add_rule(Rule::sometimes(op, Fault::sns_error("InternalError", "injected", 500), 0.02));
            }
            Provider::EndUserMessaging => {
                proxy.add_rule(Rule::sometimes(
                    op,
                    Fault::eum_error("ThrottlingException", "Rate exceeded", None),
                    0.03,
                ));
                proxy.add_rule(Rule::sometimes(
                    op,
                    Fault::eum_error("InternalServerException", "injected", None),
                    0.02,
                ));
            }
        }
    }

    /// Faults that can legitimately leave an intent undelivered: any on its send (a reset never
    /// reaches the provider; five retryable answers in a row fail it), and a lost answer to a
    /// write of its ledger item (a claim that took effect unheard lapses to `send_unknown`,
    /// nothing sent). An error answer to a write took no effect and is retried; reads, queue calls
    /// and log searches are retried too — none of those can stop an intent.
    fn can_stop_an_intent(self, f: &Proxied) -> bool {
        f.operation == self.send_operation()
            || (f.what == "DropResponse"
                && matches!(
                    f.operation.as_str(),
                    "DynamoDB_20120810.UpdateItem"
                        | "DynamoDB_20120810.TransactWriteItems"
                        | "DynamoDB_20120810.PutItem"
                ))
    }

    /// End User Messaging's carrier is the stand-in, told before the storm what each number's
    /// carrier does: one in ten unreachable, and the bad day's habits — every seventh number's
    /// events written twice, every fifth's after a `TEXT_PENDING`. SNS's carrier is played after
    /// each round ([`report_and_apply`]).
    async fn prepare_carrier(self, p: &Pipeline, intents: usize) {
        if self == Provider::Sns {
            return;
        }
        for i in 0..intents {
            let behaviour = if carrier_fails(i) { CarrierBehaviour::Unreachable } else { CarrierBehaviour::Deliver };
            let mut carrier = Carrier::new(behaviour);
            if i.is_multiple_of(7) {
                carrier = carrier.duplicated();
            }
            if i.is_multiple_of(5) {
                carrier = carrier.after_pending();
            }
            p.emulator.eum().set_carrier(&number(i), carrier).await.expect("carrier");
        }
    }

    /// Every SMS that went out, as (destination, provider message id).
    async fn sent(self, p: &Pipeline) -> Vec<(String, String)> {
        match self {
            Provider::Sns => {
                p.emulator.sent_sms().await.expect("sms").into_iter().map(|m| (m.phone_number, m.message_id)).collect()
            }
            Provider::EndUserMessaging => p
                .emulator
                .eum()
                .sent_texts()
                .await
                .expect("texts")
                .into_iter()
                .map(|t| (t.destination, t.message_id))
                .collect(),
        }
    }

    /// The carrier's verdicts reach the status function: SNS's records written and handed over,
    /// or the stand-in's events read from the stack's event group and handed over.
    async fn report_and_apply(self, p: &Pipeline, reported: &mut Reported) {
        match self {
            Provider::Sns => report_and_apply(p, reported).await,
            Provider::EndUserMessaging => apply_events(p, reported).await,
        }
    }
}

/// What the carrier has reported so far: each SMS's verdict by provider message id, and (End User
/// Messaging) the event ids already handed to the status function.
#[derive(Default)]
struct Reported {
    verdicts: HashMap<String, bool>,
    events_seen: HashSet<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_duplicates_and_faults_sends_at_most_one_sms_per_intent_and_delivers_all_the_faults_allow() {
    storm(Provider::Sns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_end_user_messaging_a_storm_sends_at_most_one_sms_per_intent_and_settles_every_sms_by_its_own_events() {
    storm(Provider::EndUserMessaging).await;
}

async fn storm(provider: Provider) {
    let started = std::time::Instant::now();
    let intents = intents();
    let p = Pipeline::start_with(provider.options()).await;
    assert_eq!(p.uses_end_user_messaging(), provider == Provider::EndUserMessaging);
    // Early in a UTC hour, so that all of the storm's escalations fall into one hour of their
    // producer's cap (`ProducerEscalationsPerHour`): whether a storm folds some depends on its
    // size, not on the minute the test happens to start at.
    let now = p.clock.now_utc();
    p.clock.advance(hour_of(now) + Duration::hours(1) + Duration::seconds(5) - now);
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
    provider.add_send_faults(&proxy);
    proxy.add_rule(Rule::sometimes(
        "Logs_20140328.FilterLogEvents",
        Fault::json_error("ThrottlingException", "Rate exceeded", 400),
        0.10,
    ));
    provider.prepare_carrier(&p, intents).await;

    // 1. Intake: every request three times at once; callers retry a 503 with the same body.
    let requests: Vec<_> = (0..intents).flat_map(|i| std::iter::repeat_n(i, 3)).collect();
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
    assert_eq!(keys.len(), intents);

    // 2-4. Sender (every message three times at once), carrier reports, status.
    drive_sender(&p).await;
    let mut reported = Reported::default();
    provider.report_and_apply(&p, &mut reported).await;

    // 5. Eleven minutes on: lapsed leases become unknown, unknowns are reconciled from the logs,
    //    queued intents whose message was lost are re-enqueued — and sent.
    p.clock.advance(Duration::minutes(11));
    for _ in 0..10 {
        sweep(&p).await;
    }
    drive_sender(&p).await;
    provider.report_and_apply(&p, &mut reported).await;
    for _ in 0..10 {
        sweep(&p).await;
    }
    // Past the deadline: whatever is not delivered goes to on-call. The schedule fires every
    // minute; a run that failed half-way holds its escalation lease for two.
    p.clock.advance(Duration::minutes(5));
    for _ in 0..20 {
        p.clock.advance(Duration::minutes(1));
        if sweep(&p).await.is_some_and(|run| run.read == 0) {
            break;
        }
    }
    let sent = provider.sent(&p).await;
    let mut per_number: HashMap<String, Vec<String>> = HashMap::new();
    for (to, id) in &sent {
        per_number.entry(to.clone()).or_default().push(id.clone());
    }
    // What could have stopped each intent, from the proxy's own log.
    let stopping_faults: Vec<String> =
        proxy.faults().into_iter().filter(|f| provider.can_stop_an_intent(f)).map(|f| f.body).collect();
    // The books.
    let escalations = p.escalations().await;
    let escalated_keys: HashSet<String> = escalations.iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    let mut by_state: HashMap<State, usize> = HashMap::new();
    let (mut delivered, mut failed_by_receipt, mut accepted_without_receipt, mut escalated) = (0, 0, 0, 0);
    let (mut could_be_stopped, mut carrier_failed, mut explained, mut unknown_with_sms) = (0, 0, 0, 0);
    let mut folded_escalations = 0;
    for (i, key) in &keys {
        let k = tocsin::domain::IdempotencyKey::parse(key).expect("key");
        let r = p.record(&k).await;
        let state = r.status.state;
        *by_state.entry(state).or_default() += 1;
        let sms = per_number.get(&number(*i)).cloned().unwrap_or_default();
        assert!(sms.len() <= 1, "intent {i}: {} SMS", sms.len());
        let receipts: Vec<ReceiptEffect> = p
            .timeline(&k)
            .await
            .into_iter()
            .filter_map(|o| match o.kind {
                ObservationKind::DeliveryStatus { effect, .. } => Some(effect),
                _ => None,
            })
            .collect();
        let moved_to = |s: State| receipts.iter().any(|e| matches!(e, ReceiptEffect::Moved { to, .. } if *to == s));
        match state {
            State::Delivered => {
                delivered += 1;
                assert_eq!(sms.len(), 1, "intent {i} delivered without an SMS?");
                assert!(moved_to(State::Delivered), "intent {i}: delivered without a delivery receipt");
            }
            State::Failed if moved_to(State::Failed) => failed_by_receipt += 1,
            State::Accepted | State::DelaySuspected | State::ExpiredUnknown => accepted_without_receipt += 1,
            _ => {}
        }
        if state != State::Delivered {
            assert!(r.status.escalation.is_some(), "intent {i} is {state} and was not escalated");
            // Past its producer's cap for the hour (`ProducerEscalationsPerHour`, 20) an escalation
            // is folded: recorded, not paged one by one — on-call was told by the notice the cap's
            // last paged escalation carried (checked below). A storm of 200 reaches the cap when
            // its escalations fall into one UTC hour, so whether any fold depends on the minute
            // the test starts at.
            let folded = r.status.escalation.as_ref().is_some_and(|e| e.folded);
            if folded {
                folded_escalations += 1;
                assert!(!escalated_keys.contains(key), "intent {i}: folded, yet paged one by one");
            } else {
                assert!(escalated_keys.contains(key), "intent {i}: escalated in the ledger but not on the queue");
            }
        }
        if r.status.escalation.is_some() {
            escalated += 1;
        }
        assert_ne!(state, State::Sending, "intent {i}: a lapsed claim must become unknown");
        if matches!(state, State::Received | State::Queued) {
            assert!(r.status.escalation.as_ref().is_some_and(|e| e.reason.contains("never sent")), "intent {i}");
        }

        // The lower bound.
        let encoded = number(*i).replace('+', "%2B");
        let stoppable = stopping_faults.iter().any(|body| body.contains(key.as_str()) || body.contains(&encoded));
        let carrier_ok = sms.first().and_then(|id| reported.verdicts.get(id)).copied();
        could_be_stopped += usize::from(stoppable);
        carrier_failed += usize::from(carrier_ok == Some(false));
        if sms.is_empty() {
            explained += 1;
            assert!(stoppable, "intent {i} is {state} without an SMS, and no injected fault could have stopped it");
        } else if state == State::SendUnknown {
            // What SNS answered was lost: nothing ties the carrier's record to the alert, so it is
            // never taken for its own; the alert is escalated (checked above). End User
            // Messaging's events name their alert by key: no such intent may remain.
            assert_eq!(
                provider,
                Provider::Sns,
                "intent {i}: its SMS's events name it by key, yet it is still unknown (carrier said {carrier_ok:?})"
            );
            unknown_with_sms += 1;
            assert!(stoppable, "intent {i} is unknown with an SMS, and no injected fault could have lost its answer");
        } else {
            // The carrier reported every SMS: its verdict reaches every intent it is tied to.
            let expected = if carrier_ok == Some(true) { State::Delivered } else { State::Failed };
            assert_eq!(state, expected, "intent {i}: its SMS was reported {carrier_ok:?} by the carrier");
        }
    }
    // What the injected faults and the carrier allow: the intents a fault kept from SNS (each
    // checked above against the proxy's log) and the SMS the carrier failed. Everything else is
    // delivered.
    let allowed_undelivered = explained + carrier_failed + unknown_with_sms;
    assert!(
        delivered >= intents - allowed_undelivered,
        "{delivered} delivered, but the faults and the carrier allow at most {allowed_undelivered} of {intents} undelivered"
    );
    assert!(delivered + escalated >= intents, "every intent delivered or escalated");
    assert_eq!(
        escalated_keys.len() + folded_escalations,
        escalated,
        "each escalated intent is on the queue under its own key, or folded past its producer's cap"
    );
    if folded_escalations > 0 {
        assert!(
            escalations.iter().any(|(m, _)| m.producer_cap_reached),
            "{folded_escalations} escalations folded, and no paged escalation told on-call the producer reached its cap"
        );
    }
    assert_eq!(
        sent.len(),
        delivered + failed_by_receipt + accepted_without_receipt + unknown_with_sms,
        "SMS sent = delivered + failed by a receipt + accepted without a receipt + unknown (states {by_state:?})"
    );
    let summary = serde_json::json!({
        "provider": format!("{provider:?}"),
        "intents": intents,
        "seed": seed(),
        "intake_calls": intents * 3,
        "proxied_calls": proxy.requests().len(),
        "faults": proxy.injected(),
        "sms": sent.len(),
        "delivered": delivered,
        "failed_by_receipt": failed_by_receipt,
        "accepted_without_receipt": accepted_without_receipt,
        "escalated": escalated,
        "escalation_messages": escalations.len(),
        "folded_escalations": folded_escalations,
        "could_be_stopped_by_faults": could_be_stopped,
        "carrier_failed": carrier_failed,
        "without_sms_each_explained_by_a_fault": explained,
        "unknown_with_sms_after_a_fault": unknown_with_sms,
        "send_answers_lost": proxy
            .faults()
            .iter()
            .filter(|f| f.operation == provider.send_operation() && f.what == "DropResponse")
            .count(),
        "allowed_undelivered": allowed_undelivered,
        "seconds": started.elapsed().as_secs_f64(),
    });
    // One line the bench command reads (`storm-summary: {json}`), with the states for people.
    eprintln!("storm-summary: {summary}");
    eprintln!("storm: states {by_state:?}");
}

/// The schedule firing the sweep. A run whose own AWS calls failed is a failed invocation: the
/// next minute's run is its retry (as on AWS), so it is not the storm's failure.
async fn sweep(p: &Pipeline) -> Option<escalation::RunSummary> {
    let stop = p.clock.in_(std::time::Duration::from_secs(50));
    // Boxed, as in the function's main: the sweep's future is too deep for a test thread's stack.
    Box::pin(p.escalation.run(stop)).await.ok()
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
            let (a, b, c) = tokio::join!(
                Box::pin(p.sender.handle(event.clone(), p.clock.invocation_deadline())),
                Box::pin(p.sender.handle(event.clone(), p.clock.invocation_deadline())),
                Box::pin(p.sender.handle(event, p.clock.invocation_deadline()))
            );
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

/// The carrier reports each SMS not reported yet (one in ten fails), noting its verdict by SNS
/// message id in `carrier`; the subscription
/// hands the records to status in batches, retried when an invocation fails (as Lambda does).
async fn report_and_apply(p: &Pipeline, reported: &mut Reported) {
    let sent = p.emulator.sent_sms().await.expect("sms");
    let mut lines = Vec::new();
    for (n, m) in sent.iter().enumerate() {
        if reported.verdicts.contains_key(&m.message_id) {
            continue;
        }
        let ok = !carrier_fails(n);
        reported.verdicts.insert(m.message_id.clone(), ok);
        let response = if ok {
            "Message has been accepted by phone carrier"
        } else {
            "Phone is currently unreachable/unavailable"
        };
        let record = sns_delivery_record(&m.message_id, &m.phone_number, ok, response, p.clock.now_utc());
        let group = if ok { "SmsSuccessLogGroup" } else { "SmsFailureLogGroup" };
        let written = p.clock.now_utc();
        put_log_at(p, p.stack.log_group(group), &record, written).await;
        lines.push((
            group,
            LogLine { id: format!("storm-{}", m.message_id), timestamp: written.timestamp_millis(), message: record },
        ));
    }
    for chunk in lines.chunks(25) {
        for group in ["SmsSuccessLogGroup", "SmsFailureLogGroup"] {
            let batch: Vec<LogLine> = chunk.iter().filter(|(g, _)| *g == group).map(|(_, l)| l.clone()).collect();
            hand_to_status(p, p.stack.log_group(group), &batch).await;
        }
    }
}

/// End User Messaging's carrier (the stand-in) wrote its events to the stack's event group as it
/// sent: the subscription hands the new ones to status in batches. Each SMS's verdict is what the
/// stand-in's carrier did with it.
async fn apply_events(p: &Pipeline, reported: &mut Reported) {
    for t in p.emulator.eum().sent_texts().await.expect("texts") {
        reported.verdicts.insert(t.message_id, t.behaviour == CarrierBehaviour::Deliver);
    }
    let group = p.stack.log_group("SmsEventLogGroup").to_owned();
    let mut lines = Vec::new();
    let mut token = None;
    loop {
        let page = p
            .logs
            .filter_log_events()
            .log_group_name(&group)
            .set_next_token(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("filter_log_events: {e}"));
        for e in page.events.unwrap_or_default() {
            let id = e.event_id.unwrap_or_default();
            if reported.events_seen.insert(id.clone()) {
                lines.push(LogLine {
                    id,
                    timestamp: e.timestamp.unwrap_or_default(),
                    message: e.message.unwrap_or_default(),
                });
            }
        }
        token = page.next_token;
        if token.is_none() {
            break;
        }
    }
    for batch in lines.chunks(25) {
        hand_to_status(p, &group, batch).await;
    }
}

/// One subscription invocation of `lines`, retried when it fails (as Lambda does).
async fn hand_to_status(p: &Pipeline, group: &str, lines: &[LogLine]) {
    if lines.is_empty() {
        return;
    }
    let event = logs_envelope(&logs_payload(group, "DATA_MESSAGE", lines));
    let mut ok = false;
    for _ in 0..8 {
        if p.status.handle(event.clone()).await.is_ok() {
            ok = true;
            break;
        }
    }
    assert!(ok, "a status batch kept failing");
}

/// SNS writing a delivery record to its log group, stamped with the pipeline's clock (which this
/// storm moves forward): the sweep's reconciliation searches the logs by that time.
async fn put_log_at(p: &Pipeline, group: &str, message: &str, at: chrono::DateTime<chrono::Utc>) {
    let stream = "sms-delivery";
    let _ = p.logs.create_log_stream().log_group_name(group).log_stream_name(stream).send().await;
    let event = aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
        .timestamp(at.timestamp_millis())
        .message(message)
        .build()
        .expect("log event");
    p.logs.put_log_events().log_group_name(group).log_stream_name(stream).log_events(event).send().await.expect("put");
}
