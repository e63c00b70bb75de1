//! Reconciliation: settling an intent whose publish outcome is unknown from the delivery-status
//! logs — **by what ties a record to it, never by guess**. An SNS delivery record carries no text
//! and no tag of tocsin's: the only thing that makes it an alert's is the message id SNS answered
//! for that alert's publish (the message index, or a digest sibling that recorded the answer). An
//! on-call phone also receives other senders' SMS — MFA codes, other applications in the account,
//! a second tocsin stack — so a record to the same number in the same minutes is as likely theirs.
//!
//! The attempt's own SMS found → link it (its records become observations as usual). Records to
//! the number in the attempt's window that nothing ties to it → **unattributed**: nothing changes,
//! they are recorded on the intent for the person its escalation reaches (an operator who knows
//! may link one, audited: `tocsin reconcile link`), and the search goes on for its own. None yet →
//! try again later with backoff (logs can take long to appear), for as long as a delivery record
//! may still come: the 73-hour receipt window. Either way an unknown outcome nothing settles is
//! escalated at its deadline.

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
    /// The attempt's own SMS: its message id is tied to this intent. `records` are its delivery
    /// records, oldest first.
    Link {
        sns_message_id: String,
        records: Vec<Found>,
    },
    /// Records of SMS to the number in the attempt's window that nothing ties to this intent:
    /// change nothing, keep them for a human, search on.
    Unattributed(Vec<Candidate>),
    NoMatch,
}

fn record_time(f: &Found) -> Option<DateTime<Utc>> {
    f.record.timestamp.or_else(|| DateTime::from_timestamp_millis(f.timestamp_ms))
}

/// Judges what the logs say about one attempt to `recipient` in `window`. `own` holds the message
/// ids tied to this intent (the message index names it); `linked_elsewhere` those tied to other
/// intents (the same number alerted twice). Only an own message is linked; the rest, to the
/// recipient and in the window, are candidates a human may look at.
pub fn judge(
    recipient: &PhoneNumber,
    window: Window,
    found: Vec<Found>,
    own: &HashSet<String>,
    linked_elsewhere: &HashSet<String>,
) -> Verdict {
    let mut mine: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    let mut unattributed: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    for f in found {
        if own.contains(&f.record.message_id) {
            mine.entry(f.record.message_id.clone()).or_default().push(f);
            continue;
        }
        let to_recipient = f.record.destination.as_deref() == Some(recipient.expose());
        if to_recipient && window.holds(&f) && !linked_elsewhere.contains(&f.record.message_id) {
            unattributed.entry(f.record.message_id.clone()).or_default().push(f);
        }
    }
    // The earliest own message (an attempt has one SMS; a second would be an operator's, linked
    // at its own attempt).
    let first_own = mine.into_iter().min_by_key(|(_, records)| records.iter().filter_map(record_time).min());
    if let Some((sns_message_id, mut records)) = first_own {
        records.sort_by_key(|f| (f.timestamp_ms, f.log_event_id.clone()));
        return Verdict::Link { sns_message_id, records };
    }
    if unattributed.is_empty() {
        return Verdict::NoMatch;
    }
    Verdict::Unattributed(
        unattributed
            .into_iter()
            .map(|(id, records)| Candidate {
                sns_message_id: id,
                first_seen: records.iter().filter_map(record_time).min().unwrap_or_default(),
                statuses: records.iter().map(|f| f.record.status.as_str().to_owned()).collect(),
            })
            .collect(),
    )
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
    /// Left to a human, searched no more: written by releases that judged records by number and
    /// time (no longer written; still read, so such an intent stays with its human).
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

    fn none() -> HashSet<String> {
        HashSet::new()
    }

    fn ids(of: &[&str]) -> HashSet<String> {
        of.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn one_message_to_the_number_in_the_window_that_nothing_ties_to_the_alert_is_never_linked() {
        let v = judge(
            &number(),
            window(),
            vec![found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000")],
            &none(),
            &none(),
        );
        assert!(matches!(v, Verdict::Unattributed(ref c) if c.len() == 1 && c[0].sns_message_id == "m1"), "{v:?}");
    }

    #[test]
    fn the_message_the_index_ties_to_the_alert_is_linked_whatever_else_went_to_the_number() {
        let v = judge(
            &number(),
            window(),
            vec![
                found("1", "m1", "+14155550100", "2026-11-29 12:00:02.000"),
                found("2", "m2", "+14155550100", "2026-11-29 12:00:03.000"),
                found("3", "m2", "+14155550100", "2026-11-29 12:00:09.000"),
            ],
            &ids(&["m2"]),
            &none(),
        );
        assert!(
            matches!(v, Verdict::Link { ref sns_message_id, ref records } if sns_message_id == "m2" && records.len() == 2),
            "{v:?}"
        );
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
            &none(),
            &none(),
        );
        assert!(matches!(v, Verdict::Unattributed(ref c) if c.len() == 1 && c[0].statuses.len() == 2), "{v:?}");
    }

    #[test]
    fn messages_linked_to_other_intents_other_numbers_or_other_times_are_no_candidates() {
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
            &none(),
            &ids(&["m2"]),
        );
        assert!(matches!(v, Verdict::Unattributed(ref c) if c.len() == 1 && c[0].sns_message_id == "m1"), "{v:?}");
    }

    #[test]
    fn an_sms_stamped_before_the_claim_by_more_than_the_skew_is_no_candidate() {
        let v = judge(
            &number(),
            window(),
            vec![found("1", "m1", "+14155550100", "2026-11-29 11:59:59.000")],
            &none(),
            &none(),
        );
        assert_eq!(v, Verdict::NoMatch);
    }

    #[test]
    fn nothing_found_is_no_match_and_retries_back_off_to_an_hour() {
        assert_eq!(judge(&number(), window(), vec![], &none(), &none()), Verdict::NoMatch);
        let now = at("2026-11-29T12:00:00Z");
        assert_eq!(next_attempt(0, now), now + chrono::Duration::minutes(1));
        assert_eq!(next_attempt(3, now), now + chrono::Duration::minutes(8));
        assert_eq!(next_attempt(30, now), now + chrono::Duration::minutes(60));
    }
}
