//! The harness the end-to-end tests and the local demo share: a real AWS API on loopback (moto in
//! server mode, installed from PyPI at a pinned version and started here), the stack's resources
//! and function environments provisioned from `template.yaml`, and builders for the events AWS
//! sends to each function.

pub mod cloudformation;
pub mod emulator;
pub mod eum;
pub mod events;
pub mod fault_proxy;
pub mod iam;
pub mod python;
pub mod recorded;
pub mod runtime_api;
pub mod sam;
pub mod stack;
pub mod stack_outputs;

pub use emulator::{Emulator, LogsShape, RecordedRequest, SentSms};
pub use iam::Principal;
pub use stack::Stack;

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("emulator: {0}")]
    Emulator(String),
    #[error("template.yaml: {0}")]
    Template(String),
    #[error("AWS call {0} failed against the emulator: {1}")]
    Aws(&'static str, String),
    #[error("{0}")]
    Iam(String),
    #[error("python: {0}")]
    Python(String),
    #[error("End User Messaging stand-in: {0}")]
    Eum(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, HarnessError>;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

pub(crate) fn aws_err<E: std::error::Error>(op: &'static str, e: E) -> HarnessError {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    HarnessError::Aws(op, s)
}

/// Runs a function's real binary under the Runtime API stand-in, against an empty emulator and
/// stack, with the function's environment from `template.yaml`; invokes every `events/<dir>/*.json`
/// file and returns (file name, answer) pairs.
pub async fn invoke_events_through_runtime(
    binary: &str,
    logical_id: &str,
    events_dir: &str,
) -> Result<Vec<(String, runtime_api::Invocation)>> {
    invoke_events_through_runtime_with(binary, logical_id, events_dir, &[]).await
}

/// As [`invoke_events_through_runtime`], the stack deployed with template `parameters` (a
/// function that exists only under some, e.g. `Replies=on`).
pub async fn invoke_events_through_runtime_with(
    binary: &str,
    logical_id: &str,
    events_dir: &str,
    parameters: &[(&str, &str)],
) -> Result<Vec<(String, runtime_api::Invocation)>> {
    let emulator = Emulator::start_for(parameters).await?;
    let stack = Stack::provision_with(&emulator.sdk_config().await, "tocsin-local", parameters).await?;
    let api = runtime_api::RuntimeApi::start().await?;
    let mut cmd = tokio::process::Command::new(binary);
    cmd.env_clear()
        .envs(stack.function_env(logical_id)?)
        .envs(emulator.aws_env(&Principal::function(logical_id)))
        .envs(api.lambda_env(logical_id))
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let dir = workspace_root().join("events").join(events_dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mut out = Vec::new();
    for f in files.into_iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let event: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f)?)
            .map_err(|e| HarnessError::Emulator(format!("{}: {e}", f.display())))?;
        let answer = tokio::select! {
            a = api.invoke(event, std::time::Duration::from_secs(60)) => a?,
            status = child.wait() => {
                return Err(HarnessError::Emulator(format!("{binary} exited before answering ({:?}); init error: {:?}", status.ok(), api.init_error())));
            }
        };
        out.push((f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), answer));
    }
    let _ = child.kill().await;
    let denials = emulator.iam().take_denials();
    if !denials.is_empty() {
        return Err(HarnessError::Iam(iam::gate::report(&denials)));
    }
    Ok(out)
}
