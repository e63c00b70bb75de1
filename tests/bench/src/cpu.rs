//! Measurements 6 and 7 (CPU only): the criterion benches in `benches/` are run by the suite
//! (`cargo bench -p tocsin-bench`, pinned to one core with `taskset -c 0` when available), and
//! their medians read back from `target/criterion/<group>/<bench>/new/estimates.json`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::binaries::target_dir;
use crate::{BenchError, Result};

/// Target: status records per second (base64 + gunzip + parse + classify).
pub const STATUS_TARGET_PER_S: f64 = 250_000.0;
/// Target: intake CPU time per request (validation + rendering + key).
pub const INTAKE_TARGET: Duration = Duration::from_micros(20);

pub const STATUS_BENCH: (&str, &str) = ("status_parse", "decode_parse_classify");
/// The same for End User Messaging events (the stack's own event group).
pub const STATUS_EUM_BENCH: (&str, &str) = ("status_parse", "eum_events");
pub const INTAKE_BENCH: (&str, &str) = ("intake_cpu", "validate_render_key");

/// Median and confidence bounds of one benchmark's iteration time.
#[derive(Debug, Clone, Copy)]
pub struct Estimate {
    pub median: Duration,
    pub lower: Duration,
    pub upper: Duration,
}

fn estimates_path((group, bench): (&str, &str)) -> PathBuf {
    target_dir().join("criterion").join(group).join(bench).join("new").join("estimates.json")
}

/// Reads criterion's estimate of one bench's median iteration time.
pub fn read(bench: (&str, &str)) -> Result<Estimate> {
    let path = estimates_path(bench);
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::Missing(format!("{}: {e}", path.display())))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let ns = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .map(|n| Duration::from_secs_f64(n / 1e9))
            .ok_or_else(|| BenchError::Missing(format!("{p} in {}", path.display())))
    };
    Ok(Estimate {
        median: ns("/median/point_estimate")?,
        lower: ns("/median/confidence_interval/lower_bound")?,
        upper: ns("/median/confidence_interval/upper_bound")?,
    })
}

fn has_taskset() -> bool {
    Command::new("taskset").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Compiles the benches (niced), then runs them on one core. Skipped when
/// `TOCSIN_BENCH_SKIP_CRITERION` is set (the last results in target/criterion are read instead).
pub fn run_criterion() -> Result<()> {
    if std::env::var_os("TOCSIN_BENCH_SKIP_CRITERION").is_some() {
        return Ok(());
    }
    let root = tocsin_harness::workspace_root();
    let built = Command::new("nice")
        .args(["-n", "19", "cargo", "bench", "--quiet", "-p", "tocsin-bench", "--benches", "--no-run"])
        .current_dir(&root)
        .status()?;
    if !built.success() {
        return Err(BenchError::Process(format!("cargo bench --no-run: {built}")));
    }
    let mut cmd = if has_taskset() {
        let mut c = Command::new("taskset");
        c.args(["-c", "0", "cargo"]);
        c
    } else {
        Command::new("cargo")
    };
    let ran = cmd
        .args([
            "bench",
            "--quiet",
            "-p",
            "tocsin-bench",
            "--bench",
            "status_parse",
            "--bench",
            "intake_cpu",
            "--",
            "--noplot",
        ])
        .current_dir(&root)
        .status()?;
    if ran.success() { Ok(()) } else { Err(BenchError::Process(format!("cargo bench: {ran}"))) }
}
