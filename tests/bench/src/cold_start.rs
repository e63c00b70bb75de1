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
    /// CPU time (all threads) of the init (spawn → first `/next`), when it could be read.
    pub init_cpu: Option<Summary>,
    /// CPU time (all threads) of the first invocation (first `/next` → second).
    pub first_invocation_cpu: Option<Summary>,
    /// How the function answered the event (the same on every run).
    pub answer: String,
    pub peak_rss_kib: Option<u64>,
    /// AWS calls per run (warm-up included), by operation, when they were recorded.
    pub calls_per_run: Option<std::collections::BTreeMap<String, f64>>,
}

/// Runs `f` with the emulator's recorder on: its result and the calls per run (`runs` + the
/// warm-up), by operation.
async fn with_calls<F: std::future::Future<Output = Result<FunctionCold>>>(
    emulator: &Emulator,
    runs: usize,
    f: F,
) -> Result<FunctionCold> {
    emulator.start_recording().await?;
    let measured = f.await;
    let ops = emulator.stop_recording().await?;
    let mut cold = measured?;
    let mut calls = std::collections::BTreeMap::new();
    for o in ops {
        *calls.entry(o).or_insert(0.0) += 1.0 / (runs + 1) as f64;
    }
    cold.calls_per_run = Some(calls);
    Ok(cold)
}

#[derive(Debug, Clone)]
pub struct ColdStart {
    pub floor: FunctionCold,
    pub functions: Vec<FunctionCold>,
    /// The Python peer (`python_peer`), or why it was not measured.
    pub python_peer: std::result::Result<FunctionCold, String>,
    /// The status function's init and first requests step by step (`init-stages`, with the
    /// functions' SDK configuration, `tocsin::adapters::sdk`): per step, the median CPU time over
    /// the runs, or why it was not measured.
    pub stages: std::result::Result<Vec<(String, Duration)>, String>,
    /// The same with `aws_config::load_from_env` (`TOCSIN_INIT_STAGES_LOADER=load_from_env`).
    pub stages_load_from_env: std::result::Result<Vec<(String, Duration)>, String>,
    /// The same with region and credentials from the environment only and the SDK's default HTTPS
    /// client per SDK client (`TOCSIN_INIT_STAGES_LOADER=env`).
    pub stages_env_only: std::result::Result<Vec<(String, Duration)>, String>,
}

/// `runs` fresh `init-stages` processes with the status function's environment: the median CPU
/// time of each step.
async fn init_stages(env: &[(String, String)], runs: usize) -> Result<Vec<(String, Duration)>> {
    let binary = release_binary("init-stages")?;
    let mut per_step: Vec<(String, Vec<Duration>)> = Vec::new();
    for _ in 0..runs.max(1) + 1 {
        let out = tokio::process::Command::new(&binary)
            .env_clear()
            .envs(env.iter().cloned())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .await?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with('{') && l.contains("\"steps\""))
            .ok_or_else(|| BenchError::Process(format!("init-stages printed no steps ({})", out.status)))?;
        let v: serde_json::Value = serde_json::from_str(line)?;
        if let Some(e) = v["errors"].as_array().and_then(|a| a.first()) {
            return Err(BenchError::Process(format!("init-stages: {e}")));
        }
        for (i, step) in v["steps"].as_array().into_iter().flatten().enumerate() {
            let name = step[0].as_str().unwrap_or_default().to_owned();
            let value = Duration::from_secs_f64(step[1].as_f64().unwrap_or_default() / 1e3);
            match per_step.get_mut(i) {
                Some((_, values)) => values.push(value),
                None => per_step.push((name, vec![value])),
            }
        }
    }
    // The first run is the warm-up (binary into the page cache), as for the cold starts.
    Ok(per_step
        .into_iter()
        .filter_map(|(name, values)| summarise(values.get(1..).unwrap_or_default()).map(|s| (name, s.median)))
        .collect())
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
    let all = |v: Vec<Option<Duration>>| v.into_iter().collect::<Option<Vec<Duration>>>();
    let init_cpu = all(samples.iter().map(|r| r.init_cpu).collect()).and_then(|v| summarise(&v));
    let first_invocation_cpu =
        all(samples.iter().map(|r| r.first_invocation_cpu).collect()).and_then(|v| summarise(&v));
    Ok(FunctionCold {
        name: name.to_owned(),
        event: event_name.to_owned(),
        to_first_next: summarise(&next).ok_or_else(none)?,
        to_first_response: summarise(&resp).ok_or_else(none)?,
        init_cpu,
        first_invocation_cpu,
        answer: samples.first().and_then(|r| r.answer.as_ref()).map(describe).unwrap_or_default(),
        peak_rss_kib: samples.iter().filter_map(|r| r.peak_rss_kib).max(),
        calls_per_run: None,
    })
}

