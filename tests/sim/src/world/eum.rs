//! AWS End User Messaging SMS, simulated: `SendTextMessage` (the account's parts-per-second quota,
//! 5xx refusals, timeouts whose SMS went out or not, refusals by reason — an opted-out number, the
//! spend limit), and the carriers behind it, whose events the stack's configuration set writes to
//! the stack's own event group — each echoing the message's `Context`, the carrier's acceptance
//! (non-final) before its verdict, after seconds or hours, twice, or never; an SMS no carrier
//! answers ends with `TEXT_TTL_EXPIRED` when its time to live runs out.
//!
//! Beside [`super::sms`] (SNS): the world sends through one provider per run ([`Provider`]).

use serde_json::{Map, Value};
use tocsin::domain::PhoneNumber;
use tocsin::domain::segments::measure;
use tocsin::ports::{OptIn, PortResult, PublishOutcome, Refusal, SmsGateway, SmsMessage};

use super::WorldEvent;
use super::ledger::port;
use super::logs::Group;
use super::sms::{Carrier, Sent};
use crate::exec::{Millis, OpKind, Sim, to_ms};
use crate::world::World;

/// One event of a message, as the configuration set's CloudWatch Logs destination writes it.
pub(super) struct EventOf<'a> {
    pub message_id: &'a str,
    pub to: &'a str,
    pub parts: u32,
    pub requested_at: Millis,
    pub context: &'a Map<String, Value>,
}

impl EventOf<'_> {
    fn json(&self, event_type: &str, is_final: bool, status: &str, description: &str, at: Millis) -> String {
        let network = &super::networks::NETWORKS[super::networks::network_of(self.to)];
        let event = EventJson {
            carrier_name: network.name,
            context: self.context,
            destination_phone_number: self.to,
            event_timestamp: at,
            event_type,
            event_version: "1.0",
            is_final,
            is_international_send: false,
            iso_country_code: "US",
            mcc: network.mcc,
            message_encoding: "GSM",
            message_id: self.message_id,
            message_request_timestamp: self.requested_at,
            message_status: status,
            message_status_description: description,
            message_type: "TRANSACTIONAL",
            mnc: network.mnc,
            origination_phone_number: "+18335550001",
            total_carrier_fee: 0.00266 * f64::from(self.parts),
            total_message_parts: self.parts,
            total_message_price: 0.00581 * f64::from(self.parts),
        };
        // Plain strings, numbers and a map of strings: nothing in it can fail to serialise.
        serde_json::to_string(&event).unwrap_or_default()
    }
}

/// An event's JSON, its fields as AWS names them (in the order a JSON object's keys sort, as
/// the world wrote them before: the same bytes).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct EventJson<'a> {
    carrier_name: &'a str,
    context: &'a Map<String, Value>,
    destination_phone_number: &'a str,
    event_timestamp: Millis,
    event_type: &'a str,
    event_version: &'a str,
    is_final: bool,
    is_international_send: bool,
    iso_country_code: &'a str,
    mcc: &'a str,
    message_encoding: &'a str,
    message_id: &'a str,
    message_request_timestamp: Millis,
    message_status: &'a str,
    message_status_description: &'a str,
    message_type: &'a str,
    mnc: &'a str,
    origination_phone_number: &'a str,
    total_carrier_fee: f64,
    total_message_parts: u32,
    total_message_price: f64,
}

/// Whether End User Messaging holds `number` in the stack's opt-out list: half the dead numbers
/// (by their last digit) replied STOP, and a send to them is refused; the other half are blocked
/// by their carrier, and the SMS fails with `TEXT_BLOCKED`.
pub(super) fn opted_out(number: &str, carrier: Option<Carrier>) -> bool {
    carrier == Some(Carrier::Dead) && number.bytes().last().is_some_and(|d| d % 2 == 0)
}

