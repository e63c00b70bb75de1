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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_of_a_chained_alert_shows_every_level_who_acknowledged_it_how_and_when() {
    let p = Pipeline::start().await;
    let mut body = alert("cli-chain-1", "+14155550192");
    body["chain"] = serde_json::json!({"wait": "5m", "then": [{"to": "+14155550193", "wait": "5m"}]});
    let (status, answer) = p.submit(&body).await;
    assert_eq!(status, 201, "{answer}");
    let root = key_of(&answer);
    p.run_sender().await;
    // Accepted, no receipt (SNS): the wait counts from the acceptance.
    p.clock.advance(Duration::minutes(6));
    assert_eq!(p.run_escalation().await.chain_levels_started, 1);
    p.run_sender().await;
    let level = tocsin::domain::chain::level_key(&root, 1);

    let acked = tocsin(&p, &["ack", level.short()]).await;
    assert_eq!(acked.code, 0, "{acked:?}");
    let doc = tocsin(&p, &["--json", "show", root.as_str()]).await.json();
    let chain = doc["chain"].as_array().expect("the chain's levels");
    assert_eq!(chain.len(), 2, "{doc}");
    assert_eq!((chain[0]["to"].as_str(), chain[1]["to"].as_str()), (Some("+1******0192"), Some("+1******0193")));
    assert_eq!(chain[0]["moved_on"]["to_level"], 1, "{doc}");
    assert_eq!(chain[1]["key"], level.as_str());
    assert_eq!(chain[1]["state"], "accepted");
    for l in chain {
        assert_eq!(l["acknowledgement"]["via"], "operator", "the whole chain is acknowledged: {doc}");
    }
    let table = tocsin(&p, &["show", root.short()]).await;
    assert_eq!(table.code, 0, "{table:?}");
    for expected in
        ["Escalation chain (2 levels, then on-call; named by the request)", "→ level 1", "+1******0193", "(operator)"]
    {
        assert!(table.stdout.contains(expected), "missing {expected:?} in\n{}", table.stdout);
    }
    assert!(!table.stdout.contains("+14155550193"), "the number leaked:\n{}", table.stdout);

    p.clock.advance(Duration::minutes(30));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "an acknowledged chain goes no further: {run:?}");
}
