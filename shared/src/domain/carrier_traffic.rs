//! Carrier health from every delivery record the account produces: tocsin's own and every other
//! application's (the delivery-status log groups are the account's). A low-volume alerting stack
//! sends a carrier a few SMS an hour — far too few to see it slow down within minutes — but the
//! account's other traffic to that carrier (MFA codes, notifications) is often hundreds an hour.
//!
//! What is kept: per minute and carrier, **counts and dwell times only** ([`Tally`]) — never a
//! number, a message id or a text. From the closed minutes a rolling per-carrier [`Baseline`]
//! (exponentially weighted: the carrier's records per minute, all carriers' records per minute,
//! its slow records per minute) is folded, one minute once (`through`), skipping a carrier's
//! minutes while it is judged degraded so an incident never becomes its own baseline.
//!
//! The detector ([`judge`]) says a carrier is degraded when, over its last few closed minutes:
//! - **silent**: it delivered far fewer records than expected — at most a fifth — and so few that
//!   chance explains it less than once in ten million (Poisson). The expectation is the lower of
//!   two: its baseline share of the *other carriers'* records in the same minutes (they are the
//!   control for daily cycles), and its own baseline rate (so another carrier's burst does not
//!   make it look silent);
//! - **slow**: at least [`TrafficPolicy::min_slow`] of its records took longer than the delay
//!   line to deliver, at least a fifth of its records and five times its baseline slow share;
//! - **all silent**: every carrier together delivered at most a fifth of the baseline rate (with
//!   the same statistical floor): every carrier with a baseline is degraded, which the carrier
//!   view classifies as "all carriers slow" (SNS, the account, or the logs' path itself).
//!
//! Never one slow message alone: both signals need several records' worth of evidence.
//!
//! Traffic also changes for good — an application stops sending through a carrier, a country's
//! volume steps down, the account's traffic falls — and at first that looks like silence. A
//! silence judged for [`TrafficPolicy::relearn_after`] (3 hours) is taken for the traffic's new
//! shape: the baseline folds that carrier's minutes again ([`held_out`]), its fast rate follows
//! within about half an hour, and the verdict clears. A real outage that long has paged on-call
//! hours before; tocsin's own SMS in flight to the carrier still mark it degraded while they
//! wait (the in-flight view, `carrier::assess`). A slow verdict is never learnt, nor a silence
//! with late records coming in (a carrier delivering only late holds SMS): a new shape of the
//! traffic does not make SMS late.
//!
//! Pure: no AWS, no I/O, time passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::carrier::{CarrierHealth, UNKNOWN, slice_of};
use super::delivery::{DeliveryRecord, DeliveryStatus, country_of_mcc};

/// Minutes since the Unix epoch: the tallies' time key.
pub type Minute = i64;

/// The minute `at` falls in.
pub fn minute_of(at: DateTime<Utc>) -> Minute {
    at.timestamp().div_euclid(60)
}

/// When `minute` starts.
pub fn start_of(minute: Minute) -> DateTime<Utc> {
    DateTime::from_timestamp(minute.saturating_mul(60), 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// One carrier's delivery records in one minute (the minute SNS wrote them): counts and dwell
/// times, nothing that names a person or a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tally {
    pub records: u64,
    pub delivered: u64,
    pub failed: u64,
    /// Records whose dwell time (SNS accepted → carrier's receipt) reached the delay line.
    pub slow: u64,
    /// Sum of the dwell times of the records that carried one, ms.
    pub dwell_ms: u64,
    /// Sum of the slow records' dwell times, ms.
    pub slow_dwell_ms: u64,
    /// Of `records`, those of alerts and digests a tocsin stack sent: this one's (known by the
    /// context an event carries or by the message index) and another's whose events name it. Alert
    /// traffic comes in storms that stop with the incident that raised them, so it never sets what
    /// a carrier is expected to deliver ([`Self::others_on_time`]): the in-flight signal judges
    /// this stack's own SMS, knowing each one sent.
    #[serde(default)]
    pub tocsin: u64,
    /// Of `slow`, a tocsin stack's.
    #[serde(default)]
    pub tocsin_slow: u64,
}

/// Who sent the SMS a record is of, as far as the status function can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A tocsin stack: the record names an alert or digest in its context, or its message id is
    /// in this stack's index.
    Tocsin,
    /// Another application, or not known yet (a young SNS record, another stack's SNS record).
    Other,
}

impl Tally {
    /// Records under the delay line.
    pub fn on_time(&self) -> u64 {
        self.records.saturating_sub(self.slow)
    }

    /// Other applications' records: tocsin's left out.
    pub fn others(&self) -> u64 {
        self.records.saturating_sub(self.tocsin)
    }

    /// Other applications' slow records.
    pub fn others_slow(&self) -> u64 {
        self.slow.saturating_sub(self.tocsin_slow)
    }

    /// Other applications' records under the delay line: what a silence is judged on. A storm of
    /// alerts to one carrier's numbers, then none, is the incident's doing, not the carrier's.
    pub fn others_on_time(&self) -> u64 {
        self.others().saturating_sub(self.others_slow())
    }

    pub fn add(&mut self, o: &Tally) {
        self.records += o.records;
        self.tocsin += o.tocsin;
        self.tocsin_slow += o.tocsin_slow;
        self.delivered += o.delivered;
        self.failed += o.failed;
        self.slow += o.slow;
        self.dwell_ms = self.dwell_ms.saturating_add(o.dwell_ms);
        self.slow_dwell_ms = self.slow_dwell_ms.saturating_add(o.slow_dwell_ms);
    }
}

/// Tallies by (minute, carrier): what the detector judges.
pub type Tallies = BTreeMap<(Minute, String), Tally>;

/// Tallies by (minute, carrier, country): what is stored. One carrier name can be several
/// networks (a group's operators in different countries), and an incident is often one country's:
/// the country is kept beside the carrier so the view can say where, while the detector judges
/// each carrier's sum ([`per_carrier`]).
pub type CountryTallies = BTreeMap<(Minute, String, String), Tally>;

