//! Carrier incidents: which carrier each number is on, how tocsin's SMS to each carrier are
//! doing while they are still in flight, when a carrier counts as degraded, and which alerts
//! caught in a degraded (or operator-held) carrier are escalated before their deadline.
//!
//! The incidents SMS alerting suffers most are one carrier slowing down: the messages arrive in
//! the end, so failure rates barely move, and only that carrier's share of the traffic is hit.
//! The signal is therefore taken per carrier and while the messages are in flight: of the SMS
//! accepted by SNS long enough ago to have arrived, how many have not.
//!
//! Pure: no AWS, no I/O, time passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::delivery::DeliveryRecord;
use super::state::State;
use super::{IdempotencyKey, PhoneNumber};

/// The slice of numbers whose carrier no delivery record has named yet.
pub const UNKNOWN: &str = "unknown";

/// Longest carrier name kept (SNS writes names like "Verizon Wireless"; anything longer is not a
/// carrier name and would only bloat a metric dimension).
const MAX_NAME: usize = 64;

/// A carrier's name as a slice key: SNS's `phoneCarrier`, trimmed; [`UNKNOWN`] when absent or
/// unusable.
pub fn slice_of(name: Option<&str>) -> String {
    match name.map(str::trim) {
        Some(n) if !n.is_empty() && n.len() <= MAX_NAME && !n.chars().any(char::is_control) => n.to_owned(),
        _ => UNKNOWN.to_owned(),
    }
}

/// The carrier a delivery record saw a number on: kept in the recipients registry so the next SMS
/// to that number can be sliced by carrier while it is in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarrierSeen {
    pub carrier: String,
    pub mcc: Option<String>,
    pub mnc: Option<String>,
    /// When the record was written (a later record wins; an older one never overwrites).
    pub at: DateTime<Utc>,
}

impl CarrierSeen {
    /// What `record` says about the number's carrier; `None` when it names none (a record without
    /// `phoneCarrier` is no evidence the carrier changed).
    pub fn from_record(record: &DeliveryRecord, at: DateTime<Utc>) -> Option<Self> {
        let carrier = slice_of(record.carrier.as_deref());
        (carrier != UNKNOWN).then(|| CarrierSeen { carrier, mcc: record.mcc.clone(), mnc: record.mnc.clone(), at })
    }

    /// Whether writing this sighting tells the registry anything beyond `written`, the number's
    /// sighting already written (and so kept, or outdone by a later one): another carrier or
    /// network, or the same one [`CARRIER_REWRITE_AFTER`] later — the kept item's retention counts
    /// from its sighting. An older sighting never does: the registry keeps the later one.
    pub fn is_news_after(&self, written: &CarrierSeen) -> bool {
        if self.at <= written.at {
            return false;
        }
        self.carrier != written.carrier
            || self.mcc != written.mcc
            || self.mnc != written.mnc
            || self.at >= written.at + CARRIER_REWRITE_AFTER
    }
}

/// How long a number's carrier, once written, is not written again while its delivery records
/// keep naming the same carrier and network. An on-call phone gets many alerts: one write a
/// number an hour (per status instance) instead of one a delivery record. The bound on staleness
/// too: a number that moves to another carrier and back within the hour may be kept on the
/// carrier it left until then.
pub const CARRIER_REWRITE_AFTER: chrono::Duration = chrono::Duration::hours(1);

/// One SMS tocsin had accepted by SNS recently (the ledger's in-flight index), in any state since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentSms {
    pub key: IdempotencyKey,
    pub recipient: PhoneNumber,
    pub accepted_at: DateTime<Utc>,
    pub state: State,
    pub escalated: bool,
}

impl SentSms {
    /// Accepted by SNS and no final delivery status yet.
    pub fn in_flight(&self) -> bool {
        matches!(self.state, State::Accepted | State::DelaySuspected)
    }
}

/// The thresholds of the carrier view. Fixed, with their reasons, rather than configured: they
/// describe what "degraded" means, and a stack that tunes them away pages no one.
#[derive(Debug, Clone)]
pub struct CarrierPolicy {
    /// An SMS not delivered this long after SNS accepted it is delayed (the stack's
    /// `DelaySuspectedAfter`: the same line the sweep's `delay_suspected` state draws).
    pub delayed_after: Duration,
    /// How far back the SMS judged for the delayed share were accepted (before `delayed_after`).
    pub window: Duration,
    /// At least this many delayed SMS before a carrier is degraded: never one slow message alone.
    pub min_delayed: usize,
    /// Delayed share (of the SMS old enough to have arrived) at or above which a carrier is
    /// degraded.
    pub degraded_share: f64,
    /// How far back the in-flight index is read (CloudWatch Metrics Insights alarms see 3 hours).
    pub lookback: Duration,
    /// An SMS in flight for less than this is never escalated early for a degraded carrier
    /// (a hold escalates at once): healthy carriers deliver nearly all SMS within a minute.
    pub min_age: Duration,
}

