//! The release binaries under test: built by the suite itself (niced), then found in the
//! workspace's target directory.

use std::path::PathBuf;
use std::process::Command;

use crate::{BenchError, Result};

/// One production function under test.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    pub binary: &'static str,
    /// Its logical id in template.yaml (for its environment).
    pub logical_id: &'static str,
    /// The real event it is invoked with: `events/<binary>/<file>`.
    pub event_file: &'static str,
}

/// The four production functions measured.
pub const FUNCTIONS: [Function; 4] = [
    Function { binary: "intake", logical_id: "IntakeFunction", event_file: "http-api-post.json" },
    Function { binary: "sender", logical_id: "SenderFunction", event_file: "sqs-send-request.json" },
    Function { binary: "status", logical_id: "StatusFunction", event_file: "delivery-success.json" },
    Function { binary: "escalation", logical_id: "EscalationFunction", event_file: "scheduled.json" },
];

/// The bare `lambda_runtime` echo function of this crate: the floor.
pub const FLOOR: &str = "echo-floor";

/// `$CARGO_TARGET_DIR`, or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tocsin_harness::workspace_root().join("target"))
}

/// `target/release/<name>`, if it was built (`$TOCSIN_BENCH_BIN_DIR/<name>` when that is set, e.g.
/// to try the suite quickly against debug binaries; figures from those are not release figures).
pub fn release_binary(name: &str) -> Result<PathBuf> {
    let dir =
        std::env::var_os("TOCSIN_BENCH_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| target_dir().join("release"));
    let p = dir.join(name);
    if p.is_file() { Ok(p) } else { Err(BenchError::Missing(format!("{} (build it with --release)", p.display()))) }
}

fn cargo_release(args: &[&str]) -> Result<()> {
    let status = Command::new("nice")
        .args(["-n", "19", "cargo", "build", "--release", "--quiet"])
        .args(args)
        .current_dir(tocsin_harness::workspace_root())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Process(format!("cargo build --release {args:?}: {status}")))
    }
}

/// `nice -n 19 cargo build --release` of the four functions and the floor (a no-op when fresh).
/// Skipped when `TOCSIN_BENCH_SKIP_BUILD` is set.
pub fn build_all() -> Result<()> {
    if std::env::var_os("TOCSIN_BENCH_SKIP_BUILD").is_some() {
        return Ok(());
    }
    cargo_release(&["-p", "intake", "-p", "sender", "-p", "status", "-p", "escalation"])?;
    cargo_release(&["-p", "tocsin-bench", "--bin", FLOOR])
}
