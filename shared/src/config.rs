//! Typed configuration from environment variables. Every variable a function needs is read at
//! start-up; anything missing or malformed stops the function with one message naming all of them.
//! There are no silent defaults: `template.yaml` sets every value (and documents it).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::domain::PhoneNumber;
use crate::domain::escalation_cap::EscalationCap;
use crate::domain::intent::SmsOptions;
use crate::domain::phone::mask_phone_like;
use crate::domain::producer::{ProducerRate, Producers};
use crate::domain::request::Limits;
use crate::domain::roster::RecipientPolicy;
use crate::domain::sms::SmsPolicy;
use crate::domain::spend::SpendCeiling;
use crate::domain::storm::DigestPolicy;
use crate::domain::sweep::SweepPolicy;

#[derive(Debug, thiserror::Error)]
#[error("configuration is incomplete or invalid:\n  - {}", .0.join("\n  - "))]
pub struct ConfigError(pub Vec<String>);

/// Reads variables from a map (the process environment in production).
pub struct Env {
    vars: HashMap<String, String>,
    errors: Vec<String>,
}

impl Env {
    pub fn from_process() -> Self {
        Self::from_map(std::env::vars().collect())
    }

    pub fn from_map(vars: HashMap<String, String>) -> Self {
        Env { vars, errors: Vec::new() }
    }

    pub fn required(&mut self, name: &str) -> String {
        match self.vars.get(name).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => v.to_owned(),
            _ => {
                self.errors.push(format!("{name} is not set"));
                String::new()
            }
        }
    }

    /// A feature switch: absent or empty means the feature is off.
    pub fn optional(&self, name: &str) -> Option<String> {
        self.vars.get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    /// A setting whose empty value is a deliberate choice the template makes ("no ceiling", "none
    /// allowed", "leave the account's limit"): empty is `None`, but the variable must be there, so
    /// a function deployed without it stops instead of taking the empty meaning silently.
    pub fn present(&mut self, name: &str) -> Option<String> {
        match self.vars.get(name) {
            None => {
                self.errors.push(format!("{name} is not set (set it empty to mean none)"));
                None
            }
            Some(v) => Some(v.trim().to_owned()).filter(|v| !v.is_empty()),
        }
    }

    /// Records a malformed value, for checks a caller makes on what it read.
    pub fn invalid(&mut self, message: impl Into<String>) {
        self.errors.push(message.into());
    }

    pub fn duration(&mut self, name: &str) -> Duration {
        let raw = self.required(name);
        if raw.is_empty() {
            return Duration::ZERO;
        }
        humantime::parse_duration(&raw).unwrap_or_else(|e| {
            self.errors.push(format!("{name}={raw:?} is not a duration like \"15m\": {e}"));
            Duration::ZERO
        })
    }

    pub fn number<T>(&mut self, name: &str, min: T) -> T
    where
        T: std::str::FromStr + PartialOrd + Copy + std::fmt::Display,
    {
        let raw = self.required(name);
        if raw.is_empty() {
            return min;
        }
        match raw.parse::<T>() {
            Ok(v) if v >= min => v,
            _ => {
                self.errors.push(format!("{name}={raw:?} must be a number of at least {min}"));
                min
            }
        }
    }

    /// An on/off switch that must be set: `on` or `off`.
    pub fn switch(&mut self, name: &str) -> bool {
        let raw = self.required(name);
        match raw.as_str() {
            "on" => true,
            "off" | "" => false,
            _ => {
                self.errors.push(format!("{name}={raw:?} must be \"on\" or \"off\""));
                false
            }
        }
    }

    pub fn finish(self) -> Result<(), ConfigError> {
        if self.errors.is_empty() { Ok(()) } else { Err(ConfigError(self.errors)) }
    }
}

pub const LEDGER_TABLE: &str = "TOCSIN_LEDGER_TABLE";
pub const RECIPIENTS_TABLE: &str = "TOCSIN_RECIPIENTS_TABLE";
pub const SEND_QUEUE_URL: &str = "TOCSIN_SEND_QUEUE_URL";
/// The urgent lane (earliest deadline first): see `SendQueue::enqueue`.
pub const URGENT_QUEUE_URL: &str = "TOCSIN_URGENT_QUEUE_URL";
pub const ESCALATION_QUEUE_URL: &str = "TOCSIN_ESCALATION_QUEUE_URL";
pub const INTAKE_REJECTS_QUEUE_URL: &str = "TOCSIN_INTAKE_REJECTS_QUEUE_URL";

