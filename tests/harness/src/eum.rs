//! The local AWS End User Messaging SMS (`pinpoint-sms-voice-v2`) stand-in, from the tests' side.
//!
//! The server is `tests/harness/eum_standin.py`, mounted inside the emulator's moto process: the SDK
//! client (`aws-sdk-pinpointsmsvoicev2`) stays real and reaches it through the IAM gate like any
//! other service. What AWS does on its own — the carriers' answers, a person texting STOP, events
//! held back and coming late or twice, the account's sandbox and spend — a test arranges through
//! the stand-in's control API (`/tocsin-eum/…` on moto's own port, not AWS's), wrapped here.
//!
//! A test sends through the SDK (or the code under test does) and reads the events back from the
//! log group its configuration set writes to ([`crate::Emulator::log_events`]), in the shape a
//! CloudWatch Logs subscription hands them to a function ([`crate::events::logs_payload`]).

use aws_config::SdkConfig;
use aws_sdk_pinpointsmsvoicev2 as eum;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

use crate::{HarnessError, Result, aws_err};

/// What the carrier does with a message to one destination (`eum_standin.py`, `BEHAVIOURS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CarrierBehaviour {
    /// `TEXT_SUCCESSFUL` (not final), then `TEXT_DELIVERED` (final): the default.
    Deliver,
    /// `TEXT_SUCCESSFUL`, final: a country where no `TEXT_DELIVERED` follows.
    DeliveredSuccessfulFinal,
    Blocked,
    Invalid,
    InvalidMessage,
    Unreachable,
    CarrierUnreachable,
    Spam,
    CarrierBlocked,
    Unknown,
    TtlExpired,
    /// No event at all — until [`EumControl::give_up`] plays AWS's 72-hour `TEXT_UNKNOWN`.
    Silent,
    /// Delivered, then the person texts STOP: the number joins the identity's opt-out list.
    OptedOutByReply,
}

/// A carrier's behaviour for one destination, with the bad day's options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Carrier {
    pub behaviour: CarrierBehaviour,
    /// Events kept until [`EumControl::release`]: they come late.
    pub hold: bool,
    /// Every event written twice.
    pub duplicate: bool,
    /// A `TEXT_PENDING` (not final) before the behaviour's events.
    pub pending: bool,
}

impl Carrier {
    pub fn new(behaviour: CarrierBehaviour) -> Carrier {
        Carrier { behaviour, hold: false, duplicate: false, pending: false }
    }
    pub fn held(mut self) -> Carrier {
        self.hold = true;
        self
    }
    pub fn duplicated(mut self) -> Carrier {
        self.duplicate = true;
        self
    }
    pub fn after_pending(mut self) -> Carrier {
        self.pending = true;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AccountTier {
    /// A new account: it sends only to verified destination numbers.
    Sandboxed,
    Production,
}

/// One message the stand-in accepted (a `DryRun` is not one), as the request gave it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SentText {
    pub message_id: String,
    pub destination: String,
    /// The number (or sender ID) the message left from.
    pub origination: String,
    /// The origination identity as the request named it (`None`: the stand-in chose one).
    pub origination_identity: Option<String>,
    pub body: String,
    pub message_type: String,
    pub context: Option<BTreeMap<String, String>>,
    pub time_to_live: Option<i64>,
    pub max_price: Option<String>,
    pub configuration_set: Option<String>,
    pub parts: u32,
    pub encoding: String,
    pub price_usd: f64,
    pub requested_at_ms: i64,
    pub behaviour: CarrierBehaviour,
}

/// The stand-in's bookkeeping: events held back, events AWS could not deliver, spend so far.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EumState {
    pub held: usize,
    /// Events to a log group that does not exist (or stamped outside what CloudWatch Logs takes).
    pub dropped: usize,
    pub spend_usd: f64,
    pub tier: AccountTier,
}

/// An origination number the stand-in allocated and activated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhoneNumber {
    pub id: String,
    pub arn: String,
    pub number: String,
}

/// The control API of one emulator's stand-in (region `us-east-1`, the harness's).
#[derive(Clone)]
pub struct EumControl {
    endpoint: String,
    http: reqwest::Client,
}

fn stand_in(e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Eum(e.to_string())
}

impl EumControl {
    /// `moto_endpoint`: moto's own port (the control API is not AWS's: it bypasses the IAM gate).
    pub fn new(moto_endpoint: &str) -> EumControl {
        EumControl {
            endpoint: format!("{}/tocsin-eum", moto_endpoint.trim_end_matches('/')),
            http: crate::emulator::moto_http(),
        }
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let response =
            self.http.post(format!("{}/{path}", self.endpoint)).json(&body).send().await.map_err(stand_in)?;
        Self::answer(path, response).await
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let response = self.http.get(format!("{}/{path}", self.endpoint)).send().await.map_err(stand_in)?;
        Self::answer(path, response).await
    }

