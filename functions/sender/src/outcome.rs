//! How one record ended, and the name its metric and log line carry. Owns no behaviour: the other
//! modules decide an outcome; `handle` turns it into the batch response.

use tocsin::domain::State;

/// How one record ended; `Retry` reports it as a batch item failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Published {
        sns_message_id: String,
    },
    /// Redelivered or concurrent copy: the intent was already accepted or final.
    Duplicate(State),
    /// Another attempt holds the claim right now: the message is kept (hidden until that claim's
    /// lease ends), since the holder may still hand the intent back and then needs it.
    HeldElsewhere,
    LeaseExpiredUnknown,
    Stale,
    Suppressed,
    Rejected,
    RetriesExhausted,
    Unknown,
    Malformed,
    Missing,
    Retry,
    /// Claimed, then put back unsent: the send rate left no time to publish in this invocation.
    Deferred,
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Published { .. } => "published",
            Outcome::Duplicate(_) => "duplicate",
            Outcome::HeldElsewhere => "held_elsewhere",
            Outcome::LeaseExpiredUnknown => "lease_expired_unknown",
            Outcome::Stale => "stale",
            Outcome::Suppressed => "suppressed",
            Outcome::Rejected => "rejected",
            Outcome::RetriesExhausted => "retries_exhausted",
            Outcome::Unknown => "unknown",
            Outcome::Malformed => "malformed",
            Outcome::Missing => "missing",
            Outcome::Retry => "throttled_or_retry",
            Outcome::Deferred => "deferred_rate",
        }
    }
}
