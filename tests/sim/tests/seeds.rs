//! The simulation as a test: a bounded number of seeds, each a whole run of the real handlers in
//! the simulated world, every guarantee checked (the long mode is `cargo run -p tocsin-sim
//! --profile sim --bin simulate`). A failure prints its seed, the broken guarantee and the steps
//! before it, shrunk to the smallest failing scenario.

use tocsin_sim::{Scenario, failure_report, run, shrink};

/// Seeds per `cargo test` run, and the largest workload one may draw: sized to stay within a
/// couple of minutes of an unoptimised build on two cores (override with TOCSIN_SIM_TEST_SEEDS).
const SEEDS: u64 = 150;
const MAX_ALERTS: usize = 80;

fn seeds() -> u64 {
    std::env::var("TOCSIN_SIM_TEST_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(SEEDS)
}

#[test]
fn every_guarantee_holds_for_every_seed() {
    for seed in 1..=seeds() {
        let report = run(&Scenario::from_seed(seed, MAX_ALERTS));
        if !report.ok() {
            panic!("{}", failure_report(&shrink(report)));
        }
    }
}

#[test]
fn a_seed_replays_to_the_same_run() {
    for seed in [3, 17] {
        let a = run(&Scenario::from_seed(seed, MAX_ALERTS));
        let b = run(&Scenario::from_seed(seed, MAX_ALERTS));
        assert_eq!(a.trace, b.trace, "seed {seed} replays step for step");
        assert_eq!((a.sms, a.escalations, a.ops), (b.sms, b.escalations, b.ops));
    }
}
