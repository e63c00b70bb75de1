//! Runs the simulation over many seeds (the long mode) or replays one.
//!
//! - `TOCSIN_SIM_SEED=N`: replays seed N alone and prints its report (and trace on failure).
//! - `TOCSIN_SIM_SEEDS=N` (default 1000), `TOCSIN_SIM_FIRST_SEED=S` (default 1): runs seeds
//!   S..S+N and stops at the first failure, shrunk.
//! - `TOCSIN_SIM_MAX_ALERTS=N` (default 200): the largest workload a seed may draw.
//! - `TOCSIN_SIM_PROVIDER=sns|end-user-messaging`: every seed sends through that SMS provider
//!   (otherwise each seed draws one, half and half).
//! - `TOCSIN_SIM_COVERAGE=PATH`: writes the runs' coverage (every port op by how it ended, every
//!   state change by writer, workloads run) there as Markdown.
//! - `TOCSIN_SIM_LOG=FILTER` (e.g. `info`): with `TOCSIN_SIM_SEED`, the handlers' own log lines
//!   on stderr (a `tracing` env filter), to follow one alert by its short key.

use std::time::Instant;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `TOCSIN_SIM_PROVIDER=sns|end-user-messaging`: every seed through one provider.
fn with_provider(scenario: tocsin_sim::Scenario) -> tocsin_sim::Scenario {
    use tocsin_sim::world::sms::Provider;
    match std::env::var("TOCSIN_SIM_PROVIDER").as_deref() {
        Ok("sns") => scenario.through(Provider::Sns),
        Ok("end-user-messaging") => scenario.through(Provider::EndUserMessaging),
        _ => scenario,
    }
}

fn var(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> std::process::ExitCode {
    let max_alerts = var("TOCSIN_SIM_MAX_ALERTS", 200) as usize;
    if let Ok(filter) = std::env::var("TOCSIN_SIM_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    if let Ok(seed) = std::env::var("TOCSIN_SIM_SEED") {
        let Ok(seed) = seed.parse::<u64>() else {
            eprintln!("TOCSIN_SIM_SEED={seed:?} is not a number");
            return std::process::ExitCode::FAILURE;
        };
        let r = tocsin_sim::run(&with_provider(tocsin_sim::Scenario::from_seed(seed, max_alerts)));
        if r.ok() {
            println!(
                "seed {seed}: ok ({} alerts, {} SMS, {} escalations, {})",
                r.lifecycles,
                r.sms,
                r.escalations,
                r.scenario.provider.name()
            );
            for line in &r.trace {
                println!("    {line}");
            }
            return std::process::ExitCode::SUCCESS;
        }
        // `TOCSIN_SIM_SHRINK=0`: the run as it failed, for a story the shrunk run no longer tells.
        let r = if std::env::var("TOCSIN_SIM_SHRINK").as_deref() == Ok("0") { r } else { tocsin_sim::shrink(r) };
        println!("{}", tocsin_sim::failure_report(&r));
        return std::process::ExitCode::FAILURE;
    }
    let first = var("TOCSIN_SIM_FIRST_SEED", 1);
    let seeds = var("TOCSIN_SIM_SEEDS", 1000);
    let started = Instant::now();
    let (mut lifecycles, mut ops, mut sms, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let mut coverage = tocsin_sim::world::Coverage::default();
    let mut workloads = tocsin_sim::Workloads::default();
    let mut lateness: Vec<i64> = Vec::new();
    let fixed_kind = std::env::var("TOCSIN_SIM_KIND")
        .ok()
        .and_then(|k| tocsin_sim::workload::ALL_KINDS.into_iter().find(|kind| kind.name().replace(' ', "-") == k));
    for seed in first..first + seeds {
        let scenario = match fixed_kind {
            Some(kind) => tocsin_sim::Scenario::fixed(
                seed,
                kind,
                max_alerts,
                std::env::var("TOCSIN_SIM_STORM").is_ok_and(|v| v == "on"),
                tocsin_sim::world::FaultPlan::none(),
            ),
            None => tocsin_sim::Scenario::from_seed(seed, max_alerts),
        };
        let scenario = with_provider(scenario);
        let r = tocsin_sim::run(&scenario);
        lifecycles += r.lifecycles as u64;
        ops += r.ops;
        sms += r.sms;
        coverage.merge(&r.coverage);
        lateness.extend(&r.chain_lateness);
        let w = workloads.entry((r.scenario.kind.name(), r.scenario.storm, r.scenario.provider.name())).or_default();
        w.0 += 1;
        w.1 += r.lifecycles as u64;
        if !r.ok() && std::env::var("TOCSIN_SIM_KEEP_GOING").is_ok() {
            let mut kinds: Vec<String> = r.violations.iter().map(|v| format!("{:?}", v.invariant)).collect();
            kinds.sort();
            kinds.dedup();
            println!(
                "seed {seed} ({}, storm {}, {}): {}",
                r.scenario.kind.name(),
                r.scenario.storm,
                r.scenario.provider.name(),
                kinds.join(", ")
            );
            failed += 1;
            continue;
        }
        if !r.ok() {
            let shrunk = tocsin_sim::shrink(r);
            println!("{}", tocsin_sim::failure_report(&shrunk));
            return std::process::ExitCode::FAILURE;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if let Ok(path) = std::env::var("TOCSIN_SIM_COVERAGE") {
        let table = tocsin_sim::coverage_markdown(&coverage, &workloads);
        if let Err(e) = std::fs::write(&path, table) {
            eprintln!("cannot write the coverage table to {path}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let totals = format!(
        "{lifecycles} alert lifecycles, {sms} SMS, {ops} ops in {secs:.1} s ({:.0} lifecycles/s)",
        lifecycles as f64 / secs
    );
    if !lateness.is_empty() {
        lateness.sort_unstable();
        let at = |q: f64| lateness[((lateness.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        let early = lateness.iter().filter(|&&l| l < 0).count();
        println!(
            "chain levels started: {}, after the level before stopped waiting by p50 {:.1} s, p90 {:.1} s, p99 {:.1} s, max {:.1} s ({early} early, for a degraded carrier or a deadline that cannot be met)",
            lateness.len(),
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0)
        );
    }
    if failed > 0 {
        println!("{failed} of {seeds} seeds FAILED; {totals}");
        return std::process::ExitCode::FAILURE;
    }
    println!("{seeds} seeds green: {totals}");
    std::process::ExitCode::SUCCESS
}