#[derive(Debug, Clone)]
pub struct IntakeConfig {
    pub ledger_table: String,
    pub send_queue_url: String,
    pub urgent_queue_url: String,
    pub rejects_queue_url: String,
    pub limits: Limits,
    pub sweep: SweepPolicy,
    /// Largest accepted HTTP body, bytes.
    pub max_body_bytes: usize,
    /// Partitions of the due-index new intents are spread over (`TOCSIN_DUE_SHARDS`).
    pub due_shards: u32,
    /// Account-wide SMS parts per second (`TOCSIN_SMS_RATE_PER_SECOND`): with the send queue's
    /// backlog, when a new alert can go out at the earliest.
    pub sms_rate_per_second: u32,
    /// Storm mode (`TOCSIN_STORM_MODE`): the queue's length then says little about when an alert
    /// goes out (digests collapse a person's backlog), so intake makes no "late" estimate.
    pub storm_mode: bool,
    /// Who may submit alerts (`TOCSIN_PRODUCERS`, role or user ARNs; empty: nobody).
    pub producers: Producers,
    /// Requests each producer may submit per minute (`TOCSIN_PRODUCER_RATE_PER_MINUTE`, and
    /// `TOCSIN_PRODUCER_RATES` for the producers with a rate of their own).
    pub producer_rate: ProducerRate,
    /// Whom the deployment may text (`TOCSIN_RECIPIENT_POLICY`: `roster` or `open`).
    pub recipient_policy: RecipientPolicy,
    /// Where the roster is (`TOCSIN_RECIPIENTS_TABLE`).
    pub recipients_table: String,
}

impl IntakeConfig {
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let mut extra = Vec::new();
        let c = IntakeConfig {
            ledger_table: env.required(LEDGER_TABLE),
            send_queue_url: env.required(SEND_QUEUE_URL),
            urgent_queue_url: env.required(URGENT_QUEUE_URL),
            rejects_queue_url: env.required(INTAKE_REJECTS_QUEUE_URL),
            limits: Limits {
                default_deadline: env.duration("TOCSIN_DEFAULT_DEADLINE"),
                min_deadline: env.duration("TOCSIN_MIN_DEADLINE"),
                max_deadline: env.duration("TOCSIN_MAX_DEADLINE"),
                max_segments: env.number("TOCSIN_MAX_SEGMENTS", 1u32),
                reply_prompt: env.switch(REPLIES),
                sms: sms_policy(env, &mut extra),
            },
            sweep: sweep_policy(env),
            max_body_bytes: env.number("TOCSIN_MAX_BODY_BYTES", 256usize),
            due_shards: due_shards(env),
            sms_rate_per_second: env.number("TOCSIN_SMS_RATE_PER_SECOND", 1u32),
            storm_mode: env.switch("TOCSIN_STORM_MODE"),
            producers: producers(env, &mut extra),
            producer_rate: ProducerRate {
                per_minute: env.number("TOCSIN_PRODUCER_RATE_PER_MINUTE", 1u32),
                overrides: Default::default(),
            },
            recipient_policy: recipient_policy(env),
            recipients_table: env.required(RECIPIENTS_TABLE),
        };
        let mut c = c;
        match ProducerRate::parse_overrides(env.present("TOCSIN_PRODUCER_RATES").as_deref().unwrap_or(""), &c.producers)
        {
            Ok(overrides) => c.producer_rate.overrides = overrides,
            Err(e) => extra.push(format!("TOCSIN_PRODUCER_RATES: {e}")),
        }
        if c.limits.default_deadline < c.limits.min_deadline || c.limits.default_deadline > c.limits.max_deadline {
            extra.push(
                "TOCSIN_DEFAULT_DEADLINE must lie between TOCSIN_MIN_DEADLINE and TOCSIN_MAX_DEADLINE".to_owned(),
            );
        }
        finish(std::mem::replace(env, Env::from_map(HashMap::new())), extra)?;
        Ok(c)
    }
}

/// Whom the deployment may text (template parameter `RecipientPolicy`): no default.
fn recipient_policy(env: &mut Env) -> RecipientPolicy {
    let raw = env.required("TOCSIN_RECIPIENT_POLICY");
    match raw.as_str() {
        "roster" | "" => RecipientPolicy::Roster,
        "open" => RecipientPolicy::Open,
        other => {
            env.invalid(format!("TOCSIN_RECIPIENT_POLICY={other:?} must be \"roster\" or \"open\""));
            RecipientPolicy::Roster
        }
    }
}

/// The deployment's producers (template parameter `Producers`). Must be present; empty is a
/// deployment that accepts no alert yet.
fn producers(env: &mut Env, extra: &mut Vec<String>) -> Producers {
    let raw = env.present("TOCSIN_PRODUCERS").unwrap_or_default();
    Producers::parse(&raw).unwrap_or_else(|errors| {
        extra.extend(errors.iter().map(|e| format!("TOCSIN_PRODUCERS: {e}")));
        Producers::default()
    })
}

