//! What a send's failure *before any answer* proves, whichever provider: the one classification
//! that keeps "at most once" honest. A request that could not be built, or that the client refused
//! to send, reached no one; a connection that was never made sent nothing (safe to retry); a
//! timeout, a connection lost mid-request or an answer that could not be read may have reached
//! the provider — the outcome is unknown and never retried blindly. The providers' own answers
//! (service errors) are each adapter's to read.

use aws_smithy_runtime_api::client::result::SdkError;

use crate::ports::{PublishOutcome, Refusal};

/// True when the error chain shows the connection was never made, so nothing was sent.
pub(crate) fn never_connected(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable)
        {
            return true;
        }
        let text = err.to_string().to_ascii_lowercase();
        if text.contains("connection refused") || text.contains("dns error") {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The outcome of an SDK error that is not the provider's own answer; `text` describes it.
pub(crate) fn transport_outcome<E, R>(err: &SdkError<E, R>, text: String) -> PublishOutcome
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match err {
        // The client itself is misconfigured (no region, a bad endpoint): the deployment's.
        SdkError::ConstructionFailure(_) => PublishOutcome::Rejected { error: text, refusal: Refusal::Account },
        SdkError::DispatchFailure(d) => {
            if d.is_user() {
                PublishOutcome::Rejected { error: text, refusal: Refusal::Account }
            } else if !d.is_timeout() && never_connected(err) {
                PublishOutcome::Retryable { error: text }
            } else {
                PublishOutcome::Unknown { error: text }
            }
        }
        // Timed out, or an answer came back that could not be read: the provider may have
        // accepted it.
        _ => PublishOutcome::Unknown { error: text },
    }
}