/// The country a record was delivered in, from its mobile country code: ISO 3166 where the MCC
/// is known ([`country_of_mcc`]), the MCC itself where not, [`UNKNOWN`] when the record carries
/// none or one that is no MCC (three digits).
pub fn country_slice(mcc: Option<&str>) -> String {
    match mcc.map(str::trim) {
        Some(m) if m.len() == 3 && m.bytes().all(|b| b.is_ascii_digit()) => country_of_mcc(m).to_owned(),
        _ => UNKNOWN.to_owned(),
    }
}

/// The detector's view: each carrier's tallies summed over its countries.
pub fn per_carrier(tallies: &CountryTallies) -> Tallies {
    let mut out = Tallies::new();
    for ((minute, carrier, _), t) in tallies {
        out.entry((*minute, carrier.clone())).or_default().add(t);
    }
    out
}

/// Each carrier's countries over all the minutes of `tallies`, busiest first.
pub fn countries_of(tallies: &CountryTallies) -> BTreeMap<String, Vec<(String, Tally)>> {
    let mut sums: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for ((_, carrier, country), t) in tallies {
        sums.entry((carrier.clone(), country.clone())).or_default().add(t);
    }
    let mut out: BTreeMap<String, Vec<(String, Tally)>> = BTreeMap::new();
    for ((carrier, country), t) in sums {
        out.entry(carrier).or_default().push((country, t));
    }
    for countries in out.values_mut() {
        countries.sort_by(|a, b| b.1.records.cmp(&a.1.records).then_with(|| a.0.cmp(&b.0)));
    }
    out
}

/// The traffic detector's thresholds. Fixed, with their reasons (as [`super::carrier::CarrierPolicy`]):
/// they say what "degraded" means.
#[derive(Debug, Clone)]
pub struct TrafficPolicy {
    /// A record whose dwell reached this is slow (the stack's `DelaySuspectedAfter`).
    pub slow_after: Duration,
    /// The most recent closed minutes judged: a silence is looked for over the last 1, 2, … of
    /// them, so a busy carrier is judged after one silent minute and a quiet one over five.
    pub window_minutes: i64,
    /// A minute is closed this long after it ended: delivery records reach the status function
    /// through a CloudWatch Logs subscription within seconds of SNS writing them.
    pub settle: Duration,
    /// Observed at most expected / this is silent (and slow at least this × the baseline share).
    pub ratio: f64,
    /// The chance that a healthy carrier shows so few records, below which silence is believed:
    /// about a million judgements a month (minutes × carriers × window lengths) × 1e-7 is a
    /// tenth of a false alarm a month.
    pub max_chance: f64,
    /// At least this many slow records before slowness degrades a carrier.
    pub min_slow: u64,
    /// And at least this share of its records slow.
    pub min_slow_share: f64,
    /// The half-life of the carriers' shares, minutes: long enough not to follow an incident
    /// (whose minutes are skipped anyway once it is judged), short enough to follow the day.
    pub half_life_minutes: f64,
    /// The half-life of the rates (records per minute), minutes: short, so the expectation
    /// follows the daily cycle's steepest slope (a lagging rate at night over-predicts, and a
    /// quiet night would look silent).
    pub rate_half_life_minutes: f64,
    /// No judgement before the baseline has folded this many minutes.
    pub warmup_minutes: u64,
    /// At most this many minutes are folded by one sweep (after a long gap the baseline resumes
    /// from the recent past rather than replaying hours).
    pub max_catch_up: i64,
    /// Records older than this (or stamped in the future) are not tallied: late receipts say
    /// nothing about a carrier now.
    pub horizon: Duration,
    /// A silence judged this long is the traffic's new shape, not an outage: the baseline learns
    /// it ([`held_out`]).
    pub relearn_after: Duration,
}

impl TrafficPolicy {
    pub fn new(slow_after: Duration) -> Self {
        TrafficPolicy {
            slow_after,
            // Silence over the last 1..=15 minutes: a carrier with 400 records an hour is judged
            // after two or three silent minutes, one with 100 an hour after about ten.
            window_minutes: 15,
            settle: Duration::from_secs(15),
            ratio: 5.0,
            max_chance: 1e-7,
            min_slow: 5,
            min_slow_share: 0.2,
            half_life_minutes: 120.0,
            rate_half_life_minutes: 15.0,
            warmup_minutes: 60,
            max_catch_up: 60,
            horizon: Duration::from_secs(3600),
            relearn_after: Duration::from_secs(3 * 3600),
        }
    }

    fn alpha(&self) -> f64 {
        1.0 - 0.5f64.powf(1.0 / self.half_life_minutes.max(1.0))
    }

    fn rate_alpha(&self) -> f64 {
        1.0 - 0.5f64.powf(1.0 / self.rate_half_life_minutes.max(1.0))
    }

    /// The last closed minute at `now`.
    pub fn last_closed(&self, now: DateTime<Utc>) -> Minute {
        minute_of(now - chrono::Duration::from_std(self.settle).unwrap_or_default()) - 1
    }

    /// The last minute the baseline takes in at `now`: the one that just left the judged
    /// window. A minute is judged before it is folded, so an incident's first minutes never
    /// lower the expectation they are judged against.
    pub fn fold_through(&self, now: DateTime<Utc>) -> Minute {
        self.last_closed(now) - self.window_minutes.max(1)
    }

    /// The closed minutes [`judge`] looks at `now` (`from..=to`): all a read-only view needs.
    pub fn judged_minutes(&self, now: DateTime<Utc>) -> (Minute, Minute) {
        let last = self.last_closed(now);
        (last - self.window_minutes.max(1) + 1, last)
    }

    /// The minutes the sweep reads at `now` for a baseline folded through `through`: the ones
    /// not folded yet (at most `max_catch_up`) and the judged window.
    pub fn minutes_to_read(&self, now: DateTime<Utc>, through: Option<Minute>) -> (Minute, Minute) {
        let (window_from, last) = self.judged_minutes(now);
        let floor = self.fold_through(now) - self.max_catch_up + 1;
        let fold_from = through.map_or(floor, |t| (t + 1).max(floor));
        (window_from.min(fold_from), last)
    }
}