/// The deployment's SMS settings and what a request may choose of them (template parameters
/// `SmsSenderId`, `SmsOriginationNumber`, `SmsMaxPriceUsd`, `SmsAllowedSenderIds`,
/// `SmsAllowedOriginationNumbers`). The ceiling and the allow-lists must be present (empty means
/// "no ceiling" and "none but the deployment's own"), so a function deployed without them stops.
fn sms_policy(env: &mut Env, extra: &mut Vec<String>) -> SmsPolicy {
    let number = |name: &str, raw: &str, extra: &mut Vec<String>| {
        PhoneNumber::parse(raw).map_err(|e| extra.push(format!("{name}: '{}' {e}", mask_phone_like(raw)))).ok()
    };
    let origination_number =
        env.optional("TOCSIN_SMS_ORIGINATION_NUMBER").and_then(|n| number("TOCSIN_SMS_ORIGINATION_NUMBER", &n, extra));
    let max_price_usd = env.present("TOCSIN_SMS_MAX_PRICE_USD");
    if let Some(p) = &max_price_usd
        && !p.parse::<f64>().is_ok_and(|v| v.is_finite() && v > 0.0)
    {
        extra.push(format!("TOCSIN_SMS_MAX_PRICE_USD must be a positive USD amount such as 0.50, not '{p}'"));
    }
    let list = |v: Option<String>| -> Vec<String> {
        v.map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
    };
    let allowed_sender_ids: BTreeSet<String> = list(env.present("TOCSIN_SMS_ALLOWED_SENDER_IDS")).into_iter().collect();
    let allowed_origination_numbers = list(env.present("TOCSIN_SMS_ALLOWED_ORIGINATION_NUMBERS"))
        .iter()
        .filter_map(|n| number("TOCSIN_SMS_ALLOWED_ORIGINATION_NUMBERS", n, extra))
        .collect();
    SmsPolicy {
        defaults: SmsOptions { sender_id: env.optional("TOCSIN_SMS_SENDER_ID"), origination_number, max_price_usd },
        allowed_sender_ids,
        allowed_origination_numbers,
    }
}

fn sweep_policy(env: &mut Env) -> SweepPolicy {
    SweepPolicy {
        delay_suspected_after: env.duration("TOCSIN_DELAY_SUSPECTED_AFTER"),
        reenqueue_grace: env.duration("TOCSIN_REENQUEUE_GRACE"),
        requeue_after: env.duration("TOCSIN_REQUEUE_AFTER"),
    }
}

/// The due-index's partition count: 1 to 1,000. One GSI partition takes about 1,000 writes per
/// second, and every in-flight intent is written there several times; spreading intents over
/// `S` partitions multiplies that ceiling by `S`. Only ever raise it: the sweep reads partitions
/// `0..S`, so intents written under a larger `S` would be missed after lowering it.
fn due_shards(env: &mut Env) -> u32 {
    let s = env.number("TOCSIN_DUE_SHARDS", 1u32);
    if s > 1000 {
        env.errors.push(format!("TOCSIN_DUE_SHARDS={s} must be at most 1000"));
    }
    s
}

fn finish(env: Env, mut extra: Vec<String>) -> Result<(), ConfigError> {
    match env.finish() {
        Ok(()) if extra.is_empty() => Ok(()),
        Ok(()) => Err(ConfigError(extra)),
        Err(mut e) => {
            e.0.append(&mut extra);
            Err(e)
        }
    }
}

/// The SMS provider a deployment sends through (`TOCSIN_SMS_PROVIDER`, template parameter
/// `SmsProvider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// AWS End User Messaging SMS: the alert's key travels in every event (`end-user-messaging`).
    EndUserMessaging,
    /// Amazon SNS: only the message id ties a delivery record to its alert (`sns`).
    Sns,
}

pub const SMS_PROVIDER: &str = "TOCSIN_SMS_PROVIDER";
/// Whether the stack takes replies (`TOCSIN_REPLIES`, template parameter `Replies`): each SMS then
/// shows a reply code ("Reply 7 to ack").
pub const REPLIES: &str = "TOCSIN_REPLIES";
/// The deployment's stack name: every SMS's context names it.
pub const STACK: &str = "TOCSIN_STACK";

