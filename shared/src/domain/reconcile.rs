//! Reconciliation: settling an intent whose publish outcome is unknown by finding its SMS in the
//! SNS delivery-status logs — same destination, inside the attempt's time window — instead of
//! guessing or re-sending.
//!
//! One unambiguous message → link it (its records become observations as usual). Several
//! messages to the same number in the window → ambiguous: the candidates are recorded and a human
//! decides. One message, but another intent to the same number has an open outcome too and was
//! claimed where the message could be its → not this attempt's to take: while that intent's sender
//! is still at work (its lease runs), the search is made again later (it may yet record the
//! message as its own); once its outcome is unknown too, the one candidate is left to a human, for
//! good — what becomes of the other intent later (an operator resends it, its new SMS is
//! delivered) says nothing about whose this SMS was. None yet → try again later with backoff (logs
//! can take long to appear), for as long as a delivery record may still come: the 73-hour receipt
//! window.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::delivery::DeliveryRecord;
use super::delivery::RECEIPT_WINDOW;
use super::phone::PhoneNumber;

/// How far SNS's clock (a record's `notification.timestamp`) and the functions' may disagree.
/// Both are kept by AWS's time service, well under a millisecond apart; a quarter of a second is
/// generous. An SMS stamped earlier than this before an attempt's claim went out before the claim:
/// another alert's SMS to the same number, never this attempt's. (It was a minute; the simulation
/// showed what that lets in: in a storm to one number, the record of another alert's SMS stamped a
/// second before a claim whose own publish never went out was taken for it, and an alert never
/// sent was called delivered.)
pub const SKEW: Duration = Duration::from_millis(250);

/// A delivery-status record found in the logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub log_group: String,
    pub log_event_id: String,
    pub timestamp_ms: i64,
    pub record: DeliveryRecord,
    /// The log message as written (holds a phone number: stored encrypted, never logged).
    pub message: String,
}

/// The time window of one attempt: from the claim (less the skew) to `margin` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    pub fn of_attempt(claimed_at: DateTime<Utc>, margin: Duration) -> Window {
        let d = |x: Duration| chrono::Duration::from_std(x).unwrap_or(chrono::Duration::zero());
        Window { from: claimed_at - d(SKEW), to: claimed_at + d(margin) }
    }

    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        t >= self.from && t <= self.to
    }

    /// When the records of SMS sent in this window may have been *logged*: a delivery record is
    /// written to the log group when the carrier's receipt comes, up to 72 hours after the SMS, and
    /// its log event carries that time — only its own `notification.timestamp` says when SNS sent
    /// it. So the logs are searched from the window's start until `now` (at most the receipt window
    /// after it), and each record's own time is then held to the window itself ([`judge`]).
    pub fn logged_by(&self, now: DateTime<Utc>) -> Window {
        let receipts_end = self.from + chrono::Duration::from_std(RECEIPT_WINDOW).unwrap_or(chrono::Duration::zero());
        Window { from: self.from, to: self.to.max(now.min(receipts_end)) }
    }

    /// Whether a found record's own time (when SNS sent it; the log event's time when it carries
    /// none) is in the window.
    pub fn holds(&self, f: &Found) -> bool {
        record_time(f).is_some_and(|t| self.contains(t))
    }

    /// The claims whose attempt window holds an SMS written at `sent`: from `margin` before it to
    /// the skew after it. `None` when the (untrusted) time is at the calendar's edge.
    pub fn claims_that_could_send(sent: DateTime<Utc>, margin: Duration) -> Option<Window> {
        let d = |x: Duration| chrono::Duration::from_std(x).unwrap_or(chrono::Duration::zero());
        Some(Window { from: sent.checked_sub_signed(d(margin))?, to: sent.checked_add_signed(d(SKEW))? })
    }
}

/// A candidate message: all records found for one SNS message id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub sns_message_id: String,
    pub first_seen: DateTime<Utc>,
    pub statuses: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Exactly one message matches: link it; `records` are its delivery records, oldest first.
    Link {
        sns_message_id: String,
        records: Vec<Found>,
    },
    /// Several messages match: change nothing, list them for a human.
    Ambiguous(Vec<Candidate>),
    /// One message matches, but `rivals` other intents to the number were claimed where it could
    /// be theirs, and at least one's sender is still at work: change nothing, search again later.
    Contested {
        sns_message_id: String,
        rivals: usize,
    },
    NoMatch,
}

