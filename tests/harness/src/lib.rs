//! The harness the end-to-end tests and the local demo share: a real AWS API on loopback (moto in
//! server mode, installed from PyPI at a pinned version and started here), the stack's resources
//! and function environments provisioned from `template.yaml`, and builders for the events AWS
//! sends to each function.

pub mod emulator;
pub mod events;
pub mod fault_proxy;
pub mod stack;

pub use emulator::{Emulator, SentSms};
pub use stack::Stack;

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("emulator: {0}")]
    Emulator(String),
    #[error("template.yaml: {0}")]
    Template(String),
    #[error("AWS call {0} failed against the emulator: {1}")]
    Aws(&'static str, String),
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
