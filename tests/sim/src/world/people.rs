//! The people tocsin texts (issue 37), as End User Messaging's two-way numbers meet them: an SMS
//! that reaches a phone may be read and answered — with the code it shows, a bare "ack", "ack
//! all", or words tocsin does not understand — after seconds, minutes or hours (after the alert
//! was escalated, or its chain moved on), sometimes twice, the two replies crossing on the way;
//! from a phone that holds other alerts too. Each reply goes the way AWS sends it: the two-way
//! channel publishes it to the stack's replies topic, SNS delivers it to the replies queue (at
//! least once), and the queue's event source mapping hands it to the replies function.
//!
//! What each phone received, and when, is kept for the judges: a reply may reach only alerts its
//! phone received before it was sent ([`crate::invariants`]).

use std::collections::BTreeMap;

use tocsin::domain::IdempotencyKey;

use super::{World, WorldEvent};
use crate::exec::Millis;

/// The coverage table's section for the people who reply.
pub const REPLY_COVERAGE: &str = "People who reply (End User Messaging two-way)";

/// How often a person answers an SMS that asks for a reply.
const ANSWERS: f64 = 0.45;

/// How often a person who answered answers again (an impatient second "ack", a thumb slip).
const TWICE: f64 = 0.12;

/// The stack's two-way number, as the simulated events name it.
pub const TWO_WAY_NUMBER: &str = "+18335550001";

/// One reply a person sent.
#[derive(Debug, Clone)]
pub struct Reply {
    pub from: String,
    pub body: String,
    /// When the person sent it (End User Messaging's inbound message arrives a moment later).
    pub sent_at: Millis,
    pub inbound_id: String,
    /// The message the person answered (`previousPublishedMessageId`).
    pub previous: String,
}

impl Reply {
    /// The queue record's body: the two-way payload in SNS's envelope, timestamped when SNS
    /// took it.
    pub fn queue_body(&self, published_at: Millis) -> String {
        let payload = serde_json::json!({
            "originationNumber": self.from,
            "destinationNumber": TWO_WAY_NUMBER,
            "messageKeyword": "KEYWORD_123456789012",
            "messageBody": self.body,
            "inboundMessageId": self.inbound_id,
            "previousPublishedMessageId": self.previous,
        });
        let timestamp = crate::exec::to_time(published_at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        serde_json::json!({
            "Type": "Notification",
            "MessageId": format!("sns-{}", self.inbound_id),
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:sim-replies",
            "Message": payload.to_string(),
            "Timestamp": timestamp,
        })
        .to_string()
    }
}

/// What one phone received: when it reached the handset, and the alerts it carried.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Millis,
    pub keys: Vec<IdempotencyKey>,
}

#[derive(Debug, Default)]
pub struct People {
    /// Whether people answer at all (the stack takes replies, under End User Messaging).
    pub answer: bool,
    pub received: BTreeMap<String, Vec<Received>>,
    pub replies: Vec<Reply>,
}

impl People {
    /// The reply with `inbound_id`.
    pub fn reply(&self, inbound_id: &str) -> Option<&Reply> {
        inbound_id.strip_prefix("sim-in-").and_then(|n| n.parse::<usize>().ok()).and_then(|n| self.replies.get(n))
    }

    /// Whether `phone` had received an SMS carrying `key` by `at`.
    pub fn had_received(&self, phone: &str, key: &IdempotencyKey, at: Millis) -> bool {
        self.received.get(phone).is_some_and(|r| r.iter().any(|r| r.at <= at && r.keys.contains(key)))
    }
}

/// The code an SMS asks its reader to reply (" - Reply 7 to ack"), if it asks.
pub fn shown_code(body: &str) -> Option<u16> {
    let (_, prompt) = body.rsplit_once(" - Reply ")?;
    prompt.split(' ').next()?.parse().ok()
}

/// The text without its reply prompt: what the alert says.
pub fn without_prompt(body: &str) -> &str {
    match body.rsplit_once(" - Reply ") {
        Some((text, prompt)) if prompt.contains(" to ack") => text,
        _ => body,
    }
}

