//! `tocsin carriers`: each carrier's health from the SMS in flight, and the operator's audited,
//! time-bounded hold (the IAM gate checks every call against `operator-policy.json`).

mod common;

use chrono::Duration;
use common::{Run, aws_env, tocsin_with};
use tocsin::domain::PhoneNumber;
use tocsin::domain::carrier::CarrierSeen;
use tocsin::ports::carriers::{CarrierBook, CarrierHolds};
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
