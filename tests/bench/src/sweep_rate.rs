//! Sweep throughput: escalations one sweep run makes within a fixed time budget, at several
//! `TOCSIN_SWEEP_CONCURRENCY` settings. Each setting gets a fresh pipeline (`Pipeline::start_with`,
//! the setting as an environment override) with the same number of due intents (submitted and
//! sent, accepted, never delivered, the clock moved past their deadline), then one sweep run
//! (`Pipeline::run_escalation_within(budget)`, as the Lambda stops before its timeout).
//!
//! The run goes through the harness's fault proxy, which delays every request by a fixed network
//! latency (`TOCSIN_BENCH_SWEEP_LATENCY_MS`, default 25 ms): on AWS a call's time is mostly that
//! wait, which concurrency overlaps; the emulator answers one request at a time in a few ms, so
//! without it the run measures moto's own service time, which no concurrency shortens.

use std::time::{Duration, Instant};

use tocsin_harness::fault_proxy::{Fault, Rule};
use tocsin_tests::{Options, Pipeline, alert};

use crate::{BenchError, Result};

/// Default settings measured.
pub const CONCURRENCIES: [usize; 4] = [1, 2, 4, 8];
/// Default due intents per setting (`TOCSIN_BENCH_SWEEP_DUE`).
pub const DUE: usize = 120;
/// Default time budget of the run (`TOCSIN_BENCH_SWEEP_BUDGET_S`).
pub const BUDGET: Duration = Duration::from_secs(5);
/// Default latency added to every request of the run (`TOCSIN_BENCH_SWEEP_LATENCY_MS`).
pub const LATENCY: Duration = Duration::from_millis(25);

#[derive(Debug, Clone)]
pub struct SweepRate {
    pub concurrency: usize,
    pub due: usize,
    pub budget: Duration,
    pub escalated: usize,
    pub read: usize,
    pub complete: bool,
    pub elapsed: Duration,
    pub errors: usize,
    /// Latency added to every request of the run.
    pub latency: Duration,
    /// AWS requests the run made.
    pub calls: usize,
}

impl SweepRate {
    /// Escalations per second of run time.
    pub fn per_second(&self) -> f64 {
        self.escalated as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// AWS requests per escalation in the run.
    pub fn calls_per_escalation(&self) -> f64 {
        self.calls as f64 / (self.escalated.max(1)) as f64
    }
}

/// A distinct US number per intent, never ending in 99 (the emulator's "opted out" numbers).
fn number(i: usize) -> String {
    format!("+14156{:04}{:02}", (i / 90) % 10_000, i % 90)
}

/// One setting: a fresh pipeline, `due` due intents, one run within `budget`.
pub async fn measure_one(concurrency: usize, due: usize, budget: Duration, latency: Duration) -> Result<SweepRate> {
    // Options take 'static strings; a handful per bench run.
    let c: &'static str = Box::leak(concurrency.to_string().into_boxed_str());
    let p = Pipeline::start_with(Options {
        env: vec![
            ("TOCSIN_ORPHAN_WAIT", "0s"),
            ("TOCSIN_SWEEP_CONCURRENCY", c),
            // Seeding only: the sender's SMS pacing would make seeding take due ÷ 10 s.
            ("TOCSIN_SMS_RATE_PER_SECOND", "10000"),
        ],
        fault_seed: Some(5),
        ..Default::default()
    })
    .await;
    for i in 0..due {
        let (code, body) = p.submit(&alert(&format!("rate-{i}"), &number(i))).await;
        if code != 201 {
            return Err(BenchError::Process(format!("intake answered {code}: {body}")));
        }
    }
    p.run_sender().await;
    p.clock.advance(chrono::Duration::minutes(16));
    let proxy = p.proxy.as_ref().ok_or_else(|| BenchError::Process("the pipeline has no fault proxy".into()))?;
    let before = proxy.requests().len();
    proxy.add_rule(Rule::sometimes("*", Fault::Delay(latency), 1.0));
    let started = Instant::now();
    let run = p.run_escalation_within(budget).await;
    let elapsed = started.elapsed();
    let calls = proxy.requests().len().saturating_sub(before);
    Ok(SweepRate {
        concurrency,
        due,
        budget,
        escalated: run.escalated,
        read: run.read,
        complete: run.complete,
        elapsed,
        errors: run.errors,
        latency,
        calls,
    })
}

pub async fn measure(
    concurrencies: &[usize],
    due: usize,
    budget: Duration,
    latency: Duration,
) -> Vec<(usize, Result<SweepRate>)> {
    let mut out = Vec::new();
    for &c in concurrencies {
        eprintln!("bench: sweep throughput at concurrency {c}");
        out.push((c, measure_one(c, due, budget, latency).await));
    }
    out
}
