//! SMS, simulated: SNS's publish (the account's parts-per-second quota, 5xx refusals, timeouts
//! whose SMS went out or not, the spend limit), and the carriers behind it, which write each
//! message's delivery record to the account's log groups — after seconds or hours, twice, or
//! never. Every SMS that leaves the account is recorded for the oracle with the alerts it covers.
//!
//! What both providers share is here: the account's quota, the carriers, the SMS that left, the
//! records waiting to be written, and [`SimGateway`], the provider a run sends through (SNS here,
//! End User Messaging in [`super::eum`]).

use std::collections::BTreeMap;

use tocsin::domain::PhoneNumber;
use tocsin::domain::segments::measure;
use tocsin::ports::{OptIn, PortResult, PublishOutcome, SmsGateway, SmsMessage};

use super::WorldEvent;
use super::ledger::port;
use super::logs::Group;
use crate::exec::{Millis, OpKind, Sim};
use crate::world::World;

/// How a recipient's carrier treats the SMS sent there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Carrier {
    /// Delivered; the receipt comes after `lo..hi` milliseconds.
    Delivers { lo: Millis, hi: Millis },
    /// Never answers: no delivery record at all.
    Silent,
    /// The number is dead (opted out, invalid): a permanent failure record.
    Dead,
    /// Unreachable now: a transient failure record.
    Unreachable,
}

/// One SMS that left the account (or may have: a publish that timed out after sending).
#[derive(Debug, Clone)]
pub struct Sent {
    pub at: Millis,
    pub to: String,
    pub body_len: usize,
    pub message_id: String,
    /// The publish's task, for the trace.
    pub parts: u32,
    /// An operator's resend (`tocsin resend`): published by the operator, outside the breaker.
    pub operator: bool,
}

/// A delivery record waiting to be written.
#[derive(Debug, Clone)]
pub struct PendingRecord {
    pub group: Group,
    pub message: String,
}

pub struct Sms {
    /// Account-wide parts per second (SNS's quota), and the bucket's state.
    pub rate: f64,
    bucket: f64,
    bucket_at: Millis,
    /// The monthly spend limit is used up from this instant: SNS accepts and the carrier record
    /// says "No quota left for account".
    pub spend_exhausted_from: Option<Millis>,
    pub carriers: BTreeMap<String, Carrier>,
    /// The networks behind the numbers: their names in every record, their incidents, and the
    /// other traffic's changes of shape.
    pub networks: super::networks::Networks,
    /// Numbers SNS holds as opted out.
    pub opted_out: BTreeMap<String, bool>,
    pub sent: Vec<Sent>,
    /// The stack's SMS breaker as deployed (`SmsPartsPerHour`): what the breaker's judge holds the
    /// stack's sends to.
    pub breaker: Option<u32>,
    /// The SMS a carrier delivered to the handset (whether or not its record ever arrives): the
    /// truth "delivered" is judged against.
    pub handed_over: std::collections::BTreeSet<String>,
    pub records: BTreeMap<u64, PendingRecord>,
    next_record: u64,
    next_message: u64,
}

impl Sms {
    pub fn new(rate_per_second: u32) -> Self {
        Sms {
            breaker: None,
            rate: f64::from(rate_per_second.max(1)),
            bucket: f64::from(rate_per_second.max(1)),
            bucket_at: 0,
            spend_exhausted_from: None,
            carriers: BTreeMap::new(),
            networks: super::networks::Networks::default(),
            opted_out: BTreeMap::new(),
            sent: Vec::new(),
            handed_over: std::collections::BTreeSet::new(),
            records: BTreeMap::new(),
            next_record: 0,
            next_message: 0,
        }
    }

    /// Takes `parts` from the account's bucket (burst of one second's worth); false: throttled.
    pub(super) fn take(&mut self, parts: u32, now: Millis) -> bool {
        let elapsed = (now - self.bucket_at).max(0) as f64 / 1000.0;
        self.bucket = (self.bucket + elapsed * self.rate).min(self.rate);
        self.bucket_at = now;
        if self.bucket >= f64::from(parts) {
            self.bucket -= f64::from(parts);
            true
        } else {
            false
        }
    }

    /// A message id as the provider answers it: unique in the run.
    pub fn next_message_id(&mut self, provider: &str, draw: u64) -> String {
        self.next_message += 1;
        format!("{provider}-{:08x}-{}", draw as u32, self.next_message)
    }