impl CarrierPolicy {
    pub fn new(delayed_after: Duration) -> Self {
        CarrierPolicy {
            delayed_after,
            // "14 of 15 SMS in the last 10 min": the same span as the delay line itself, at least.
            window: delayed_after.max(Duration::from_secs(600)),
            // Three: one or two slow messages happen on every healthy carrier (a phone off, out
            // of coverage); three at once to one carrier, making up half its traffic, do not.
            min_delayed: 3,
            degraded_share: 0.5,
            lookback: Duration::from_secs(3 * 3600),
            min_age: Duration::from_secs(120),
        }
    }
}

/// How one carrier stands, as the sweep measured it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CarrierHealth {
    pub carrier: String,
    /// tocsin SMS accepted within the lookback and not delivered (nor failed) yet.
    pub in_flight: usize,
    /// SMS accepted within the window that ended `delayed_after` ago: old enough to have arrived.
    pub judged: usize,
    /// Of `judged`, those still in flight.
    pub delayed: usize,
    /// In-flight SMS that crossed `delayed_after` in the last minute (delay-suspected entries per
    /// minute).
    pub newly_delayed: usize,
    /// The 95th percentile of the delayed SMS's ages (a lower bound on their latency), seconds.
    pub p95_delay_s: u64,
    /// The median of the delayed SMS's ages, seconds: the delay an alert in this carrier is
    /// expected to take at least.
    pub median_delay_s: u64,
    /// Degraded by either signal: tocsin's own SMS in flight, or every application's delivery
    /// records ([`super::carrier_traffic`], merged in by [`super::carrier_traffic::merge`]).
    pub degraded: bool,
    /// The traffic signal (every application's records): judged at all (a warm baseline), the
    /// records observed and expected over the span that decided, degraded by it, and its line.
    #[serde(default)]
    pub traffic_judged: bool,
    #[serde(default)]
    pub traffic_observed: u64,
    #[serde(default)]
    pub traffic_expected: f64,
    #[serde(default)]
    pub traffic_degraded: bool,
    #[serde(default)]
    pub traffic_summary: Option<String>,
}

impl CarrierHealth {
    /// Degraded by tocsin's own SMS in flight (whatever the traffic signal says).
    pub fn in_flight_degraded(&self, policy: &CarrierPolicy) -> bool {
        self.delayed >= policy.min_delayed && self.delayed_share() >= policy.degraded_share
    }

    /// `delayed / judged`, 0 when nothing was old enough to judge.
    pub fn delayed_share(&self) -> f64 {
        if self.judged == 0 { 0.0 } else { self.delayed as f64 / self.judged as f64 }
    }

    /// The one line on-call reads: "carrier X delayed: 14 of 15 SMS in the last 10 min not
    /// delivered; p95 41 min".
    pub fn summary(&self, policy: &CarrierPolicy) -> String {
        if !self.in_flight_degraded(policy)
            && let Some(traffic) = &self.traffic_summary
        {
            return traffic.clone();
        }
        format!(
            "carrier {} delayed: {} of {} SMS in the last {} min not delivered; p95 {} min",
            self.carrier,
            self.delayed,
            self.judged,
            policy.window.as_secs() / 60,
            self.p95_delay_s.div_ceil(60)
        )
    }
}

fn secs(d: chrono::Duration) -> u64 {
    u64::try_from(d.num_seconds()).unwrap_or(0)
}

fn chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX).min(chrono::Duration::days(36_500))
}

