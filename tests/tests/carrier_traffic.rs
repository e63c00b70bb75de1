//! Carrier health from every application's delivery records (issue 26 item 2), through real
//! emulator calls: the status function tallies every record of its batches by minute and carrier
//! (tocsin's and other applications'; counts and dwell only), the sweep judges the last minutes
//! against the rolling per-carrier baseline and publishes the verdict with a `carrier` dimension
//! — the metric the carrier-delayed alarm (`MAX(carrier_degraded) GROUP BY carrier`) reads.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use tocsin::domain::State;
use tocsin::domain::carrier_traffic::{CountryTallies, Minute, Tally, TrafficPolicy, minute_of, start_of};
use tocsin::ports::carriers::CarrierTraffic;
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record};
use tocsin_harness::fault_proxy::{Fault, Rule};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const DELIVERED: &str = "Message has been accepted by phone carrier";

fn policy() -> TrafficPolicy {
    TrafficPolicy::new(std::time::Duration::from_secs(600))
}

/// Another application's delivery record through `carrier`, written at `at`.
fn foreign(n: usize, carrier: &str, at: DateTime<Utc>) -> LogLine {
    let mut rec: Value = serde_json::from_str(&sns_delivery_record(
        &format!("e0000000-0000-4000-8000-{n:012}"),
        &format!("+1206555{:04}", n % 10_000),
        true,
        DELIVERED,
        at,
    ))
    .expect("json");
    rec["delivery"]["phoneCarrier"] = json!(carrier);
    LogLine { id: format!("5{n:08}"), timestamp: at.timestamp_millis(), message: rec.to_string() }
}

/// An alert to `number` sent, and the carrier's delivery record of its SMS, written at `at`
/// (log event `log_id`): its key and that record.
async fn delivered_alert(
    p: &Pipeline,
    event_id: &str,
    number: &str,
    log_id: &str,
    at: DateTime<Utc>,
) -> (tocsin::domain::IdempotencyKey, LogLine) {
    let (_, body) = p.submit(&alert(event_id, number)).await;
    let key = key_of(&body);
    p.run_sender().await;
    let id = p.record(&key).await.status.sns_message_id.expect("accepted");
    let line = LogLine {
        id: log_id.into(),
        timestamp: at.timestamp_millis(),
        message: sns_delivery_record(&id, number, true, DELIVERED, at),
    };
    (key, line)
}

/// What the harness arranges as the account's past traffic: `per_minute(m, carrier)` records
/// for every minute of `minutes` (as the status function would have tallied them).
async fn history(p: &Pipeline, minutes: std::ops::Range<Minute>, per_minute: impl Fn(Minute, &str) -> u64) {
    let mut t = CountryTallies::new();
    for m in minutes {
        for carrier in ["SlowTel", "FastTel"] {
            let n = per_minute(m, carrier);
            t.insert(
                (m, carrier.to_owned(), "US".to_owned()),
                Tally { records: n, delivered: n, dwell_ms: n * 3_000, ..Default::default() },
            );
        }
    }
    p.registry.add_tallies(&t).await.expect("history arranged");
}

/// Moves the test clock (it runs on with the wall clock) to a second after a minute closes (the
/// policy's settle time past its end): the judged minutes follow the clock, and a test that read
/// them must not see them shift under it when the wall clock passes that point half way through
/// (it did, now and then, and the test failed).
fn just_after_a_minute_closes(p: &Pipeline) {
    let target = (policy().settle + std::time::Duration::from_secs(1)).as_millis() as i64;
    let into = p.clock.now_utc().timestamp_millis().rem_euclid(60_000);
    p.clock.advance(Duration::milliseconds((target - into).rem_euclid(60_000)));
}

