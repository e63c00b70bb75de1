//! What can go wrong, with enough context to act on, and the exit code each maps to.

use tocsin::ports::PortError;

/// Exit codes (documented in the README): scripts can tell "no" from "broken".
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// Refused or not found: nothing was changed.
    pub const REFUSED: u8 = 1;
    /// Usage error (clap's own code).
    pub const USAGE: u8 = 2;
    /// AWS (or the emulator) failed, or a stored item is unreadable.
    pub const UNAVAILABLE: u8 = 3;
    /// A resend was attempted but SNS did not accept it (or its outcome is unknown): recorded in
    /// the ledger; read the message before doing anything else.
    pub const NOT_ACCEPTED: u8 = 4;
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no intent with key {0}")]
    NotFound(String),
    /// The request cannot be done in the current state; nothing was changed.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Port {
        context: String,
        #[source]
        source: PortError,
    },
    #[error("{operation} failed: {message}")]
    Aws { operation: &'static str, message: String },
    #[error("cannot write the output: {0}")]
    Output(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NotFound(_) | CliError::Refused(_) => exit::REFUSED,
            CliError::Usage(_) => exit::USAGE,
            CliError::Port { .. } | CliError::Aws { .. } | CliError::Output(_) => exit::UNAVAILABLE,
        }
    }

    /// A short machine-readable kind for `--json` error documents.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::NotFound(_) => "not_found",
            CliError::Refused(_) => "refused",
            CliError::Usage(_) => "usage",
            CliError::Port { .. } | CliError::Aws { .. } => "unavailable",
            CliError::Output(_) => "output",
        }
    }

    /// Wraps a port error with what the CLI was doing.
    pub fn port(context: impl Into<String>) -> impl FnOnce(PortError) -> CliError {
        let context = context.into();
        move |source| CliError::Port { context, source }
    }

    /// Wraps an SDK error with its operation and full source chain.
    pub fn aws<E: std::error::Error>(operation: &'static str) -> impl FnOnce(E) -> CliError {
        move |e| CliError::Aws { operation, message: describe(&e) }
    }
}

/// An error with its source chain (SDK errors keep the service code and message in sources).
pub fn describe<E: std::error::Error + ?Sized>(e: &E) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

pub type CliResult<T> = Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_failures_have_distinct_exit_codes() {
        assert_eq!(CliError::NotFound("k".into()).exit_code(), exit::REFUSED);
        assert_eq!(CliError::Refused("no".into()).exit_code(), exit::REFUSED);
        let port = CliError::Port {
            context: "reading".into(),
            source: PortError::Unavailable { operation: "DynamoDB GetItem", message: "down".into() },
        };
        assert_eq!(port.exit_code(), exit::UNAVAILABLE);
        assert_eq!(port.to_string(), "reading: DynamoDB GetItem failed: down");
    }
}
