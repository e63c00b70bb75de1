//! The storm at full size: `tests/tests/storm.rs` (duplicates and injected faults everywhere,
//! then the books checked) run with `TOCSIN_STORM_INTENTS` — CI runs it at 60 intents, this
//! command at 200, on each provider. Each storm prints one `storm-summary: {json}` line, read back
//! here.

use std::process::Command;

use crate::error::{BenchError, Result};

/// The storm size this command runs.
pub const DEFAULT_INTENTS: usize = 200;

/// Runs the storm tests (one per provider) with `intents` intents; their summaries.
pub fn run(intents: usize) -> Result<Vec<serde_json::Value>> {
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
    let summaries = stderr
        .lines()
        .chain(stdout.lines())
        .filter_map(|l| l.strip_prefix("storm-summary: "))
        .map(serde_json::from_str)
        .collect::<std::result::Result<Vec<serde_json::Value>, _>>()?;
    if summaries.is_empty() {
        return Err(BenchError::Missing("the storms' `storm-summary:` lines".into()));
    }
    Ok(summaries)
}
