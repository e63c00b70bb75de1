//! What one batch did: each log event's outcome summed, published as metrics and one log line, and
//! the invocation's result (a dependency failure fails it so Lambda retries). Knows no ports.

use serde::Serialize;
use tocsin::domain::state::ReceiptEffect;
use tocsin::ports::{Clock, PortError};
use tocsin::telemetry::Metrics;

use crate::payload::Header;
use crate::{StatusError, StatusHandler, StatusRegistry, StatusStore};

/// What happened to one log event.
#[derive(Debug, Clone, PartialEq)]
pub enum EventOutcome {
    Applied(ReceiptEffect),
    Duplicate,
    Orphaned,
    Unparseable,
    /// Progress (End User Messaging's queued, pending, the carrier's non-final acceptance):
    /// stored, never an outcome.
    Progress,
    /// Its context names another stack: never applied here.
    OtherStack,
    /// Its context names an intent (or a digest) by key that does not exist here, or is not that
    /// number's: nothing written.
    NoSuchIntent,
    /// An event of a confirmation SMS (the answer to a person's reply): it carries no alert.
    Confirmation,
}

#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub control_message: bool,
    pub events: usize,
    pub delivered: usize,
    pub failed: usize,
    pub redundant: usize,
    pub conflicting: usize,
    pub late: usize,
    pub unrecognised: usize,
    pub duplicates: usize,
    pub orphaned: usize,
    pub unparseable: usize,
    /// Progress events (End User Messaging's queued, pending, the carrier's non-final
    /// acceptance): stored, never an outcome.
    pub progress: usize,
    pub other_stack: usize,
    pub no_such_intent: usize,
    /// Events of confirmation SMS (answers to replies): no alert's fate.
    pub confirmations: usize,
    pub suppressed: usize,
    /// Records in the batch, tocsin's or other applications', saying the account's SMS spend limit
    /// is used up ([`tocsin::domain::provider::FailureClass::AccountLimit`]): no SMS leaves the account until it is raised.
    pub spend_exhausted: usize,
}

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// The batch's metrics and log line, and its result: an error when a dependency failed (the
    /// whole batch is then retried; what was stored is found again as duplicates).
    pub(crate) fn report(
        &self,
        header: Option<&Header>,
        (summary, errors): (Summary, Vec<PortError>),
    ) -> Result<Summary, StatusError> {
        if summary.control_message {
            return Ok(summary);
        }
        let group = header.map_or("", |h| h.log_group.as_str());
        let mut m = Metrics::new("status");
        for (name, v) in [
            ("delivered", summary.delivered),
            ("failed", summary.failed),
            ("conflicting", summary.conflicting),
            ("late", summary.late),
            ("unrecognised_status", summary.unrecognised),
            ("duplicate", summary.duplicates),
            ("orphaned", summary.orphaned),
            // The same records under the name that says what they almost always are: other
            // applications' SMS in the account's delivery-status log groups.
            ("foreign_records", summary.orphaned),
            ("unparseable", summary.unparseable),
            ("progress", summary.progress),
            ("other_stack_events", summary.other_stack),
            ("no_such_intent", summary.no_such_intent),
            ("suppressed", summary.suppressed),
            ("spend_exhausted", summary.spend_exhausted),
            ("dependency_error", errors.len()),
        ] {
            if v > 0 {
                m.count(name, v as u64);
            }
        }
        m.flush();
        if summary.spend_exhausted > 0 {
            tracing::error!(
                records = summary.spend_exhausted,
                "the account's SMS spend limit is reached: no SMS goes out (tocsin's or anyone's) until it is raised"
            );
        }
        tracing::info!(log_group = group, summary = ?summary, "status batch processed");
        match errors.into_iter().next() {
            None => Ok(summary),
            Some(first) => Err(StatusError::Dependency {
                failed: summary.events - handled(&summary),
                total: summary.events,
                first,
            }),
        }
    }
}

pub(crate) fn handled(s: &Summary) -> usize {
    s.delivered
        + s.failed
        + s.redundant
        + s.conflicting
        + s.late
        + s.unrecognised
        + s.duplicates
        + s.orphaned
        + s.unparseable
        + s.progress
        + s.other_stack
        + s.no_such_intent
}
