//! `tocsin ack KEY` (issue 37), the real binary against the emulator next to the real pipeline,
//! signing as the operator: "I have this alert" is recorded once, shown, and the sweep never
//! escalates the alert after it.

mod common;

use chrono::Duration;
use common::{Run, aws_env, tocsin_with};
use tocsin_tests::{Pipeline, alert, key_of};

const STACK: &str = "tocsin-local";

async fn tocsin(p: &Pipeline, args: &[&str]) -> Run {
    let mut all = vec!["--stack", STACK];
    all.extend_from_slice(args);
    tocsin_with(aws_env(&p.emulator.endpoint()), &all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_acknowledges_an_alert_once_it_shows_who_and_the_sweep_never_escalates_it() {
    let p = Pipeline::start().await;
    let (_, body) = p.submit(&alert("cli-ack-1", "+14155550191")).await;
    let key = key_of(&body);
    p.run_sender().await;

    let first = tocsin(&p, &["--json", "ack", key.short()]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let doc = first.json();
    assert_eq!(doc["recorded"], true, "{doc}");
    assert_eq!(doc["via"], "operator", "{doc}");
    let by = doc["by"].as_str().expect("who").to_owned();
    assert!(!by.is_empty(), "{doc}");

    let again = tocsin(&p, &["ack", key.as_str()]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("already acknowledged by"), "{again:?}");

    let shown = tocsin(&p, &["show", key.as_str()]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains(&format!("by {by} (operator)")), "{}", shown.stdout);
    assert!(shown.stdout.contains("acknowledged by"), "the timeline says so too: {}", shown.stdout);

    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    assert!(p.record(&key).await.status.escalation.is_none(), "an acknowledged alert is never escalated");
    assert!(p.escalations().await.is_empty());

    let missing = tocsin(&p, &["ack", &"ab".repeat(32)]).await;
    assert_ne!(missing.code, 0, "{missing:?}");
}