    pub fn add_record(&mut self, group: Group, message: String) -> u64 {
        self.next_record += 1;
        self.records.insert(self.next_record, PendingRecord { group, message });
        self.next_record
    }
}

/// `YYYY-MM-DD hh:mm:ss.mmm`, as SNS stamps a record.
fn timestamp(ms: Millis) -> String {
    use chrono::{Datelike, Timelike};
    let t = crate::exec::to_time(ms);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.timestamp_subsec_millis()
    )
}

/// A delivery-status record as SNS writes it (one log event's message).
pub fn record_json(
    message_id: &str,
    at: Millis,
    to: &str,
    parts: u32,
    status: &str,
    response: &str,
    dwell: Millis,
) -> String {
    let network = &super::networks::NETWORKS[super::networks::network_of(to)];
    format!(
        concat!(
            r#"{{"notification":{{"messageId":"{}","timestamp":"{}"}},"delivery":{{"phoneCarrier":"{}","mnc":{},"mcc":{},"#,
            r#""numberOfMessageParts":{},"destination":"{}","priceInUSD":0.00581,"smsType":"Transactional","providerResponse":"{}","#,
            r#""dwellTimeMs":{},"dwellTimeMsUntilDeviceAck":{}}},"status":"{}"}}"#
        ),
        message_id,
        timestamp(at),
        network.name,
        network.mnc.trim_start_matches('0'),
        network.mcc,
        parts,
        to,
        response,
        dwell,
        dwell + 400,
        status
    )
}

impl World {
    /// What SNS does with one publish. The SMS the oracle counts is every one that left.
    fn sns_publish(&mut self, to: &PhoneNumber, body: &str) -> PublishOutcome {
        let now = self.now;
        let parts = measure(body).segments.max(1);
        if self.chance(self.faults.publish_5xx) {
            return PublishOutcome::Retryable { error: "InternalError: simulated 5xx".into() };
        }
        if !self.sms.take(parts, now) {
            return PublishOutcome::Retryable { error: "Throttling: Rate exceeded".into() };
        }
        let timed_out = self.chance(self.faults.publish_timeout);
        if timed_out && self.chance(0.5) {
            // The request never reached SNS.
            return PublishOutcome::Unknown { error: "operation timeout (simulated; never sent)".into() };
        }
        let draw = self.draw();
        let message_id = self.sms.next_message_id("sns", draw);
        let covered = self.covered(body, to.expose());
        self.sms.sent.push(Sent {
            at: now,
            to: to.expose().to_owned(),
            body_len: body.len(),
            message_id: message_id.clone(),
            parts,
            operator: covered.iter().any(|(_, operator, _)| *operator),
        });
        self.oracle.sms_left(now, to, &message_id, &covered);
        self.carry(to, &message_id, parts);
        if timed_out {
            PublishOutcome::Unknown { error: "operation timeout (simulated; sent)".into() }
        } else {
            PublishOutcome::Accepted { message_id }
        }
    }

    /// The alerts an SMS with `body` carries, as the oracle knows them, with whether an operator's
    /// resend holds each one's claim and when it was claimed.
    pub(super) fn covered(
        &mut self,
        body: &str,
        to: &str,
    ) -> Vec<(tocsin::domain::IdempotencyKey, bool, Option<Millis>)> {
        self.oracle
            .covered_by(super::people::without_prompt(body), to)
            .into_iter()
            .map(|key| {
                let status = self.ledger.intents.get(&key).map(|i| &i.record.status);
                let operator = status.and_then(|s| s.attempt_id.as_deref()).is_some_and(|a| a.starts_with("operator:"));
                let claimed = status.and_then(|s| s.claimed_at).map(crate::exec::to_ms);
                (key, operator, claimed)
            })
            .collect()
    }

