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

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

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

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().map_err(|e| BenchError::Process(format!("cannot run {cmd:?}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        Err(BenchError::Process(format!(
            "{cmd:?} failed: {}: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )))
    }
}

/// Installs the peer's pinned dependencies once (wheels only) and returns the venv's Python.
/// Blocking: call it from `spawn_blocking`.
pub fn ensure_installed() -> Result<PathBuf> {
    let dir = install_dir();
    fs::create_dir_all(&dir)?;
    let venv = dir.join(format!("venv-{:016x}", fnv1a(REQUIREMENTS)));
    let interpreter = venv.join("bin").join("python");
    let marker = venv.join(".tocsin-installed");
    if marker.exists() {
        return Ok(interpreter);
    }
    let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("install.lock"))?;
    lock.lock()?;
    if marker.exists() {
        return Ok(interpreter);
    }
    eprintln!("bench: installing the Python peer's dependencies into {} (first run only)", venv.display());
    let _ = fs::remove_dir_all(&venv);
    run(Command::new(python()).args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(venv.join("bin").join("pip"))
        .args(["install", "--disable-pip-version-check", "--no-input", "--quiet", "--only-binary=:all:", "-r"])
        .arg(requirements_path()))?;
    File::create(&marker)?;
    Ok(interpreter)
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
