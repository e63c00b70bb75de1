//! The alert intent: the immutable record of what an upstream system asked for, and the status
//! that the pipeline derives from its observations.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::acknowledgement::Acknowledgement;
use super::chain::{Chain, level_key};
use super::digest_id::DigestId;
use super::key::IdempotencyKey;
use super::phone::PhoneNumber;
use super::producer::ProducerName;
use super::reconcile::ReconcileState;
use super::request::ValidatedRequest;
use super::segments::SegmentCount;
use super::state::State;
use super::template::TemplateRef;

// Moved down to `sms` so that request (which validates them) and intent (which stores them) do not
// import each other; re-exported where callers have always found it.
pub use super::sms::SmsOptions;

/// A rendered SMS text. Never printed: `Debug` shows only its length.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageBody(String);

impl MessageBody {
    pub fn new(text: String) -> Self {
        Self(text)
    }
    /// The text in clear, for the SNS publish only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for MessageBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageBody(<{} chars>)", self.0.chars().count())
    }
}

/// Where the request came from. Not part of the payload: the same event reported by the API and
/// by EventBridge is one intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Api,
    EventBridge,
    Operator,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Api => "api",
            Origin::EventBridge => "eventbridge",
            Origin::Operator => "operator",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    pub key: IdempotencyKey,
    pub event_id: String,
    pub template: TemplateRef,
    pub variables: BTreeMap<String, String>,
    pub recipient: PhoneNumber,
    pub body: MessageBody,
    pub segments: SegmentCount,
    pub deadline: DateTime<Utc>,
    /// The deadline as requested (relative like `15m`, or absolute normalised to RFC 3339);
    /// `None` when the deployment default applied. Compared on replay, not the resolved instant.
    pub deadline_spec: Option<String>,
    pub sms: SmsOptions,
    pub origin: Origin,
    /// Who submitted it (part of the key). `None` only for intents written before producers were
    /// named (the v1 key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<ProducerName>,
    pub created_at: DateTime<Utc>,
    /// The escalation chain this intent is a level of (docs/acknowledgement.md, "Chains");
    /// `None`: the default chain (on-call when not delivered by the deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Chain>,
}

/// How long the ledger keeps an intent after its deadline: well past the 73-hour receipt window,
/// so the idempotency key outlives every retry and every late delivery record. Every item written
/// about the intent (its observations, its SNS message-id index entries) expires with it.
pub const RETENTION_AFTER_DEADLINE: chrono::Duration = chrono::Duration::days(30);

impl Intent {
    /// When this intent and everything recorded about it expire (the ledger's TTL). After it, the
    /// same event id and template version start a new intent: a second life with a clean history.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.deadline.checked_add_signed(RETENTION_AFTER_DEADLINE).unwrap_or(self.deadline)
    }

    pub fn from_request(req: ValidatedRequest, origin: Origin, producer: ProducerName, now: DateTime<Utc>) -> Self {
        let key = IdempotencyKey::derive(&producer, &req.event_id, &req.template);
        let chain =
            req.chain.map(|c| Chain { root: key.clone(), level: 0, levels: c.levels, spec: c.spec, policy: c.policy });
        Intent {
            key,
            event_id: req.event_id,
            template: req.template,
            variables: req.variables,
            recipient: req.recipient,
            body: MessageBody::new(req.body),
            segments: req.segments,
            deadline: req.deadline,
            deadline_spec: req.deadline_spec,
            sms: req.sms,
            origin,
            producer: Some(producer),
            created_at: now,
            chain,
        }
    }

    /// The intent of this chain's next level, started at `now`: the same alert (template, text,
    /// SMS settings, producer) to the level's phone, its key derived from the root's, its
    /// deadline the level's wait (an SMS that has not reached them by then is no use: the chain
    /// moves on). `None` when on-call's queue comes next, or the intent names no chain.
    pub fn next_level(&self, now: DateTime<Utc>) -> Option<Intent> {
        let chain = self.chain.as_ref()?;
        let (level, next) = chain.next()?;
        let wait = chrono::Duration::from_std(next.wait()).ok()?;
        Some(Intent {
            key: level_key(&chain.root, level),
            event_id: self.event_id.clone(),
            template: self.template.clone(),
            variables: self.variables.clone(),
            recipient: next.to.clone(),
            body: self.body.clone(),
            segments: self.segments,
            deadline: now.checked_add_signed(wait)?,
            deadline_spec: None,
            sms: self.sms.clone(),
            origin: self.origin,
            producer: self.producer.clone(),
            created_at: now,
            chain: Some(Chain { level, ..chain.clone() }),
        })
    }

    /// The payload fields in which `other` (same key) differs from this stored intent. Empty means
    /// a faithful replay.
    pub fn differing_fields(&self, other: &Intent) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.recipient != other.recipient {
            d.push("recipient");
        }
        if self.variables != other.variables {
            d.push("variables");
        }
        if self.deadline_spec != other.deadline_spec {
            d.push("deadline");
        }
        if self.sms.sender_id != other.sms.sender_id {
            d.push("sms.sender_id");
        }
        if self.sms.origination_number != other.sms.origination_number {
            d.push("sms.origination_number");
        }
        if self.sms.max_price_usd != other.sms.max_price_usd {
            d.push("sms.max_price_usd");
        }
        if self.event_id != other.event_id {
            d.push("event_id");
        }
        if self.template != other.template {
            d.push("template");
        }
        // What the request said: a chain from the template's policy is no part of the request.
        if self.chain.as_ref().and_then(Chain::requested) != other.chain.as_ref().and_then(Chain::requested) {
            d.push("chain");
        }
        d
    }
}