impl World {
    /// An SMS of this stack reached `to`'s handset `at`, carrying `keys`: the phone has it, and
    /// its person may answer.
    pub(super) fn handset_received(
        &mut self,
        to: &str,
        body: &str,
        message_id: &str,
        at: Millis,
        keys: Vec<IdempotencyKey>,
    ) {
        if keys.is_empty() {
            return;
        }
        self.people.received.entry(to.to_owned()).or_default().push(Received { at, keys });
        if !self.people.answer {
            return;
        }
        let Some(code) = shown_code(body) else { return };
        if !self.chance(ANSWERS) {
            return;
        }
        let text = match self.between(0, 99) {
            0..=59 => code.to_string(),
            60..=69 => format!("ack {code}"),
            70..=84 => "ack".to_owned(),
            85..=91 => "ACK ALL".to_owned(),
            _ => "on it, thanks".to_owned(),
        };
        // Most read it within minutes; some in the morning.
        let delay = match self.between(0, 99) {
            0..=79 => self.between(8_000, 5 * 60_000),
            80..=94 => self.between(5 * 60_000, 60 * 60_000),
            _ => self.between(3_600_000, 6 * 3_600_000),
        };
        self.send_reply(to, text.clone(), at + delay, message_id);
        self.coverage.count(REPLY_COVERAGE, "a person answered", 1);
        if self.chance(TWICE) {
            let again = at + delay + self.between(2_000, 10 * 60_000);
            self.send_reply(to, text, again, message_id);
            self.coverage.count(REPLY_COVERAGE, "a person answered twice", 1);
        }
    }

    /// An acknowledgement written by a reply (its observation `ack:reply:<inbound>`): the
    /// reply's phone must have received the alert before the person sent it — or a level of the
    /// chain whose root it is (a level's acknowledgement is written on its root first).
    pub(super) fn reply_acknowledged(&mut self, key: &IdempotencyKey, observation_id: &str) {
        let Some(reply) = observation_id.strip_prefix("ack:reply:").and_then(|id| self.people.reply(id)) else {
            return;
        };
        let (phone, sent_at, inbound, said) =
            (reply.from.clone(), reply.sent_at, reply.inbound_id.clone(), reply.body.clone());
        let received = |k: &IdempotencyKey| self.people.had_received(&phone, k, sent_at);
        let levels = self
            .oracle
            .intents
            .get(key)
            .and_then(|t| t.chain.as_ref())
            .filter(|c| &c.root == key)
            .map_or(0, |c| c.levels);
        let a_level = (1..levels)
            .filter_map(|n| u8::try_from(n).ok())
            .any(|n| received(&tocsin::domain::chain::level_key(key, n)));
        if received(key) || a_level {
            self.coverage.count(REPLY_COVERAGE, "an alert acknowledged by reply", 1);
            return;
        }
        let now = self.now;
        self.oracle.violations.push(crate::oracle::Violation {
            at: now,
            invariant: crate::oracle::Invariant::RepliesReachOnlyWhatArrived,
            key: Some(key.to_string()),
            detail: format!(
                "acknowledged by reply {inbound} ({said:?}) from {}, sent at {sent_at} ms: that phone had not received it \
                 (it had received, by then: {})",
                tocsin::domain::phone::mask_phone_like(&phone),
                self.people.received.get(&phone).map_or(String::new(), |r| r
                    .iter()
                    .filter(|r| r.at <= sent_at)
                    .map(|r| format!("{} ms: {}", r.at, r.keys.iter().map(|k| k.short()).collect::<Vec<_>>().join("+")))
                    .collect::<Vec<_>>()
                    .join(", "))
            ),
        });
    }

    fn send_reply(&mut self, from: &str, body: String, sent_at: Millis, previous: &str) {
        let n = self.people.replies.len();
        self.people.replies.push(Reply {
            from: from.to_owned(),
            body,
            sent_at,
            inbound_id: format!("sim-in-{n}"),
            previous: previous.to_owned(),
        });
        // The two-way channel → the replies topic → the replies queue: a second or three.
        let queued = sent_at + self.between(300, 3_000);
        self.schedule(queued, WorldEvent::Reply { n, receives: 0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_an_sms_shows_is_read_from_its_prompt() {
        assert_eq!(shown_code("[tocsin] payment_failed: r1 settle - Reply 7 to ack"), Some(7));
        assert_eq!(shown_code("... (ref abc) - Reply 12 to ack all 3"), Some(12));
        assert_eq!(shown_code("[tocsin] payment_failed: r1 settle"), None);
        assert_eq!(without_prompt("x (ref abc) - Reply 12 to ack all 3"), "x (ref abc)");
        assert_eq!(without_prompt("no prompt"), "no prompt");
    }
}