fn provider_kind(env: &mut Env) -> ProviderKind {
    match env.required(SMS_PROVIDER).as_str() {
        "end-user-messaging" => ProviderKind::EndUserMessaging,
        "sns" => ProviderKind::Sns,
        // Not set: `required` has recorded it and the function stops; the value is never used.
        "" => ProviderKind::Sns,
        other => {
            env.invalid(format!("{SMS_PROVIDER}={other:?} must be \"end-user-messaging\" or \"sns\""));
            ProviderKind::Sns
        }
    }
}

/// The deployment's End User Messaging settings for sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EumSettings {
    /// The stack's configuration set (`TOCSIN_EUM_CONFIGURATION_SET`): its event destination is
    /// the stack's own log group.
    pub configuration_set: String,
    /// The pool or phone number (id or ARN) to send from (`TOCSIN_EUM_ORIGINATION_IDENTITY`, set
    /// empty to let End User Messaging choose among the account's); a request's own origination
    /// number still wins.
    pub origination_identity: Option<String>,
    /// The opt-out list the identity uses (`TOCSIN_EUM_OPT_OUT_LIST`).
    pub opt_out_list: String,
    /// The stack's protect configuration (`TOCSIN_EUM_PROTECT_CONFIGURATION`): its country rules
    /// block every destination country but `SmsAllowedCountries`. The configuration set carries
    /// it too; naming it on every send keeps the rules in force should the set lose it. `None`
    /// only for an operator's CLI on a stack older than it.
    pub protect_configuration: Option<String>,
}

/// What the sender sends through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendingProvider {
    Sns,
    EndUserMessaging(EumSettings),
}

impl SendingProvider {
    fn from_env(env: &mut Env) -> Self {
        match provider_kind(env) {
            ProviderKind::Sns => SendingProvider::Sns,
            ProviderKind::EndUserMessaging => SendingProvider::EndUserMessaging(EumSettings {
                configuration_set: env.required("TOCSIN_EUM_CONFIGURATION_SET"),
                origination_identity: env.present("TOCSIN_EUM_ORIGINATION_IDENTITY"),
                opt_out_list: env.required("TOCSIN_EUM_OPT_OUT_LIST"),
                protect_configuration: Some(env.required("TOCSIN_EUM_PROTECT_CONFIGURATION")),
            }),
        }
    }
}

/// Where reconciliation searches for an alert's delivery records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryLogs {
    /// The account's SNS SMS delivery-status groups (`TOCSIN_SMS_SUCCESS_LOG_GROUP`,
    /// `TOCSIN_SMS_FAILURE_LOG_GROUP`), by recipient.
    Sns { success_group: String, failure_group: String },
    /// The stack's End User Messaging event group (`TOCSIN_EUM_EVENT_LOG_GROUP`), by key; only
    /// events whose context names this stack (`TOCSIN_STACK`) are its own.
    EndUserMessaging { event_group: String, stack: String },
}

impl DeliveryLogs {
    fn from_env(env: &mut Env) -> Self {
        match provider_kind(env) {
            ProviderKind::Sns => DeliveryLogs::Sns {
                success_group: env.required("TOCSIN_SMS_SUCCESS_LOG_GROUP"),
                failure_group: env.required("TOCSIN_SMS_FAILURE_LOG_GROUP"),
            },
            ProviderKind::EndUserMessaging => DeliveryLogs::EndUserMessaging {
                event_group: env.required("TOCSIN_EUM_EVENT_LOG_GROUP"),
                stack: env.required(STACK),
            },
        }
    }
}

#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// The deployment (stack) name, named in every SMS's context (`TOCSIN_STACK`).
    pub stack: String,
    /// The SMS provider and its settings.
    pub provider: SendingProvider,
    /// Whether each SMS shows a reply code (`TOCSIN_REPLIES`): the sender gives the alert (or
    /// digest) a code on its phone and adds " - Reply 7 to ack".
    pub replies: bool,
    pub ledger_table: String,
    pub recipients_table: String,
    pub send_queue_url: String,
    pub urgent_queue_url: String,
    /// Account-wide SMS parts per second toward SNS.
    pub sms_rate_per_second: u32,
    /// The event source mapping's maximum concurrency: each instance gets rate / concurrency.
    pub max_concurrency: u32,
    pub max_attempts: u32,
    /// How long a claim may stay unresolved before the sweep declares the outcome unknown.
    pub claim_lease: Duration,
    /// Bound on one SNS publish; past it the outcome is unknown.
    pub publish_timeout: Duration,
    pub retry_base_delay: Duration,
    pub retry_max_delay: Duration,
    /// The deployment's SMS settings and what a request may choose of them.
    pub sms_policy: SmsPolicy,
    /// Whom the deployment may text (`TOCSIN_RECIPIENT_POLICY`), checked again at send time.
    pub recipient_policy: RecipientPolicy,
    /// The stack's SMS parts per UTC hour before its breaker opens (`TOCSIN_SMS_PARTS_PER_HOUR`).
    pub spend_ceiling: SpendCeiling,
    pub sweep: SweepPolicy,
    /// Storm mode (`TOCSIN_STORM_MODE`): a recipient's claimable alerts go out as one digest SMS
    /// within `TOCSIN_MAX_SEGMENTS` parts, at most `TOCSIN_STORM_MAX_SMS_PER_WINDOW` SMS per
    /// `TOCSIN_STORM_WINDOW` per recipient unless a deadline would be missed.
    pub storm: DigestPolicy,
}