/// The other intents to a number that could own a found SMS: their outcomes open too and their
/// claims inside its window (see [`Window::claims_that_could_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rivals {
    /// Still `sending` with a running lease: their senders may yet record the SMS as theirs.
    pub sending: usize,
    /// Their outcome unknown too (`send_unknown`, or a lease run out).
    pub unknown: usize,
}

impl Verdict {
    /// The verdict once the other intents that could own a linked message are known. A link no
    /// rival could own stands; one a sender at work could own waits; one an unknown outcome could
    /// own is ambiguous, its one candidate left to a human.
    pub fn unless_contested(self, rivals: Rivals) -> Verdict {
        match self {
            Verdict::Link { sns_message_id, .. } if rivals.sending > 0 => {
                Verdict::Contested { sns_message_id, rivals: rivals.sending + rivals.unknown }
            }
            Verdict::Link { sns_message_id, records } if rivals.unknown > 0 => Verdict::Ambiguous(vec![Candidate {
                sns_message_id,
                first_seen: records.iter().filter_map(record_time).min().unwrap_or_default(),
                statuses: records.iter().map(|f| f.record.status.as_str().to_owned()).collect(),
            }]),
            v => v,
        }
    }

    /// When the message a link would take was first written, if it is a link.
    pub fn link_time(&self) -> Option<DateTime<Utc>> {
        match self {
            Verdict::Link { records, .. } => records.iter().filter_map(record_time).min(),
            _ => None,
        }
    }
}

fn record_time(f: &Found) -> Option<DateTime<Utc>> {
    f.record.timestamp.or_else(|| DateTime::from_timestamp_millis(f.timestamp_ms))
}

/// Judges what the logs say about one attempt to `recipient` in `window`. `linked_elsewhere`
/// holds message ids already tied to other intents (the same number alerted twice).
pub fn judge(
    recipient: &PhoneNumber,
    window: Window,
    found: Vec<Found>,
    linked_elsewhere: &HashSet<String>,
) -> Verdict {
    let mut by_message: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    for f in found {
        let to_recipient = f.record.destination.as_deref() == Some(recipient.expose());
        let in_window = window.holds(&f);
        if to_recipient && in_window && !linked_elsewhere.contains(&f.record.message_id) {
            by_message.entry(f.record.message_id.clone()).or_default().push(f);
        }
    }
    match by_message.len() {
        0 => Verdict::NoMatch,
        1 => {
            let (sns_message_id, mut records) = by_message.into_iter().next().unwrap_or_default();
            records.sort_by_key(|f| (f.timestamp_ms, f.log_event_id.clone()));
            Verdict::Link { sns_message_id, records }
        }
        _ => Verdict::Ambiguous(
            by_message
                .into_iter()
                .map(|(id, records)| Candidate {
                    sns_message_id: id,
                    first_seen: records.iter().filter_map(record_time).min().unwrap_or_default(),
                    statuses: records.iter().map(|f| f.record.status.as_str().to_owned()).collect(),
                })
                .collect(),
        ),
    }
}

/// When to search again after `attempts` searches found nothing: 1, 2, 4 … minutes, at most an hour.
pub fn next_attempt(attempts: u32, now: DateTime<Utc>) -> DateTime<Utc> {
    let minutes = 1i64 << attempts.min(6);
    now + chrono::Duration::minutes(minutes.min(60))
}

