//! The suite's one error type.

use tocsin_harness::HarnessError;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("harness: {0}")]
    Harness(#[from] HarnessError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Process(String),
    #[error("not found: {0}")]
    Missing(String),
    #[error("AWS call {0} failed: {1}")]
    Aws(&'static str, String),
}

pub type Result<T> = std::result::Result<T, BenchError>;