impl World {
    /// What End User Messaging does with one SendTextMessage.
    fn eum_send(
        &mut self,
        to: &PhoneNumber,
        body: &str,
        context: Vec<(&'static str, String)>,
        worth_until: Millis,
    ) -> PublishOutcome {
        let now = self.now;
        let number = to.expose().to_owned();
        let parts = measure(body).segments.max(1);
        if self.chance(self.faults.publish_5xx) {
            return PublishOutcome::Retryable { error: "InternalServerException: simulated 5xx".into() };
        }
        if !self.sms.take(parts, now) {
            return PublishOutcome::Retryable { error: "ThrottlingException: Rate exceeded".into() };
        }
        let carrier = self.sms.carriers.get(&number).copied();
        if opted_out(&number, carrier) || self.sms.opted_out.get(&number).copied().unwrap_or(false) {
            return PublishOutcome::Rejected {
                error: "ConflictException: DESTINATION_PHONE_NUMBER_OPTED_OUT".into(),
                refusal: Refusal::Recipient,
            };
        }
        if self.sms.spend_exhausted_from.is_some_and(|t| now >= t) {
            return PublishOutcome::Rejected {
                error: "ServiceQuotaExceededException: MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT".into(),
                refusal: Refusal::SpendLimit,
            };
        }
        let timed_out = self.chance(self.faults.publish_timeout);
        if timed_out && self.chance(0.5) {
            return PublishOutcome::Unknown { error: "operation timeout (simulated; never sent)".into() };
        }
        let draw = self.draw();
        let message_id = self.sms.next_message_id("eum", draw);
        // A reply's confirmation names the reply, not an alert: it carries none.
        let confirms = context.iter().find(|(k, _)| *k == tocsin::domain::send_context::REPLY).map(|(_, v)| v.clone());
        let covered = if confirms.is_some() { Vec::new() } else { self.covered(body, &number) };
        self.sms.sent.push(Sent {
            at: now,
            to: number.clone(),
            body_len: body.len(),
            message_id: message_id.clone(),
            parts,
            operator: covered.iter().any(|(_, operator, _)| *operator),
        });
        match &confirms {
            Some(inbound) => self.oracle.confirmation_sent(now, inbound),
            None => self.oracle.sms_left(now, to, &message_id, &covered),
        }
        let context: Map<String, Value> = context.into_iter().map(|(k, v)| (k.to_owned(), Value::String(v))).collect();
        let event = EventOf { message_id: &message_id, to: &number, parts, requested_at: now, context: &context };
        if let Some(at) = self.eum_carry(Group::Events, &event, carrier, worth_until) {
            let keys = covered.into_iter().map(|(key, _, _)| key).collect();
            self.handset_received(&number, body, &message_id, at, keys);
        }
        if timed_out {
            PublishOutcome::Unknown { error: "operation timeout (simulated; sent)".into() }
        } else {
            PublishOutcome::Accepted { message_id }
        }
    }

    /// The carrier's events for one SMS: its acceptance, then its verdict (or the end of its time
    /// to live), each written to `group` (the sending configuration set's destination), lost or
    /// doubled as faults have it. Returns when the SMS reached the handset, if it did.
    pub(super) fn eum_carry(
        &mut self,
        group: Group,
        e: &EventOf<'_>,
        carrier: Option<Carrier>,
        worth_until: Millis,
    ) -> Option<Millis> {
        let now = self.now;
        let accepted_at = now + self.between(200, 2_000);
        let accepted =
            e.json("TEXT_SUCCESSFUL", false, "SUCCESSFUL", "Message has been accepted by phone carrier", accepted_at);
        self.eum_event(group, accepted, accepted_at);
        let (event_type, status, description, lo, hi) = match carrier
            .unwrap_or(Carrier::Delivers { lo: 1_000, hi: 20_000 })
        {
            Carrier::Delivers { lo, hi } => {
                ("TEXT_DELIVERED", "DELIVERED", "Message has been delivered to the handset", lo, hi)
            }
            Carrier::Dead => ("TEXT_BLOCKED", "BLOCKED", "The recipient's carrier is blocking messages", 500, 5_000),
            Carrier::Unreachable => {
                ("TEXT_CARRIER_UNREACHABLE", "CARRIER_UNREACHABLE", "The carrier is unreachable", 5_000, 60_000)
            }
            Carrier::Silent => {
                // No carrier verdict: End User Messaging gives up when the time to live ends.
                let ttl =
                    e.json("TEXT_TTL_EXPIRED", true, "TTL_EXPIRED", "The message's time to live expired", worth_until);
                self.eum_event(group, ttl, worth_until.max(accepted_at));
                return None;
            }
        };
        let mut at = accepted_at + self.between(lo, hi);
        // A network in an incident holds the SMS and hands it over once the incident ends.
        let released = self.sms.networks.released(e.to, at);
        if released > at {
            at = released + self.between(0, 120_000);
        }
        if at > worth_until {
            // Past its time to live the carrier stops trying, and End User Messaging says so.
            let ttl =
                e.json("TEXT_TTL_EXPIRED", true, "TTL_EXPIRED", "The message's time to live expired", worth_until);
            self.eum_event(group, ttl, worth_until.max(accepted_at));
            return None;
        }
        let delivered = event_type == "TEXT_DELIVERED";
        if delivered {
            self.sms.handed_over.insert(e.message_id.to_owned());
        }
        let verdict = e.json(event_type, true, status, description, at);
        self.eum_event(group, verdict, at);
        delivered.then_some(at)
    }

    /// One event reaching `group` `at` (plus the destination's delay), or never.
    fn eum_event(&mut self, group: Group, message: String, at: Millis) {
        if self.chance(self.faults.record_lost) {
            return;
        }
        let copies = if self.chance(self.faults.record_twice) { 2 } else { 1 };
        for _ in 0..copies {
            let id = self.sms.add_record(group, message.clone());
            let when = at + self.between(100, 3_000);
            self.schedule(when, WorldEvent::Record(id));
        }
    }
}

/// End User Messaging as the functions use it: every event names its alert by key.
#[derive(Clone)]
pub struct SimEum {
    pub sim: Sim,
}

impl SmsGateway for SimEum {
    fn records_name_their_alert(&self) -> bool {
        true
    }

