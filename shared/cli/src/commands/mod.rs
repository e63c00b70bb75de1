//! One module per command, and what they share: finding an intent by key and its masked view.

pub mod ack;
pub mod breaker;
pub mod carriers;
pub mod chains;
pub mod doctor;
pub mod escalations;
pub mod eum;
pub mod list;
pub mod opt_outs;
pub mod preflight;
pub mod probe;
pub mod re_enable;
pub mod recipients;
pub mod reconcile;
pub mod resend;
pub mod send;
pub mod show;
pub mod suppressed;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::domain::acknowledgement::Acknowledgement;
use tocsin::domain::intent::Escalation;
use tocsin::domain::{IdempotencyKey, IntentRecord, State};
use tocsin::ports::IntentStore;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::progress::Spinner;

/// The shortest key prefix accepted in place of a full key.
pub const MIN_PREFIX: usize = 8;

/// How many creation days back a key prefix is looked for (a full key is read wherever it is).
pub const PREFIX_DAYS: i64 = 7;

/// Reads a full key as is; resolves a unique prefix (≥ 8 hex characters) from the list-index: the
/// open escalations, then the intents created in the last [`PREFIX_DAYS`] days (Queries whose
/// partitions are read through, filtered by the prefix; never a table scan).
pub async fn resolve_key(ctx: &Context, raw: &str) -> CliResult<IdempotencyKey> {
    let raw = raw.trim();
    if let Ok(key) = IdempotencyKey::parse(raw) {
        return Ok(key);
    }
    let is_prefix =
        (MIN_PREFIX..64).contains(&raw.len()) && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !is_prefix {
        return Err(CliError::Usage(format!(
            "'{raw}' is not an idempotency key: give the 64 lowercase hex characters, or a unique prefix of at least {MIN_PREFIX}"
        )));
    }
    let spinner = Spinner::start(format!("looking for keys starting with {raw}…"));
    let mut matching: std::collections::BTreeSet<IdempotencyKey> = ctx
        .ledger
        .open_escalations(usize::MAX)
        .await
        .map_err(CliError::port("reading the open escalations"))?
        .into_iter()
        .map(|(_, k)| k)
        .filter(|k| k.as_str().starts_with(raw))
        .collect();
    let today = (chrono::Utc::now() + chrono::Duration::days(1)).date_naive();
    for back in 0..=PREFIX_DAYS {
        let day = today - chrono::Duration::days(back);
        spinner.set_message(format!("keys starting with {raw}: {day} ({} found so far)…", matching.len()));
        let found = ctx
            .ledger
            .created_on(day, usize::MAX, Some(raw))
            .await
            .map_err(CliError::port("reading the list-index"))?;
        matching.extend(found.into_iter().map(|(_, k)| k));
    }
    spinner.done();
    let mut matching: Vec<IdempotencyKey> = matching.into_iter().collect();
    match matching.len() {
        0 => Err(CliError::NotFound(format!(
            "{raw}… (no open escalation, and no intent created in the last {PREFIX_DAYS} days, has such a key: give the full key)"
        ))),
        1 => Ok(matching.remove(0)),
        n => Err(CliError::Usage(format!("{n} intents have keys starting with {raw}: give more characters"))),
    }
}

/// Reads an intent or says clearly that there is none.
pub async fn load(ctx: &Context, key: &IdempotencyKey) -> CliResult<IntentRecord> {
    ctx.ledger
        .get(key)
        .await
        .map_err(CliError::port(format!("reading intent {key}")))?
        .ok_or_else(|| CliError::NotFound(key.to_string()))
}

/// An intent as the CLI shows it: no message body, no variables, the recipient masked.
#[derive(Debug, Clone, Serialize)]
pub struct IntentView {
    pub key: String,
    pub event_id: String,
    pub template: String,
    pub recipient: String,
    pub origin: &'static str,
    /// Who submitted it (`None` for intents from before producers were named).
    pub producer: Option<String>,
    pub created_at: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
    pub state: State,
    pub attempts: u32,
    pub sns_message_id: Option<String>,
    pub accepted_at: Option<DateTime<Utc>>,
    pub final_at: Option<DateTime<Utc>>,
    pub attempt_id: Option<String>,
    pub lease_until: Option<DateTime<Utc>>,
    pub escalation: Option<Escalation>,
    /// Who took the alert, how and when (`tocsin ack`, later a reply).
    pub acknowledgement: Option<Acknowledgement>,
    pub conflicts: u32,
    pub last_error: Option<String>,
    /// The SMS settings the request named (numbers masked); absent ones fall back to the stack's.
    pub sms: SmsView,
}

/// An intent's own SMS settings (`sms` in the request). What the request leaves out the sender
/// takes from the stack (SmsOriginationNumber, SmsSenderId, SmsMaxPriceUsd), else SNS decides.
#[derive(Debug, Clone, Serialize)]
pub struct SmsView {
    pub origination_number: Option<String>,
    pub sender_id: Option<String>,
    pub max_price_usd: Option<String>,
}

impl SmsView {
    /// One line for `show`: what the request named, and where the rest comes from.
    pub fn describe(&self) -> String {
        let named: Vec<String> = [
            self.origination_number.as_ref().map(|n| format!("from {n}")),
            self.sender_id.as_ref().map(|id| format!("sender ID {id}")),
            self.max_price_usd.as_ref().map(|p| format!("at most {p} USD")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let origination = if self.origination_number.is_some() {
            String::new()
        } else {
            "no origination number named: the stack's SmsOriginationNumber, or SNS picks a route (US carriers \
             block SMS from an unregistered number)"
                .to_owned()
        };
        match (named.is_empty(), origination.is_empty()) {
            (true, _) => format!("{origination}; sender ID and price cap from the stack's defaults"),
            (false, true) => format!("{} (the rest from the stack's defaults)", named.join(", ")),
            (false, false) => format!("{}; {origination}", named.join(", ")),
        }
    }
}

impl From<&IntentRecord> for IntentView {
    fn from(r: &IntentRecord) -> Self {
        let (i, s) = (&r.intent, &r.status);
        IntentView {
            key: i.key.to_string(),
            event_id: i.event_id.clone(),
            template: i.template.to_string(),
            recipient: i.recipient.masked(),
            origin: i.origin.as_str(),
            producer: i.producer.as_ref().map(ToString::to_string),
            created_at: i.created_at,
            deadline: i.deadline,
            state: s.state,
            attempts: s.attempts,
            sns_message_id: s.sns_message_id.clone(),
            accepted_at: s.accepted_at,
            final_at: s.final_at,
            attempt_id: s.attempt_id.clone(),
            lease_until: s.lease_until,
            escalation: s.escalation.clone(),
            acknowledgement: s.acknowledgement.clone(),
            conflicts: s.conflicts,
            last_error: s.last_error.clone(),
            sms: SmsView {
                origination_number: i.sms.origination_number.as_ref().map(|n| n.masked()),
                sender_id: i.sms.sender_id.clone(),
                max_price_usd: i.sms.max_price_usd.clone(),
            },
        }
    }
}