/// Tallies the records of one batch by the minute SNS wrote them and their carrier. `records`
/// pairs each record with when it was written (`None`: unknown, not tallied) and who sent it.
pub fn tally<'a>(
    records: impl IntoIterator<Item = (&'a DeliveryRecord, Option<DateTime<Utc>>, Sender)>,
    now: DateTime<Utc>,
    policy: &TrafficPolicy,
) -> CountryTallies {
    let oldest = now - chrono::Duration::from_std(policy.horizon).unwrap_or_default();
    // A record stamped a little ahead of this clock is clock skew; far ahead is not believed.
    let newest = now + chrono::Duration::minutes(5);
    let slow_ms = u64::try_from(policy.slow_after.as_millis()).unwrap_or(u64::MAX);
    let mut out = CountryTallies::new();
    for (r, at, sender) in records {
        let Some(at) = at.filter(|at| *at >= oldest && *at <= newest) else { continue };
        // Progress (End User Messaging's queued, pending, non-final acceptance) is not a record of
        // an outcome: one SMS is tallied once, by its final event, as SNS logs it once.
        if matches!(r.status, DeliveryStatus::Pending(_)) {
            continue;
        }
        let key = (minute_of(at), slice_of(r.carrier.as_deref()), country_slice(r.mcc.as_deref()));
        let t = out.entry(key).or_default();
        let tocsin = sender == Sender::Tocsin;
        t.records += 1;
        t.tocsin += u64::from(tocsin);
        match r.status {
            DeliveryStatus::Success => t.delivered += 1,
            DeliveryStatus::Failure => t.failed += 1,
            DeliveryStatus::Pending(_) | DeliveryStatus::Other(_) => {}
        }
        if let Some(d) = r.dwell_ms {
            t.dwell_ms = t.dwell_ms.saturating_add(d);
            if d >= slow_ms {
                t.slow += 1;
                t.tocsin_slow += u64::from(tocsin);
                t.slow_dwell_ms = t.slow_dwell_ms.saturating_add(d);
            }
        }
    }
    out
}

/// One carrier's rolling baseline: exponentially weighted records and slow records per minute.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CarrierBaseline {
    /// Records per minute, averaged slowly: the carrier's share of all records.
    pub records: f64,
    pub slow: f64,
    /// Records per minute, averaged quickly: the carrier's current rate.
    #[serde(default)]
    pub rate: f64,
}

/// The rolling baseline of every carrier, folded from closed minutes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Baseline {
    /// The last minute folded (each minute is folded once: a save is conditional on it).
    pub through: Option<Minute>,
    /// Minutes folded so far (the warm-up).
    pub minutes: u64,
    pub carriers: BTreeMap<String, CarrierBaseline>,
    /// Since when each currently degraded carrier has been degraded (the start of its silence):
    /// a lower bound on its current delay.
    #[serde(default)]
    pub degraded_since: BTreeMap<String, Minute>,
}

/// A carrier whose baseline rate fell below this (records per minute) is forgotten.
const FORGET_BELOW: f64 = 1e-4;

impl Baseline {
    /// All carriers' records per minute (as folded: see [`Self::scale`]).
    pub fn total(&self) -> f64 {
        self.carriers.values().map(|c| c.records).sum()
    }

    /// `carrier`'s share of all records.
    pub fn share(&self, carrier: &str) -> f64 {
        let total = self.total();
        match self.carriers.get(carrier) {
            Some(c) if total > 0.0 => c.records / total,
            _ => 0.0,
        }
    }

    /// What the folded fast rates are multiplied by to be rates: an average weighted over
    /// `minutes` minutes only has the weight `1 − (1 − α)^minutes` (the start-up bias of an
    /// exponential average that began at zero). Shares need no correction.
    pub fn scale(&self, policy: &TrafficPolicy) -> f64 {
        let weight = 1.0 - (1.0 - policy.rate_alpha()).powf(self.minutes as f64);
        if weight > 0.0 { 1.0 / weight } else { 0.0 }
    }

    /// All carriers' records per minute now (the fast average, corrected).
    pub fn total_rate(&self, policy: &TrafficPolicy) -> f64 {
        self.carriers.values().map(|c| c.rate).sum::<f64>() * self.scale(policy)
    }
}

/// Folds the minutes after `baseline.through` up to `through` (at most `max_catch_up` of them)
/// from `tallies`. A carrier in `degraded` counts its baseline instead of what it did in those
/// minutes: an incident never becomes its own baseline.
pub fn fold(
    baseline: &Baseline,
    tallies: &Tallies,
    through: Minute,
    degraded: &BTreeSet<String>,
    policy: &TrafficPolicy,
) -> Baseline {
    let mut b = baseline.clone();
    let floor = through - policy.max_catch_up + 1;
    // The first fold starts at the first minute anything was tallied: minutes before the stack
    // existed are not quiet minutes.
    let first = match b.through {
        Some(t) => (t + 1).max(floor),
        None => tallies.keys().map(|(m, _)| *m).find(|m| *m >= floor).unwrap_or(through),
    };
    let (a, fast) = (policy.alpha(), policy.rate_alpha());
    for m in first..=through {
        let minute: BTreeMap<&str, &Tally> =
            tallies.range((m, String::new())..(m + 1, String::new())).map(|((_, c), t)| (c.as_str(), t)).collect();
        let mut names: BTreeSet<String> = b.carriers.keys().cloned().collect();
        names.extend(minute.keys().map(|c| (*c).to_owned()));
        for name in names {
            if degraded.contains(&name) {
                continue;
            }
            let seen = minute.get(name.as_str()).copied().copied().unwrap_or_default();
            let c = b.carriers.entry(name).or_default();
            // Other applications' records only: a storm of alerts would teach the baseline a rate
            // that is gone when the storm is ([`Tally::tocsin`]).
            c.records += a * (seen.others() as f64 - c.records);
            c.rate += fast * (seen.others() as f64 - c.rate);
            c.slow += a * (seen.others_slow() as f64 - c.slow);
        }
        b.carriers.retain(|_, c| c.records >= FORGET_BELOW || c.rate >= FORGET_BELOW);
        b.minutes += 1;
    }
    b.through = Some(through.max(b.through.unwrap_or(Minute::MIN)));
    b
}