impl SenderConfig {
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let mut extra = Vec::new();
        let mut c = SenderConfig {
            stack: env.required(STACK),
            provider: SendingProvider::from_env(env),
            replies: env.switch(REPLIES),
            ledger_table: env.required(LEDGER_TABLE),
            recipients_table: env.required(RECIPIENTS_TABLE),
            send_queue_url: env.required(SEND_QUEUE_URL),
            urgent_queue_url: env.required(URGENT_QUEUE_URL),
            sms_rate_per_second: env.number("TOCSIN_SMS_RATE_PER_SECOND", 1u32),
            max_concurrency: env.number("TOCSIN_SENDER_MAX_CONCURRENCY", 1u32),
            max_attempts: env.number("TOCSIN_MAX_PUBLISH_ATTEMPTS", 1u32),
            claim_lease: env.duration("TOCSIN_CLAIM_LEASE"),
            publish_timeout: env.duration("TOCSIN_PUBLISH_TIMEOUT"),
            retry_base_delay: env.duration("TOCSIN_RETRY_BASE_DELAY"),
            retry_max_delay: env.duration("TOCSIN_RETRY_MAX_DELAY"),
            sms_policy: sms_policy(env, &mut extra),
            recipient_policy: recipient_policy(env),
            spend_ceiling: SpendCeiling { parts_per_hour: env.number("TOCSIN_SMS_PARTS_PER_HOUR", 1u32) },
            sweep: sweep_policy(env),
            storm: DigestPolicy {
                enabled: env.switch("TOCSIN_STORM_MODE"),
                max_sms_per_window: env.number("TOCSIN_STORM_MAX_SMS_PER_WINDOW", 1u32),
                window: env.duration("TOCSIN_STORM_WINDOW"),
                max_segments: env.number("TOCSIN_MAX_SEGMENTS", 1u8),
                reply_prompt: false,
            },
        };
        c.storm.reply_prompt = c.replies;
        if c.replies && c.provider == SendingProvider::Sns {
            extra.push(format!("{REPLIES}=on needs {SMS_PROVIDER}=end-user-messaging: SNS cannot receive replies"));
        }
        if c.publish_timeout >= c.claim_lease {
            extra.push("TOCSIN_PUBLISH_TIMEOUT must be shorter than TOCSIN_CLAIM_LEASE".into());
        }
        if c.storm.window.is_zero() {
            extra.push("TOCSIN_STORM_WINDOW must be longer than zero".into());
        }
        if c.spend_ceiling.parts_per_hour < u32::from(c.storm.max_segments) {
            extra.push(format!(
                "TOCSIN_SMS_PARTS_PER_HOUR={} is below TOCSIN_MAX_SEGMENTS={}: one alert could open the breaker",
                c.spend_ceiling.parts_per_hour, c.storm.max_segments
            ));
        }
        finish(std::mem::replace(env, Env::from_map(HashMap::new())), extra)?;
        Ok(c)
    }

    /// This instance's share of the account rate, in SMS parts per second. Never rounded up: with
    /// every instance running, their sum never exceeds the account rate (1 part/s over 2 instances
    /// is half a part per second each).
    pub fn instance_rate(&self) -> f64 {
        f64::from(self.sms_rate_per_second) / f64::from(self.max_concurrency.max(1))
    }

    /// The time between two SMS parts from one instance (the inverse of [`Self::instance_rate`]).
    pub fn instance_part_interval(&self) -> Duration {
        Duration::from_secs_f64(f64::from(self.max_concurrency.max(1)) / f64::from(self.sms_rate_per_second.max(1)))
    }
}

