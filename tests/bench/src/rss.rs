//! Measurement 2: peak RSS (`VmHWM`) of the sender binary handling a batch of 10 SQS records
//! (10 real intents seeded through intake), and of the status binary handling a ~1 MB
//! subscription event; then the Python peer (`python_peer`) on the same two workloads.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tocsin_harness::events::sqs_event;
use tocsin_harness::runtime_api::Invocation;
use tocsin_tests::{Pipeline, alert};

use crate::binaries::release_binary;
use crate::function::{Process, run_process};
use crate::workload::{delivery_lines, envelope, envelope_of_size};
use crate::{BenchError, Result};

/// The target, in KiB (16 MB).
pub const TARGET_KIB: u64 = 16 * 1024;

#[derive(Debug, Clone)]
pub struct PeakRss {
    pub function: String,
    /// For a Python peer row: the `function` of the Rust row it is compared with.
    pub peer_of: Option<String>,
    pub workload: String,
    pub peak_rss_kib: u64,
    pub invocation: Duration,
    pub outcome: String,
    /// Whether the function answered within the time limit (else VmHWM was read mid-batch).
    pub complete: bool,
    /// CPU time (all threads) from the first `GET /next` to the answer (or to giving up).
    pub cpu: Option<Duration>,
    /// AWS calls the emulator recorded during the invocation, by operation.
    pub calls: BTreeMap<String, usize>,
    /// Records in the workload (for calls per record).
    pub records: usize,
}

/// Default of `TOCSIN_BENCH_STATUS_TIMEOUT`, seconds.
pub const STATUS_TIMEOUT_DEFAULT: u64 = 240;

fn env_for(p: &Pipeline, logical_id: &str, overrides: &[(&str, &str)]) -> Result<Vec<(String, String)>> {
    let mut env = p.stack.function_env(logical_id)?;
    for (k, v) in overrides {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    let mut env: Vec<(String, String)> = env.into_iter().collect();
    env.extend(p.emulator.aws_env(&tocsin_harness::Principal::function(logical_id)));
    Ok(env)
}

fn outcome(answer: Option<&Invocation>, timeout: Duration) -> String {
    match answer {
        Some(Invocation::Response(v)) => format!("response {}", crate::report::truncate(&v.to_string(), 160)),
        Some(Invocation::Error(v)) => format!("error {}", crate::report::truncate(&v.to_string(), 160)),
        None => format!(
            "no answer within {} s{} (emulator-bound: every record is one or more serialized moto calls); VmHWM read then, mid-batch",
            timeout.as_secs(),
            if timeout.as_secs() == STATUS_TIMEOUT_DEFAULT {
                String::new()
            } else {
                format!(" (non-default `TOCSIN_BENCH_STATUS_TIMEOUT`; default {STATUS_TIMEOUT_DEFAULT} s)")
            }
        ),
    }
}

/// How long the status binary may work through the ~1 MB event against the emulator
/// (`TOCSIN_BENCH_STATUS_TIMEOUT`, seconds; default [`STATUS_TIMEOUT_DEFAULT`]).
pub fn status_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("TOCSIN_BENCH_STATUS_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(STATUS_TIMEOUT_DEFAULT),
    )
}

/// Runs `process` for one invocation with the emulator's recorder on: the run and its calls.
async fn recorded(
    p: &Pipeline,
    process: &Process,
    env: &[(String, String)],
    name: &str,
    event: serde_json::Value,
    timeout: Duration,
) -> Result<(crate::function::ColdRun, BTreeMap<String, usize>)> {
    p.emulator.start_recording().await?;
    let run = run_process(process, env, name, event, timeout).await;
    let ops = p.emulator.stop_recording().await?;
    let calls = ops.into_iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o).or_insert(0) += 1;
        m
    });
    Ok((run?, calls))
}

/// CPU time from the first `GET /next` to the answer (or to giving up).
fn invocation_cpu(run: &crate::function::ColdRun) -> Option<Duration> {
    run.cpu_at_answer.zip(run.init_cpu).map(|(b, a)| b.saturating_sub(a))
}

/// Submits 10 alerts through intake and returns their 10 send requests as one SQS event.
async fn send_batch(p: &Pipeline, prefix: &str) -> Result<serde_json::Value> {
    for i in 0..10 {
        let (code, body) = p.submit(&alert(&format!("{prefix}-{i}"), &format!("+1415555{:04}", 2000 + i))).await;
        if code != 201 {
            return Err(BenchError::Process(format!("intake answered {code}: {body}")));
        }
    }
    let queue = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&queue.url, 10).await;
    if msgs.len() != 10 {
        return Err(BenchError::Process(format!("expected 10 queued send requests, found {}", msgs.len())));
    }
    Ok(serde_json::to_value(sqs_event(&queue.arn, &msgs))?)
}

