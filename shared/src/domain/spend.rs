//! The stack's SMS spend breaker: at most `SmsPartsPerHour` SMS parts in any UTC hour, every
//! producer, recipient and alert together — a ceiling of the deployment's own, below the
//! account's monthly spend limit (which, once reached, stops every SMS of the account, on-call's
//! included).
//!
//! Every send counts its parts against the hour before it is published (an alert, a digest). The
//! send that would pass the ceiling **opens the breaker** and is not published; from then on
//! nothing is sent: each alert the sender picks up is withheld (`suppressed`, so the sweep
//! escalates it through the escalation queue and its alarms — a channel that is not tocsin's
//! SMS). The next hour does not close it: SMS pumping does not stop on the hour. Only an operator
//! does (`tocsin breaker resume --reason`, break-glass with MFA, audited), which also starts the
//! hour's count again.
//!
//! Counted before the publish, never after: a publish that fails or whose outcome is unknown has
//! still counted, so the meter may read high, never low.

use chrono::{DateTime, DurationRound, Utc};
use serde::{Deserialize, Serialize};

/// The ceiling (`TOCSIN_SMS_PARTS_PER_HOUR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendCeiling {
    pub parts_per_hour: u32,
}

/// The UTC hour `now` falls in: the meter's window.
pub fn hour_of(now: DateTime<Utc>) -> DateTime<Utc> {
    now.duration_trunc(chrono::Duration::hours(1)).unwrap_or(now)
}

/// An open breaker: since when, and what the hour had counted when it opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenBreaker {
    pub opened_at: DateTime<Utc>,
    /// The parts counted in the hour it opened in (the send that opened it not among them).
    pub hour_parts: u32,
    /// The parts of the send that would have passed the ceiling.
    pub refused_parts: u32,
}

/// What the meter answered for one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spend {
    /// Counted: publish.
    Counted,
    /// Not counted, and not to be published: the breaker is open. `opened_here`: this send is the
    /// one that opened it.
    Withheld { breaker: OpenBreaker, opened_here: bool },
}

impl Spend {
    /// Why an alert was not sent, as its observation and escalation say.
    pub fn withheld_reason(breaker: &OpenBreaker, ceiling: SpendCeiling) -> String {
        format!(
            "the stack's SMS breaker is open since {} ({} parts counted in that hour; the ceiling is {} \
             parts per hour, SmsPartsPerHour): nothing is sent until an operator resumes (tocsin breaker resume)",
            breaker.opened_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            breaker.hour_parts,
            ceiling.parts_per_hour
        )
    }
}

/// What the meter holds now (for operators: `tocsin breaker`, `tocsin doctor`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterReading {
    /// The hour the count is for; `None`: nothing counted yet.
    pub hour: Option<DateTime<Utc>>,
    pub parts: u32,
    pub open: Option<OpenBreaker>,
}

impl MeterReading {
    /// The parts counted in the hour of `now` (0 once that hour has passed).
    pub fn parts_in_hour_of(&self, now: DateTime<Utc>) -> u32 {
        if self.hour == Some(hour_of(now)) { self.parts } else { 0 }
    }
}

/// What an operator's resume records beside the meter (who, why, when, and what it closed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerEvent {
    pub at: DateTime<Utc>,
    pub operator: String,
    pub reason: String,
    /// The breaker this resume closed.
    pub closed: OpenBreaker,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_meter_counts_per_utc_hour() {
        let t = Utc.with_ymd_and_hms(2026, 12, 3, 14, 59, 59).single().expect("instant");
        assert_eq!(hour_of(t), Utc.with_ymd_and_hms(2026, 12, 3, 14, 0, 0).single().expect("instant"));
        let reading = MeterReading { hour: Some(hour_of(t)), parts: 7, open: None };
        assert_eq!(reading.parts_in_hour_of(t), 7);
        assert_eq!(reading.parts_in_hour_of(t + chrono::Duration::seconds(1)), 0, "a new hour starts at zero");
    }

    #[test]
    fn a_withheld_alert_says_the_breaker_is_open_and_who_closes_it() {
        let opened_at = Utc.with_ymd_and_hms(2026, 12, 3, 14, 10, 0).single().expect("instant");
        let reason = Spend::withheld_reason(
            &OpenBreaker { opened_at, hour_parts: 998, refused_parts: 3 },
            SpendCeiling { parts_per_hour: 1000 },
        );
        assert!(reason.contains("breaker is open since 2026-12-03T14:10:00Z"), "{reason}");
        assert!(reason.contains("998 parts") && reason.contains("1000 parts per hour"), "{reason}");
        assert!(reason.contains("tocsin breaker resume"), "{reason}");
    }
}