#[derive(Debug, Clone)]
pub struct StatusConfig {
    /// The deployment (stack) name (`TOCSIN_STACK`): an event whose context names another stack is
    /// never applied here.
    pub stack: String,
    pub ledger_table: String,
    pub recipients_table: String,
    /// How young a record matching no intent must be for status to wait for the sender's
    /// message-id write (only such a record can be ahead of it); the wait ends at the record's
    /// time + this, and never past the invocation's start + this nor its deadline.
    pub orphan_wait: Duration,
    /// The canary's number (`TOCSIN_CANARY_NUMBER`, template parameter `CanaryNumber`): a delivery
    /// record to it that moves an intent to delivered counts as `canary_delivered`. Unset: no canary.
    pub canary_number: Option<PhoneNumber>,
    /// The delay line (`TOCSIN_DELAY_SUSPECTED_AFTER`): a delivery record whose dwell reached it
    /// is tallied as slow for the carrier view ([`crate::domain::carrier_traffic`]).
    pub delay_suspected_after: Duration,
}

impl StatusConfig {
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let mut extra = Vec::new();
        let canary_number = env
            .optional("TOCSIN_CANARY_NUMBER")
            .and_then(|n| PhoneNumber::parse(&n).map_err(|e| extra.push(format!("TOCSIN_CANARY_NUMBER {e}"))).ok());
        let c = StatusConfig {
            stack: env.required(STACK),
            ledger_table: env.required(LEDGER_TABLE),
            recipients_table: env.required(RECIPIENTS_TABLE),
            orphan_wait: env.duration("TOCSIN_ORPHAN_WAIT"),
            canary_number,
            delay_suspected_after: env.duration("TOCSIN_DELAY_SUSPECTED_AFTER"),
        };
        finish(std::mem::replace(env, Env::from_map(HashMap::new())), extra)?;
        Ok(c)
    }
}

/// The replies function's configuration (issue 37): where the phones' reply codes, the alerts and
/// the registry are, and how it answers a reply by SMS.
#[derive(Debug, Clone)]
pub struct RepliesConfig {
    /// The deployment (stack) name (`TOCSIN_STACK`), in every confirmation's context.
    pub stack: String,
    pub ledger_table: String,
    pub recipients_table: String,
    /// The End User Messaging settings confirmations are sent with (replies exist only there).
    pub provider: SendingProvider,
    /// Bound on one confirmation's send (`TOCSIN_PUBLISH_TIMEOUT`).
    pub publish_timeout: Duration,
    /// The stack's SMS parts per UTC hour (`TOCSIN_SMS_PARTS_PER_HOUR`): confirmations count
    /// against the same breaker as alerts.
    pub spend_ceiling: SpendCeiling,
    /// Confirmations one phone may get per UTC hour (`TOCSIN_REPLY_CONFIRMATIONS_PER_HOUR`; 0:
    /// none): what a reply loop with an auto-responder can cost.
    pub confirmations_per_hour: u32,
}

impl RepliesConfig {
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let mut extra = Vec::new();
        let c = RepliesConfig {
            stack: env.required(STACK),
            ledger_table: env.required(LEDGER_TABLE),
            recipients_table: env.required(RECIPIENTS_TABLE),
            provider: SendingProvider::from_env(env),
            publish_timeout: env.duration("TOCSIN_PUBLISH_TIMEOUT"),
            spend_ceiling: SpendCeiling { parts_per_hour: env.number("TOCSIN_SMS_PARTS_PER_HOUR", 1u32) },
            confirmations_per_hour: env.number("TOCSIN_REPLY_CONFIRMATIONS_PER_HOUR", 0u32),
        };
        if c.provider == SendingProvider::Sns {
            extra.push(format!("the replies function needs {SMS_PROVIDER}=end-user-messaging: SNS has no inbound SMS"));
        }
        finish(std::mem::replace(env, Env::from_map(HashMap::new())), extra)?;
        Ok(c)
    }
}

#[derive(Debug, Clone)]
pub struct EscalationConfig {
    pub ledger_table: String,
    pub recipients_table: String,
    /// Where reconciliation searches for an alert's delivery records (the provider's logs).
    pub delivery_logs: DeliveryLogs,
    pub reconcile_margin: Duration,
    /// Unknown outcomes searched per run.
    pub reconcile_batch: usize,
    pub send_queue_url: String,
    pub urgent_queue_url: String,
    pub escalation_queue_url: String,
    pub sweep: SweepPolicy,
    /// Intents read per page of the due index.
    pub page_size: i32,
    /// Stop taking new work this long before the function's own deadline.
    pub safety_margin: Duration,
    /// How long an escalation lease holds off an overlapping run.
    pub escalation_lease: Duration,
    /// Partitions of the due-index the sweep reads (`TOCSIN_DUE_SHARDS`, the same as intake's).
    pub due_shards: u32,
    /// Due intents handled at once (`TOCSIN_SWEEP_CONCURRENCY`).
    pub concurrency: usize,
    /// Each producer's escalations paged per UTC hour before they are folded
    /// (`TOCSIN_PRODUCER_ESCALATIONS_PER_HOUR`).
    pub escalation_cap: EscalationCap,
}

