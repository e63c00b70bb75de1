//! Status: delivery truth from SNS delivery-status logs — append-only, monotonic, with immediate
//! suppression. Subscription events are built from the real record shapes and fed to the real
//! handler; every effect is read back from the emulator.

use chrono::Duration;
use serde_json::{Value, json};
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::RegistryEvent;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::state::ReceiptEffect;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::RecipientRegistry;
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Pipeline, alert, key_of};

const SUCCESS_GROUP: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber";
const FAILURE_GROUP: &str = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber/Failure";

/// Submits and sends one alert; returns its key and SNS message id.
async fn sent(p: &Pipeline, event: &str, number: &str) -> (IdempotencyKey, String) {
    let (_, body) = p.submit(&alert(event, number)).await;
    p.run_sender().await;
    let key = key_of(&body);
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    (key, id)
}

fn line(id: &str, message: String) -> LogLine {
    LogLine { id: id.into(), timestamp: chrono::Utc::now().timestamp_millis(), message }
}

fn record(p: &Pipeline, msg_id: &str, number: &str, success: bool, response: &str) -> String {
    sns_delivery_record(msg_id, number, success, response, p.clock.now_utc())
}

async fn feed(p: &Pipeline, group: &str, lines: &[LogLine]) -> status::Summary {
    let summary = p.status.handle(logs_envelope(&logs_payload(group, "DATA_MESSAGE", lines))).await;
    p.assert_iam_allowed();
    summary.expect("status")
}

fn load(path: &str) -> Value {
    let text = std::fs::read_to_string(tocsin_harness::workspace_root().join(path)).expect("file");
    serde_json::from_str(&text).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_events_and_control_messages_are_accepted() {
    let p = Pipeline::start().await;
    let control = p.status.handle(load("events/status/control-message.json")).await.expect("ok");
    assert!(control.control_message);
    // The AWS documentation's records name message ids this stack never sent: kept as orphans.
    for file in ["events/status/delivery-success.json", "events/status/delivery-failure.json"] {
        let s = p.status.handle(load(file)).await.expect("ok");
        assert_eq!((s.events, s.orphaned), (1, 1), "{file}");
    }
    assert_eq!(p.ledger_item_count().await, 2, "two orphans kept, nothing else written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_log_event_is_stored_once() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "dup-1", "+14155550140").await;
    let l = line("4001", record(&p, &id, "+14155550140", true, "Message has been accepted by phone carrier"));
    let first = feed(&p, SUCCESS_GROUP, &[l.clone(), l.clone()]).await;
    assert_eq!((first.delivered, first.duplicates), (1, 1), "{first:?}");
    let again = feed(&p, SUCCESS_GROUP, std::slice::from_ref(&l)).await;
    assert_eq!(again.duplicates, 1);
    let receipts =
        p.timeline(&key).await.into_iter().filter(|o| matches!(o.kind, ObservationKind::DeliveryStatus { .. })).count();
    assert_eq!(receipts, 1);
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_a_delivery_is_stored_and_counted_but_never_flips_the_state() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "conflict-1", "+14155550141").await;
    feed(
        &p,
        SUCCESS_GROUP,
        &[line("5001", record(&p, &id, "+14155550141", true, "Message has been accepted by phone carrier"))],
    )
    .await;
    let s = feed(
        &p,
        FAILURE_GROUP,
        &[line("5002", record(&p, &id, "+14155550141", false, "Unknown error attempting to reach phone"))],
    )
    .await;
    assert_eq!(s.conflicting, 1);
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.conflicts), (State::Delivered, 1));
    let effects: Vec<ReceiptEffect> = p
        .timeline(&key)
        .await
        .into_iter()
        .filter_map(|o| match o.kind {
            ObservationKind::DeliveryStatus { effect, .. } => Some(effect),
            _ => None,
        })
        .collect();
    assert_eq!(
        effects,
        vec![ReceiptEffect::Moved { from: State::Accepted, to: State::Delivered }, ReceiptEffect::Conflicting]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_records_keep_the_first_final_state() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "order-1", "+14155550142").await;
    // Both records in one batch, the failure first (batches carry no ordering guarantee).
    let s = feed(
        &p,
        FAILURE_GROUP,
        &[line("6001", record(&p, &id, "+14155550142", false, "Phone carrier is currently unreachable/unavailable"))],
    )
    .await;
    assert_eq!(s.failed, 1);
    feed(
        &p,
        SUCCESS_GROUP,
        &[line("6002", record(&p, &id, "+14155550142", true, "Message has been accepted by phone carrier"))],
    )
    .await;
    let r = p.record(&key).await;
    assert_eq!((r.status.state, r.status.conflicts), (State::Failed, 1));
    assert_eq!(p.timeline(&key).await.len(), 3, "accepted, and both records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delivery_after_escalation_is_recorded_without_un_escalating() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "late-1", "+14155550143").await;
    p.clock.advance(Duration::minutes(20));
    p.run_escalation().await;
    assert_eq!(p.escalations().await.len(), 1);
    let s = feed(
        &p,
        SUCCESS_GROUP,
        &[line("7001", record(&p, &id, "+14155550143", true, "Message has been accepted by phone carrier"))],
    )
    .await;
    assert_eq!(s.delivered, 1);
    let r = p.record(&key).await;
    assert_eq!(r.status.state, State::Delivered, "delivery truth still moves forward");
    assert!(r.status.escalation.is_some(), "the escalation stays a fact");
    let late = p
        .timeline(&key)
        .await
        .into_iter()
        .any(|o| matches!(o.kind, ObservationKind::DeliveryStatus { late: true, .. }));
    assert!(late, "shown as late");
    p.run_escalation().await;
    assert!(p.escalations().await.is_empty(), "not escalated again");
}

