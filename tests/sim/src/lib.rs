//! tocsin's deterministic simulation: the real handlers (intake, sender, status, escalation with
//! reconciliation) run against a simulated AWS, on a simulated clock, with every port call a
//! scheduled operation that may be delayed, fail, lose its answer, be retried by the SDK, or end
//! its invocation where it stands. One seed decides everything — the workload, the faults, the
//! interleaving — so a failing run is replayed exactly from its seed.
//!
//! - [`exec`]: the executor (simulated time, ops, timers, tasks).
//! - [`world`]: the simulated services, with AWS's semantics ([`world::ledger`] is the ledger
//!   table the DynamoDB adapter writes; the contract tests hold the two to the same answers).
//! - [`oracle`] and [`invariants`]: the guarantees, checked as events happen and at quiescence.
//! - [`workload`] and [`run`]: the traffic, and one run from a seed.
//!
//! `cargo test -p tocsin-sim` runs a bounded number of seeds; `cargo run -p tocsin-sim --release
//! --bin simulate` runs as many as asked (docs/testing.md, "The simulation").

pub mod deployment;
pub mod exec;
pub mod invariants;
pub mod oracle;
pub mod run;
pub mod workload;
pub mod world;

pub use run::{Report, Scenario, run};

/// A failing run, as a human reads it: the seed to replay it, what broke, and the steps before.
pub fn failure_report(r: &Report) -> String {
    let s = &r.scenario;
    let mut out = format!(
        "simulation seed {} FAILED ({} alerts, {}, storm mode {}, {}):\n  faults: {:?}\n",
        s.seed,
        s.alerts,
        s.kind.name(),
        if s.storm { "on" } else { "off" },
        s.provider.name(),
        s.faults,
    );
    for v in r.violations.iter().take(20) {
        out.push_str(&format!("  {v}\n"));
    }
    if r.violations.len() > 20 {
        out.push_str(&format!("  … and {} more\n", r.violations.len() - 20));
    }
    if !r.story.is_empty() {
        out.push_str("the alert's story:\n");
        for line in &r.story {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "replay (and shrink again): TOCSIN_SIM_SEED={} TOCSIN_SIM_MAX_ALERTS={} cargo run -p tocsin-sim --profile sim --bin simulate\nlast steps before the first violation:\n",
        s.seed, s.max_alerts
    ));
    for line in r.trace.iter().rev().take(trace_lines()).rev() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The smallest scenario that still fails, found by trying smaller ones with the same seed: fewer
/// alerts, then each kind of fault switched off. Returns the report of the smallest failure.
pub fn shrink(failing: Report) -> Report {
    let mut best = failing;
    let fails = |s: &Scenario| {
        let r = run(s);
        (!r.ok()).then_some(r)
    };
    // Fewer alerts.
    loop {
        let n = best.scenario.alerts;
        if n <= 1 {
            break;
        }
        let mut smaller = best.scenario.clone();
        smaller.alerts = n / 2;
        match fails(&smaller) {
            Some(r) => best = r,
            None => break,
        }
    }
    // Each fault off, one at a time.
    type Knob = fn(&mut world::FaultPlan);
    let knobs: [Knob; 19] = [
        |f| f.error_before = 0.0,
        |f| f.error_after = 0.0,
        |f| f.retried = 0.0,
        |f| f.crash = 0.0,
        |f| f.crash_streak = 0.0,
        |f| f.slow = 0.0,
        |f| f.gsi_lag_ms = 0,
        |f| f.gsi_lag_long = 0.0,
        |f| f.publish_timeout = 0.0,
        |f| f.publish_5xx = 0.0,
        |f| f.record_lost = 0.0,
        |f| f.record_twice = 0.0,
        |f| f.batch_twice = 0.0,
        |f| f.search_throttled = 0.0,
        |f| f.ingestion_slow = 0.0,
        |f| f.outage = 0.0,
        |f| f.sweep_twice = 0.0,
        |f| f.sqs_duplicate = 0.0,
        |f| f.lambda_throttled = 0.0,
    ];
    for knob in knobs {
        let mut quieter = best.scenario.clone();
        knob(&mut quieter.faults);
        if let Some(r) = fails(&quieter) {
            best = r;
        }
    }
    best
}

/// Trace lines a failure report prints (`TOCSIN_SIM_TRACE_LINES`, default 60).
fn trace_lines() -> usize {
    std::env::var("TOCSIN_SIM_TRACE_LINES").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

/// Seeds and alert lifecycles run, per workload kind, storm mode and SMS provider.
pub type Workloads = std::collections::BTreeMap<(&'static str, bool, &'static str), (u64, u64)>;

/// The coverage of many runs as Markdown: every port op by how it ended (answered, failed, its
/// answer lost, the invocation crashing before or after it landed), every state change by writer,
/// and the workloads run. An empty cell is a case no run reached.
pub fn coverage_markdown(c: &world::Coverage, workloads: &Workloads) -> String {
    // "outage began": the op that started an outage (counted also as failed before); "crash
    // streak began": an invocation whose crash its function's next invocations repeat; "delivered
    // twice": a queue message handed to a second sender while the first still had it; "lagged
    // past a lease": an index write that showed more than a claim lease after its table write.
    const HOW: [&str; 10] = [
        "answered",
        "failed before",
        "answer lost",
        "retried after loss",
        "crash before",
        "crash after",
        "outage began",
        "crash streak began",
        "delivered twice",
        "lagged past a lease",
    ];
    let mut out = String::from("### Port operations, by how they ended\n\n| op |");
    for h in HOW {
        out.push_str(&format!(" {h} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(HOW.len()));
    out.push('\n');
    let labels: std::collections::BTreeSet<&str> = c
        .ops
        .keys()
        .map(|(l, _)| *l)
        .filter(|l| {
            ![
                world::second_stack::COVERAGE,
                world::THROTTLE_COVERAGE,
                world::ACK_COVERAGE,
                world::RESEND_COVERAGE,
                world::people::REPLY_COVERAGE,
                world::CHAIN_COVERAGE,
                world::networks::COVERAGE,
            ]
            .contains(l)
        })
        .collect();
    for label in labels {
        out.push_str(&format!("| {label} |"));
        for h in HOW {
            match c.ops.get(&(label, h)) {
                Some(n) => out.push_str(&format!(" {n} |")),
                None => out.push_str(" |"),
            }
        }
        out.push('\n');
    }
    for (title, label) in [
        ("A second tocsin stack paging the same phones", world::second_stack::COVERAGE),
        ("Lambda throttling tocsin's functions (the account's unreserved concurrency taken)", world::THROTTLE_COVERAGE),
        ("Acknowledgements (someone takes an open alert, racing the automation)", world::ACK_COVERAGE),
        ("Operators' resends (racing the sender and the sweep)", world::RESEND_COVERAGE),
        ("People who reply (End User Messaging's two-way numbers)", world::people::REPLY_COVERAGE),
        ("Escalation chains, by where the alert's chain came from", world::CHAIN_COVERAGE),
        (
            "Carrier networks: incidents, traffic that changes for good, and the traffic verdicts against them",
            world::networks::COVERAGE,
        ),
    ] {
        out.push_str(&format!("\n### {title}\n\n| what | times |\n|---|---:|\n"));
        for (what, n) in c.section(label) {
            out.push_str(&format!("| {what} | {n} |\n"));
        }
    }
    out.push_str(
        "\n### State changes, by writer (the observation's source)\n\n| change | by | times |\n|---|---|---:|\n",
    );
    for ((change, by), n) in &c.transitions {
        out.push_str(&format!("| {change} | {by} | {n} |\n"));
    }
    out.push_str(
        "\n### Workloads\n\n| workload | storm mode | SMS provider | seeds | alert lifecycles |\n|---|---|---|---:|---:|\n",
    );
    for ((kind, storm, provider), (seeds, lifecycles)) in workloads {
        out.push_str(&format!(
            "| {kind} | {} | {provider} | {seeds} | {lifecycles} |\n",
            if *storm { "on" } else { "off" }
        ));
    }
    out
}