/// Why an intent was escalated, recorded beside the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalation {
    pub at: DateTime<Utc>,
    pub reason: String,
    /// Recorded, not paged one by one: its producer was over its escalation cap for the hour
    /// (`domain::escalation_cap`), and on-call had been told so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
    /// Handed to this level of the alert's escalation chain (a tracked SMS to its person), not
    /// paged: on-call's open-escalations list never holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_level: Option<u8>,
}

/// The derived, mutable side of an intent: a cache of its observations, kept for queries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub state: State,
    pub attempts: u32,
    /// The current attempt's id while `sending`; afterwards the last attempt's (a keyed delivery
    /// event names the attempt that sent its SMS).
    pub attempt_id: Option<String>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub lease_until: Option<DateTime<Utc>>,
    pub sns_message_id: Option<String>,
    pub accepted_at: Option<DateTime<Utc>>,
    pub final_at: Option<DateTime<Utc>>,
    pub escalation: Option<Escalation>,
    /// Delivery records that contradicted a final state.
    pub conflicts: u32,
    pub last_error: Option<String>,
    /// Searches of the delivery-status logs for an unknown outcome, and when to search next.
    #[serde(default)]
    pub reconcile_attempts: u32,
    #[serde(default)]
    pub reconcile_next_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub reconcile_state: ReconcileState,
    /// When the intent was last put on the send queue (intake, a release for retry, the sweep).
    #[serde(default)]
    pub enqueued_at: Option<DateTime<Utc>>,
    /// When the sweep next looks at the intent (its due-index entry); `None`: not in the index.
    #[serde(default)]
    pub next_check: Option<DateTime<Utc>>,
    /// The storm-mode digest whose SMS covered this intent, if it went out in one.
    #[serde(default)]
    pub digest_id: Option<DigestId>,
    /// When intake expected the SMS to go out, if that was after the deadline: the sweep escalates
    /// at once ("late is said early") and the intent stays eligible to be sent.
    #[serde(default)]
    pub late_expected: Option<DateTime<Utc>>,
    /// Who took the alert, how and when; `None` while nobody has.
    #[serde(default)]
    pub acknowledgement: Option<Acknowledgement>,
    /// On a chain's root: the highest level started (the arbiter's record, written only by
    /// `ChainLedger::start_level`); `None` before any and on every other intent.
    #[serde(default)]
    pub chain_level: Option<u8>,
    /// Until when an escalation run holds the intent (it decided to page on-call or to start a
    /// chain's next level, and is doing it): a resend is refused meanwhile. `None`, or a time
    /// past: no run holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_run_until: Option<DateTime<Utc>>,
}

impl Status {
    pub fn new() -> Self {
        Status {
            state: State::Received,
            attempts: 0,
            attempt_id: None,
            claimed_at: None,
            lease_until: None,
            sns_message_id: None,
            accepted_at: None,
            final_at: None,
            escalation: None,
            conflicts: 0,
            last_error: None,
            reconcile_attempts: 0,
            reconcile_next_at: None,
            reconcile_state: ReconcileState::Pending,
            enqueued_at: None,
            next_check: None,
            digest_id: None,
            late_expected: None,
            acknowledgement: None,
            chain_level: None,
            escalation_run_until: None,
        }
    }
}

impl Default for Status {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentRecord {
    pub intent: Intent,
    pub status: Status,
}