    /// The carrier's answer for one SMS: its delivery record(s), scheduled.
    pub(super) fn carry(&mut self, to: &PhoneNumber, message_id: &str, parts: u32) {
        let now = self.now;
        let number = to.expose().to_owned();
        let (status, response, lo, hi) = if self.sms.spend_exhausted_from.is_some_and(|t| now >= t) {
            ("FAILURE", "No quota left for account", 200, 2_000)
        } else {
            match self.sms.carriers.get(&number).copied().unwrap_or(Carrier::Delivers { lo: 1_000, hi: 20_000 }) {
                Carrier::Delivers { lo, hi } => ("SUCCESS", "Message has been accepted by phone carrier", lo, hi),
                Carrier::Silent => return,
                Carrier::Dead => ("FAILURE", "Phone number is opted out", 500, 5_000),
                Carrier::Unreachable => ("FAILURE", "Phone is currently unreachable/unavailable", 5_000, 60_000),
            }
        };
        if status == "SUCCESS" {
            self.sms.handed_over.insert(message_id.to_owned());
        }
        if self.chance(self.faults.record_lost) {
            return;
        }
        let mut dwell = self.between(lo, hi);
        // A network in an incident holds the SMS and hands it over once the incident ends.
        let released = self.sms.networks.released(&number, now + dwell);
        if released > now + dwell {
            dwell = released - now + self.between(0, 120_000);
        }
        let message = record_json(message_id, now, &number, parts, status, response, dwell);
        let group = if status == "SUCCESS" { Group::Success } else { Group::Failure };
        let copies = if self.chance(self.faults.record_twice) { 2 } else { 1 };
        for _ in 0..copies {
            let id = self.sms.add_record(group, message.clone());
            let at = now + dwell + self.between(100, 3_000);
            self.schedule(at, WorldEvent::Record(id));
        }
    }
}

/// The SMS provider a run sends through, as the functions' adapters are chosen in `main.rs`.
#[derive(Clone)]
pub enum SimGateway {
    Sns(SimSns),
    EndUserMessaging(super::eum::SimEum),
}

impl SimGateway {
    pub fn of(provider: Provider, sim: Sim) -> Self {
        match provider {
            Provider::Sns => SimGateway::Sns(SimSns { sim }),
            Provider::EndUserMessaging => SimGateway::EndUserMessaging(super::eum::SimEum { sim }),
        }
    }
}

impl SmsGateway for SimGateway {
    fn records_name_their_alert(&self) -> bool {
        match self {
            SimGateway::Sns(g) => g.records_name_their_alert(),
            SimGateway::EndUserMessaging(g) => g.records_name_their_alert(),
        }
    }

    async fn publish(&self, message: SmsMessage<'_>) -> PublishOutcome {
        match self {
            SimGateway::Sns(g) => g.publish(message).await,
            SimGateway::EndUserMessaging(g) => g.publish(message).await,
        }
    }

    async fn is_opted_out(&self, recipient: &PhoneNumber) -> PortResult<bool> {
        match self {
            SimGateway::Sns(g) => g.is_opted_out(recipient).await,
            SimGateway::EndUserMessaging(g) => g.is_opted_out(recipient).await,
        }
    }

    async fn opt_in(&self, recipient: &PhoneNumber) -> PortResult<OptIn> {
        match self {
            SimGateway::Sns(g) => g.opt_in(recipient).await,
            SimGateway::EndUserMessaging(g) => g.opt_in(recipient).await,
        }
    }
}

/// The provider a run sends through (the template's `SmsProvider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Provider {
    Sns,
    EndUserMessaging,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Sns => "sns",
            Provider::EndUserMessaging => "end-user-messaging",
        }
    }
}

/// SNS as the functions use it.
#[derive(Clone)]
pub struct SimSns {
    pub sim: Sim,
}

impl SmsGateway for SimSns {
    fn records_name_their_alert(&self) -> bool {
        false
    }

    async fn publish(&self, message: SmsMessage<'_>) -> PublishOutcome {
        let (to, body) = (message.to.clone(), message.body.to_owned());
        match self.sim.call("SNS Publish", OpKind::Publish, move |w| w.sns_publish(&to, &body)).await {
            Ok(outcome) => outcome,
            Err((_, label)) => PublishOutcome::Unknown { error: format!("{label}: simulated failure") },
        }
    }

    async fn is_opted_out(&self, recipient: &PhoneNumber) -> PortResult<bool> {
        let p = recipient.expose().to_owned();
        port(
            self.sim
                .call("SNS CheckIfPhoneNumberIsOptedOut", OpKind::Read, move |w| {
                    w.sms.opted_out.get(&p).copied().unwrap_or(false)
                })
                .await,
        )
    }

    async fn opt_in(&self, recipient: &PhoneNumber) -> PortResult<OptIn> {
        let p = recipient.expose().to_owned();
        port(
            self.sim
                .call("SNS OptInPhoneNumber", OpKind::Write, move |w| {
                    w.sms.opted_out.remove(&p);
                    OptIn::Done
                })
                .await,
        )
    }
}
