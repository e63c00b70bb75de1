//! The carrier view's ports: each number's last-seen carrier (the recipients registry), the SMS
//! tocsin had accepted recently (the ledger's in-flight index), operators' carrier holds, and
//! every application's delivery records tallied per carrier with their rolling baseline.

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::PortResult;
use crate::domain::PhoneNumber;
use crate::domain::carrier::{CarrierHold, CarrierSeen, SentSms};
use crate::domain::carrier_traffic::{Baseline, CountryTallies, Minute};

/// The carrier each recipient was last seen on, from its delivery records.
pub trait CarrierBook: Send + Sync {
    /// Keeps `seen` as `recipient`'s carrier unless a later record is already kept (idempotent:
    /// a redelivered record writes the same facts, an older one changes nothing).
    fn record_carrier(
        &self,
        recipient: &PhoneNumber,
        seen: &CarrierSeen,
    ) -> impl Future<Output = PortResult<()>> + Send;
    /// The kept carriers of `recipients` (numbers never seen are absent: the unknown slice),
    /// by E.164 number.
    fn carriers_of(
        &self,
        recipients: &[PhoneNumber],
    ) -> impl Future<Output = PortResult<HashMap<String, CarrierSeen>>> + Send;
}

/// The SMS tocsin had accepted by SNS since an instant, whatever their state now: what the sweep
/// slices by carrier. Eventually consistent (an index).
pub trait RecentSends: Send + Sync {
    /// At most `limit` SMS accepted at or after `since`, newest first.
    fn accepted_since(
        &self,
        since: DateTime<Utc>,
        limit: usize,
    ) -> impl Future<Output = PortResult<Vec<SentSms>>> + Send;
}

/// How a release ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    Released(CarrierHold),
    /// No hold on that carrier was active.
    NotHeld,
}

/// Operators' holds on carriers, with their audit trail (who, why, when, until when).
pub trait CarrierHolds: Send + Sync {
    /// The holds active at `at`.
    fn active_holds(&self, at: DateTime<Utc>) -> impl Future<Output = PortResult<Vec<CarrierHold>>> + Send;
    /// Sets (or replaces) the hold on `hold.carrier`, recording it in the audit trail.
    fn hold(&self, hold: &CarrierHold) -> impl Future<Output = PortResult<()>> + Send;
    /// Ends the hold on `carrier` at `at`, recording who and why.
    fn release(
        &self,
        carrier: &str,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> impl Future<Output = PortResult<Released>> + Send;
    /// The audit trail of `carrier`'s holds, oldest first: one line per hold and release.
    fn hold_history(&self, carrier: &str) -> impl Future<Output = PortResult<Vec<String>>> + Send;
}

/// How saving the traffic baseline ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineSaved {
    Saved,
    /// Another sweep saved a baseline since this one was read: nothing written (each minute is
    /// folded once).
    Stale,
}

/// Every application's delivery records, tallied per minute, carrier and country (counts and
/// dwell times, never a number or a text), and the rolling per-carrier baseline folded from them
/// ([`crate::domain::carrier_traffic`]).
pub trait CarrierTraffic: Send + Sync {
    /// Adds `tallies` to the stored ones, one atomic increment per (minute, carrier, country).
    /// Not idempotent: a batch delivered twice counts twice (the detector's ratios tolerate it).
    fn add_tallies(&self, tallies: &CountryTallies) -> impl Future<Output = PortResult<()>> + Send;
    /// The tallies of the minutes `from..=to`.
    fn tallies(&self, from: Minute, to: Minute) -> impl Future<Output = PortResult<CountryTallies>> + Send;
    /// The baseline as last saved (an empty one before the first save).
    fn baseline(&self) -> impl Future<Output = PortResult<Baseline>> + Send;
    /// Saves `next` if the stored baseline is still the one folded through `read_through` (what
    /// [`Self::baseline`] returned): two sweeps never fold a minute twice.
    fn save_baseline(
        &self,
        next: &Baseline,
        read_through: Option<Minute>,
    ) -> impl Future<Output = PortResult<BaselineSaved>> + Send;
}