/// The escalation function's latest EMF document for `carrier`.
fn carrier_doc(carrier: &str) -> Value {
    tocsin_tests::emitted_metrics()
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|d| d["carrier"] == json!(carrier) && d["function"] == "escalation")
        .unwrap_or_else(|| panic!("an EMF document for {carrier}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_applications_records_alone_show_a_carrier_gone_silent_and_its_alarm_metric_says_so() {
    let p = Pipeline::start().await;
    just_after_a_minute_closes(&p);
    // Ninety minutes of the account's traffic: SlowTel 10 records a minute, FastTel 20.
    let now = p.clock.now_utc();
    let last = policy().last_closed(now);
    history(&p, last - 89..last + 1, |_, c| if c == "SlowTel" { 10 } else { 20 }).await;
    let warm = p.run_escalation().await;
    assert_eq!(warm.carriers_degraded, 0, "{warm:?}");

    // Three minutes on, only FastTel's records arrive: other applications' SMS, none of tocsin's.
    p.clock.advance(Duration::minutes(3));
    let after = policy().last_closed(p.clock.now_utc());
    let lines: Vec<LogLine> = (last + 1..=after)
        .flat_map(|m| (0..20).map(move |i| (m, i)))
        .enumerate()
        .map(|(n, (m, i))| foreign(n, "FastTel", start_of(m) + Duration::seconds(i * 2)))
        .collect();
    let group = p.stack.log_group("SmsSuccessLogGroup").to_owned();
    let s = p.status.handle(logs_envelope(&logs_payload(&group, "DATA_MESSAGE", &lines))).await.expect("handled");
    assert_eq!(s.orphaned, lines.len(), "{s:?}");

    let run = p.run_escalation().await;
    assert_eq!(run.carriers_degraded, 1, "{run:?}");
    let slow = carrier_doc("SlowTel");
    assert_eq!(slow["carrier_degraded"].as_f64(), Some(1.0), "{slow}");
    assert_eq!(slow["carrier_traffic_degraded"].as_f64(), Some(1.0), "{slow}");
    assert_eq!(slow["carrier_traffic_observed"].as_f64(), Some(0.0), "{slow}");
    assert!(slow["carrier_traffic_expected"].as_f64().is_some_and(|e| e >= 16.0), "{slow}");
    assert_eq!(slow["carrier_in_flight"].as_f64(), Some(0.0), "nothing of tocsin's to it: {slow}");
    assert_eq!(slow["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0], json!(["function", "carrier"]));
    let fast = carrier_doc("FastTel");
    assert_eq!((fast["carrier_degraded"].as_f64(), fast["carrier_traffic_degraded"].as_f64()), (Some(0.0), Some(0.0)));
    let metrics = tocsin_tests::emitted_metrics();
    assert!(!metrics.contains("+1206555"), "no number in the metrics");
}

/// One carrier name can be several countries' networks (a group's operators), and an incident is
/// often one country's: the status function keeps each record's country (from its MCC) beside its
/// carrier, so `tocsin carriers` can say where. The detector judges the carrier whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_function_tallies_every_record_by_carrier_and_country() {
    let p = Pipeline::start().await;
    let m = minute_of(p.clock.now_utc()) - 1;
    let with_mcc = |n: usize, mcc: Option<u32>| {
        let mut line = foreign(n, "GroupTel", start_of(m) + Duration::seconds(10));
        let mut rec: Value = serde_json::from_str(&line.message).expect("json");
        match mcc {
            Some(code) => rec["delivery"]["mcc"] = json!(code),
            None => {
                rec["delivery"].as_object_mut().expect("delivery").remove("mcc");
            }
        }
        line.message = rec.to_string();
        line
    };
    let lines = vec![
        with_mcc(1, Some(310)),
        with_mcc(2, Some(311)),
        with_mcc(3, Some(310)),
        with_mcc(4, Some(262)),
        with_mcc(5, Some(262)),
        with_mcc(6, None),
    ];
    let group = p.stack.log_group("SmsSuccessLogGroup").to_owned();
    let s = p.status.handle(logs_envelope(&logs_payload(&group, "DATA_MESSAGE", &lines))).await.expect("handled");
    assert_eq!(s.orphaned, 6, "{s:?}");
    p.assert_iam_allowed();
    let stored = p.registry.tallies(m, m).await.expect("tallies");
    let records = |country: &str| stored.get(&(m, "GroupTel".to_owned(), country.to_owned())).map(|t| t.records);
    assert_eq!((records("US"), records("DE"), records("unknown")), (Some(3), Some(2), Some(1)), "{stored:?}");
    assert_eq!(stored.len(), 3, "{stored:?}");
    let whole = tocsin::domain::carrier_traffic::per_carrier(&stored);
    assert_eq!(whole[&(m, "GroupTel".to_owned())].records, 6, "judged whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_with_normal_variation_and_a_daily_slope_never_degrades_a_carrier() {
    let p = Pipeline::start().await;
    just_after_a_minute_closes(&p);
    // Counts that wander ±40 % minute to minute, each carrier on its own, around a rate that
    // falls steadily to 40 % over the two hours (a steep evening: the baseline lags behind it).
    let now = p.clock.now_utc();
    let last = policy().last_closed(now);
    let origin = last - 89;
    let wobble = move |m: Minute, c: &str| -> u64 {
        let base = if c == "SlowTel" { 12.0 } else { 24.0 };
        let slope = 1.0 - 0.6 * ((m - origin) as f64 / 110.0).clamp(0.0, 1.0);
        let phase = usize::from(c.as_bytes().first().copied().unwrap_or(0)) * 3;
        let noise = [1.0, 1.4, 0.6, 1.1, 0.8, 1.3, 0.7, 1.0, 0.9, 1.2][(m.unsigned_abs() as usize * 7 + phase) % 10];
        (base * slope * noise).round() as u64
    };
    history(&p, last - 89..last + 1, wobble).await;
    let first = p.run_escalation().await;
    let mut degraded = first.carriers_degraded;
    // Twenty minutes of sweeps, a minute apart, as the traffic goes on.
    let mut through = last;
    for _ in 0..20 {
        p.clock.advance(Duration::minutes(1));
        let now_last = policy().last_closed(p.clock.now_utc());
        history(&p, through + 1..now_last + 1, wobble).await;
        through = now_last;
        degraded += p.run_escalation().await.carriers_degraded;
    }
    assert_eq!(degraded, 0);
    assert_eq!(carrier_doc("SlowTel")["carrier_traffic_degraded"].as_f64(), Some(0.0));
    let baseline = p.registry.baseline().await.expect("baseline");
    assert_eq!(
        baseline.through,
        Some(through - policy().window_minutes),
        "every minute folded, once, when it leaves the judged window"
    );
    assert!(baseline.minutes >= 60, "{baseline:?}");
    assert_eq!(baseline.degraded_since, Default::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_traffic_tally_cannot_be_written_still_applies_its_receipts() {
    let p = Pipeline::start_with(Options { fault_seed: Some(26), ..Default::default() }).await;
    let proxy = p.proxy.as_ref().expect("a fault proxy");
    let at = p.clock.now_utc() - Duration::seconds(30);
    let (key, own) = delivered_alert(&p, "traffic-tally-down", "+14155552650", "600000001", at).await;
    // Every tally write fails (the SDK's retries included).
    proxy.add_rule(
        Rule::times("DynamoDB_20120810.UpdateItem", Fault::http_status(500), 50).when_body_contains("TRAFFIC#"),
    );
    let lines = vec![own, foreign(1, "FastTel", at)];
    let group = p.stack.log_group("SmsSuccessLogGroup").to_owned();
    let s = p
        .status
        .handle(logs_envelope(&logs_payload(&group, "DATA_MESSAGE", &lines)))
        .await
        .expect("the batch succeeds without its tallies");
    assert_eq!((s.delivered, s.orphaned), (1, 1), "{s:?}");
    assert_eq!(p.record(&key).await.status.state, State::Delivered);
    let failed: f64 = tocsin_tests::emitted_metrics()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|d| d["function"] == json!("status"))
        .filter_map(|d| d["traffic_tally_failed"].as_f64())
        .sum();
    assert_eq!(failed, 2.0, "both tallies (the two carriers of its minute) counted as not written");
    let stored = p.registry.tallies(minute_of(at), minute_of(at)).await.expect("read");
    assert!(stored.is_empty(), "{stored:?}");
}

/// Found by the simulation (long mode, SNS seed 151048): during an outage the status function's
/// index lookup failed try after try, and every failed try of a batch tallied its records — as
/// other applications', since no index said they were tocsin's. A carrier's baseline learnt a
/// rate three times its real one, and when the outage ended it looked silent: "degraded", with
/// nothing wrong. A batch's traffic is tallied once it has all succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_tried_again_after_a_failure_tallies_its_records_once_and_tocsins_as_tocsins() {
    let p = Pipeline::start_with(Options { fault_seed: Some(27), ..Default::default() }).await;
    let proxy = p.proxy.as_ref().expect("a fault proxy");
    let at = p.clock.now_utc() - Duration::seconds(30);
    let (key, own) = delivered_alert(&p, "traffic-tally-retried", "+14155552651", "600000011", at).await;
    let lines = vec![own, foreign(11, "FastTel", at)];
    let group = p.stack.log_group("SmsSuccessLogGroup").to_owned();
    let batch = logs_envelope(&logs_payload(&group, "DATA_MESSAGE", &lines));
    // The first try fails at the message-index lookup, the second at the alert's own write (the
    // SDK's retries included): each time Lambda tries the batch again.
    proxy.add_rule(Rule::times("DynamoDB_20120810.BatchGetItem", Fault::http_status(500), 1_000));
    assert!(p.status.handle(batch.clone()).await.is_err(), "the lookup failed");
    proxy.clear_rules();
    proxy.add_rule(
        Rule::times("DynamoDB_20120810.UpdateItem", Fault::http_status(500), 1_000).when_body_contains(key.as_str()),
    );
    assert!(p.status.handle(batch.clone()).await.is_err(), "the alert's write failed");
    proxy.clear_rules();
    let s = p.status.handle(batch).await.expect("the third try succeeds");
    assert_eq!((s.delivered, s.orphaned), (1, 1), "{s:?}");
    let stored = p.registry.tallies(minute_of(at), minute_of(at)).await.expect("read");
    let whole = tocsin::domain::carrier_traffic::per_carrier(&stored);
    let records: u64 = whole.values().map(|t| t.records).sum();
    let tocsins: u64 = whole.values().map(|t| t.tocsin).sum();
    assert_eq!((records, tocsins), (2, 1), "each record once, tocsin's own as tocsin's: {stored:?}");
}