/// The nearest-rank percentile `p` (0..=100) of sorted `values`.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * p).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The health of every carrier tocsin sent to in the lookback, at `now`. `carrier_of` names the
/// carrier of each SMS (the recipients registry's last-seen carrier; [`UNKNOWN`] when none).
pub fn assess<'a>(
    sent: impl IntoIterator<Item = (&'a SentSms, String)>,
    now: DateTime<Utc>,
    policy: &CarrierPolicy,
) -> BTreeMap<String, CarrierHealth> {
    let delayed_after = chrono(policy.delayed_after);
    let judged_from = now - delayed_after - chrono(policy.window);
    let judged_to = now - delayed_after;
    let minute_ago = now - chrono::Duration::minutes(1);
    let mut ages: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut out: BTreeMap<String, CarrierHealth> = BTreeMap::new();
    for (sms, carrier) in sent {
        let h = out.entry(carrier.clone()).or_insert_with(|| CarrierHealth { carrier, ..Default::default() });
        let in_flight = sms.in_flight();
        h.in_flight += usize::from(in_flight);
        if sms.accepted_at >= judged_from && sms.accepted_at <= judged_to {
            h.judged += 1;
            if in_flight {
                h.delayed += 1;
                ages.entry(h.carrier.clone()).or_default().push(secs(now - sms.accepted_at));
            }
        }
        let crossed = sms.accepted_at + delayed_after;
        if in_flight && crossed > minute_ago && crossed <= now {
            h.newly_delayed += 1;
        }
    }
    for (carrier, mut a) in ages {
        a.sort_unstable();
        if let Some(h) = out.get_mut(&carrier) {
            h.p95_delay_s = percentile(&a, 95);
            h.median_delay_s = percentile(&a, 50);
        }
    }
    for h in out.values_mut() {
        h.degraded = h.in_flight_degraded(policy);
    }
    out
}

/// What the carrier view says overall: the classification the runbook is organised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    Healthy,
    /// One carrier (or a few, not most) slow: tell the people on it, do not resend.
    OneCarrierSlow,
    /// Every carrier tocsin judged is slow: the delay is upstream of the carriers (SNS, the
    /// origination number, the account) — or, with no delivery records at all, the logs' path.
    AllCarriersSlow,
}

/// One carrier slow, all slow, or healthy. "All" needs at least two carriers judged: with one,
/// the stack cannot tell a carrier from everything.
pub fn classify(health: &BTreeMap<String, CarrierHealth>) -> Classification {
    let judged: Vec<&CarrierHealth> =
        health.values().filter(|h| (h.judged > 0 || h.traffic_judged) && h.carrier != UNKNOWN).collect();
    let degraded = health.values().filter(|h| h.degraded).count();
    match degraded {
        0 => Classification::Healthy,
        _ if judged.len() >= 2 && judged.iter().all(|h| h.degraded) => Classification::AllCarriersSlow,
        _ => Classification::OneCarrierSlow,
    }
}

/// An operator's hold on a carrier: until `until`, every new alert to its numbers escalates at
/// once (the non-SMS paging path) while the SMS still goes out — the manual failover a carrier
/// incident's runbook recommends over automatic rerouting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarrierHold {
    pub carrier: String,
    pub operator: String,
    pub reason: String,
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
}

impl CarrierHold {
    pub fn active_at(&self, at: DateTime<Utc>) -> bool {
        self.since <= at && at < self.until
    }
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl CarrierHold {
    /// The hold's line in the carrier's audit trail.
    pub fn audit_line(&self) -> String {
        format!("{} hold by {} until {}: {}", stamp(self.since), self.operator, stamp(self.until), self.reason)
    }
}

/// A release's line in the carrier's audit trail.
pub fn release_line(operator: &str, reason: &str, at: DateTime<Utc>) -> String {
    format!("{} released by {operator}: {reason}", stamp(at))
}

/// The longest hold an operator may set: a hold is a stop-gap for an incident, not a setting.
pub const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);

