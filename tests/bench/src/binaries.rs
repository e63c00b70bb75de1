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

fn cargo(args: &[&str]) -> Result<()> {
    let status = Command::new("nice")
        .args(["-n", "19", "cargo"])
        .args(args)
        .current_dir(tocsin_harness::workspace_root())
        .status()?;
    if status.success() { Ok(()) } else { Err(BenchError::Process(format!("cargo {args:?}: {status}"))) }
}

/// The packages built for the measurements, in one cargo invocation so that every binary is built
/// with the same feature set (a second invocation with another package set would rebuild the SDK).
const PACKAGES: [&str; 12] =
    ["-p", "intake", "-p", "sender", "-p", "status", "-p", "escalation", "-p", "sms-preferences", "-p", "tocsin-bench"];

/// Whether `cargo lambda` (cargo-lambda, with zig for cross-compiling) is installed.
fn cargo_lambda_available() -> bool {
    Command::new("cargo")
        .args(["lambda", "--help"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `nice -n 19 cargo build --release` of the functions and this crate (a no-op when fresh): what
/// every section that runs a release binary needs, so a partial run never measures stale ones.
pub fn build_host() -> Result<()> {
    let mut args = vec!["build", "--release", "--quiet"];
    args.extend(PACKAGES);
    cargo(&args)
}

/// What was built: the host release binaries, and whether the arm64 deployment build ran.
#[derive(Debug, Clone)]
pub struct Built {
    /// `None`: built; `Some(why)`: why the arm64 `bootstrap`s were not built by this run.
    pub arm64_skipped: Option<String>,
}

/// `nice -n 19 cargo build --release` of the functions and this crate (a no-op when fresh), then,
/// when cargo-lambda is installed, the deployment build `cargo lambda build --release --arm64`
/// of the same functions (into `target/lambda/<function>/bootstrap`). Skipped when
/// `TOCSIN_BENCH_SKIP_BUILD` is set; the arm64 build alone with `TOCSIN_BENCH_SKIP_ARM64`.
pub fn build_all() -> Result<Built> {
    if std::env::var_os("TOCSIN_BENCH_SKIP_BUILD").is_some() {
        return Ok(Built { arm64_skipped: Some("TOCSIN_BENCH_SKIP_BUILD is set".into()) });
    }
    build_host()?;
    if std::env::var_os("TOCSIN_BENCH_SKIP_ARM64").is_some() {
        return Ok(Built { arm64_skipped: Some("TOCSIN_BENCH_SKIP_ARM64 is set".into()) });
    }
    if !cargo_lambda_available() {
        return Ok(Built {
            arm64_skipped: Some(
                "cargo-lambda is not installed (`pip install cargo-lambda ziglang`, \
                 `rustup target add aarch64-unknown-linux-gnu`)"
                    .into(),
            ),
        });
    }
    let mut args = vec!["lambda", "build", "--release", "--arm64"];
    for f in FUNCTIONS.iter().map(|f| f.binary).chain(["sms-preferences"]) {
        args.extend(["--bin", f]);
    }
    cargo(&args)?;
    Ok(Built { arm64_skipped: None })
}
