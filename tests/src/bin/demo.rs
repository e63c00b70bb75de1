//! `cargo run -p tocsin-tests --bin demo`: the whole pipeline, locally, in one go.
//!
//! Starts the emulator, creates the resources from template.yaml, sends alerts through the real
//! function code and the deployment's default SMS provider, AWS End User Messaging (the local
//! stand-in plays the carriers, writing AWS's event format into the stack's event group: one
//! delivered, one blocked for good, one silent), runs the escalation sweep, and prints each
//! alert's timeline. `-- --provider sns` runs the same story through SNS, the demo playing the
//! carrier with delivery-status records in SNS's format.

use chrono::Duration;
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use tocsin::domain::IdempotencyKey;
use tocsin_tests::tocsin_harness::eum::{Carrier, CarrierBehaviour};
use tocsin_tests::{Options, Pipeline, alert, key_of};

/// The numbers of the story: delivered, blocked for good, silent.
const DELIVERED: &str = "+14155550101";
const BLOCKED: &str = "+14155550199";
const SILENT: &str = "+14155550103";

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sns = match args.iter().position(|a| a == "--provider").and_then(|i| args.get(i + 1)).map(String::as_str) {
        None | Some("end-user-messaging") => false,
        Some("sns") => true,
        Some(other) => {
            eprintln!("--provider {other}: the providers are end-user-messaging (the default) and sns");
            std::process::exit(2);
        }
    };
    let provider = if sns { "SNS" } else { "End User Messaging" };
    println!("tocsin demo: starting the local AWS emulator and creating the stack from template.yaml ({provider}) …");
    let p = Pipeline::start_with(if sns { Options::sns() } else { Options::end_user_messaging() }).await;
    if !sns {
        let eum = p.emulator.eum();
        for (number, behaviour) in [(BLOCKED, CarrierBehaviour::Blocked), (SILENT, CarrierBehaviour::Silent)] {
            if let Err(e) = eum.set_carrier(number, Carrier::new(behaviour)).await {
                eprintln!("the stand-in's carrier: {e}");
                std::process::exit(1);
            }
        }
    }
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
        ("db-disk-full-1001", DELIVERED, "carrier confirms delivery"),
        ("db-disk-full-1002", BLOCKED, "number blocked: fails for good"),
        ("db-disk-full-1003", SILENT, "carrier stays silent"),
    ];
    let mut keys: Vec<(IdempotencyKey, &str, &str)> = Vec::new();
    for (event, number, story) in cases {
        let (status, body) = p.submit(&alert(event, number)).await;
        let key = key_of(&body);
        println!("   {event}  → HTTP {status}  key {}…  ({story})", key.short());
        keys.push((key, event, story));
    }
    let (status, body) = p.submit(&alert("db-disk-full-1001", DELIVERED)).await;
    println!("   db-disk-full-1001 again (a client retry) → HTTP {status}, replay = {}", body["replay"]);

    if sns {
        println!("\n2. The sender drains the send queue (SQS → sender → SNS Publish)");
    } else {
        println!("\n2. The sender drains the send queue (SQS → sender → SendTextMessage, the key in its Context)");
    }
    p.run_sender().await;
    let sent: Vec<(String, String)> = if sns {
        p.emulator.sent_sms().await.unwrap_or_default().into_iter().map(|m| (m.phone_number, m.message_id)).collect()
    } else {
        p.emulator
            .eum()
            .sent_texts()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.destination, t.message_id))
            .collect()
    };
    for (number, id) in &sent {
        println!("   SMS to {} accepted by {provider}, MessageId {id}", tocsin::domain::phone::mask_phone_like(number));
    }

    if sns {
        println!("\n3. The carrier reports (SNS writes delivery-status logs; the subscription feeds status)");
        let id_for = |n: &str| sent.iter().find(|(to, _)| to == n).map(|(_, id)| id.clone()).unwrap_or_default();
        p.clock.advance(Duration::seconds(4));
        p.carrier_reports(&id_for(DELIVERED), DELIVERED, true, "Message has been accepted by phone carrier").await;
        p.carrier_reports(&id_for(BLOCKED), BLOCKED, false, "Phone is on a blocked list").await;
    } else {
        println!(
            "\n3. The carriers report (events naming each alert by key land in the stack's event group; the subscription feeds status)"
        );
        p.clock.advance(Duration::seconds(4));
    }
    for s in p.run_status().await {
        println!(
            "   status: {} delivered, {} failed, {} progress, {} recipients suppressed",
            s.delivered, s.failed, s.progress, s.suppressed
        );
    }

    println!("\n4. A later alert to the blocked number is not sent: the registry suppressed it");
    let (_, body) = p.submit(&alert("db-disk-full-1004", BLOCKED)).await;
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
    let sent = if sns {
        p.emulator.sent_sms().await.map(|s| s.len()).unwrap_or(0)
    } else {
        p.emulator.eum().sent_texts().await.map(|s| s.len()).unwrap_or(0)
    };
    println!(
        "Summary: {sent} SMS sent for {} alerts (never one twice), {} escalations waiting for on-call.",
        keys.len(),
        escalations.len()
    );
}
