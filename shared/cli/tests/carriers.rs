//! `tocsin carriers`: each carrier's health from the SMS in flight and from every application's
//! delivery records against its rolling baseline (the traffic signal), and the operator's audited,
//! time-bounded hold (the IAM gate checks every call against the operator policies (`operator-read-only-policy.json`, `operator-break-glass-policy.json`)).

mod common;

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, Utc};
use common::{Run, aws_env, tocsin_with};
use tocsin::domain::PhoneNumber;
use tocsin::domain::carrier::CarrierSeen;
use tocsin::domain::carrier_traffic::{self, Baseline, CountryTallies, Minute, Tallies, Tally, TrafficPolicy};
use tocsin::ports::carriers::{BaselineSaved, CarrierBook, CarrierHolds, CarrierTraffic};
use tocsin_tests::{Pipeline, alert, key_of};

async fn tocsin(p: &Pipeline, args: &[&str]) -> Run {
    let mut all = vec!["--stack", "tocsin-local"];
    all.extend_from_slice(args);
    tocsin_with(aws_env(&p.emulator.endpoint()), &all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_carrier_table_shows_in_flight_sms_per_carrier_and_a_hold_is_audited_bounded_and_released() {
    let p = Pipeline::start().await;
    let to = PhoneNumber::parse("+14155552640").expect("n");
    let seen = CarrierSeen { carrier: "HeldTel".into(), mcc: Some("310".into()), mnc: None, at: chrono::Utc::now() };
    p.registry.record_carrier(&to, &seen).await.expect("seeded");
    let (_, answer) = p.submit(&alert("cli-carrier-1", to.expose())).await;
    p.run_sender().await;
    assert!(p.record(&key_of(&answer)).await.status.sns_message_id.is_some());

    let r = tocsin(&p, &["--json", "carriers"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["carriers"][0]["carrier"], "HeldTel", "{doc}");
    assert_eq!(doc["carriers"][0]["in_flight"], 1, "{doc}");
    assert!(!r.stdout.contains(to.expose()), "no number in the output");

    let r = tocsin(&p, &["carriers", "hold", "HeldTel", "--reason", "vendor incident 4711", "--for", "48h"]).await;
    assert_eq!(r.code, 2, "longer than a day is refused: {r:?}");
    let r = tocsin(&p, &["carriers", "hold", "HeldTel"]).await;
    assert_eq!(r.code, 2, "a reason is required: {r:?}");
    let r =
        tocsin(&p, &["--json", "carriers", "hold", "HeldTel", "--reason", "vendor incident 4711", "--for", "2h"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let hold = &r.json()["hold"];
    assert!(hold["operator"].as_str().is_some_and(|o| !o.is_empty()), "{hold}");
    let holds = p.registry.active_holds(chrono::Utc::now()).await.expect("holds");
    assert_eq!(holds.len(), 1);
    let length = holds[0].until - holds[0].since;
    assert!(length <= Duration::hours(2) && length > Duration::minutes(119), "{length}");
    let r = tocsin(&p, &["--json", "carriers"]).await;
    assert!(r.json()["carriers"][0]["held_until"].is_string(), "{r:?}");

    let r = tocsin(&p, &["carriers", "release", "HeldTel", "--reason", "vendor resolved"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("hold by") && r.stdout.contains("released by") && r.stdout.contains("vendor resolved"),
        "{r:?}"
    );
    assert!(p.registry.active_holds(chrono::Utc::now()).await.expect("holds").is_empty());
    let r = tocsin(&p, &["carriers", "release", "HeldTel", "--reason", "again"]).await;
    assert_eq!(r.code, 1, "nothing held: refused: {r:?}");
}

/// The stack's default `DelaySuspectedAfter`, which `tocsin carriers` assumes unless told.
fn traffic_policy() -> TrafficPolicy {
    TrafficPolicy::new(std::time::Duration::from_secs(600))
}

/// `per_minute` records (all delivered, none late) for each carrier in every minute of `minutes`.
fn steady(t: &mut Tallies, minutes: std::ops::RangeInclusive<Minute>, carriers: &[(&str, u64)]) {
    for m in minutes {
        for (carrier, n) in carriers {
            t.insert(
                (m, (*carrier).to_owned()),
                Tally { records: *n, delivered: *n, dwell_ms: n * 3_000, ..Default::default() },
            );
        }
    }
}

/// As [`steady`], as the status function stores it: each carrier's records in one country.
fn steady_in(t: &mut CountryTallies, minutes: std::ops::RangeInclusive<Minute>, carriers: &[(&str, &str, u64)]) {
    for m in minutes {
        for (carrier, country, n) in carriers {
            t.insert(
                (m, (*carrier).to_owned(), (*country).to_owned()),
                Tally { records: *n, delivered: *n, dwell_ms: n * 3_000, ..Default::default() },
            );
        }
    }
}

/// A baseline folded (by the sweep's own fold) from twelve hours of `carriers`' steady traffic,
/// through the minute the sweep would have folded by `now`.
fn warmed(carriers: &[(&str, u64)], now: DateTime<Utc>) -> Baseline {
    let policy = traffic_policy();
    let through = policy.fold_through(now);
    let mut history = Tallies::new();
    steady(&mut history, through - 719..=through, carriers);
    let mut b = Baseline::default();
    for m in through - 719..=through {
        b = carrier_traffic::fold(&b, &history, m, &BTreeSet::new(), &policy);
    }
    b
}

/// An SMS of tocsin's accepted by SNS (in flight) to a number last seen on `carrier`.
async fn one_in_flight(p: &Pipeline, number: &str, carrier: &str, event: &str) -> PhoneNumber {
    let to = PhoneNumber::parse(number).expect("n");
    let seen = CarrierSeen { carrier: carrier.into(), mcc: Some("310".into()), mnc: None, at: Utc::now() };
    p.registry.record_carrier(&to, &seen).await.expect("seeded");
    let (_, answer) = p.submit(&alert(event, to.expose())).await;
    p.run_sender().await;
    assert!(p.record(&key_of(&answer)).await.status.sns_message_id.is_some());
    to
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carriers_shows_a_carrier_the_account_wide_traffic_calls_degraded_beside_its_in_flight_sms_and_usual_traffic() {
    let p = Pipeline::start().await;
    let to = one_in_flight(&p, "+14155552641", "SlowTel", "cli-traffic-1").await;
    // The account's traffic as the status function tallies it and the sweep folds it: SlowTel
    // 10 records a minute, FastTel 20, for twelve hours; then SlowTel's records stop (other
    // applications' SMS: none of tocsin's) while FastTel's go on. The minutes after `last` are
    // there in case the command runs a minute later than this clock.
    let now = Utc::now();
    let policy = traffic_policy();
    let last = policy.last_closed(now);
    let baseline = warmed(&[("SlowTel", 10), ("FastTel", 20)], now);
    assert_eq!(p.registry.save_baseline(&baseline, None).await.expect("saved"), BaselineSaved::Saved);
    // SlowTel's name covers two countries' networks: 8 of its 10 records a minute are in the US.
    let mut recent = CountryTallies::new();
    steady_in(&mut recent, last - 20..=last + 2, &[("FastTel", "US", 20)]);
    steady_in(&mut recent, last - 20..=last - 6, &[("SlowTel", "US", 8), ("SlowTel", "DE", 2)]);
    p.registry.add_tallies(&recent).await.expect("tallied");

    let r = tocsin(&p, &["--json", "carriers"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["traffic"]["status"], "judged", "{doc}");
    let carriers = doc["carriers"].as_array().expect("carriers");
    let of = |name: &str| {
        carriers.iter().find(|c| c["carrier"] == name).unwrap_or_else(|| panic!("{name} in {doc}")).clone()
    };
    let slow = of("SlowTel");
    assert_eq!(slow["in_flight"], 1, "tocsin's own SMS beside the traffic: {slow}");
    assert_eq!(slow["degraded"], true, "{slow}");
    let v = &slow["traffic_verdict"];
    assert_eq!((&v["degraded"], &v["signal"]), (&true.into(), &"silent".into()), "{slow}");
    let (observed, expected) = (v["observed"].as_f64().unwrap_or(-1.0), v["expected"].as_f64().unwrap_or(0.0));
    assert!(observed >= 0.0 && observed * 5.0 <= expected && expected >= 20.0, "{slow}");
    assert!(v["degraded_since"].is_string(), "{slow}");
    let usual = &slow["usual"];
    assert!((usual["share_percent"].as_f64().unwrap_or(0.0) - 33.3).abs() < 0.5, "a third of the records: {slow}");
    assert!((usual["records_per_minute"].as_f64().unwrap_or(0.0) - 10.0).abs() < 0.5, "{slow}");
    assert_eq!(usual["late_percent"], 0.0, "{slow}");
    let countries: Vec<(String, u64)> = slow["countries"]
        .as_array()
        .expect("countries")
        .iter()
        .map(|c| (c["country"].as_str().unwrap_or_default().to_owned(), c["records"].as_u64().unwrap_or(0)))
        .collect();
    match countries.as_slice() {
        [(us, u), (de, d)] => {
            assert_eq!((us.as_str(), de.as_str()), ("US", "DE"), "busiest first: {slow}");
            assert!(*d > 0 && *u == 4 * d, "the judged window's records by country: {slow}");
        }
        other => panic!("two countries: {other:?}"),
    }
    let fast = of("FastTel");
    assert_eq!((&fast["degraded"], &fast["in_flight"]), (&false.into(), &0.into()), "{fast}");
    assert_eq!(fast["traffic_verdict"]["judged"], true, "{fast}");
    assert_eq!(doc["classification"], "one_carrier_slow", "{doc}");

    let r = tocsin(&p, &["carriers"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let row = r.stdout.lines().find(|l| l.contains("SlowTel")).unwrap_or_default();
    for cell in ["33.3% of records, 10/min, 0% late", "US ", ", DE ", "DEGRADED (silent) since", "DEGRADED"] {
        assert!(row.contains(cell), "{cell:?} in {row:?}\n{}", r.stdout);
    }
    assert!(r.stdout.lines().any(|l| l.starts_with("carrier SlowTel delayed: ")), "the traffic's own words: {r:?}");
    assert!(r.stdout.contains("traffic = every application's delivery records"), "{r:?}");
    assert!(!r.stdout.contains(to.expose()), "no number in the output");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carriers_says_a_missing_baseline_is_warming_up_and_a_corrupt_one_unreadable_and_still_shows_the_sms_in_flight()
{
    let p = Pipeline::start().await;
    one_in_flight(&p, "+14155552642", "HeldTel", "cli-traffic-2").await;

    let r = tocsin(&p, &["carriers"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("traffic baseline warming up: 0 of 60 minutes"), "no baseline saved yet: {r:?}");

    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let table = p.stack.table("RecipientsTable").to_owned();
    for (what, baseline) in [("no baseline attribute", None), ("not a baseline", Some("{\"through\": \"soon\""))] {
        let mut put = ddb
            .put_item()
            .table_name(&table)
            .item("pk", AttributeValue::S("CARRIERS".into()))
            .item("sk", AttributeValue::S("TRAFFIC_BASELINE".into()))
            .item("through", AttributeValue::N("1".into()));
        if let Some(b) = baseline {
            put = put.item("baseline", AttributeValue::S(b.into()));
        }
        put.send().await.expect("corrupted");

        let r = tocsin(&p, &["carriers"]).await;
        assert_eq!(r.code, 0, "{what}: the rest is still shown: {r:?}");
        assert!(!r.stderr.contains("panicked"), "{what}: {r:?}");
        let row = r.stdout.lines().find(|l| l.contains("HeldTel")).unwrap_or_default();
        assert!(row.contains("unreadable"), "{what}: {row:?}");
        assert!(
            r.stdout.contains("TRAFFIC BASELINE UNREADABLE — stored item carrier traffic baseline is unreadable"),
            "{what}: {r:?}"
        );
        assert!(r.stdout.contains("delete-item"), "{what}: how to get a fresh one: {r:?}");

        let r = tocsin(&p, &["--json", "carriers"]).await;
        assert_eq!(r.code, 0, "{what}: {r:?}");
        let doc = r.json();
        assert_eq!(doc["traffic"]["status"], "baseline_corrupt", "{what}: {doc}");
        assert!(doc["traffic"]["error"].as_str().is_some_and(|e| e.contains("carrier traffic baseline")), "{doc}");
        assert_eq!((&doc["carriers"][0]["carrier"], &doc["carriers"][0]["in_flight"]), (&"HeldTel".into(), &1.into()));
    }
}