/// The sender binary, or the Python peer (`peer`: its interpreter), on a batch of 10 fresh send
/// requests.
async fn sender(p: &Pipeline, peer: Option<&std::path::Path>) -> Result<PeakRss> {
    let event = send_batch(p, if peer.is_some() { "rss-peer" } else { "rss" }).await?;
    let env = env_for(p, "SenderFunction", &[])?;
    let timeout = Duration::from_secs(120);
    let (process, name) = match peer {
        Some(python) => (crate::python_peer::process(python, &env), crate::python_peer::FUNCTION_NAME),
        None => (Process::binary(&release_binary("sender")?), "sender"),
    };
    let before = p.emulator.sent_sms().await?.len();
    let (run, calls) = recorded(p, &process, &env, name, event, timeout).await?;
    let sent = p.emulator.sent_sms().await?.len().saturating_sub(before);
    let (function, peer_of) = match peer {
        Some(_) => ("Python peer (sender batch)".to_owned(), Some("sender".to_owned())),
        None => ("sender".to_owned(), None),
    };
    Ok(PeakRss {
        workload: format!("SQS batch of 10 records (10 intents seeded through intake); {sent} SMS published"),
        peak_rss_kib: run.peak_rss_kib.ok_or_else(|| BenchError::Missing(format!("{function} VmHWM")))?,
        function,
        peer_of,
        invocation: run.to_first_response.saturating_sub(run.to_first_next),
        outcome: outcome(run.answer.as_ref(), timeout),
        complete: run.answer.is_some(),
        cpu: invocation_cpu(&run),
        calls,
        records: 10,
    })
}

/// One subscription event of `records` delivery records (or of ~`bytes`): the event, its record
/// count and its serialized size.
fn status_event(p: &Pipeline, size: Workload) -> (serde_json::Value, usize, usize) {
    let group = p.stack.log_group("SmsSuccessLogGroup").to_owned();
    let at = chrono::Utc::now();
    let (event, records) = match size {
        Workload::Bytes(b) => envelope_of_size(&group, b, at),
        Workload::Records(n) => (envelope(&group, &delivery_lines(n, at)), n),
    };
    let bytes = event.to_string().len();
    (event, records, bytes)
}

/// The status binary, or the Python peer (`peer`: its interpreter), on one subscription event.
async fn status(
    p: &Pipeline,
    size: Workload,
    (event, records, bytes): (serde_json::Value, usize, usize),
    peer: Option<&std::path::Path>,
) -> Result<PeakRss> {
    // The records name SNS message ids no intent has: each is looked up and kept as an orphan.
    // The template's 2 s orphan wait (a sleep) is set to 0 so the run measures memory, not sleeps.
    let env = env_for(p, "StatusFunction", &[("TOCSIN_ORPHAN_WAIT", "0s")])?;
    let timeout = status_timeout();
    let (process, name) = match peer {
        Some(python) => (crate::python_peer::process(python, &env), crate::python_peer::FUNCTION_NAME),
        None => (Process::binary(&release_binary("status")?), "status"),
    };
    let rust_name = match size {
        Workload::Bytes(_) => "status (~1 MB event)".to_owned(),
        Workload::Records(n) => format!("status ({n} records)"),
    };
    let (function, peer_of) = match peer {
        Some(_) => {
            let what = match size {
                Workload::Bytes(_) => "~1 MB event".to_owned(),
                Workload::Records(n) => format!("{n} records"),
            };
            (format!("Python peer (status, {what})"), Some(rust_name))
        }
        None => (rust_name, None),
    };
    let started = Instant::now();
    let (run, calls) = recorded(p, &process, &env, name, event, timeout).await?;
    Ok(PeakRss {
        workload: format!(
            "subscription event of {:.3} MB (gzip + base64 of {records} SNS delivery records), TOCSIN_ORPHAN_WAIT=0s",
            bytes as f64 / 1e6
        ),
        peak_rss_kib: run.peak_rss_kib.ok_or_else(|| BenchError::Missing(format!("{function} VmHWM")))?,
        function,
        peer_of,
        invocation: run.to_first_response.saturating_sub(run.to_first_next).min(started.elapsed()),
        outcome: outcome(run.answer.as_ref(), timeout),
        complete: run.answer.is_some(),
        cpu: invocation_cpu(&run),
        calls,
        records,
    })
}

#[derive(Debug, Clone, Copy)]
enum Workload {
    Bytes(usize),
    Records(usize),
}

/// Both measurements on one pipeline (one emulator and stack), then the Python peer on workloads
/// of the same shape and size (fresh send requests, fresh records: the Rust runs stored theirs).
pub async fn measure() -> Vec<Result<PeakRss>> {
    let p = Pipeline::start().await;
    let large = status_event(&p, Workload::Bytes(1_000_000));
    let mut out = vec![
        sender(&p, None).await,
        status(&p, Workload::Records(500), status_event(&p, Workload::Records(500)), None).await,
        status(&p, Workload::Bytes(1_000_000), large, None).await,
    ];
    let peer = |e: BenchError| BenchError::Process(format!("Python peer: {e}"));
    match crate::python_peer::install().await {
        Ok(python) => {
            out.push(sender(&p, Some(&python)).await.map_err(peer));
            // 500 fresh records of the same shape (new message ids): every orphan put is new for
            // the peer as it was for the Rust run.
            let fresh = status_event(&p, Workload::Records(500));
            out.push(status(&p, Workload::Records(500), fresh, Some(&python)).await.map_err(peer));
            // Likewise a fresh ~1 MB event: the Rust run stored the first one's orphans.
            let fresh = status_event(&p, Workload::Bytes(1_000_000));
            out.push(status(&p, Workload::Bytes(1_000_000), fresh, Some(&python)).await.map_err(peer));
        }
        // Already says "Python peer install: …".
        Err(e) => out.push(Err(e)),
    }
    out
}
