//! Measurement 1: cold start of each function's release binary with its full production init
//! (config from the template environment, every SDK client), against the emulator, versus the
//! floor (a bare `lambda_runtime` echo).

use std::time::Duration;

use serde_json::json;
use tocsin_harness::runtime_api::Invocation;
use tocsin_harness::{Emulator, Stack};

use crate::binaries::{FLOOR, FUNCTIONS, release_binary};
use crate::function::{ColdRun, run_once, sample_event};
use crate::stats::{Summary, summarise};
use crate::{BenchError, Result};

/// Invocation timeout for one cold run.
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct FunctionCold {
    pub name: String,
    pub event: String,
    pub to_first_next: Summary,
    pub to_first_response: Summary,
    /// How the function answered the event (the same on every run).
    pub answer: String,
    pub peak_rss_kib: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ColdStart {
    pub floor: FunctionCold,
    pub functions: Vec<FunctionCold>,
}

fn describe(answer: &Invocation) -> String {
    let (kind, v) = match answer {
        Invocation::Response(v) => ("response", v),
        Invocation::Error(v) => ("error", v),
    };
    let detail = v
        .get("statusCode")
        .map(|c| format!("statusCode {c}"))
        .or_else(|| {
            v.get("batchItemFailures").map(|f| format!("{} batch item failures", f.as_array().map_or(0, Vec::len)))
        })
        .or_else(|| v.get("errorType").map(|t| t.to_string()))
        .unwrap_or_default();
    format!("{kind} {detail}").trim().to_owned()
}

async fn repeat(
    name: &str,
    event_name: &str,
    env: &[(String, String)],
    event: serde_json::Value,
    runs: usize,
) -> Result<FunctionCold> {
    let binary = release_binary(name)?;
    // One unmeasured run first: the binary's pages in the page cache, as on a warm Lambda host.
    run_once(&binary, env, name, event.clone(), TIMEOUT).await?;
    let mut samples: Vec<ColdRun> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let run = run_once(&binary, env, name, event.clone(), TIMEOUT).await?;
        if run.answer.is_none() {
            return Err(BenchError::Process(format!("{name}: no answer within {TIMEOUT:?}")));
        }
        samples.push(run);
    }
    let next: Vec<Duration> = samples.iter().map(|r| r.to_first_next).collect();
    let resp: Vec<Duration> = samples.iter().map(|r| r.to_first_response).collect();
    let none = || BenchError::Process(format!("{name}: no runs"));
    Ok(FunctionCold {
        name: name.to_owned(),
        event: event_name.to_owned(),
        to_first_next: summarise(&next).ok_or_else(none)?,
        to_first_response: summarise(&resp).ok_or_else(none)?,
        answer: samples.first().and_then(|r| r.answer.as_ref()).map(describe).unwrap_or_default(),
        peak_rss_kib: samples.iter().filter_map(|r| r.peak_rss_kib).max(),
    })
}

/// `runs` measured cold starts of the floor and of each function, on one emulator and stack.
pub async fn measure(runs: usize) -> Result<ColdStart> {
    let emulator = Emulator::start().await?;
    let stack = Stack::provision(&emulator.sdk_config().await, "tocsin-local").await?;
    let aws = emulator.aws_env();
    let floor = repeat(FLOOR, "`{\"ping\":true}`", &aws, json!({"ping": true}), runs).await?;
    let mut functions = Vec::new();
    for f in FUNCTIONS {
        let mut env: Vec<(String, String)> = stack.function_env(f.logical_id)?.into_iter().collect();
        env.extend(aws.iter().cloned());
        let event = sample_event(f.binary, f.event_file)?;
        let label = format!("events/{}/{}", f.binary, f.event_file);
        functions.push(repeat(f.binary, &label, &env, event, runs).await?);
    }
    Ok(ColdStart { floor, functions })
}
