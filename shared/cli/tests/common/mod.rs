//! What the CLI's behaviour tests share: running the real `tocsin` binary with only the variables
//! given (the standard AWS ones), and reading its answer.

#![allow(dead_code)]

pub mod api;

use serde_json::Value;

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs `tocsin ARGS` with exactly `env` (plus PATH); nothing else of this process leaks in.
pub async fn tocsin_with(env: Vec<(String, String)>, args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tocsin"));
    cmd.env_clear().envs(env).env("PATH", std::env::var("PATH").unwrap_or_default()).args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("join").expect("run tocsin");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The emulator's AWS environment with `AWS_ENDPOINT_URL` set to `endpoint`, signing as the
/// operator (the IAM gate checks each call against the operator policies (`shared/cli/operator-read-only-policy.json`, `operator-break-glass-policy.json`)).
pub fn aws_env(endpoint: &str) -> Vec<(String, String)> {
    tocsin_harness::emulator::aws_env_for(endpoint, &tocsin_harness::Principal::Operator)
}
