//! Runs one function binary for one invocation, as Lambda would: a fresh process with the
//! function's production environment, its Runtime API pointed at the stand-in (through the
//! [`NextProbe`]), the event already waiting. Times and peak memory are taken from outside.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tocsin_harness::runtime_api::{Invocation, RuntimeApi};

use crate::probe::NextProbe;
use crate::{BenchError, Result};

/// What one cold invocation showed.
#[derive(Debug, Clone)]
pub struct ColdRun {
    /// Process spawn → first `GET …/invocation/next`.
    pub to_first_next: Duration,
    /// Process spawn → the answer posted for the waiting event.
    /// Process spawn → the answer, or → giving up when there was none within the timeout.
    pub to_first_response: Duration,
    /// `None`: no answer within the timeout (the process was still working).
    pub answer: Option<Invocation>,
    /// `VmHWM` (peak resident set) after the invocation, in KiB.
    pub peak_rss_kib: Option<u64>,
}

/// `VmHWM` of a live process, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// Spawns `binary` with `env` (function + AWS environment), hands it `event`, waits up to
/// `timeout` for its answer, reads its peak RSS, then kills it.
pub async fn run_once(
    binary: &Path,
    env: &[(String, String)],
    function_name: &str,
    event: Value,
    timeout: Duration,
) -> Result<ColdRun> {
    let api = RuntimeApi::start().await?;
    let probe = NextProbe::start(api.address()).await?;
    let mut cmd = tokio::process::Command::new(binary);
    cmd.env_clear()
        .envs(env.iter().cloned())
        .envs(api.lambda_env(function_name))
        .env("AWS_LAMBDA_RUNTIME_API", probe.address())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let spawned = Instant::now();
    let mut child = cmd.spawn()?;
    let answer = tokio::select! {
        a = api.invoke(event, timeout) => a.ok(),
        status = child.wait() => {
            return Err(BenchError::Process(format!(
                "{} exited before answering ({:?}); init error: {:?}",
                binary.display(),
                status.ok(),
                api.init_error()
            )));
        }
    };
    let answered = Instant::now();
    let peak_rss_kib = child.id().and_then(peak_rss_kib);
    let _ = child.kill().await;
    let first_next = probe
        .first_next()
        .ok_or_else(|| BenchError::Process(format!("{} answered without a GET /next", binary.display())))?;
    Ok(ColdRun {
        to_first_next: first_next.duration_since(spawned),
        to_first_response: answered.duration_since(spawned),
        answer,
        peak_rss_kib,
    })
}

/// The sample event `events/<dir>/<file>`.
pub fn sample_event(dir: &str, file: &str) -> Result<Value> {
    let path = tocsin_harness::workspace_root().join("events").join(dir).join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::Missing(format!("{}: {e}", path.display())))?;
    Ok(serde_json::from_str(&text)?)
}