/// `runs` measured cold starts of the floor and of each function, on one emulator and stack.
pub async fn measure(runs: usize) -> Result<ColdStart> {
    let emulator = Emulator::start().await?;
    let stack = Stack::provision(&emulator.sdk_config().await, "tocsin-local").await?;
    let aws = emulator.aws_env(&tocsin_harness::Principal::Harness);
    let floor = repeat(FLOOR, "`{\"ping\":true}`", &aws, json!({"ping": true}), runs).await?;
    let mut functions = Vec::new();
    for f in FUNCTIONS {
        let mut env: Vec<(String, String)> = stack.function_env(f.logical_id)?.into_iter().collect();
        env.extend(emulator.aws_env(&tocsin_harness::Principal::function(f.logical_id)));
        let event = sample_event(f.binary, f.event_file)?;
        let label = format!("events/{}/{}", f.binary, f.event_file);
        let measured = repeat(f.binary, &label, &env, event, runs);
        // The sender's calls, to compare with the Python peer's (which does the sender's work).
        functions.push(if f.binary == PEER_EVENT.0 {
            with_calls(&emulator, runs, measured).await?
        } else {
            measured.await?
        });
    }
    let mut status_env: Vec<(String, String)> = stack.function_env("StatusFunction")?.into_iter().collect();
    status_env.extend(aws.iter().cloned());
    let stages = init_stages(&status_env, runs).await.map_err(|e| e.to_string());
    let loader = |name: &str| {
        let mut env = status_env.clone();
        env.push(("TOCSIN_INIT_STAGES_LOADER".into(), name.into()));
        env
    };
    let stages_load_from_env = init_stages(&loader("load_from_env"), runs).await.map_err(|e| e.to_string());
    let stages_env_only = init_stages(&loader("env"), runs).await.map_err(|e| e.to_string());
    let python_peer = with_calls(&emulator, runs, python_peer(&stack, &aws, runs)).await.map_err(|e| e.to_string());
    Ok(ColdStart { floor, functions, python_peer, stages, stages_load_from_env, stages_env_only })
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

/// Lambda's CPU share: one full vCPU at 1,769 MB, in proportion below (AWS Lambda documentation,
/// "Lambda memory and computing power"). The handler runs at that share; the init phase, by public
/// measurements, with the host's CPU unthrottled.
pub const MB_PER_VCPU: f64 = 1769.0;

/// The deployed memory size of the function `logical_id` in template.yaml, in MB: its own
/// `MemorySize`, else `Globals.Function.MemorySize`.
pub fn deployed_memory_mb(logical_id: &str) -> Result<u64> {
    let template = crate::wru::template_json()?;
    let resource = template
        .pointer(&format!("/Resources/{logical_id}"))
        .ok_or_else(|| BenchError::Missing(format!("{logical_id} in template.yaml")))?;
    match resource.pointer("/Properties/MemorySize") {
        Some(own) => own
            .as_u64()
            .ok_or_else(|| BenchError::Missing(format!("a number as {logical_id}'s MemorySize in template.yaml"))),
        None => globals_memory_mb(&template),
    }
}

/// The template's default memory size (`Globals.Function.MemorySize`), in MB: the memory of a
/// function that sets none (the floor and the Python peer are measured as such).
pub fn default_memory_mb() -> Result<u64> {
    globals_memory_mb(&crate::wru::template_json()?)
}

fn globals_memory_mb(template: &serde_json::Value) -> Result<u64> {
    template
        .pointer("/Globals/Function/MemorySize")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| BenchError::Missing("Globals.Function.MemorySize in template.yaml".into()))
}

/// The deployed memory of the measured binary `name` (a function's binary name, else the template's
/// default, as for the floor).
pub fn memory_of_binary_mb(name: &str) -> Result<u64> {
    match crate::binaries::FUNCTIONS.iter().find(|f| f.binary == name) {
        Some(f) => deployed_memory_mb(f.logical_id),
        None => default_memory_mb(),
    }
}

/// The vCPU share at `memory_mb`.
pub fn cpu_share(memory_mb: u64) -> f64 {
    (memory_mb as f64 / MB_PER_VCPU).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployed_memory_gets_its_proportional_share_of_a_vcpu_read_from_the_template() {
        assert!((cpu_share(128) - 0.0724).abs() < 1e-3);
        assert!((1.0 / cpu_share(128) - 13.8).abs() < 0.1);
        assert_eq!(cpu_share(3008), 1.0);
        let default = default_memory_mb().expect("template.yaml's default memory size");
        assert!(default >= 128);
        // The status function sets its own (a full subscription batch), the others take the default.
        let status = deployed_memory_mb("StatusFunction").expect("the status function's memory size");
        assert!(status > default, "status {status} MB, default {default} MB");
        assert_eq!(deployed_memory_mb("SenderFunction").expect("the sender's memory size"), default);
        assert_eq!(memory_of_binary_mb("status").expect("status"), status);
        assert_eq!(memory_of_binary_mb(crate::binaries::FLOOR).expect("the floor"), default);
        assert!(deployed_memory_mb("NoSuchFunction").is_err());
    }
}
