//! A second tocsin stack in the same account, paging the same people for the same business events
//! (a staging and a production stack fed by one monitor, or a stack per region): its SMS reach the
//! phones this stack pages within seconds of this stack's own, for alerts with the **same keys**
//! (derived from the same event id and template version), and it takes its parts from the account's
//! SMS quota this stack shares.
//!
//! Under SNS its delivery records land in the account's two groups beside this stack's, told apart
//! by nothing but message ids this stack never indexed. Under End User Messaging its events go to
//! its own configuration set's group — or, when someone pointed it at this stack's configuration
//! set by hand, into this stack's group, naming the same keys under the other stack's name.

use serde_json::{Map, Value};
use tocsin::domain::send_context::SendContext;
use tocsin::domain::{IdempotencyKey, PhoneNumber};

use super::World;
use super::eum::{EventOf, opted_out};
use super::logs::Group;
use super::networks::network_of;
use super::sms::Provider;
use crate::exec::Millis;

/// The second stack's name, in its SMS's contexts.
pub const STACK: &str = "tocsin-second";

/// The coverage table's label for what the second stack did.
pub const COVERAGE: &str = "Second tocsin stack";

/// How a run's second stack behaves (drawn with the workload).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecondStack {
    /// The share of this stack's business events the second stack pages too.
    pub share: f64,
    /// Its End User Messaging events land in this stack's group (a configuration set shared by
    /// hand), not its own.
    pub shares_our_group: bool,
}

impl SecondStack {
    pub fn none() -> Self {
        SecondStack { share: 0.0, shares_our_group: false }
    }
}

impl World {
    /// The second stack's SMS for the business event this stack knows as `key`, to `to`: sent now
    /// through `provider`, as its own pipeline would (one SMS, its own attempt), unless the
    /// account's quota or the number's opt-out refuses it.
    pub fn second_stack_send(
        &mut self,
        provider: Provider,
        stack: SecondStack,
        to: &PhoneNumber,
        key: &IdempotencyKey,
    ) {
        let now = self.now;
        let number = to.expose().to_owned();
        self.count("paged a phone this stack pages");
        if !self.sms.take(1, now) {
            self.count("throttled by the account's quota");
            return;
        }
        let near: Millis = 60_000;
        if self.sms.sent.iter().rev().take_while(|s| now - s.at <= near).any(|s| s.to == number) {
            self.count("SMS within a minute of this stack's own to the phone");
        }
        let draw = self.draw();
        match provider {
            Provider::Sns => {
                let message_id = self.sms.next_message_id("sns", draw);
                let minute = now - now.rem_euclid(60_000);
                self.oracle.others_sms.entry((network_of(&number), minute)).or_default()[1] += 1;
                self.carry(to, &message_id, 1);
            }
            Provider::EndUserMessaging => {
                let carrier = self.sms.carriers.get(&number).copied();
                if opted_out(&number, carrier) {
                    return;
                }
                let message_id = self.sms.next_message_id("eum", draw);
                let attempt = format!("second-{draw:016x}");
                let context: Map<String, Value> = SendContext::alert(STACK, key.clone(), attempt)
                    .entries()
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), Value::String(v)))
                    .collect();
                let event =
                    EventOf { message_id: &message_id, to: &number, parts: 1, requested_at: now, context: &context };
                let group = if stack.shares_our_group {
                    self.count("its events in this stack's group, naming the same key");
                    Group::Events
                } else {
                    Group::SecondStackEvents
                };
                let _ = self.eum_carry(group, &event, carrier, now + 30 * 60_000);
            }
        }
    }

    fn count(&mut self, what: &'static str) {
        self.coverage.count(COVERAGE, what, 1);
    }
}
