//! The storm at full size: `tests/tests/storm.rs` (duplicates and injected faults everywhere,
//! then the books checked) run with `TOCSIN_STORM_INTENTS` — CI runs it at 60 intents, this
//! command at 200. The test prints one `storm-summary: {json}` line, read back here.

use std::process::Command;

use crate::error::{BenchError, Result};

/// The storm size this command runs.
pub const DEFAULT_INTENTS: usize = 200;

/// Runs the storm test with `intents` intents; its summary.
pub fn run(intents: usize) -> Result<serde_json::Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(tocsin_harness::workspace_root())
        .args(["test", "-p", "tocsin-tests", "--test", "integration", "storm::", "--", "--nocapture"])
        .env("TOCSIN_STORM_INTENTS", intents.to_string())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(BenchError::Process(format!(
            "the storm failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )));
    }
    let line = stderr
        .lines()
        .chain(stdout.lines())
        .find_map(|l| l.strip_prefix("storm-summary: "))
        .ok_or_else(|| BenchError::Missing("the storm's `storm-summary:` line".into()))?;
    Ok(serde_json::from_str(line)?)
}
