//! Delivery records, read defensively: SNS SMS delivery-status logs ([`sns`]) and End User
//! Messaging SMS events ([`eum`]), each its provider's own format, both read into one
//! [`DeliveryRecord`]. Which format a log message is follows from the message itself (an End
//! User Messaging event has an `eventType`), so one reader serves every log group.
//!
//! Only the fields each format guarantees are relied on (SNS: `notification.messageId` and
//! `status`; End User Messaging: `eventType` and `messageId`). Every other field may be missing or
//! come in another shape than the documentation shows (numbers as strings, other timestamp
//! formats, extra fields): such a field is kept as `None` rather than failing the record.

mod eum;
mod json;
mod sns;

use chrono::{DateTime, Utc};

pub use json::parse_timestamp;

use super::provider::Classification;
use super::send_context::SendContext;
use super::state::Receipt;

/// How long a record that matched no intent is kept (the ORPHAN item's TTL). Nearly all of them
/// are other applications' SMS (the delivery-status log groups are the account's), and each holds
/// someone's phone number, so not the intents' 30 days. Six hours is ample for what an orphan is
/// for: a record that overtook the sender's MessageId write is read back by the sweep at its
/// intent's first check (minutes later), a crashed sender's is found by the sweep's reconciliation
/// within minutes (it searches the log groups themselves, not the orphans), and an operator
/// investigating a missing receipt the same shift still finds it.
pub const ORPHAN_RETENTION: chrono::Duration = chrono::Duration::hours(6);

/// The carriers' receipt window: a delivery record can arrive up to 72 h late; one hour of margin.
pub const RECEIPT_WINDOW: std::time::Duration = std::time::Duration::from_secs(73 * 3600);

#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryStatus {
    Success,
    Failure,
    /// Progress the provider reports before an outcome (End User Messaging's queued, pending, or
    /// the carrier's non-final acceptance): recorded, never an outcome.
    Pending(String),
    /// A status this version does not know. Never read as success.
    Other(String),
}

impl DeliveryStatus {
    pub fn receipt(&self) -> Option<Receipt> {
        match self {
            DeliveryStatus::Success => Some(Receipt::Delivered),
            DeliveryStatus::Failure => Some(Receipt::Failed),
            DeliveryStatus::Pending(_) | DeliveryStatus::Other(_) => None,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            DeliveryStatus::Success => "SUCCESS",
            DeliveryStatus::Failure => "FAILURE",
            DeliveryStatus::Pending(s) | DeliveryStatus::Other(s) => s,
        }
    }
}

/// Which provider wrote a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An SNS SMS delivery-status log record (the account's `DirectPublishToPhoneNumber` groups).
    SnsDeliveryLog,
    /// An End User Messaging SMS event (the stack's configuration set's event destination).
    EumEvent,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub format: Format,
    /// The provider's message id: what SNS's Publish or End User Messaging's SendTextMessage answered.
    pub message_id: String,
    pub status: DeliveryStatus,
    /// When the SMS was sent (SNS's `notification.timestamp`, End User Messaging's
    /// `messageRequestTimestamp`).
    pub timestamp: Option<DateTime<Utc>>,
    /// When this record reports what it reports, if the provider says (End User Messaging's
    /// `eventTimestamp`); an SNS record is about the moment it was logged.
    pub reported_at: Option<DateTime<Utc>>,
    /// As the provider wrote it: may be masked, invalid or absent. Mask before logging.
    pub destination: Option<String>,
    /// SNS's `providerResponse`; End User Messaging's event type and status description.
    pub provider_response: Option<String>,
    pub carrier: Option<String>,
    pub mcc: Option<String>,
    pub mnc: Option<String>,
    /// The destination's ISO country when the provider says it (End User Messaging).
    pub iso_country: Option<String>,
    pub parts: Option<u32>,
    pub price_usd: Option<f64>,
    /// From sending to this record (SNS's `dwellTimeMs`; End User Messaging: the event's time less
    /// the request's, for a final event).
    pub dwell_ms: Option<u64>,
    pub dwell_until_ack_ms: Option<u64>,
    pub sms_type: Option<String>,
    /// What the SMS said about itself, echoed by the provider (End User Messaging's `Context`):
    /// the alert and attempt it carried, by key. `None` under SNS, or for another application's SMS.
    pub context: Option<SendContext>,
    /// A failure's class, from the provider's own table; `None` unless `status` is `Failure`.
    pub failure: Option<Classification>,
}

impl DeliveryRecord {
    /// A record of `message_id` with `status` and nothing else known (every optional field absent).
    pub fn bare(format: Format, message_id: impl Into<String>, status: DeliveryStatus) -> Self {
        DeliveryRecord {
            format,
            message_id: message_id.into(),
            status,
            timestamp: None,
            reported_at: None,
            destination: None,
            provider_response: None,
            carrier: None,
            mcc: None,
            mnc: None,
            iso_country: None,
            parts: None,
            price_usd: None,
            dwell_ms: None,
            dwell_until_ack_ms: None,
            sms_type: None,
            context: None,
            failure: None,
        }
    }

    /// The destination's country: as the provider says it, else from the mobile country code.
    pub fn country(&self) -> Option<&str> {
        self.iso_country.as_deref().or(self.mcc.as_deref().map(country_of_mcc))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("log message is not JSON: {0}")]
    NotJson(String),
    #[error("log message is not a JSON object")]
    NotObject,
    #[error("record has no notification.messageId")]
    NoMessageId,
    #[error("record has no status")]
    NoStatus,
    #[error("event has no messageId")]
    NoEventMessageId,
}

/// Parses one CloudWatch Logs message written by SNS or End User Messaging. Reads the message
/// once, into the fields it needs (no intermediate JSON tree): the status function does this for
/// every record.
pub fn parse_record(message: &str) -> Result<DeliveryRecord, RecordError> {
    let raw = json::read(message).map_err(|e| match e {
        json::Unreadable::NotJson(e) => RecordError::NotJson(e),
        json::Unreadable::NotObject => RecordError::NotObject,
    })?;
    if raw.top.get("eventType").is_some() { eum::record(&raw) } else { sns::record(&raw) }
}

/// ISO country of a mobile country code, for the latency metrics. Unknown MCCs stay numeric.
pub fn country_of_mcc(mcc: &str) -> &str {
    match mcc {
        "310" | "311" | "312" | "313" | "314" | "315" | "316" => "US",
        "302" => "CA",
        "234" | "235" => "GB",
        "262" => "DE",
        "208" => "FR",
        "222" => "IT",
        "214" => "ES",
        "204" => "NL",
        "505" => "AU",
        "440" | "441" => "JP",
        "450" => "KR",
        "404" | "405" => "IN",
        "724" => "BR",
        "334" => "MX",
        other => other,
    }
}