impl EscalationConfig {
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let c = EscalationConfig {
            ledger_table: env.required(LEDGER_TABLE),
            recipients_table: env.required(RECIPIENTS_TABLE),
            delivery_logs: DeliveryLogs::from_env(env),
            reconcile_margin: env.duration("TOCSIN_RECONCILE_MARGIN"),
            reconcile_batch: env.number("TOCSIN_RECONCILE_BATCH", 0usize),
            send_queue_url: env.required(SEND_QUEUE_URL),
            urgent_queue_url: env.required(URGENT_QUEUE_URL),
            escalation_queue_url: env.required(ESCALATION_QUEUE_URL),
            sweep: sweep_policy(env),
            page_size: env.number("TOCSIN_SWEEP_PAGE_SIZE", 1i32),
            safety_margin: env.duration("TOCSIN_SWEEP_SAFETY_MARGIN"),
            escalation_lease: env.duration("TOCSIN_ESCALATION_LEASE"),
            due_shards: due_shards(env),
            concurrency: env.number("TOCSIN_SWEEP_CONCURRENCY", 1usize),
            escalation_cap: EscalationCap { per_hour: env.number("TOCSIN_PRODUCER_ESCALATIONS_PER_HOUR", 1u32) },
        };
        finish(std::mem::replace(env, Env::from_map(HashMap::new())), vec![])?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_configuration_names_every_missing_variable() {
        let mut env = Env::from_map(HashMap::from([(LEDGER_TABLE.to_owned(), "t".to_owned())]));
        let err = EscalationConfig::from_env(&mut env).expect_err("incomplete");
        let text = err.to_string();
        for name in [SEND_QUEUE_URL, ESCALATION_QUEUE_URL, "TOCSIN_SWEEP_PAGE_SIZE", "TOCSIN_REENQUEUE_GRACE"] {
            assert!(text.contains(name), "{text}");
        }
        assert!(!text.contains(LEDGER_TABLE));
    }

    #[test]
    fn malformed_values_are_reported_with_their_value() {
        let mut env = Env::from_map(HashMap::from([
            (LEDGER_TABLE.to_owned(), "t".to_owned()),
            ("TOCSIN_ORPHAN_WAIT".to_owned(), "soon".to_owned()),
            (RECIPIENTS_TABLE.to_owned(), "r".to_owned()),
        ]));
        let err = StatusConfig::from_env(&mut env).expect_err("invalid");
        assert!(err.to_string().contains("TOCSIN_ORPHAN_WAIT=\"soon\""), "{err}");
    }

    #[test]
    fn storm_mode_is_a_required_on_off_switch() {
        let mut env = Env::from_map(HashMap::from([("TOCSIN_STORM_MODE".to_owned(), "yes".to_owned())]));
        assert!(!env.switch("TOCSIN_STORM_MODE"));
        let err = env.finish().expect_err("not on/off");
        assert!(err.to_string().contains("TOCSIN_STORM_MODE=\"yes\" must be \"on\" or \"off\""), "{err}");
        let mut env = Env::from_map(HashMap::new());
        env.switch("TOCSIN_STORM_MODE");
        assert!(env.finish().expect_err("missing").to_string().contains("TOCSIN_STORM_MODE is not set"));
        let mut env = Env::from_map(HashMap::from([("TOCSIN_STORM_MODE".to_owned(), "on".to_owned())]));
        assert!(env.switch("TOCSIN_STORM_MODE"));
        assert!(env.finish().is_ok());
    }