/// Which signal degraded a carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Far fewer records than its baseline predicts.
    Silent,
    /// Many of its records took longer than the delay line.
    Slow,
    /// Every carrier together far below the baseline rate.
    AllSilent,
}

/// What the traffic says about one carrier, at one sweep.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrafficVerdict {
    pub carrier: String,
    /// Over `minutes` closed minutes (the span that decided, else the whole window): records
    /// observed and expected.
    pub minutes: i64,
    pub observed: u64,
    pub expected: f64,
    /// Records in the whole window and the slow ones among them.
    pub window_records: u64,
    pub window_slow: u64,
    /// The baseline share of all records, %.
    pub share_percent: f64,
    /// Whether the baseline is warm and the carrier has one: false, nothing is judged.
    pub judged: bool,
    pub degraded: bool,
    pub signal: Option<Signal>,
    /// Since when it has been degraded (this episode).
    pub degraded_since: Option<DateTime<Utc>>,
    /// A lower bound on its current delay, seconds: the time since its silence began, or the
    /// mean dwell of its slow records, whichever is longer.
    pub delay_floor_s: u64,
}

impl TrafficVerdict {
    /// The line on-call reads.
    pub fn summary(&self) -> String {
        match self.signal {
            Some(Signal::Slow) => format!(
                "carrier {} delayed: {} of {} delivery records (all applications) in the last {} min took over the delay line; mean {} min",
                self.carrier,
                self.window_slow,
                self.window_records,
                self.minutes,
                self.delay_floor_s.div_ceil(60)
            ),
            Some(Signal::AllSilent) => format!(
                "all carriers silent: {} delivery records (other applications) in the last {} min where {:.0} were expected; carrier {} silent for {} min",
                self.observed,
                self.minutes,
                self.expected,
                self.carrier,
                self.delay_floor_s.div_ceil(60)
            ),
            _ => format!(
                "carrier {} delayed: {} of {:.0} expected delivery records (other applications) in the last {} min; silent for {} min",
                self.carrier,
                self.observed,
                self.expected,
                self.minutes,
                self.delay_floor_s.div_ceil(60)
            ),
        }
    }
}

/// P(X ≤ k) for X ~ Poisson(mean).
pub fn poisson_cdf(k: u64, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 1.0;
    }
    let mut term = (-mean).exp();
    let mut sum = term;
    for i in 1..=k {
        term *= mean / i as f64;
        sum += term;
    }
    sum.min(1.0)
}

/// The latest minute itself is far below its expectation: a silence that has ended (the
/// carrier delivers again) is not judged silent on the strength of the minutes before.
fn latest_low(observed: u64, expected: f64, policy: &TrafficPolicy) -> bool {
    observed as f64 * policy.ratio <= expected.max(1.0)
}

fn is_silent(observed: u64, expected: f64, policy: &TrafficPolicy) -> bool {
    expected > 0.0 && observed as f64 * policy.ratio <= expected && poisson_cdf(observed, expected) <= policy.max_chance
}

