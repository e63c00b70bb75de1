//! `cargo run -p tocsin-bench --release --bin bench`: runs every measurement and writes
//! BENCHMARKS.md at the workspace root (rewritten after each section, so an interrupted run still
//! leaves what it measured).

use std::process::ExitCode;

use tocsin_bench::report::Report;
use tocsin_bench::{
    api_calls, binaries, capacity, cold_start, cpu, machine, merge, rss, size, status_rate, storm, storm_mode,
    sweep_rate, sweep_reads, wru,
};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn sizes() -> Vec<usize> {
    std::env::var("TOCSIN_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 50_000])
}

/// `TOCSIN_BENCH_SECTIONS` (comma-separated: build, cpu, size, cold, calls, wru, idle, rss, sweep,
/// sweeprate, statusrate, storm, stormmode, replies) selects sections; all by default.
fn enabled(section: &str) -> bool {
    std::env::var("TOCSIN_BENCH_SECTIONS").map(|v| v.split(',').any(|s| s.trim() == section)).unwrap_or(true)
}

fn write(report: &Report) -> std::io::Result<()> {
    let path = tocsin_harness::workspace_root().join("BENCHMARKS.md");
    let mut text = report.render();
    // A partial run keeps the sections it did not measure from the previous file.
    if let Ok(sections) = std::env::var("TOCSIN_BENCH_SECTIONS")
        && let Ok(old) = std::fs::read_to_string(&path)
    {
        let date = report.machine.as_ref().map(|m| m.date.clone()).unwrap_or_default();
        let note = format!(
            "> This file was last updated by a partial run ({date}, `TOCSIN_BENCH_SECTIONS={sections}`): the other \
             sections are from earlier runs of the same command.\n\n"
        );
        let old = old
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("> This file was last updated by a partial run"))
            .collect::<String>();
        let old = old.replace("\n\n\n", "\n\n");
        text = merge::merge(&old, &text, &note);
    } else if let Ok(old) = std::fs::read_to_string(&path) {
        // A full run: every section this command measures is new; the ones it does not write
        // (the simulation's long runs, the carrier month) are kept.
        text = merge::carry_over(&old, text);
    }
    std::fs::write(&path, text)?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> std::io::Result<()> {
    let mut report =
        Report { machine: Some(machine::describe()), runs: env_usize("TOCSIN_BENCH_RUNS", 10), ..Default::default() };

    if enabled("build") {
        eprintln!("bench: building release binaries");
        let built = binaries::build_all();
        if let Ok(binaries::Built { arm64_skipped: Some(why) }) = &built {
            eprintln!("bench: arm64 deployment build skipped: {why}");
        }
        report.arm64_skipped = built.as_ref().ok().and_then(|b| b.arm64_skipped.clone());
        report.build = Some(built.map(|_| ()));
    } else if std::env::var_os("TOCSIN_BENCH_SKIP_BUILD").is_none() {
        // A partial run without the build section still measures current binaries: without this,
        // a change since the last release build would be measured as the old code.
        eprintln!("bench: bringing the release binaries up to date");
        if let Err(e) = binaries::build_host() {
            return Err(std::io::Error::other(format!("release build: {e}")));
        }
    }
    if enabled("cpu") {
        eprintln!("bench: criterion benches (CPU only, one core)");
        report.criterion = Some(cpu::run_criterion());
        report.status_parse = vec![
            ("SNS delivery-status records", cpu::read(cpu::STATUS_BENCH)),
            ("End User Messaging events", cpu::read(cpu::STATUS_EUM_BENCH)),
        ];
        report.intake_cpu = Some(cpu::read(cpu::INTAKE_BENCH));
        write(&report)?;
    }
    if enabled("size") {
        eprintln!("bench: deployment size");
        report.sizes = Some(size::measure());
        write(&report)?;
    }
    if enabled("cold") {
        eprintln!("bench: cold start ({} runs per function)", report.runs);
        report.cold = Some(cold_start::measure(report.runs).await);
        write(&report)?;
    }
    if enabled("calls") {
        eprintln!("bench: AWS API calls per alert");
        report.calls = Some(api_calls::measure().await);
        report.calls_eum = Some(api_calls::measure_end_user_messaging().await);
        write(&report)?;
    }
    if enabled("wru") {
        eprintln!("bench: write units, cost and capacity of one delivered alert");
        let measured = wru::measure().await;
        if let Ok(w) = &measured {
            eprintln!("bench: {}", wru::summary_line(w));
            report.capacity = Some(wru::template_json().and_then(|t| capacity::model(w, &t)));
        }
        report.wru = Some(measured);
        report.wru_eum = Some(wru::measure_end_user_messaging().await);
        write(&report)?;
    }
    if enabled("idle") {
        eprintln!("bench: what an idle stack costs a month");
        report.idle = Some(tocsin_bench::idle::measure().await);
        write(&report)?;
    }
    if enabled("rss") {
        eprintln!("bench: peak RSS");
        report.rss = Some(rss::measure().await);
        write(&report)?;
    }
    if enabled("sweep") {
        let sizes = sizes();
        eprintln!("bench: escalation reads at {sizes:?} delivered intents");
        report.sweeps = Some(sweep_reads::measure(&sizes).await);
        write(&report)?;
    }
    if enabled("sweeprate") {
        let concurrencies: Vec<usize> = std::env::var("TOCSIN_BENCH_SWEEP_CONCURRENCIES")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
            .unwrap_or_else(|| sweep_rate::CONCURRENCIES.to_vec());
        let due = env_usize("TOCSIN_BENCH_SWEEP_DUE", sweep_rate::DUE);
        let budget = std::time::Duration::from_secs(env_usize(
            "TOCSIN_BENCH_SWEEP_BUDGET_S",
            sweep_rate::BUDGET.as_secs() as usize,
        ) as u64);
        let latency = std::time::Duration::from_millis(env_usize(
            "TOCSIN_BENCH_SWEEP_LATENCY_MS",
            sweep_rate::LATENCY.as_millis() as usize,
        ) as u64);
        let defaults = concurrencies == sweep_rate::CONCURRENCIES
            && due == sweep_rate::DUE
            && budget == sweep_rate::BUDGET
            && latency == sweep_rate::LATENCY;
        report.sweep_rate_settings = Some((due, budget, defaults));
        report.sweep_rates = Some(sweep_rate::measure(&concurrencies, due, budget, latency).await);
        write(&report)?;
    }
    if enabled("statusrate") {
        eprintln!("bench: status throughput per instance (in-memory ports, then the binary on the emulator)");
        report.status_rate = Some(status_rate::measure().await);
        write(&report)?;
    }
    if enabled("storm") {
        let intents = env_usize("TOCSIN_STORM_INTENTS", storm::DEFAULT_INTENTS);
        eprintln!("bench: the storm at {intents} intents (a debug test build)");
        let storm = storm::run(intents);
        if let Err(e) = &storm {
            // A failed section keeps its previous text in BENCHMARKS.md: say why here.
            eprintln!("bench: the storm was not measured: {e}");
        }
        report.storm = Some(storm);
        write(&report)?;
    }
    if enabled("replies") {
        eprintln!("bench: acknowledgement by reply ({} replies)", tocsin_bench::replies::REPLIES);
        let replies = tocsin_bench::replies::measure().await;
        if let Err(e) = &replies {
            // A failed section keeps its previous text in BENCHMARKS.md: say why here.
            eprintln!("bench: acknowledgement by reply was not measured: {e}");
        }
        report.replies = Some(replies);
        write(&report)?;
    }
    if enabled("stormmode") {
        let seed = std::env::var("TOCSIN_BENCH_STORM_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(storm_mode::DEFAULT_SEED);
        eprintln!("bench: storm mode, simulated (seed {seed}; off, on, and the EDF bound)");
        report.storm_mode = Some(storm_mode::run(seed));
        write(&report)?;
    }
    Ok(())
}
