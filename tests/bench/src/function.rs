//! Runs one function binary for one invocation, as Lambda would: a fresh process with the
//! function's production environment, its Runtime API pointed at the stand-in (through the
//! [`NextProbe`]), the event already waiting. Times and peak memory are taken from outside.

use std::path::{Path, PathBuf};
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
    /// Process spawn → the answer, or → giving up when there was none within the timeout.
    pub to_first_response: Duration,
    /// CPU time (all threads, user + system) from spawn to the first `GET /next`: the init.
    pub init_cpu: Option<Duration>,
    /// CPU time of the first invocation: first `GET /next` → the second (asked right after the
    /// answer is posted).
    pub first_invocation_cpu: Option<Duration>,
    /// CPU time from spawn to the answer, or to giving up (read then, mid-invocation).
    pub cpu_at_answer: Option<Duration>,
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

/// What to spawn for one function process: a release binary, or an interpreter with its
/// arguments (the Python peer), optionally in a working directory and with extra variables.
#[derive(Debug, Clone)]
pub struct Process {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Set after the function's environment and the Runtime API's (e.g. `PYTHONPATH`).
    pub extra_env: Vec<(String, String)>,
}

impl Process {
    /// A function binary run as Lambda runs a `provided.al2023` bootstrap.
    pub fn binary(path: &Path) -> Process {
        Process { program: path.to_owned(), args: Vec::new(), cwd: None, extra_env: Vec::new() }
    }

    fn describe(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
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
    run_process(&Process::binary(binary), env, function_name, event, timeout).await
}

/// [`run_once`] for any [`Process`].
pub async fn run_process(
    process: &Process,
    env: &[(String, String)],
    function_name: &str,
    event: Value,
    timeout: Duration,
) -> Result<ColdRun> {
    let api = RuntimeApi::start().await?;
    let probe = NextProbe::start(api.address()).await?;
    let mut cmd = tokio::process::Command::new(&process.program);
    cmd.args(&process.args)
        .env_clear()
        .envs(env.iter().cloned())
        .envs(api.lambda_env(function_name))
        .env("AWS_LAMBDA_RUNTIME_API", probe.address())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(process.extra_env.iter().cloned())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(dir) = &process.cwd {
        cmd.current_dir(dir);
    }
    let spawned = Instant::now();
    let mut child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        probe.watch(pid);
    }
    let answer = tokio::select! {
        a = api.invoke(event, timeout) => a.ok(),
        status = child.wait() => {
            return Err(BenchError::Process(format!(
                "{} exited before answering ({:?}); init error: {:?}",
                process.describe(),
                status.ok(),
                api.init_error()
            )));
        }
    };
    let answered = Instant::now();
    let peak_rss_kib = child.id().and_then(peak_rss_kib);
    // The runtime asks for the next event right after posting the answer: give it a moment.
    if answer.is_some() {
        let asked = Instant::now();
        while probe.next(1).is_none() && asked.elapsed() < Duration::from_millis(500) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let cpu_at_answer = child.id().and_then(crate::cpu_clock::of_process);
    let _ = child.kill().await;
    let first_next = probe
        .first_next()
        .ok_or_else(|| BenchError::Process(format!("{} answered without a GET /next", process.describe())))?;
    let init_cpu = probe.next(0).and_then(|s| s.cpu);
    let first_invocation_cpu = probe.next(1).and_then(|s| s.cpu).zip(init_cpu).map(|(b, a)| b.saturating_sub(a));
    Ok(ColdRun {
        to_first_next: first_next.duration_since(spawned),
        // The probe's hold of the first `GET /next` is the bench's, not the function's.
        to_first_response: answered
            .duration_since(spawned)
            .saturating_sub(probe.next(0).map(|s| s.held).unwrap_or_default()),
        init_cpu,
        first_invocation_cpu,
        cpu_at_answer,
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