/// The verdict on every carrier with a baseline at `now`, from the tallies of the judged window
/// (other minutes in `tallies` are ignored). Returns the verdicts and the baseline's
/// `degraded_since` as it stands after them (to be saved with the next fold).
pub fn judge(
    baseline: &Baseline,
    tallies: &Tallies,
    now: DateTime<Utc>,
    policy: &TrafficPolicy,
) -> (BTreeMap<String, TrafficVerdict>, BTreeMap<String, Minute>) {
    let last = policy.last_closed(now);
    let w = policy.window_minutes.max(1);
    let warm = baseline.minutes >= policy.warmup_minutes;
    let in_minute = |m: Minute, c: &str| tallies.get(&(m, c.to_owned())).copied().unwrap_or_default();
    // Silence is judged on the records delivered on time (under the delay line): a carrier
    // draining a backlog delivers many records, all late, and is not delivering what is sent now.
    // And on other applications' only, as the baseline is folded.
    let total_in = |m: Minute| -> u64 {
        tallies.range((m, String::new())..(m + 1, String::new())).map(|(_, t)| t.others_on_time()).sum()
    };
    // All carriers together, over the last k minutes.
    let mut all_silent: Option<(i64, u64, f64)> = None;
    let scale = baseline.scale(policy);
    let total_rate = baseline.total_rate(policy);
    if warm && latest_low(total_in(last), total_rate, policy) {
        let mut obs = 0;
        for k in 1..=w {
            obs += total_in(last - k + 1);
            let exp = total_rate * k as f64;
            if is_silent(obs, exp, policy) {
                all_silent = Some((k, obs, exp));
            }
        }
    }
    let mut names: BTreeSet<&str> = baseline.carriers.keys().map(String::as_str).collect();
    names.extend(tallies.keys().filter(|(m, _)| *m > last - w && *m <= last).map(|(_, c)| c.as_str()));
    let mut verdicts = BTreeMap::new();
    let mut since = BTreeMap::new();
    for name in names {
        let base = baseline.carriers.get(name).copied().unwrap_or_default();
        let others_base = baseline.total() - base.records;
        let mut v = TrafficVerdict {
            carrier: name.to_owned(),
            share_percent: (baseline.share(name) * 1000.0).round() / 10.0,
            judged: warm && base.records > 0.0,
            ..Default::default()
        };
        let (mut obs, mut others) = (0u64, 0u64);
        let mut silent_for = None;
        let mut slow_dwell = 0u64;
        let mut latest = false;
        let mut window_expected = 0.0;
        for k in 1..=w {
            let m = last - k + 1;
            let t = in_minute(m, name);
            obs += t.others_on_time();
            others += total_in(m) - t.others_on_time();
            v.window_records += t.records;
            v.window_slow += t.slow;
            slow_dwell = slow_dwell.saturating_add(t.slow_dwell_ms);
            let by_rate = base.rate * scale * k as f64;
            let by_share = if others_base > 0.0 { others as f64 * base.records / others_base } else { by_rate };
            let exp = by_share.min(by_rate);
            if k == 1 {
                latest = latest_low(obs, exp, policy);
            }
            window_expected = exp;
            if v.judged && latest && is_silent(obs, exp, policy) {
                silent_for = Some((k, obs, exp));
            }
            if k == w && silent_for.is_none() {
                (v.minutes, v.observed, v.expected) = (k, obs, exp);
            }
        }
        if let Some((k, o, e)) = silent_for {
            (v.minutes, v.observed, v.expected) = (k, o, e);
            v.signal = Some(Signal::Silent);
        }
        let slow_share = if v.window_records == 0 { 0.0 } else { v.window_slow as f64 / v.window_records as f64 };
        let base_slow_share = if base.records > 0.0 { base.slow / base.records } else { 0.0 };
        let slow = v.window_slow >= policy.min_slow
            && slow_share >= policy.min_slow_share
            && slow_share >= policy.ratio * base_slow_share;
        if v.signal.is_none() && slow && warm {
            v.signal = Some(Signal::Slow);
            v.minutes = w;
        }
        if v.signal.is_none()
            && v.judged
            && let Some((k, o, e)) = all_silent
        {
            v.signal = Some(Signal::AllSilent);
            (v.minutes, v.observed, v.expected) = (k, o, e);
        }
        v.degraded = v.signal.is_some();
        if v.degraded {
            // The episode began at the first silent minute, or continues from an earlier sweep.
            let began = baseline.degraded_since.get(name).copied().unwrap_or(last - v.minutes + 1);
            since.insert(name.to_owned(), began);
            v.degraded_since = Some(start_of(began));
            let silent_s = if v.signal == Some(Signal::Slow) {
                0
            } else {
                u64::try_from((now - start_of(began)).num_seconds()).unwrap_or(0)
            };
            // Late records say how long the carrier took, not how long it takes now: while it
            // delivers at least half of what is expected on time (a backlog draining after the
            // incident), an SMS sent now is not expected to wait. Every record on time counts,
            // tocsin's own too: each is an SMS the carrier delivered now. The expectation is
            // other applications' (what the baseline knows), so tocsin's traffic can only make a
            // carrier look more like draining — the lenient side, which escalates no earlier.
            let on_time = v.window_records - v.window_slow;
            let draining = on_time as f64 * 2.0 >= window_expected;
            let mean_slow_s = if draining { 0 } else { slow_dwell.checked_div(v.window_slow).unwrap_or(0) / 1000 };
            // Late records arriving say what the carrier's delay is now; only a carrier that
            // delivers nothing at all is judged by how long it has been silent.
            v.delay_floor_s = if v.window_slow >= policy.min_slow { mean_slow_s } else { silent_s };
        }
        verdicts.insert(name.to_owned(), v);
    }
    (verdicts, since)
}

/// The smallest share of all records (%) a carrier judged healthy needs for its own entry in the
/// carrier view.
pub const MIN_SHARE_PERCENT: f64 = 1.0;

/// Merges the traffic verdicts into the in-flight health ([`super::carrier::assess`]): a carrier
/// is degraded when either signal says so, and its delay is the longer of the two lower bounds
/// (what early escalation weighs a deadline against). A carrier only the traffic knows of gets
/// an entry (nothing of tocsin's in flight to it; its numbers' next alerts still benefit).
pub fn merge(health: &mut BTreeMap<String, CarrierHealth>, verdicts: &BTreeMap<String, TrafficVerdict>) {
    for v in verdicts.values() {
        // A carrier carrying a sliver of the account's traffic gets no series of its own (each
        // carrier's metrics are custom metrics, billed each): degraded, it still does.
        let worth_a_series = v.judged && v.share_percent >= MIN_SHARE_PERCENT;
        if !v.degraded && !worth_a_series {
            continue;
        }
        let h = health
            .entry(v.carrier.clone())
            .or_insert_with(|| CarrierHealth { carrier: v.carrier.clone(), ..Default::default() });
        h.traffic_judged = v.judged;
        h.traffic_observed = v.observed;
        h.traffic_expected = (v.expected * 10.0).round() / 10.0;
        h.traffic_degraded = v.degraded;
        if v.degraded {
            h.degraded = true;
            h.traffic_summary = Some(v.summary());
            h.median_delay_s = h.median_delay_s.max(v.delay_floor_s);
            h.p95_delay_s = h.p95_delay_s.max(v.delay_floor_s);
        }
    }
}

/// One sweep's step over the traffic: the verdicts at `now`, and the baseline to save after them —
/// folded through the minute that just left the judged window, without the carriers
/// [`held_out`], with each degraded episode's start.
pub fn step(
    baseline: &Baseline,
    tallies: &Tallies,
    now: DateTime<Utc>,
    policy: &TrafficPolicy,
) -> (BTreeMap<String, TrafficVerdict>, Baseline) {
    let (verdicts, since) = judge(baseline, tallies, now, policy);
    let mut next = fold(baseline, tallies, policy.fold_through(now), &held_out(&verdicts, now, policy), policy);
    next.degraded_since = since;
    (verdicts, next)
}