    async fn answer(path: &str, response: reqwest::Response) -> Result<Value> {
        let status = response.status();
        let body: Value = response.json().await.map_err(stand_in)?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(stand_in(format!("/tocsin-eum/{path}: {}", body["error"].as_str().unwrap_or("no error text"))))
        }
    }

    /// What the carrier does with every message to `destination` from now on.
    pub async fn set_carrier(&self, destination: &str, carrier: Carrier) -> Result<()> {
        let mut body = serde_json::to_value(&carrier).map_err(stand_in)?;
        body["destination"] = json!(destination);
        self.post("carrier", body).await.map(drop)
    }

    /// What the carrier does with messages to any destination without its own behaviour.
    pub async fn set_default_carrier(&self, carrier: Carrier) -> Result<()> {
        self.set_carrier("*", carrier).await
    }

    /// The next `n` SendTextMessage calls answer ThrottlingException before anything is read.
    /// (The SDK's standard retry makes up to 3 attempts: `n` below that is absorbed.)
    pub async fn throttle_next(&self, n: u32) -> Result<()> {
        self.post("throttle", json!({"next": n})).await.map(drop)
    }

    /// Message parts per second `identity` (number, id or sender ID) may send before throttling.
    pub async fn set_parts_per_second(&self, identity: &str, parts_per_second: u32) -> Result<()> {
        self.post("rate", json!({"identity": identity, "parts_per_second": parts_per_second})).await.map(drop)
    }

    pub async fn set_account_tier(&self, tier: AccountTier) -> Result<()> {
        self.post("account", json!({"tier": tier})).await.map(drop)
    }

    /// The monthly text spend limit, in whole US dollars (a new account's is 1).
    pub async fn set_spend_limit(&self, usd: u32) -> Result<()> {
        self.post("account", json!({"spend_limit_usd": usd})).await.map(drop)
    }

    /// The month's spend reached, whatever the limit says.
    pub async fn set_spend_exhausted(&self, exhausted: bool) -> Result<()> {
        self.post("account", json!({"spend_exhausted": exhausted})).await.map(drop)
    }

    /// Destination numbers verified for a sandboxed account.
    pub async fn verify_destinations(&self, numbers: &[&str]) -> Result<()> {
        self.post("account", json!({"verified_destinations": numbers})).await.map(drop)
    }

    /// A production account with room to spend: what most tests of the sending path start from.
    pub async fn production_account(&self) -> Result<()> {
        self.post("account", json!({"tier": AccountTier::Production, "spend_limit_usd": 1000})).await.map(drop)
    }

    /// Sets a phone number's status (`ACTIVE` once its registration is approved; `PENDING`, …).
    pub async fn set_phone_number_status(&self, phone_number: &str, status: &str) -> Result<()> {
        self.post("phone-number-status", json!({"phone_number": phone_number, "status": status})).await.map(drop)
    }

    /// Writes every held event, stamped `at` (default: now): the late events. Returns how many.
    pub async fn release(&self, at: Option<DateTime<Utc>>) -> Result<usize> {
        let v = self.post("release", json!({"at_ms": at.map(|t| t.timestamp_millis())})).await?;
        v["released"].as_u64().map(|n| n as usize).ok_or_else(|| stand_in("release: no count"))
    }

    /// AWS after 72 hours without a final event: `TEXT_UNKNOWN` for every such message.
    pub async fn give_up(&self, at: Option<DateTime<Utc>>) -> Result<usize> {
        let v = self.post("give-up", json!({"at_ms": at.map(|t| t.timestamp_millis())})).await?;
        v["written"].as_u64().map(|n| n as usize).ok_or_else(|| stand_in("give-up: no count"))
    }

    /// Every message accepted so far, in order.
    pub async fn sent_texts(&self) -> Result<Vec<SentText>> {
        let v = self.get("messages").await?;
        serde_json::from_value(v["messages"].clone()).map_err(stand_in)
    }

    pub async fn state(&self) -> Result<EumState> {
        serde_json::from_value(self.get("state").await?).map_err(stand_in)
    }

    /// A person texts `text` from `from` to origination number `to`: End User Messaging applies an
    /// opt-out (or toll-free opt-in) keyword, then publishes the inbound message to the number's
    /// two-way channel `copies` times. Returns its `inboundMessageId`, or `None` when two-way is
    /// off (AWS drops the reply).
    pub async fn reply(&self, from: &str, to: &str, text: &str, copies: u32) -> Result<Option<String>> {
        let v = self.post("reply", json!({"from": from, "to": to, "text": text, "copies": copies})).await?;
        Ok(v["inbound_message_id"].as_str().map(str::to_owned))
    }

    /// What an account owner does to take replies: two-way on for `number`, its channel the
    /// stack's replies topic (`UpdatePhoneNumber` through the SDK).
    pub async fn enable_two_way(&self, sdk: &SdkConfig, number: &PhoneNumber, topic_arn: &str) -> Result<()> {
        eum::Client::new(sdk)
            .update_phone_number()
            .phone_number_id(&number.id)
            .two_way_enabled(true)
            .two_way_channel_arn(topic_arn)
            .send()
            .await
            .map_err(|e| aws_err("UpdatePhoneNumber", e))?;
        Ok(())
    }

    /// Requests an origination number through the SDK (as the account owner would) and activates
    /// it (its registration approved): a new number is `PENDING` until then.
    pub async fn active_phone_number(
        &self,
        sdk: &SdkConfig,
        number_type: eum::types::RequestableNumberType,
        iso_country_code: &str,
    ) -> Result<PhoneNumber> {
        let client = eum::Client::new(sdk);
        let out = client
            .request_phone_number()
            .iso_country_code(iso_country_code)
            .message_type(eum::types::MessageType::Transactional)
            .number_capabilities(eum::types::NumberCapability::Sms)
            .number_type(number_type)
            .send()
            .await
            .map_err(|e| aws_err("RequestPhoneNumber", e))?;
        let (Some(id), Some(arn), Some(number)) = (out.phone_number_id, out.phone_number_arn, out.phone_number) else {
            return Err(stand_in("RequestPhoneNumber answered without an id, ARN or number"));
        };
        self.set_phone_number_status(&id, "ACTIVE").await?;
        Ok(PhoneNumber { id, arn, number })
    }

    /// A configuration set whose events (every SMS type: `TEXT_ALL`) go to CloudWatch Logs group
    /// `log_group` (created if missing). Returns the configuration set's ARN.
    pub async fn configuration_set_logging_to(&self, sdk: &SdkConfig, name: &str, log_group: &str) -> Result<String> {
        let logs = aws_sdk_cloudwatchlogs::Client::new(sdk);
        match logs.create_log_group().log_group_name(log_group).send().await {
            Ok(_) => {}
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_already_exists_exception()) => {}
            Err(e) => return Err(aws_err("CreateLogGroup", e)),
        }
        let client = eum::Client::new(sdk);
        let created = client
            .create_configuration_set()
            .configuration_set_name(name)
            .send()
            .await
            .map_err(|e| aws_err("CreateConfigurationSet", e))?;
        let destination = eum::types::CloudWatchLogsDestination::builder()
            .iam_role_arn(format!("arn:aws:iam::{}:role/{name}-events", crate::stack::ACCOUNT))
            .log_group_arn(format!(
                "arn:aws:logs:{}:{}:log-group:{log_group}",
                crate::stack::REGION,
                crate::stack::ACCOUNT
            ))
            .build()
            .map_err(stand_in)?;
        client
            .create_event_destination()
            .configuration_set_name(name)
            .event_destination_name("logs")
            .matching_event_types(eum::types::EventType::TextAll)
            .cloud_watch_logs_destination(destination)
            .send()
            .await
            .map_err(|e| aws_err("CreateEventDestination", e))?;
        created.configuration_set_arn.ok_or_else(|| stand_in("CreateConfigurationSet answered without an ARN"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carrier_is_sent_as_the_stand_in_reads_it() {
        let v = serde_json::to_value(Carrier::new(CarrierBehaviour::OptedOutByReply).held().duplicated())
            .expect("serialises");
        assert_eq!(v, json!({"behaviour": "opted_out_by_reply", "hold": true, "duplicate": true, "pending": false}));
        assert_eq!(
            serde_json::to_value(CarrierBehaviour::DeliveredSuccessfulFinal).ok(),
            Some(json!("delivered_successful_final"))
        );
        assert_eq!(serde_json::to_value(AccountTier::Sandboxed).ok(), Some(json!("SANDBOXED")));
    }

    #[test]
    fn every_behaviour_the_rust_side_names_is_one_the_stand_in_knows() {
        let source = include_str!("../eum_standin.py");
        for b in [
            CarrierBehaviour::Deliver,
            CarrierBehaviour::DeliveredSuccessfulFinal,
            CarrierBehaviour::Blocked,
            CarrierBehaviour::Invalid,
            CarrierBehaviour::InvalidMessage,
            CarrierBehaviour::Unreachable,
            CarrierBehaviour::CarrierUnreachable,
            CarrierBehaviour::Spam,
            CarrierBehaviour::CarrierBlocked,
            CarrierBehaviour::Unknown,
            CarrierBehaviour::TtlExpired,
            CarrierBehaviour::Silent,
            CarrierBehaviour::OptedOutByReply,
        ] {
            let name = serde_json::to_value(b).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            assert!(source.contains(&format!("    \"{name}\": [")), "eum_standin.py BEHAVIOURS lacks {name}");
        }
    }
}
