//! `cargo run -p tocsin-tests --bin demo`: the whole pipeline, locally, in one go.
//!
//! Starts the emulator, creates the resources from template.yaml, sends alerts through the real
//! function code, plays the carrier (delivery-status records in the real SNS format: one
//! delivered, one failed for good, one silent), runs the escalation sweep, and prints each
//! alert's timeline.

use chrono::Duration;
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use tocsin::domain::IdempotencyKey;
use tocsin_tests::{Pipeline, alert, key_of};

#[tokio::main]
async fn main() {
    println!("tocsin demo: starting the local AWS emulator and creating the stack from template.yaml …");
    let p = Pipeline::start().await;
    let metrics_path = tocsin_tests::tocsin_harness::workspace_root().join("target/tocsin-demo-metrics.jsonl");
    if let Ok(f) = std::fs::File::create(&metrics_path) {
        tocsin::telemetry::set_metrics_sink(Box::new(f));
    }
    println!("  emulator  {}", p.emulator.endpoint());
    for (id, name) in &p.stack.tables {
        println!("  table     {name:<32} ({id})");
    }
    for (id, q) in &p.stack.queues {
        println!("  queue     {:<32} ({id})", q.name);
    }
    for (id, g) in &p.stack.log_groups {
        println!("  log group {g:<32} ({id})");
    }
    let t0 = p.clock.now_utc();

    println!("\n1. Upstream systems submit alerts (HTTP API → intake)");
    let cases = [
        ("db-disk-full-1001", "+14155550101", "carrier confirms delivery"),
        ("db-disk-full-1002", "+14155550199", "number opted out: fails for good"),
        ("db-disk-full-1003", "+14155550103", "carrier stays silent"),
    ];
    let mut keys: Vec<(IdempotencyKey, &str, &str)> = Vec::new();
    for (event, number, story) in cases {
        let (status, body) = p.submit(&alert(event, number)).await;
        let key = key_of(&body);
        println!("   {event}  → HTTP {status}  key {}…  ({story})", key.short());
        keys.push((key, event, story));
    }
    let (status, body) = p.submit(&alert("db-disk-full-1001", "+14155550101")).await;
    println!("   db-disk-full-1001 again (a client retry) → HTTP {status}, replay = {}", body["replay"]);

    println!("\n2. The sender drains the send queue (SQS → sender → SNS Publish)");
    p.run_sender().await;
    let sms = p.emulator.sent_sms().await.unwrap_or_default();
    for m in &sms {
        println!(
            "   SMS to {} accepted by SNS, MessageId {}",
            tocsin::domain::phone::mask_phone_like(&m.phone_number),
            m.message_id
        );
    }
    let id_for = |n: &str| sms.iter().find(|m| m.phone_number == n).map(|m| m.message_id.clone()).unwrap_or_default();

    println!("\n3. The carrier reports (SNS writes delivery-status logs; the subscription feeds status)");
    p.clock.advance(Duration::seconds(4));
    p.carrier_reports(&id_for("+14155550101"), "+14155550101", true, "Message has been accepted by phone carrier")
        .await;
    p.carrier_reports(&id_for("+14155550199"), "+14155550199", false, "Phone number is opted out").await;
    for s in p.run_status().await {
        println!("   status: {} delivered, {} failed, {} recipients suppressed", s.delivered, s.failed, s.suppressed);
    }

    println!("\n4. A later alert to the opted-out number is not sent: the registry suppressed it");
    let (_, body) = p.submit(&alert("db-disk-full-1004", "+14155550199")).await;
    keys.push((key_of(&body), "db-disk-full-1004", "recipient suppressed"));
    p.run_sender().await;

    println!("\n5. The escalation sweep runs every minute; 16 minutes later the silent alert is past its deadline");
    let first = p.run_escalation().await;
    p.clock.advance(Duration::minutes(16));
    let second = p.run_escalation().await;
    println!(
        "   run 1: {} escalated · run 2: {} escalated, {} delay-suspected",
        first.escalated, second.escalated, second.delay_suspected
    );
    let escalations = p.escalations().await;
    for (m, _) in &escalations {
        println!("   ON-CALL ← {} to {}: {}", m.event_id, m.recipient_masked, m.reason);
    }

    println!("\n6. Each alert's timeline (from the ledger's append-only observations)\n");
    for (key, event, story) in &keys {
        let r = p.record(key).await;
        let mut table = Table::new();
        table.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic).set_width(110);
        table.set_header(vec!["t+", "state after", "what happened"]);
        let created = (r.intent.created_at - t0).num_milliseconds() as f64 / 1000.0;
        table.add_row(vec![
            format!("{created:.3}s"),
            "received".into(),
            format!("received from {} ({})", r.intent.origin.as_str(), r.intent.template),
        ]);
        for o in p.timeline(key).await {
            let offset = (o.at - t0).num_milliseconds() as f64 / 1000.0;
            let state = o.state_after.map(|s| s.to_string()).unwrap_or_else(|| "—".into());
            table.add_row(vec![format!("{offset:.3}s"), state, o.summary()]);
        }
        println!(
            "{event} → {} ({story}) · to {} · key {}…{}",
            r.status.state.as_str().to_uppercase(),
            r.intent.recipient,
            key.short(),
            if r.status.escalation.is_some() { " · ESCALATED" } else { "" }
        );
        println!("{table}\n");
    }
    println!("Metrics (CloudWatch Embedded Metric Format) were written to {}", metrics_path.display());
    println!(
        "Summary: {} SMS sent for {} alerts (never one twice), {} escalations waiting for on-call.",
        p.emulator.sent_sms().await.map(|s| s.len()).unwrap_or(0),
        keys.len(),
        escalations.len()
    );
}
