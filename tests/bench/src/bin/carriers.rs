//! `cargo run -p tocsin-bench --release --bin carriers`: carrier incidents over a simulated
//! month (tocsin's volume × other applications' × incident), through the sweep's pure domain
//! functions; writes section 11 of BENCHMARKS.md. `TOCSIN_BENCH_CARRIERS_SEED` (default 2026);
//! `TOCSIN_BENCH_CARRIERS_ONLY=<Incident>-<tocsin/day>-<other apps/day>` (e.g. `OneSlow-20-5000`)
//! runs one case.

use std::process::ExitCode;
use std::time::Instant;

use tocsin_bench::carrier_month::{Incident, render, run, splice};

fn main() -> ExitCode {
    let seed = std::env::var("TOCSIN_BENCH_CARRIERS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(2026);
    let started = Instant::now();
    let mut outcomes = Vec::new();
    let only = std::env::var("TOCSIN_BENCH_CARRIERS_ONLY").ok();
    for incident in [
        Incident::OneSlow,
        Incident::OneSilent,
        Incident::AllSlow,
        Incident::CarrierLeft,
        Incident::CarrierGone,
        Incident::AccountHalves,
        Incident::None,
    ] {
        for tocsin in [20, 200, 2_000] {
            for foreign in [0, 5_000, 50_000] {
                if only.as_deref().is_some_and(|o| o != format!("{incident:?}-{tocsin}-{foreign}")) {
                    continue;
                }
                let o = run(incident, tocsin, foreign, seed);
                eprintln!("carriers: {:?} tocsin {tocsin}/day foreign {foreign}/day: {o:?}", incident);
                outcomes.push(o);
            }
        }
    }
    let cpu = tocsin_bench::cpu_clock::own().unwrap_or_else(|| started.elapsed());
    let section = render(&outcomes, "cargo run -p tocsin-bench --release --bin carriers", cpu);
    print!("{section}");
    let path = tocsin_harness::workspace_root().join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    match std::fs::write(&path, splice(&text, &section)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carriers: could not write {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
