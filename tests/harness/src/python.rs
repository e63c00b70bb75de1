//! Python tools the tests and benches run (the moto emulator, the benchmark's Python peer), each
//! installed from PyPI into its own virtualenv under the target directory on first use: a file
//! lock keeps parallel test binaries from racing, and a marker file records a finished install.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{HarnessError, Result};

/// The interpreter that creates the virtualenvs: `$PYTHON`, or `python3`.
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Makes `<dir>/<venv>` with `pip install <pip_args>` once per machine and returns its Python.
/// Blocking: call it from `spawn_blocking` in async code.
pub fn ensure_venv<S: AsRef<OsStr>>(dir: &Path, venv: &str, pip_args: &[S]) -> Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let venv = dir.join(venv);
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
    eprintln!("tocsin harness: installing into {} (first run only)", venv.display());
    let _ = fs::remove_dir_all(&venv);
    run(Command::new(python()).args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(venv.join("bin").join("pip"))
        .args(["install", "--disable-pip-version-check", "--no-input", "--quiet"])
        .args(pip_args))?;
    File::create(&marker)?;
    Ok(interpreter)
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().map_err(|e| HarnessError::Python(format!("cannot run {cmd:?}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        Err(HarnessError::Python(format!(
            "{cmd:?} failed: {}: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )))
    }
}
