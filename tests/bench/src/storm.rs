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
        // The panic's own lines say why; the backtrace's tail does not.
        let lines: Vec<&str> = stderr.lines().chain(stdout.lines()).collect();
        let why: Vec<&str> = match lines.iter().position(|l| l.contains("panicked at")) {
            Some(i) => lines[i..].iter().take(4).copied().collect(),
            None => lines.iter().rev().take(8).rev().copied().collect(),
        };
        return Err(BenchError::Process(format!("the storm failed ({}): {}", out.status, why.join(" / "))));
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
