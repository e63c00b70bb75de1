//! The Python peer of issue #8: the function a user would otherwise write
//! (`tests/bench/python/peer/handler.py`: awslambdaric + boto3 + aws-lambda-powertools Logger and
//! Idempotency with DynamoDB persistence, creating the DynamoDB, SQS and SNS clients), run under
//! the same Runtime API stand-in and probe as the Rust binaries, as
//! `<venv>/bin/python -m awslambdaric handler.fn`.
//!
//! Its dependencies (`tests/bench/python/requirements.txt`, pinned) are installed from PyPI into a
//! virtualenv under the target directory on first use, as the harness installs moto: a file lock
//! keeps parallel runs from racing, a marker file records a finished install, and the venv's name
//! carries a hash of the requirements so a change of pins installs afresh.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::binaries::target_dir;
use crate::function::Process;
use crate::{BenchError, Result};

/// The pinned requirements, as installed.
pub const REQUIREMENTS: &str = include_str!("../python/requirements.txt");

/// The handler, as `awslambdaric` takes it (`module.function`).
pub const HANDLER: &str = "handler.fn";

/// The function name the peer runs under (`AWS_LAMBDA_FUNCTION_NAME`; powertools puts it in the
/// idempotency records' partition key).
pub const FUNCTION_NAME: &str = "python-peer";

/// `tests/bench/python/peer`: the handler's directory (cwd and `PYTHONPATH` of the process).
pub fn handler_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join("peer")
}

fn requirements_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join("requirements.txt")
}

/// FNV-1a, 64 bits: names the venv after the pins it holds.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn install_dir() -> PathBuf {
    target_dir().join("tocsin-bench-python")
}

/// Installs the peer's pinned dependencies once (wheels only) and returns the venv's Python.
/// Blocking: call it from `spawn_blocking`.
pub fn ensure_installed() -> Result<PathBuf> {
    let venv = format!("venv-{:016x}", fnv1a(REQUIREMENTS));
    let requirements = requirements_path();
    let args = [OsStr::new("--only-binary=:all:"), OsStr::new("-r"), requirements.as_os_str()];
    Ok(tocsin_harness::python::ensure_venv(&install_dir(), &venv, &args)?)
}

/// [`ensure_installed`] off the async runtime, with the reason in the error.
pub async fn install() -> Result<PathBuf> {
    tokio::task::spawn_blocking(ensure_installed)
        .await
        .map_err(|e| BenchError::Process(format!("Python peer install task: {e}")))?
        .map_err(|e| BenchError::Process(format!("Python peer install: {e}")))
}

/// `<venv>/bin/python -m awslambdaric handler.fn`, in the handler's directory, for a function
/// environment `env`. Bytecode is not written (the source tree stays clean; the handler is
/// compiled on each start, as a deployed zip of sources is; the libraries' bytecode was compiled
/// by pip at install). `AWS_DEFAULT_REGION` is set from `AWS_REGION`, as the Lambda service sets
/// both (botocore reads only the former; the Rust SDK the latter).
pub fn process(interpreter: &Path, env: &[(String, String)]) -> Process {
    let dir = handler_dir();
    let region = env.iter().rev().find(|(k, _)| k == "AWS_REGION").map(|(_, v)| v.clone());
    Process {
        program: interpreter.to_owned(),
        args: vec!["-m".into(), "awslambdaric".into(), HANDLER.into()],
        cwd: Some(dir.clone()),
        extra_env: vec![
            ("PYTHONPATH".into(), dir.display().to_string()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("LAMBDA_TASK_ROOT".into(), dir.display().to_string()),
        ]
        .into_iter()
        .chain(region.map(|r| ("AWS_DEFAULT_REGION".to_owned(), r)))
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_pinned() {
        let pins: Vec<&str> =
            REQUIREMENTS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
        assert_eq!(pins.len(), 3);
        assert!(pins.iter().all(|p| p.contains("==")), "{pins:?}");
    }

    #[test]
    fn handler_exists() {
        assert!(handler_dir().join("handler.py").is_file());
    }
}
