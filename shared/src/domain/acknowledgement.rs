//! An acknowledgement: someone has the alert (issue 37, docs/acknowledgement.md). Recorded once,
//! beside the state — "delivered" says the SMS reached the phone, this says a person took the
//! alert — and an acknowledged alert is never escalated after it. A leaf of the domain.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who took the alert, how and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acknowledgement {
    pub at: DateTime<Utc>,
    /// Who: an operator's name, or the replying phone, masked (`+1******0100`).
    pub by: String,
    pub via: AckVia,
}

/// How an acknowledgement came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckVia {
    /// A reply to the alert's SMS.
    Reply,
    /// The operator tooling (`tocsin ack`).
    Operator,
}

impl AckVia {
    pub fn as_str(self) -> &'static str {
        match self {
            AckVia::Reply => "reply",
            AckVia::Operator => "operator",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "reply" => Some(AckVia::Reply),
            "operator" => Some(AckVia::Operator),
            _ => None,
        }
    }
}