/// The carriers the next fold skips: the ones degraded in `verdicts` (an incident never becomes
/// its own baseline), but for a silence judged since at least `policy.relearn_after` before `now`,
/// which is taken for the traffic's new shape and learnt.
pub fn held_out(
    verdicts: &BTreeMap<String, TrafficVerdict>,
    now: DateTime<Utc>,
    policy: &TrafficPolicy,
) -> BTreeSet<String> {
    let relearn = chrono::Duration::from_std(policy.relearn_after).unwrap_or(chrono::Duration::MAX);
    verdicts
        .values()
        .filter(|v| v.degraded)
        .filter(|v| {
            // Silent, with no late records coming in either: late records say the carrier holds
            // SMS (an incident), not that fewer are sent.
            let silence =
                matches!(v.signal, Some(Signal::Silent | Signal::AllSilent)) && v.window_slow < policy.min_slow;
            !(silence && v.degraded_since.is_some_and(|since| now - since >= relearn))
        })
        .map(|v| v.carrier.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::delivery::Format;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-09-23T12:00:00Z").map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    fn policy() -> TrafficPolicy {
        TrafficPolicy::new(Duration::from_secs(600))
    }

    /// `per_minute` records per carrier for minutes `from..to`, each with `slow` of them slow.
    fn traffic(t: &mut Tallies, from: Minute, to: Minute, carriers: &[(&str, u64, u64)]) {
        for m in from..to {
            for (c, n, slow) in carriers {
                let e = t.entry((m, (*c).to_owned())).or_default();
                e.records += n;
                e.delivered += n;
                e.slow += slow;
                e.slow_dwell_ms += slow * 50 * 60_000;
            }
        }
    }

    /// A baseline warmed on twelve hours of `carriers` ending just before the judged window at `now`.
    fn warmed(carriers: &[(&str, u64, u64)], now: DateTime<Utc>) -> Baseline {
        let last = policy().last_closed(now) - policy().window_minutes;
        let mut t = Tallies::new();
        traffic(&mut t, last - 720, last + 1, carriers);
        let mut b = Baseline::default();
        for m in (last - 720)..=last {
            b = fold(&b, &t, m, &BTreeSet::new(), &policy());
        }
        b
    }

    fn window(now: DateTime<Utc>) -> (Minute, Minute) {
        let last = policy().last_closed(now);
        (last - policy().window_minutes + 1, last + 1)
    }

    #[test]
    fn a_carrier_whose_records_stop_while_the_others_go_on_is_degraded_as_silent() {
        let now = t0() + chrono::Duration::seconds(20);
        let normal = [("SlowTel", 10, 0), ("FastTel", 20, 0)];
        let b = warmed(&normal, now);
        let (from, to) = window(now);
        let mut t = Tallies::new();
        traffic(&mut t, from, to - 2, &normal);
        traffic(&mut t, to - 2, to, &[("FastTel", 20, 0)]);
        let (v, since) = judge(&b, &t, now, &policy());
        let slow = &v["SlowTel"];
        assert!(slow.degraded && slow.signal == Some(Signal::Silent), "{slow:?}");
        assert_eq!((slow.minutes, slow.observed), (2, 0));
        assert!((slow.expected - 20.0).abs() < 1.0, "{slow:?}");
        assert!(slow.delay_floor_s >= 120, "silent for two minutes at least: {slow:?}");
        assert!(since.contains_key("SlowTel"));
        assert!(!v["FastTel"].degraded);
        assert!(
            slow.summary().starts_with("carrier SlowTel delayed: 0 of 20 expected delivery records"),
            "{}",
            slow.summary()
        );
    }

    /// An incident pages many people at once on whatever carriers they are with, and stops: the
    /// storm's records are tocsin's, and neither teach the baseline nor make its end a silence.
    #[test]
    fn an_alert_storm_to_one_carrier_then_none_is_not_that_carrier_gone_silent() {
        let now = t0() + chrono::Duration::seconds(20);
        let last = policy().last_closed(now) - policy().window_minutes;
        let verdict = |storm_is_tocsins: bool| {
            let mut t = Tallies::new();
            traffic(&mut t, last - 720, last + 1, &[("SlowTel", 2, 0), ("FastTel", 20, 0)]);
            // The last half hour before the judged window: 60 alerts a minute to SlowTel's numbers.
            for m in last - 29..=last {
                let e = t.entry((m, "SlowTel".to_owned())).or_default();
                e.records += 60;
                e.delivered += 60;
                if storm_is_tocsins {
                    e.tocsin += 60;
                }
            }
            let mut b = Baseline::default();
            for m in (last - 720)..=last {
                b = fold(&b, &t, m, &BTreeSet::new(), &policy());
            }
            // The storm is over; the carrier carries its usual two records a minute.
            let (from, to) = window(now);
            let mut w = Tallies::new();
            traffic(&mut w, from, to, &[("SlowTel", 2, 0), ("FastTel", 20, 0)]);
            judge(&b, &w, now, &policy()).0.remove("SlowTel").expect("a verdict")
        };
        let v = verdict(true);
        assert!(!v.degraded, "{v:?}");
        assert!(v.expected < 40.0, "expected about its usual 2 a minute: {v:?}");
        // The same storm counted as the carrier's steady load: its end looks like an outage.
        let learnt = verdict(false);
        assert!(learnt.degraded && learnt.signal == Some(Signal::Silent), "{learnt:?}");
    }

    #[test]
    fn a_quiet_carrier_missing_a_few_records_is_not_judged_silent() {
        // Two records a minute: five silent minutes happen by chance too often to page on.
        let now = t0() + chrono::Duration::seconds(20);
        let normal = [("Quiet", 1, 0), ("Busy", 30, 0)];
        let b = warmed(&normal, now);
        let (from, to) = window(now);
        let mut t = Tallies::new();
        traffic(&mut t, from, to, &[("Busy", 30, 0)]);
        let (v, _) = judge(&b, &t, now, &policy());
        assert!(!v["Quiet"].degraded, "{:?}", v["Quiet"]);
    }

    #[test]
    fn a_daily_dip_in_every_carrier_together_is_not_silence() {
        // Traffic halves everywhere (night): each carrier keeps its share, nothing is degraded.
        let now = t0() + chrono::Duration::seconds(20);
        let b = warmed(&[("A", 20, 0), ("B", 40, 0)], now);
        let (from, to) = window(now);
        let mut t = Tallies::new();
        traffic(&mut t, from, to, &[("A", 10, 0), ("B", 20, 0)]);
        let (v, _) = judge(&b, &t, now, &policy());
        assert!(v.values().all(|v| !v.degraded), "{v:?}");
    }

    #[test]
    fn another_carriers_burst_does_not_make_a_steady_carrier_look_silent() {
        let now = t0() + chrono::Duration::seconds(20);
        let b = warmed(&[("A", 20, 0), ("B", 40, 0)], now);
        let (from, to) = window(now);
        let mut t = Tallies::new();
        traffic(&mut t, from, to, &[("A", 20, 0), ("B", 400, 0)]);
        let (v, _) = judge(&b, &t, now, &policy());
        assert!(!v["A"].degraded, "{:?}", v["A"]);
    }

    #[test]
    fn many_records_over_the_delay_line_degrade_a_carrier_as_slow_but_one_never_does() {
        let now = t0() + chrono::Duration::seconds(20);
        let b = warmed(&[("A", 4, 0), ("B", 4, 0)], now);
        let (from, to) = window(now);
        let mut one = Tallies::new();
        traffic(&mut one, from, to, &[("A", 4, 0), ("B", 4, 0)]);
        one.entry((to - 1, "A".into())).or_default().slow += 1;
        let (v, _) = judge(&b, &one, now, &policy());
        assert!(!v["A"].degraded, "one slow record: {:?}", v["A"]);
        // Half of them late: slow, but it delivers on time too (a backlog draining): an SMS sent
        // now is not expected to wait.
        let mut many = Tallies::new();
        traffic(&mut many, from, to, &[("A", 4, 2), ("B", 4, 0)]);
        let (v, _) = judge(&b, &many, now, &policy());
        assert!(v["A"].degraded && v["A"].signal == Some(Signal::Slow), "{:?}", v["A"]);
        assert_eq!(v["A"].delay_floor_s, 0, "draining: {:?}", v["A"]);
        // All of them late: nothing delivered on time (silent on time), and its delay is theirs.
        let mut all_late = Tallies::new();
        traffic(&mut all_late, from, to, &[("A", 4, 4), ("B", 4, 0)]);
        let (v, _) = judge(&b, &all_late, now, &policy());
        assert!(v["A"].degraded && v["A"].signal == Some(Signal::Silent), "{:?}", v["A"]);
        assert_eq!(v["A"].delay_floor_s, 50 * 60, "the late records' mean dwell");
    }

    #[test]
    fn every_carrier_silent_at_once_is_all_silent() {
        let now = t0() + chrono::Duration::seconds(20);
        let b = warmed(&[("A", 20, 0), ("B", 20, 0)], now);
        let (v, _) = judge(&b, &Tallies::new(), now, &policy());
        assert!(v.values().all(|v| v.degraded && v.signal == Some(Signal::AllSilent)), "{v:?}");
    }

    #[test]
    fn nothing_is_judged_before_the_baseline_is_warm() {
        let now = t0() + chrono::Duration::seconds(20);
        let mut t = Tallies::new();
        let (from, _) = window(now);
        traffic(&mut t, from - 10, from, &[("A", 20, 0), ("B", 20, 0)]);
        let mut b = Baseline::default();
        for m in (from - 10)..from {
            b = fold(&b, &t, m, &BTreeSet::new(), &policy());
        }
        let (v, _) = judge(&b, &Tallies::new(), now, &policy());
        assert!(v.values().all(|v| !v.degraded && !v.judged), "{v:?}");
    }

    /// One sweep a minute from `start` for `minutes`, over tallies `per_minute` gives each minute;
    /// returns the baseline and, per sweep, whether `carrier` was judged degraded.
    fn sweeps(
        mut b: Baseline,
        start: DateTime<Utc>,
        minutes: i64,
        carrier: &str,
        per_minute: impl Fn(Minute) -> Vec<(&'static str, u64, u64)>,
    ) -> (Baseline, Vec<bool>) {
        let mut t = Tallies::new();
        let mut out = Vec::new();
        // The judged window before the first sweep, then each minute as it closes.
        let (from, _) = window(start);
        let mut next_minute = from;
        for i in 0..minutes {
            let now = start + chrono::Duration::minutes(i);
            while next_minute <= policy().last_closed(now) {
                traffic(&mut t, next_minute, next_minute + 1, &per_minute(next_minute));
                next_minute += 1;
            }
            let (v, next) = step(&b, &t, now, &policy());
            out.push(v.get(carrier).is_some_and(|v| v.degraded));
            b = next;
        }
        (b, out)
    }

    #[test]
    fn a_carrier_an_application_stopped_using_is_silent_at_first_then_learnt_as_the_new_level() {
        // Traffic to A falls to a tenth for good (an application stopped sending through it).
        let start = t0() + chrono::Duration::seconds(20);
        let before = [("A", 30, 0), ("B", 30, 0)];
        let b = warmed(&before, start);
        let (window_from, _) = window(start);
        let (_, degraded) = sweeps(b, start, 6 * 60, "A", |m| {
            if m < window_from { before.to_vec() } else { vec![("A", 3, 0), ("B", 30, 0)] }
        });
        let first = degraded.iter().position(|d| *d).expect("judged silent at first");
        assert!(first < 15, "a drop to a tenth looks like an outage at first: minute {first}");
        let last = degraded.iter().rposition(|d| *d).expect("degraded");
        let relearn = 3 * 60;
        assert!(last >= relearn - 1, "never learnt before relearn_after: cleared at minute {last}");
        assert!(last < relearn + 45, "cleared within relearn_after and 45 minutes, not at minute {last}");
        assert!(degraded[last + 1..].iter().all(|d| !d), "and stays clear");
    }

    #[test]
    fn a_real_silence_is_never_learnt_before_relearn_after_and_a_slow_carrier_never() {
        let start = t0() + chrono::Duration::seconds(20);
        let before = [("A", 30, 0), ("B", 30, 0)];
        let (window_from, _) = window(start);
        // Silent for good: degraded at every sweep up to relearn_after.
        let (_, silent) = sweeps(warmed(&before, start), start, 3 * 60, "A", |m| {
            if m < window_from { before.to_vec() } else { vec![("B", 30, 0)] }
        });
        let first = silent.iter().position(|d| *d).expect("silent");
        assert!(silent[first..].iter().all(|d| *d), "degraded throughout the first three hours");
        // Slow for good: never learnt, however long; nor a carrier delivering only late (silent on
        // time, its SMS held).
        for late in [20, 30] {
            let (_, slow) = sweeps(warmed(&before, start), start, 5 * 60, "A", |m| {
                if m < window_from { before.to_vec() } else { vec![("A", 30, late), ("B", 30, 0)] }
            });
            let first = slow.iter().position(|d| *d).expect("slow");
            assert!(slow[first..].iter().all(|d| *d), "{late} of 30 late: stays degraded");
        }
    }

    #[test]
    fn a_degraded_carriers_minutes_never_lower_its_baseline_and_a_minute_folds_once() {
        let now = t0() + chrono::Duration::seconds(20);
        let b = warmed(&[("A", 20, 0), ("B", 20, 0)], now);
        let through = b.through.expect("folded");
        let mut t = Tallies::new();
        traffic(&mut t, through + 1, through + 61, &[("B", 20, 0)]);
        let skip = BTreeSet::from(["A".to_owned()]);
        let kept = fold(&b, &t, through + 60, &skip, &policy());
        assert!((kept.share("A") - b.share("A")).abs() < 0.01, "{} vs {}", kept.share("A"), b.share("A"));
        let not_kept = fold(&b, &t, through + 60, &BTreeSet::new(), &policy());
        assert!(not_kept.share("A") < b.share("A") * 0.9);
        // Folding through the same minute again changes nothing.
        assert_eq!(fold(&kept, &t, through + 60, &skip, &policy()), Baseline { ..kept.clone() });
    }

    #[test]
    fn records_are_tallied_by_minute_carrier_and_country_with_counts_and_dwell_only() {
        let rec = |carrier: Option<&str>, mcc: Option<&str>, status: DeliveryStatus, dwell: u64| DeliveryRecord {
            destination: Some("+14155550100".into()),
            carrier: carrier.map(str::to_owned),
            mcc: mcc.map(str::to_owned),
            dwell_ms: Some(dwell),
            ..DeliveryRecord::bare(Format::SnsDeliveryLog, "m", status)
        };
        let a = rec(Some("Tel"), Some("310"), DeliveryStatus::Success, 1_000);
        let b = rec(Some("Tel"), Some("310"), DeliveryStatus::Failure, 700_000);
        let c = rec(None, None, DeliveryStatus::Success, 2_000);
        // One group's name, two countries' networks.
        let d = rec(Some("Tel"), Some("262"), DeliveryStatus::Success, 3_000);
        let e = rec(Some("Tel"), Some("99x"), DeliveryStatus::Success, 3_000);
        let now = t0();
        let t = tally(
            [
                (&a, Some(now), Sender::Other),
                (&b, Some(now), Sender::Tocsin),
                (&c, Some(now), Sender::Other),
                (&d, Some(now), Sender::Other),
                (&e, Some(now), Sender::Other),
                (&a, Some(now - chrono::Duration::hours(2)), Sender::Other),
                (&a, None, Sender::Other),
            ],
            now,
            &policy(),
        );
        let m = minute_of(now);
        let key = |carrier: &str, country: &str| (m, carrier.to_owned(), country.to_owned());
        assert_eq!(
            t[&key("Tel", "US")],
            Tally {
                records: 2,
                delivered: 1,
                failed: 1,
                slow: 1,
                dwell_ms: 701_000,
                slow_dwell_ms: 700_000,
                tocsin: 1,
                tocsin_slow: 1
            }
        );
        assert_eq!(t[&key("Tel", "DE")].records, 1);
        assert_eq!(t[&key("Tel", UNKNOWN)].records, 1, "no three-digit MCC: the country is unknown");
        assert_eq!(t[&key(UNKNOWN, UNKNOWN)].records, 1);
        assert_eq!(t.len(), 4, "the two-hour-old and the unstamped records are not tallied");
        // The detector judges each carrier whole; the view lists its countries, busiest first.
        let carriers = per_carrier(&t);
        assert_eq!(carriers[&(m, "Tel".to_owned())].records, 4);
        assert_eq!(carriers.len(), 2);
        let countries: Vec<(String, u64)> =
            countries_of(&t)["Tel"].iter().map(|(c, t)| (c.clone(), t.records)).collect();
        assert_eq!(countries, [("US".to_owned(), 2), ("DE".to_owned(), 1), (UNKNOWN.to_owned(), 1)]);
    }

    #[test]
    fn a_read_only_view_reads_exactly_the_minutes_the_judge_looks_at() {
        let now = t0() + chrono::Duration::seconds(20);
        let (from, to) = policy().judged_minutes(now);
        assert_eq!((to, to - from + 1), (policy().last_closed(now), policy().window_minutes));
        let (read_from, read_to) = policy().minutes_to_read(now, None);
        assert!(read_from <= from && read_to == to, "the sweep reads the judged minutes too");
        // A tally outside them changes no verdict.
        let b = warmed(&[("A", 20, 0), ("B", 20, 0)], now);
        let mut t = Tallies::new();
        traffic(&mut t, from, to + 1, &[("A", 20, 0), ("B", 20, 0)]);
        let (inside, _) = judge(&b, &t, now, &policy());
        traffic(&mut t, from - 5, from, &[("A", 500, 500)]);
        assert_eq!(judge(&b, &t, now, &policy()).0, inside);
    }

    #[test]
    fn poisson_tail_is_what_the_silence_rule_says() {
        assert!((poisson_cdf(0, 16.0) - (-16.0f64).exp()).abs() < 1e-12);
        assert!(poisson_cdf(0, 16.0) < 1e-6 && poisson_cdf(0, 10.0) > 1e-7);
    }
}