/// Why an in-flight alert is escalated before its deadline, if it is: its carrier is held by an
/// operator (alerts accepted since the hold began), or degraded with a delay that puts the alert
/// past its deadline. `None` for an alert already escalated or no longer in flight — so never
/// twice, and never for a healthy carrier's slow message.
pub fn early_escalation(
    sms: &SentSms,
    deadline: DateTime<Utc>,
    health: Option<&CarrierHealth>,
    hold: Option<&CarrierHold>,
    now: DateTime<Utc>,
    policy: &CarrierPolicy,
) -> Option<String> {
    if sms.escalated || !sms.in_flight() || now >= deadline {
        // At or past the deadline the sweep's own escalation takes it.
        return None;
    }
    if let Some(hold) = hold.filter(|h| h.active_at(now) && sms.accepted_at >= h.since) {
        return Some(format!(
            "carrier {} on hold by {} until {}: {}; the SMS was sent and may still arrive",
            hold.carrier,
            hold.operator,
            hold.until.format("%H:%M UTC"),
            hold.reason
        ));
    }
    let h = health.filter(|h| h.degraded)?;
    if now - sms.accepted_at < chrono(policy.min_age) {
        // Just sent: a carrier that has recovered (its backlog still draining) delivers it in
        // seconds. Waiting this long first keeps a healthy SMS from being escalated early.
        return None;
    }
    let expected = sms.accepted_at + chrono::Duration::seconds(i64::try_from(h.median_delay_s).unwrap_or(i64::MAX));
    (expected > deadline).then(|| {
        format!(
            "{}; at that delay this SMS arrives after its deadline {} (sent, may still arrive)",
            h.summary(policy),
            deadline.format("%H:%M UTC")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(carrier: &str, mnc: &str, at: DateTime<Utc>) -> CarrierSeen {
        CarrierSeen { carrier: carrier.into(), mcc: Some("310".into()), mnc: Some(mnc.into()), at }
    }

    #[test]
    fn the_same_carrier_again_within_the_hour_is_no_news() {
        let written = seen("Verizon Wireless", "004", t0());
        let again = seen("Verizon Wireless", "004", t0() + chrono::Duration::minutes(59));
        assert!(!again.is_news_after(&written));
    }

    #[test]
    fn the_same_carrier_an_hour_later_is_written_again() {
        let written = seen("Verizon Wireless", "004", t0());
        assert!(seen("Verizon Wireless", "004", t0() + CARRIER_REWRITE_AFTER).is_news_after(&written));
    }

    #[test]
    fn another_carrier_or_network_is_news_at_once() {
        let written = seen("Verizon Wireless", "004", t0());
        let later = t0() + chrono::Duration::seconds(1);
        assert!(seen("T-Mobile USA", "004", later).is_news_after(&written));
        assert!(seen("Verizon Wireless", "012", later).is_news_after(&written));
        let unnamed = CarrierSeen { mnc: None, ..seen("Verizon Wireless", "004", later) };
        assert!(unnamed.is_news_after(&written));
    }

    #[test]
    fn an_older_sighting_is_never_news() {
        let written = seen("Verizon Wireless", "004", t0());
        assert!(!seen("T-Mobile USA", "260", t0() - chrono::Duration::hours(3)).is_news_after(&written));
        assert!(!seen("T-Mobile USA", "260", t0()).is_news_after(&written));
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-09-23T12:00:00Z").map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    fn key(n: usize) -> IdempotencyKey {
        IdempotencyKey::derive(
            &crate::domain::producer::ProducerName::parse("monitoring").expect("producer"),
            &format!("e{n}"),
            &super::super::template::TemplateRef { name: "t".into(), version: 1 },
        )
    }

    fn sms(n: usize, accepted_min_ago: i64, state: State) -> SentSms {
        SentSms {
            key: key(n),
            recipient: PhoneNumber::parse("+14155550100").expect("valid"),
            accepted_at: t0() - chrono::Duration::minutes(accepted_min_ago),
            state,
            escalated: false,
        }
    }

    fn policy() -> CarrierPolicy {
        CarrierPolicy::new(Duration::from_secs(600))
    }

    fn health_of(sent: &[(SentSms, &str)]) -> BTreeMap<String, CarrierHealth> {
        assess(sent.iter().map(|(s, c)| (s, (*c).to_owned())), t0(), &policy())
    }

    #[test]
    fn a_carrier_with_most_of_its_old_enough_sms_undelivered_is_degraded() {
        let mut sent: Vec<(SentSms, &str)> =
            (0..14).map(|n| (sms(n, 11 + (n % 9) as i64, State::DelaySuspected), "SlowTel")).collect();
        sent.push((sms(14, 15, State::Delivered), "SlowTel"));
        sent.extend((20..30).map(|n| (sms(n, 12, State::Delivered), "FastTel")));
        let h = health_of(&sent);
        let slow = &h["SlowTel"];
        assert!(slow.degraded);
        assert_eq!((slow.delayed, slow.judged, slow.in_flight), (14, 15, 14));
        assert_eq!(
            slow.summary(&policy()),
            "carrier SlowTel delayed: 14 of 15 SMS in the last 10 min not delivered; p95 19 min"
        );
        assert!(!h["FastTel"].degraded);
        assert_eq!(classify(&h), Classification::OneCarrierSlow);
    }

    #[test]
    fn one_or_two_slow_messages_never_degrade_a_carrier() {
        let sent = vec![(sms(0, 12, State::DelaySuspected), "Tel"), (sms(1, 13, State::DelaySuspected), "Tel")];
        let h = health_of(&sent);
        assert!(!h["Tel"].degraded, "two of two delayed is still two messages");
        assert_eq!(classify(&h), Classification::Healthy);
    }

    #[test]
    fn sms_younger_than_the_delay_line_are_in_flight_but_not_judged() {
        let sent: Vec<_> = (0..5).map(|n| (sms(n, 3, State::Accepted), "Tel")).collect();
        let h = &health_of(&sent)["Tel"];
        assert_eq!((h.in_flight, h.judged, h.delayed, h.degraded), (5, 0, 0, false));
    }

    #[test]
    fn sms_crossing_the_delay_line_in_the_last_minute_are_counted_once() {
        let mut just = sms(0, 10, State::Accepted);
        just.accepted_at -= chrono::Duration::seconds(30);
        let sent = vec![(just, "Tel"), (sms(1, 12, State::DelaySuspected), "Tel")];
        assert_eq!(health_of(&sent)["Tel"].newly_delayed, 1);
    }

    #[test]
    fn every_carrier_slow_is_told_apart_from_one() {
        let mut sent: Vec<(SentSms, &str)> = (0..4).map(|n| (sms(n, 12, State::DelaySuspected), "A")).collect();
        sent.extend((10..14).map(|n| (sms(n, 12, State::DelaySuspected), "B")));
        assert_eq!(classify(&health_of(&sent)), Classification::AllCarriersSlow);
    }

    #[test]
    fn an_alert_in_a_degraded_carrier_that_cannot_make_its_deadline_is_escalated_early_once() {
        let sent: Vec<(SentSms, &str)> = (0..6).map(|n| (sms(n, 20, State::DelaySuspected), "SlowTel")).collect();
        let h = health_of(&sent);
        let mut alert = sms(99, 2, State::Accepted);
        let tight = alert.accepted_at + chrono::Duration::minutes(15);
        let reason = early_escalation(&alert, tight, h.get("SlowTel"), None, t0(), &policy()).expect("early");
        assert!(reason.starts_with("carrier SlowTel delayed: 6 of 6 SMS"), "{reason}");
        // A deadline the carrier's current delay still meets: no early escalation.
        let loose = alert.accepted_at + chrono::Duration::minutes(60);
        assert_eq!(early_escalation(&alert, loose, h.get("SlowTel"), None, t0(), &policy()), None);
        // Once escalated, never again.
        alert.escalated = true;
        assert_eq!(early_escalation(&alert, tight, h.get("SlowTel"), None, t0(), &policy()), None);
    }

    #[test]
    fn an_sms_sent_in_the_last_two_minutes_is_not_escalated_early_for_a_degraded_carrier() {
        let sent: Vec<(SentSms, &str)> = (0..6).map(|n| (sms(n, 20, State::DelaySuspected), "SlowTel")).collect();
        let h = health_of(&sent);
        let fresh = sms(99, 1, State::Accepted);
        let tight = fresh.accepted_at + chrono::Duration::minutes(5);
        assert_eq!(early_escalation(&fresh, tight, h.get("SlowTel"), None, t0(), &policy()), None);
        let two = sms(98, 2, State::Accepted);
        let tight = two.accepted_at + chrono::Duration::minutes(5);
        assert!(early_escalation(&two, tight, h.get("SlowTel"), None, t0(), &policy()).is_some());
    }

    #[test]
    fn a_slow_message_in_a_healthy_carrier_is_left_to_its_deadline() {
        let sent = vec![(sms(0, 30, State::DelaySuspected), "Tel")];
        let h = health_of(&sent);
        let alert = &sent[0].0;
        assert_eq!(
            early_escalation(alert, t0() + chrono::Duration::minutes(1), h.get("Tel"), None, t0(), &policy()),
            None
        );
    }

    #[test]
    fn a_held_carrier_escalates_alerts_sent_since_the_hold_and_only_while_it_lasts() {
        let hold = CarrierHold {
            carrier: "Tel".into(),
            operator: "ana".into(),
            reason: "vendor incident 4711".into(),
            since: t0() - chrono::Duration::minutes(5),
            until: t0() + chrono::Duration::hours(1),
        };
        let deadline = t0() + chrono::Duration::hours(2);
        let new = sms(0, 1, State::Accepted);
        let reason = early_escalation(&new, deadline, None, Some(&hold), t0(), &policy()).expect("held");
        assert!(reason.contains("carrier Tel on hold by ana") && reason.contains("vendor incident 4711"), "{reason}");
        let before_hold = sms(1, 10, State::Accepted);
        assert_eq!(early_escalation(&before_hold, deadline, None, Some(&hold), t0(), &policy()), None);
        let later = t0() + chrono::Duration::hours(1);
        assert_eq!(early_escalation(&new, deadline, None, Some(&hold), later, &policy()), None, "hold over");
    }

    #[test]
    fn an_unusable_carrier_name_is_the_unknown_slice() {
        assert_eq!(slice_of(Some(" Verizon Wireless ")), "Verizon Wireless");
        assert_eq!(slice_of(Some("")), UNKNOWN);
        assert_eq!(slice_of(None), UNKNOWN);
        assert_eq!(slice_of(Some(&"x".repeat(65))), UNKNOWN);
    }
}