    fn sender_at(rate: u32, concurrency: u32) -> SenderConfig {
        let vars = [
            (LEDGER_TABLE, "t"),
            (RECIPIENTS_TABLE, "r"),
            (SEND_QUEUE_URL, "q"),
            (URGENT_QUEUE_URL, "u"),
            ("TOCSIN_MAX_PUBLISH_ATTEMPTS", "5"),
            ("TOCSIN_CLAIM_LEASE", "2m"),
            ("TOCSIN_PUBLISH_TIMEOUT", "10s"),
            ("TOCSIN_RETRY_BASE_DELAY", "2s"),
            ("TOCSIN_RETRY_MAX_DELAY", "5m"),
            ("TOCSIN_DELAY_SUSPECTED_AFTER", "10m"),
            ("TOCSIN_REENQUEUE_GRACE", "2m"),
            ("TOCSIN_REQUEUE_AFTER", "10m"),
            ("TOCSIN_STORM_MODE", "off"),
            ("TOCSIN_REPLIES", "off"),
            ("TOCSIN_RECIPIENT_POLICY", "roster"),
            ("TOCSIN_MAX_SEGMENTS", "3"),
            ("TOCSIN_STORM_MAX_SMS_PER_WINDOW", "3"),
            ("TOCSIN_STORM_WINDOW", "5m"),
            ("TOCSIN_SMS_PARTS_PER_HOUR", "1000"),
            ("TOCSIN_SMS_MAX_PRICE_USD", ""),
            ("TOCSIN_SMS_ALLOWED_SENDER_IDS", ""),
            ("TOCSIN_SMS_ALLOWED_ORIGINATION_NUMBERS", ""),
            (STACK, "tocsin-test"),
            (SMS_PROVIDER, "sns"),
        ];
        let mut map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        map.insert("TOCSIN_SMS_RATE_PER_SECOND".into(), rate.to_string());
        map.insert("TOCSIN_SENDER_MAX_CONCURRENCY".into(), concurrency.to_string());
        SenderConfig::from_env(&mut Env::from_map(map)).expect("valid sender configuration")
    }

    #[test]
    fn replies_are_refused_under_sns_which_has_no_inbound_sms() {
        let mut vars = HashMap::from([(REPLIES.to_owned(), "on".to_owned())]);
        vars.extend(
            [(LEDGER_TABLE, "t"), (RECIPIENTS_TABLE, "r"), (SEND_QUEUE_URL, "q"), (URGENT_QUEUE_URL, "u")]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        vars.insert(SMS_PROVIDER.into(), "sns".into());
        let err = SenderConfig::from_env(&mut Env::from_map(vars)).expect_err("refused").to_string();
        assert!(err.contains("TOCSIN_REPLIES=on needs TOCSIN_SMS_PROVIDER=end-user-messaging"), "{err}");
    }

    #[test]
    fn end_user_messaging_needs_its_configuration_set_and_opt_out_list_and_names_a_bad_provider() {
        let base = |provider: &str| {
            let mut env = Env::from_map(HashMap::from([(SMS_PROVIDER.to_owned(), provider.to_owned())]));
            let p = SendingProvider::from_env(&mut env);
            (p, env.finish().err().map(|e| e.to_string()).unwrap_or_default())
        };
        let (_, err) = base("end-user-messaging");
        assert!(err.contains("TOCSIN_EUM_CONFIGURATION_SET is not set"), "{err}");
        assert!(err.contains("TOCSIN_EUM_ORIGINATION_IDENTITY is not set (set it empty"), "{err}");
        assert!(err.contains("TOCSIN_EUM_OPT_OUT_LIST is not set"), "{err}");
        let (p, err) = base("sns");
        assert_eq!((p, err.as_str()), (SendingProvider::Sns, ""));
        let (_, err) = base("pinpoint");
        assert!(err.contains("TOCSIN_SMS_PROVIDER=\"pinpoint\" must be"), "{err}");
        let mut env = Env::from_map(HashMap::from([
            (SMS_PROVIDER.to_owned(), "end-user-messaging".to_owned()),
            ("TOCSIN_EUM_CONFIGURATION_SET".to_owned(), "tocsin-dev".to_owned()),
            ("TOCSIN_EUM_ORIGINATION_IDENTITY".to_owned(), "".to_owned()),
            ("TOCSIN_EUM_OPT_OUT_LIST".to_owned(), "Default".to_owned()),
            ("TOCSIN_EUM_PROTECT_CONFIGURATION".to_owned(), "protect-1".to_owned()),
        ]));
        let p = SendingProvider::from_env(&mut env);
        assert!(env.finish().is_ok());
        assert_eq!(
            p,
            SendingProvider::EndUserMessaging(EumSettings {
                configuration_set: "tocsin-dev".into(),
                origination_identity: None,
                opt_out_list: "Default".into(),
                protect_configuration: Some("protect-1".into()),
            })
        );
    }

    #[test]
    fn the_instances_shares_of_the_send_rate_never_add_up_to_more_than_the_account_rate() {
        for (rate, concurrency) in [(1, 2), (1, 7), (20, 2), (20, 3), (3, 1000)] {
            let c = sender_at(rate, concurrency);
            let total = c.instance_rate() * f64::from(concurrency);
            assert!(total <= f64::from(rate) + 1e-9, "{rate}/s over {concurrency}: {total}");
            let interval = c.instance_part_interval().as_secs_f64();
            assert!((interval * c.instance_rate() - 1.0).abs() < 1e-9, "{rate}/{concurrency}: {interval}");
        }
        assert_eq!(sender_at(1, 2).instance_part_interval(), Duration::from_secs(2), "half a part per second each");
    }
}
