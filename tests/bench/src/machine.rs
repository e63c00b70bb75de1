//! The machine and toolchain the figures were taken on.

use std::process::Command;

#[derive(Debug, Clone)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub ram_gib: f64,
    pub rustc: String,
    pub cargo: String,
    pub kernel: String,
    pub date: String,
}

fn first_line_with(path: &str, prefix: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find(|l| l.starts_with(prefix)).map(str::to_owned)
}

fn version_of(tool: &str) -> String {
    Command::new(tool)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| format!("{tool}: unavailable"))
}

/// Reads `/proc/cpuinfo`, `/proc/meminfo`, and the toolchain versions.
pub fn describe() -> Machine {
    let cpu_model = first_line_with("/proc/cpuinfo", "model name")
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
        .unwrap_or_else(|| "unknown".into());
    let ram_kib: f64 = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0.0);
    Machine {
        cpu_model,
        cores: std::thread::available_parallelism().map(usize::from).unwrap_or(1),
        ram_gib: ram_kib / 1024.0 / 1024.0,
        rustc: version_of("rustc"),
        cargo: version_of("cargo"),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()).unwrap_or_default(),
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
    }
}