/// Status decides on the state an indexed receipt almost always finds (accepted with that message
/// id, not escalated) without reading it; the write's conditions catch every other case. Here the
/// intent was escalated while still `accepted`: the presumption is wrong only in that fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_for_an_alert_escalated_while_still_accepted_is_recorded_as_late() {
    let p = Pipeline::start().await;
    let mut short = alert("late-accepted-1", "+14155550147");
    short["deadline"] = json!("5m");
    let (_, body) = p.submit(&short).await;
    p.run_sender().await;
    let key = key_of(&body);
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    p.clock.advance(Duration::minutes(6));
    p.run_escalation().await;
    let escalated = p.record(&key).await;
    assert_eq!(escalated.status.state, State::Accepted, "no delay warning yet");
    assert!(escalated.status.escalation.is_some());

    let s = feed(
        &p,
        SUCCESS_GROUP,
        &[line("7101", record(&p, &id, "+14155550147", true, "Message has been accepted by phone carrier"))],
    )
    .await;
    assert_eq!(s.delivered, 1, "{s:?}");
    let late = p
        .timeline(&key)
        .await
        .into_iter()
        .any(|o| matches!(o.kind, ObservationKind::DeliveryStatus { late: true, .. }));
    assert!(late, "decided on the escalated record, not on the presumption");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}

/// The handler decodes the payload as a stream through a bounded window; a batch many times the
/// window is handled whole, in one invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_many_times_the_decoding_window_is_handled_whole() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "window-1", "+14155550148").await;
    let mut lines: Vec<LogLine> = (0..300).map(|i| line(&format!("80{i:03}"), format!("not a record {i}"))).collect();
    lines.insert(
        150,
        line("81000", record(&p, &id, "+14155550148", true, "Message has been accepted by phone carrier")),
    );
    let s = feed(&p, SUCCESS_GROUP, &lines).await;
    assert_eq!((s.events, s.unparseable, s.delivered), (301, 300, 1), "{s:?}");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_message_ids_and_poisoned_events_never_take_the_good_records_down() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "poison-1", "+14155550144").await;
    let s = feed(
        &p,
        SUCCESS_GROUP,
        &[
            line("8001", "[ERROR] not a delivery record".into()),
            line("8002", r#"{"status":"SUCCESS","delivery":{}}"#.into()),
            line("8003", record(&p, "00000000-0000-0000-0000-000000000000", "+14155550999", true, "ok")),
            line("8004", record(&p, &id, "+14155550144", true, "Message has been accepted by phone carrier")),
            line("8005", "{\"notification\":".into()),
        ],
    )
    .await;
    assert_eq!((s.unparseable, s.orphaned, s.delivered), (3, 1, 1), "{s:?}");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_is_not_base64_gzip_json_fails_the_invocation_and_writes_nothing() {
    let p = Pipeline::start().await;
    use base64::Engine;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, b"{not json").expect("gzip");
    let not_json = gz.finish().expect("gzip");
    for bad in [
        json!({"awslogs": {"data": "%%% not base64 %%%"}}),
        json!({"awslogs": {"data": b64(b"plain text, not gzip")}}),
        json!({"awslogs": {"data": b64(&not_json)}}),
        json!({"Records": []}),
    ] {
        let err = p.status.handle(bad.clone()).await.expect_err("malformed");
        assert!(matches!(err, status::StatusError::MalformedPayload(_)), "{bad}: {err}");
    }
    assert_eq!(p.ledger_item_count().await, 0);
}