    async fn publish(&self, message: SmsMessage<'_>) -> PublishOutcome {
        let (to, body) = (message.to.clone(), message.body.to_owned());
        let context = message.context.entries();
        let worth_until = to_ms(message.worth_until);
        let sent = self
            .sim
            .call("End User Messaging SendTextMessage", OpKind::Publish, move |w| {
                w.eum_send(&to, &body, context.clone(), worth_until)
            })
            .await;
        match sent {
            Ok(outcome) => outcome,
            Err((_, label)) => PublishOutcome::Unknown { error: format!("{label}: simulated failure") },
        }
    }

    async fn is_opted_out(&self, recipient: &PhoneNumber) -> PortResult<bool> {
        let p = recipient.expose().to_owned();
        port(
            self.sim
                .call("End User Messaging DescribeOptedOutNumbers", OpKind::Read, move |w| {
                    let carrier = w.sms.carriers.get(&p).copied();
                    opted_out(&p, carrier) || w.sms.opted_out.get(&p).copied().unwrap_or(false)
                })
                .await,
        )
    }

    async fn opt_in(&self, recipient: &PhoneNumber) -> PortResult<OptIn> {
        let p = recipient.expose().to_owned();
        port(
            self.sim
                .call("End User Messaging DeleteOptedOutNumber", OpKind::Write, move |w| {
                    let carrier = w.sms.carriers.get(&p).copied();
                    // A number the world keeps opted out (a STOP the world itself models) stays so.
                    if opted_out(&p, carrier) {
                        return OptIn::Refused("ValidationException: opted in within the last 30 days".into());
                    }
                    w.sms.opted_out.remove(&p);
                    OptIn::Done
                })
                .await,
        )
    }
}
