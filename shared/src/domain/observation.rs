//! Observations: the append-only facts about an intent. Each has a deterministic id made of its
//! source and the source's own id (a CloudWatch Logs event id, an attempt id, a run id), so the
//! same fact delivered twice is stored once.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::acknowledgement::AckVia;
use super::provider::FailureClass;
use super::reconcile::Candidate;
use super::state::{ReceiptEffect, State};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObservationKind {
    /// Intake wrote the intent.
    Received {
        origin: String,
    },
    /// Intake (or a sweep, or a replay) put the intent on the send queue.
    Enqueued {
        by: String,
    },
    /// A sender attempt claimed the intent.
    Claimed {
        attempt_id: String,
        attempt: u32,
    },
    /// SNS returned a MessageId.
    Accepted {
        attempt_id: String,
        sns_message_id: String,
    },
    /// SNS proved it did not accept the publish; the claim was released for a retry.
    PublishRetryable {
        attempt_id: String,
        error: String,
    },
    /// Claimed, then handed back to the queue unsent: the send rate would have kept the claim
    /// past the invocation's end (a claim never outlives its holder's time).
    Deferred {
        attempt_id: String,
        reason: String,
    },
    /// SNS refused the publish for good.
    PublishRejected {
        attempt_id: String,
        error: String,
    },
    /// The publish may or may not have reached SNS.
    SendUnknown {
        attempt_id: String,
        cause: String,
    },
    /// The recipient is on the suppression list; nothing was sent.
    Suppressed {
        registry_reason: String,
    },
    /// Picked up after its deadline; nothing was sent.
    Stale {
        deadline: DateTime<Utc>,
    },
    /// A delivery-status record from SNS.
    DeliveryStatus {
        log_event_id: String,
        sns_message_id: String,
        status: String,
        provider_response: Option<String>,
        class: Option<FailureClass>,
        carrier: Option<String>,
        dwell_ms: Option<u64>,
        effect: ReceiptEffect,
        /// Arrived after the intent was escalated.
        late: bool,
    },
    DelaySuspected,
    ExpiredUnknown,
    Escalated {
        reason: String,
        run_id: String,
    },
    /// A search of the delivery-status logs for an unknown outcome.
    Reconciliation {
        outcome: String,
        search: u32,
        candidates: Vec<Candidate>,
    },
    /// Someone took the alert (`Status::acknowledgement`).
    Acknowledged {
        by: String,
        via: AckVia,
    },
    /// A human acted through the operator tooling (resend, reconcile, acknowledge …).
    Operator {
        operator: String,
        action: String,
        reason: String,
    },
}

/// The id of the observation that an attempt's claim lease lapsed with no recorded result (by a
/// later copy of its message, or by the sweep): a fact of its own, distinct from the attempt's own
/// outcome (`attempt:<id>:<outcome>`), which may be stored already while the state write it came
/// with never landed — sharing that id would make the lapse look already recorded, for ever.
pub fn lease_expired_id(attempt_id: &str) -> String {
    format!("lease:{attempt_id}:expired")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// `<source>:<source id>`: the de-duplication key.
    pub id: String,
    pub at: DateTime<Utc>,
    /// The state after this observation was applied.
    pub state_after: Option<State>,
    #[serde(flatten)]
    pub kind: ObservationKind,
}

impl Observation {
    pub fn new(id: impl Into<String>, at: DateTime<Utc>, kind: ObservationKind) -> Self {
        Observation { id: id.into(), at, state_after: None, kind }
    }

    pub fn with_state(mut self, s: State) -> Self {
        self.state_after = Some(s);
        self
    }

    /// A one-line human summary (no phone number, no message body).
    pub fn summary(&self) -> String {
        match &self.kind {
            ObservationKind::Received { origin } => format!("received from {origin}"),
            ObservationKind::Enqueued { by } => format!("enqueued by {by}"),
            ObservationKind::Claimed { attempt, .. } => format!("claimed by sender (attempt {attempt})"),
            ObservationKind::Accepted { sns_message_id, .. } => {
                format!("accepted by the SMS provider, message id {sns_message_id}")
            }
            ObservationKind::PublishRetryable { error, .. } => {
                format!("the SMS provider did not accept ({error}); will retry")
            }
            ObservationKind::Deferred { reason, .. } => format!("not sent yet ({reason}); back on the queue"),
            ObservationKind::PublishRejected { error, .. } => format!("the SMS provider refused it ({error})"),
            ObservationKind::SendUnknown { cause, .. } => format!("outcome unknown ({cause}); not re-sent"),
            ObservationKind::Suppressed { registry_reason } => {
                format!("withheld, not sent: {registry_reason}")
            }
            ObservationKind::Stale { deadline } => {
                format!("deadline {} passed before sending; not sent", deadline.to_rfc3339())
            }
            ObservationKind::DeliveryStatus { status, provider_response, effect, late, .. } => {
                let response = provider_response.as_deref().unwrap_or("no provider response");
                // End User Messaging's progress (queued, pending, the carrier's acceptance): its
                // status is the event type, which the response already names.
                if *effect == ReceiptEffect::Unrecognised && status.starts_with("TEXT_") {
                    return format!("progress: {response} (not an outcome)");
                }
                let effect = match effect {
                    ReceiptEffect::Moved { to, .. } => format!("-> {to}"),
                    ReceiptEffect::Redundant => "redundant".into(),
                    ReceiptEffect::Conflicting => "CONFLICTING, state kept".into(),
                    ReceiptEffect::Late => "late, state kept".into(),
                    ReceiptEffect::Unrecognised => "unrecognised status, state kept".into(),
                };
                let late = if *late { " (after escalation)" } else { "" };
                format!("delivery status {status}: {response}{late} [{effect}]")
            }
            ObservationKind::DelaySuspected => "no delivery receipt yet: delay suspected".into(),
            ObservationKind::ExpiredUnknown => "no delivery receipt within 73 h: expired unknown".into(),
            ObservationKind::Escalated { reason, .. } => format!("escalated: {reason}"),
            ObservationKind::Reconciliation { outcome, search, candidates } => {
                let ids: Vec<&str> = candidates.iter().map(|c| c.sns_message_id.as_str()).collect();
                if ids.is_empty() {
                    format!("log search {search}: {outcome}")
                } else {
                    format!("log search {search}: {outcome} ({})", ids.join(", "))
                }
            }
            ObservationKind::Acknowledged { by, via } => format!("acknowledged by {by} ({})", via.as_str()),
            ObservationKind::Operator { operator, action, reason } => {
                format!("operator {operator}: {action} ({reason})")
            }
        }
    }
}
