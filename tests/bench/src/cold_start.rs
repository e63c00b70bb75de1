//! Measurement 1: cold start of each function's release binary with its full production init
//! (config from the template environment, every SDK client), against the emulator, versus the
//! floor (a bare `lambda_runtime` echo).

use std::time::Duration;

use serde_json::json;
use tocsin_harness::runtime_api::Invocation;
use tocsin_harness::{Emulator, Stack};

use crate::binaries::{FLOOR, FUNCTIONS, release_binary};
use crate::function::{ColdRun, Process, run_process, sample_event};
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
    /// The Python peer (`python_peer`), or why it was not measured.
    pub python_peer: std::result::Result<FunctionCold, String>,
}

/// The Python peer runs with the sender's environment and is invoked with the sender's event.
pub const PEER_EVENT: (&str, &str, &str) = ("sender", "SenderFunction", "sqs-send-request.json");

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
    repeat_process(&Process::binary(&release_binary(name)?), name, event_name, env, event, runs).await
}

async fn repeat_process(
    process: &Process,
    name: &str,
    event_name: &str,
    env: &[(String, String)],
    event: serde_json::Value,
    runs: usize,
) -> Result<FunctionCold> {
    // One unmeasured run first: the binary's pages in the page cache, as on a warm Lambda host.
    run_process(process, env, name, event.clone(), TIMEOUT).await?;
    let mut samples: Vec<ColdRun> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let run = run_process(process, env, name, event.clone(), TIMEOUT).await?;
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
    let python_peer = python_peer(&stack, &aws, runs).await.map_err(|e| e.to_string());
    Ok(ColdStart { floor, functions, python_peer })
}

/// `runs` cold starts of the Python peer, with the same stand-in, probe, environment and event
/// as the sender.
async fn python_peer(stack: &Stack, aws: &[(String, String)], runs: usize) -> Result<FunctionCold> {
    let interpreter = crate::python_peer::install().await?;
    let (dir, logical_id, file) = PEER_EVENT;
    let mut env: Vec<(String, String)> = stack.function_env(logical_id)?.into_iter().collect();
    env.extend(aws.iter().cloned());
    let event = sample_event(dir, file)?;
    let label = format!("events/{dir}/{file}");
    let process = crate::python_peer::process(&interpreter, &env);
    repeat_process(&process, crate::python_peer::FUNCTION_NAME, &label, &env, event, runs)
        .await
        .map_err(|e| BenchError::Process(format!("Python peer: {e}")))
}