/// The handler reads a payload as a stream: one that breaks off (never seen from CloudWatch Logs)
/// fails the invocation, the whole records before the break are applied (facts, stored once), and
/// a retry of the same payload adds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_breaks_off_keeps_the_whole_records_before_the_break_and_a_retry_adds_nothing() {
    let p = Pipeline::start().await;
    use base64::Engine;
    let (key, id) = sent(&p, "cut-1", "+14155550149").await;
    let good = line("9101", record(&p, &id, "+14155550149", true, "Message has been accepted by phone carrier"));
    let text = logs_payload(SUCCESS_GROUP, "DATA_MESSAGE", &[good.clone(), good.clone(), good]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &text.as_bytes()[..text.len() - 40]).expect("gzip");
    let cut_short =
        json!({"awslogs": {"data": base64::engine::general_purpose::STANDARD.encode(gz.finish().expect("gzip"))}});

    for attempt in 0..2 {
        let err = p.status.handle(cut_short.clone()).await.expect_err("malformed");
        assert!(matches!(err, status::StatusError::MalformedPayload(_)), "attempt {attempt}: {err}");
    }
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    let receipts =
        p.timeline(&key).await.into_iter().filter(|o| matches!(o.kind, ObservationKind::DeliveryStatus { .. })).count();
    assert_eq!(receipts, 1, "the record is stored once, whatever the retries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_missing_every_optional_field_still_count() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "sparse-1", "+14155550145").await;
    let bare = json!({"notification": {"messageId": id}, "status": "SUCCESS"}).to_string();
    assert_eq!(feed(&p, SUCCESS_GROUP, &[line("9001", bare)]).await.delivered, 1);
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecognised_status_is_stored_and_never_read_as_success() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "weird-1", "+14155550146").await;
    let odd = json!({"notification": {"messageId": id}, "status": "PENDING"}).to_string();
    assert_eq!(feed(&p, SUCCESS_GROUP, &[line("9101", odd)]).await.unrecognised, 1);
    assert_eq!(p.record(&key).await.status.state, State::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_suppresses_the_number_at_once_until_an_audited_re_enable() {
    let p = Pipeline::start().await;
    let number = "+14155550147";
    let (key, id) = sent(&p, "optout-1", number).await;
    let s = feed(&p, FAILURE_GROUP, &[line("9201", record(&p, &id, number, false, "Phone number is opted out"))]).await;
    assert_eq!((s.failed, s.suppressed), (1, 1));
    let phone = PhoneNumber::parse(number).expect("valid");
    let sup = p.registry.suppression(&phone).await.expect("registry").expect("suppressed before the function returned");
    assert_eq!(sup.reason, "Phone number is opted out");
    match p.registry.history(&phone).await.expect("history").as_slice() {
        [RegistryEvent::Suppressed { evidence }] => {
            assert_eq!((evidence.log_event_id.as_str(), evidence.intent_key.as_str()), ("9201", key.as_str()));
        }
        other => panic!("{other:?}"),
    }
    // The next alert to that number is not sent.
    let (_, next) = p.submit(&alert("optout-2", number)).await;
    p.run_sender().await;
    assert_eq!(p.record(&key_of(&next)).await.status.state, State::Suppressed);
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 1);
    // An operator re-enables it, with a reason; the trail says who, why and when.
    let ok = p
        .registry
        .re_enable(&phone, "alice@ops", "confirmed by phone: opted back in", p.clock.now_utc())
        .await
        .expect("re-enable");
    assert!(ok);
    assert!(
        !p.registry.re_enable(&phone, "bob@ops", "again", p.clock.now_utc()).await.expect("idempotent"),
        "not suppressed any more"
    );
    assert!(p.registry.suppression(&phone).await.expect("registry").is_none());
    let history = p.registry.history(&phone).await.expect("history");
    assert!(
        matches!(&history[1], RegistryEvent::ReEnabled { operator, reason, .. } if operator == "alice@ops" && reason.contains("opted back in"))
    );
    p.submit(&alert("optout-3", number)).await;
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_and_unknown_failures_fail_the_alert_without_suppressing_the_number() {
    let p = Pipeline::start().await;
    let (k1, id1) = sent(&p, "transient-1", "+14155550148").await;
    let (k2, id2) = sent(&p, "transient-2", "+14155550149").await;
    let s = feed(
        &p,
        FAILURE_GROUP,
        &[
            line("9301", record(&p, &id1, "+14155550148", false, "Phone is currently unreachable/unavailable")),
            line("9302", record(&p, &id2, "+14155550149", false, "A response no table has seen")),
        ],
    )
    .await;
    assert_eq!((s.failed, s.suppressed), (2, 0));
    for (k, n) in [(k1, "+14155550148"), (k2, "+14155550149")] {
        assert_eq!(p.record(&k).await.status.state, State::Failed);
        assert!(p.registry.suppression(&PhoneNumber::parse(n).expect("valid")).await.expect("registry").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_spend_limit_escalates_the_alert_at_once_and_never_suppresses_the_number() {
    let p = Pipeline::start().await;
    let number = "+14155550152";
    let (key, id) = sent(&p, "spend-1", number).await;
    // SNS's record for our SMS, and one for another application's SMS in the same account.
    let s = feed(
        &p,
        FAILURE_GROUP,
        &[
            line("9351", record(&p, &id, number, false, "No quota left for account")),
            line("9352", record(&p, "not-ours-1", "+14155550999", false, "No quota left for account")),
        ],
    )
    .await;
    assert_eq!((s.failed, s.suppressed, s.orphaned, s.spend_exhausted), (1, 0, 1, 2));
    let phone = PhoneNumber::parse(number).expect("valid");
    assert!(
        p.registry.suppression(&phone).await.expect("registry").is_none(),
        "the account's failure, not the number's"
    );
    let failed = p.record(&key).await;
    assert_eq!(failed.status.state, State::Failed);
    // On-call hears of it at the next sweep, long before the deadline, told why.
    let run = p.run_escalation().await;
    assert_eq!(run.escalated, 1);
    let escalations = p.escalations().await;
    let [(message, _)] = escalations.as_slice() else { panic!("one escalation: {escalations:?}") };
    assert_eq!(message.idempotency_key, key.as_str());
    assert!(message.reason.contains("SMS spend limit reached for the account"), "{}", message.reason);
    assert!(message.reason.contains("not the recipient's fault"), "{}", message.reason);
    assert!(tocsin_tests::emitted_metrics().contains("\"spend_exhausted\""), "the alarm's metric is emitted");
    // Once the limit is raised, the same number gets the next alert.
    p.submit(&alert("spend-2", number)).await;
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_latency_is_measured_by_carrier_and_country() {
    let p = Pipeline::start().await;
    let (_, id) = sent(&p, "metrics-1", "+14155550150").await;
    let carrier = format!("Carrier-{}", &id[..8]);
    let mut rec: Value =
        serde_json::from_str(&record(&p, &id, "+14155550150", true, "Message has been accepted by phone carrier"))
            .expect("json");
    rec["delivery"]["phoneCarrier"] = json!(carrier);
    rec["delivery"]["dwellTimeMs"] = json!(4321);
    feed(&p, SUCCESS_GROUP, &[line("9401", rec.to_string())]).await;
    let metrics = tocsin_tests::emitted_metrics();
    let doc: Value = metrics
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|d| d["carrier"] == json!(carrier))
        .expect("an EMF document for this carrier");
    assert_eq!((doc["country"].as_str(), doc["dwell_ms"].as_f64()), (Some("US"), Some(4321.0)));
    assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0], json!(["function", "carrier", "country"]));
    assert!(!metrics.contains("+14155550150"), "no phone number in metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_failure_fails_the_invocation_and_the_retry_does_not_double_append() {
    let p = Pipeline::start().await;
    let (key, id) = sent(&p, "retry-1", "+14155550151").await;
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 11).await.expect("proxy");
    let sdk = tocsin_tests::function_sdk(&proxy.endpoint(), "StatusFunction").await;
    let flaky = status::StatusHandler {
        store: DynamoLedger::new(aws_sdk_dynamodb::Client::new(&sdk), p.stack.table("LedgerTable")),
        registry: p.status.registry.clone(),
        clock: p.clock.clone(),
        config: p.status.config.clone(),
        carriers_written: status::CarriersWritten::default(),
    };
    let deadline = || p.clock.in_(p.status.timeout);
    let event = logs_envelope(&logs_payload(
        SUCCESS_GROUP,
        "DATA_MESSAGE",
        &[line("9501", record(&p, &id, "+14155550151", true, "Message has been accepted by phone carrier"))],
    ));
    // 1. The state write lands but its answer is lost: the SDK's retry is refused, finds its own
    // observation carried on the intent, and writes nothing more.
    proxy.add_rule(Rule::once("DynamoDB_20120810.UpdateItem", Fault::DropResponse));
    let s = flaky.handle(event.clone(), deadline()).await.expect("the retried write is recognised");
    assert_eq!(s.delivered + s.duplicates, 1, "{s:?}");
    assert!(proxy.log().iter().any(|(op, what)| op.ends_with("UpdateItem") && what == "DropResponse"));
    // 2. The ledger keeps failing past the SDK's own retries: the invocation fails as a whole.
    proxy.add_rule(Rule::times(
        "DynamoDB_20120810.BatchGetItem",
        Fault::json_error("com.amazonaws.dynamodb.v20120810#InternalServerError", "boom", 500),
        10,
    ));
    let err = flaky.handle(event.clone(), deadline()).await.expect_err("dependency failure");
    assert!(matches!(err, status::StatusError::Dependency { .. }), "{err}");
    proxy.clear_rules();
    // 3. Lambda's asynchronous retry delivers the same event again, twice.
    assert_eq!(flaky.handle(event.clone(), deadline()).await.expect("retry succeeds").duplicates, 1);
    flaky.handle(event, deadline()).await.expect("and again");
    let receipts =
        p.timeline(&key).await.into_iter().filter(|o| matches!(o.kind, ObservationKind::DeliveryStatus { .. })).count();
    assert_eq!(receipts, 1, "stored once however often delivered");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
}

/// A record that overtakes the sender's MessageId write by more than `TOCSIN_ORPHAN_WAIT` (the
/// write was slow: throttled, retried) finds no index entry and is kept as an orphan. The sweep
/// reads the orphans of a silent accepted alert back before it suspects a delay: the alert is
/// failed as its record says — not escalated as carrier-silent — and the dead number suppressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_overtook_the_senders_message_id_write_is_applied_by_the_next_sweep() {
    let p = Pipeline::start().await;
    let number = "+14155550148";
    let (key, id) = sent(&p, "overtaken-1", number).await;
    // The MessageId write has not landed yet when the record is read: its index item is away.
    let index_item = p.take_message_index(&id).await;
    let s = feed(&p, FAILURE_GROUP, &[line("9301", record(&p, &id, number, false, "Phone number is opted out"))]).await;
    assert_eq!((s.orphaned, s.failed, s.suppressed), (1, 0, 0), "{s:?}");
    p.put_back(index_item).await;
    assert_eq!(p.record(&key).await.status.state, State::Accepted);

    // The alert's first check: no receipt after `delay_suspected_after` (10 minutes).
    p.clock.advance(Duration::minutes(11));
    let sweep = p.run_escalation().await;
    assert_eq!(sweep.delay_suspected, 0, "{sweep:?}");
    let after = p.record(&key).await;
    assert_eq!(after.status.state, State::Failed, "{:?}", after.status);
    let escalation = after.status.escalation.expect("a failed alert is escalated at once");
    assert!(!escalation.reason.contains("silent"), "{}", escalation.reason);
    let phone = PhoneNumber::parse(number).expect("valid");
    let sup = p.registry.suppression(&phone).await.expect("registry").expect("the dead number is suppressed");
    assert_eq!(sup.reason, "Phone number is opted out");
    // Applied once: the next sweeps find it stored already.
    let applied = |t: &[tocsin::domain::observation::Observation]| {
        t.iter().filter(|o| matches!(o.kind, ObservationKind::DeliveryStatus { .. })).count()
    };
    assert_eq!(applied(&p.timeline(&key).await), 1);
    p.clock.advance(Duration::minutes(1));
    p.run_escalation().await;
    assert_eq!(applied(&p.timeline(&key).await), 1);
}