/// Reconciliation bookkeeping kept on the intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileState {
    /// Not started, or searching with backoff.
    #[default]
    Pending,
    /// Several candidates: left to a human.
    Ambiguous,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::delivery::parse_record;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    fn found(id: &str, msg: &str, dest: &str, ts: &str) -> Found {
        let raw = format!(
            r#"{{"notification":{{"messageId":"{msg}","timestamp":"{ts}"}},"delivery":{{"destination":"{dest}"}},"status":"SUCCESS"}}"#
        );
        Found {
            log_group: "g".into(),
            log_event_id: id.into(),
            timestamp_ms: 0,
            record: parse_record(&raw).expect("record"),
            message: raw,
        }
    }

    fn number() -> PhoneNumber {
        PhoneNumber::parse("+14155550100").expect("valid")
    }

    fn window() -> Window {
        Window::of_attempt(at("2026-11-29T12:00:00Z"), Duration::from_secs(900))
    }

    #[test]
    fn one_message_to_the_number_in_the_window_is_linked() {
        let v = judge(
            &number(),
            window(),
            vec![found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000")],
            &HashSet::new(),
        );
        assert!(matches!(v, Verdict::Link { ref sns_message_id, .. } if sns_message_id == "m1"));
    }

    #[test]
    fn records_of_one_message_in_both_groups_are_one_candidate() {
        let v = judge(
            &number(),
            window(),
            vec![
                found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000"),
                found("2", "m1", "+14155550100", "2026-11-29 12:00:09.000"),
            ],
            &HashSet::new(),
        );
        assert!(matches!(v, Verdict::Link { ref records, .. } if records.len() == 2));
    }

    #[test]
    fn two_messages_to_the_same_number_are_ambiguous() {
        let v = judge(
            &number(),
            window(),
            vec![
                found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000"),
                found("2", "m2", "+14155550100", "2026-11-29 12:01:00.000"),
            ],
            &HashSet::new(),
        );
        assert!(matches!(v, Verdict::Ambiguous(ref c) if c.len() == 2));
    }

    #[test]
    fn messages_linked_to_other_intents_other_numbers_or_other_times_do_not_count() {
        let linked: HashSet<String> = ["m2".to_owned()].into();
        let v = judge(
            &number(),
            window(),
            vec![
                found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000"),
                found("2", "m2", "+14155550100", "2026-11-29 12:00:03.000"),
                found("3", "m3", "+14155550199", "2026-11-29 12:00:04.000"),
                found("4", "m4", "+14155550100", "2026-11-29 13:00:00.000"),
                found("5", "m5", "+14155550100", "2026-11-29 11:58:00.000"),
            ],
            &linked,
        );
        assert!(matches!(v, Verdict::Link { ref sns_message_id, .. } if sns_message_id == "m1"), "{v:?}");
    }

    #[test]
    fn a_link_another_open_attempt_could_own_waits_for_its_sender_or_is_left_to_a_human() {
        let link = judge(
            &number(),
            window(),
            vec![found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000")],
            &HashSet::new(),
        );
        assert_eq!(link.link_time(), Some(at("2026-11-29T12:00:02Z")));
        assert!(matches!(link.clone().unless_contested(Rivals::default()), Verdict::Link { .. }));
        let at_work = Rivals { sending: 1, unknown: 1 };
        assert_eq!(
            link.clone().unless_contested(at_work),
            Verdict::Contested { sns_message_id: "m1".into(), rivals: 2 }
        );
        let unknown = Rivals { sending: 0, unknown: 1 };
        assert!(
            matches!(link.unless_contested(unknown), Verdict::Ambiguous(ref c) if c.len() == 1 && c[0].sns_message_id == "m1")
        );
        assert_eq!(Verdict::NoMatch.unless_contested(at_work), Verdict::NoMatch);
    }

    #[test]
    fn an_sms_stamped_before_the_claim_by_more_than_the_skew_is_not_the_attempts() {
        let v = judge(
            &number(),
            window(),
            vec![found("1", "m1", "+14155550100", "2026-11-29 11:59:59.000")],
            &HashSet::new(),
        );
        assert_eq!(v, Verdict::NoMatch);
        let claims = Window::claims_that_could_send(at("2026-11-29T12:00:02Z"), Duration::from_secs(900));
        assert_eq!(claims, Some(Window { from: at("2026-11-29T11:45:02Z"), to: at("2026-11-29T12:00:02.250Z") }));
    }

    #[test]
    fn nothing_found_is_no_match_and_retries_back_off_to_an_hour() {
        assert_eq!(judge(&number(), window(), vec![], &HashSet::new()), Verdict::NoMatch);
        let now = at("2026-11-29T12:00:00Z");
        assert_eq!(next_attempt(0, now), now + chrono::Duration::minutes(1));
        assert_eq!(next_attempt(3, now), now + chrono::Duration::minutes(8));
        assert_eq!(next_attempt(30, now), now + chrono::Duration::minutes(60));
    }
}
