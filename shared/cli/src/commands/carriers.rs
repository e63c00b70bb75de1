//! `tocsin carriers [hold NAME --reason … [--for 2h] | release NAME --reason …]`: each carrier's
//! health as the sweep measures it — tocsin's own SMS in flight (in flight, delayed share), every
//! application's delivery records against the carrier's rolling baseline (the traffic signal),
//! state, holds — and the operator's manual failover: a time-bounded, audited hold under which
//! every new alert to the carrier's numbers is escalated at once (the non-SMS paging path) while
//! its SMS still goes out.
//!
//! Read-only: the traffic verdicts are computed here with the sweep's own functions
//! ([`carrier_traffic::judge`], [`carrier_traffic::merge`]) over the stored baseline and the
//! judged window's tallies; nothing is folded or saved (that is the sweep's, once per minute).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::domain::carrier::{self, CarrierHealth, CarrierHold, CarrierPolicy, MAX_HOLD};
use tocsin::domain::carrier_traffic::{self, Baseline, Signal, TrafficPolicy, TrafficVerdict, start_of};
use tocsin::ports::PortError;
use tocsin::ports::carriers::{CarrierBook, CarrierHolds, CarrierTraffic, RecentSends, Released};

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::progress::Spinner;

/// The most SMS of the last hours read (newest first): as the sweep does.
const RECENT_SENDS_MAX: usize = 20_000;

#[derive(Debug, Serialize)]
struct CarriersView {
    at: DateTime<Utc>,
    classification: carrier::Classification,
    carriers: Vec<CarrierView>,
    holds: Vec<CarrierHold>,
    traffic: TrafficView,
}

#[derive(Debug, Serialize)]
struct CarrierView {
    #[serde(flatten)]
    health: CarrierHealth,
    delayed_share_percent: f64,
    held_until: Option<DateTime<Utc>>,
    /// The carrier's rolling baseline in the account's delivery records (none: it has none).
    usual: Option<UsualTraffic>,
    /// What the traffic says about it now, as the sweep judges it (none: no baseline and no
    /// records of it in the judged window, or the traffic could not be read).
    traffic_verdict: Option<TrafficVerdict>,
    /// Its records in the judged window by country (one name can be several countries'
    /// networks, and an incident is often one country's), busiest first.
    countries: Vec<CountryTraffic>,
}

/// One carrier's records in one country over the judged window (every application's).
#[derive(Debug, Clone, Serialize)]
struct CountryTraffic {
    /// ISO 3166 code from the records' MCC; the MCC where it is not in tocsin's table; `unknown`.
    country: String,
    records: u64,
    delivered: u64,
    failed: u64,
    /// Records over the delay line.
    late: u64,
}

/// One carrier's baseline in words: its share of every application's delivery records in the
/// account, its current rate, and how many of its records usually arrive over the delay line.
#[derive(Debug, Clone, Copy, Serialize)]
struct UsualTraffic {
    share_percent: f64,
    records_per_minute: f64,
    late_percent: f64,
}

/// Where the traffic signal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum TrafficStatus {
    /// The baseline is warm: carriers are judged.
    Judged,
    /// The baseline has folded fewer than the warm-up's minutes: nothing is judged yet.
    WarmingUp,
    /// The stored baseline item is there but unreadable (no `baseline` attribute, not a
    /// baseline): nothing is judged, here or by the sweep, until it is repaired or deleted.
    BaselineCorrupt,
    /// Reading the baseline or the judged window's tallies failed (AWS, permissions, a corrupt
    /// tally).
    Unreadable,
}

#[derive(Debug, Serialize)]
struct TrafficView {
    status: TrafficStatus,
    /// Why it could not be read, when it could not.
    error: Option<String>,
    /// The closed minutes judged (`from`, `to`: their starts).
    window_from: DateTime<Utc>,
    window_to: DateTime<Utc>,
    /// The last minute the baseline has taken in, and how many minutes it has folded.
    baseline_through: Option<DateTime<Utc>>,
    baseline_minutes: u64,
    warmup_minutes: u64,
}

/// The traffic signal as read: the baseline (if readable), the verdicts (if judged) and each
/// carrier's countries in the judged window.
struct Traffic {
    view: TrafficView,
    baseline: Option<Baseline>,
    verdicts: BTreeMap<String, TrafficVerdict>,
    countries: BTreeMap<String, Vec<CountryTraffic>>,
}

/// Reads the baseline and the judged window's tallies and judges them as the sweep does. A
/// failure is kept in the view, not returned: the in-flight view stands without it.
async fn read_traffic(ctx: &Context, now: DateTime<Utc>, policy: &TrafficPolicy) -> Traffic {
    let (from, to) = policy.judged_minutes(now);
    let mut view = TrafficView {
        status: TrafficStatus::WarmingUp,
        error: None,
        window_from: start_of(from),
        window_to: start_of(to),
        baseline_through: None,
        baseline_minutes: 0,
        warmup_minutes: policy.warmup_minutes,
    };
    let unreadable = |status, e: PortError, mut view: TrafficView| {
        view.status = status;
        view.error = Some(e.to_string());
        Traffic { view, baseline: None, verdicts: BTreeMap::new(), countries: BTreeMap::new() }
    };
    let baseline = match ctx.registry.baseline().await {
        Ok(b) => b,
        Err(e @ PortError::Corrupt { .. }) => return unreadable(TrafficStatus::BaselineCorrupt, e, view),
        Err(e) => return unreadable(TrafficStatus::Unreadable, e, view),
    };
    view.baseline_through = baseline.through.map(start_of);
    view.baseline_minutes = baseline.minutes;
    let tallies = match ctx.registry.tallies(from, to).await {
        Ok(t) => t,
        Err(e) => {
            let mut t = unreadable(TrafficStatus::Unreadable, e, view);
            t.baseline = Some(baseline);
            return t;
        }
    };
    let countries = carrier_traffic::countries_of(&tallies)
        .into_iter()
        .map(|(carrier, list)| {
            let list = list
                .into_iter()
                .map(|(country, t)| CountryTraffic {
                    country,
                    records: t.records,
                    delivered: t.delivered,
                    failed: t.failed,
                    late: t.slow,
                })
                .collect();
            (carrier, list)
        })
        .collect();
    let (verdicts, _) = carrier_traffic::judge(&baseline, &carrier_traffic::per_carrier(&tallies), now, policy);
    if baseline.minutes >= policy.warmup_minutes {
        view.status = TrafficStatus::Judged;
    }
    Traffic { view, baseline: Some(baseline), verdicts, countries }
}

fn usual(baseline: &Baseline, name: &str, policy: &TrafficPolicy) -> Option<UsualTraffic> {
    let c = baseline.carriers.get(name)?;
    let round1 = |x: f64| (x * 10.0).round() / 10.0;
    Some(UsualTraffic {
        share_percent: round1(baseline.share(name) * 100.0),
        records_per_minute: round1(c.rate * baseline.scale(policy)),
        late_percent: round1(if c.records > 0.0 { c.slow / c.records * 100.0 } else { 0.0 }),
    })
}

/// "12% of records, 10/min, 0.5% late"; a rate under one a minute is given per hour.
fn usual_cell(u: Option<&UsualTraffic>) -> String {
    let Some(u) = u else { return "—".to_owned() };
    let rate = if u.records_per_minute >= 1.0 {
        format!("{:.0}/min", u.records_per_minute)
    } else {
        format!("{:.0}/h", u.records_per_minute * 60.0)
    };
    format!("{}% of records, {rate}, {}% late", u.share_percent, u.late_percent)
}

/// "0 / 20 in 2 min" (records delivered on time / what the baseline predicts).
fn observed_cell(v: Option<&TrafficVerdict>) -> String {
    match v {
        Some(v) if v.judged || v.degraded => format!("{} / {:.0} in {} min", v.observed, v.expected, v.minutes),
        Some(v) => format!("{} records, not judged", v.window_records),
        None => "—".to_owned(),
    }
}

/// "US 120 (3 late), DE 4, +2 more": the judged window's records by country, busiest first.
fn countries_cell(countries: &[CountryTraffic]) -> String {
    const SHOWN: usize = 3;
    if countries.is_empty() {
        return "—".to_owned();
    }
    let mut cell: Vec<String> = countries
        .iter()
        .take(SHOWN)
        .map(|c| match c.late {
            0 => format!("{} {}", c.country, c.records),
            late => format!("{} {} ({late} late)", c.country, c.records),
        })
        .collect();
    if countries.len() > SHOWN {
        cell.push(format!("+{} more", countries.len() - SHOWN));
    }
    cell.join(", ")
}

fn signal_word(s: Option<Signal>) -> &'static str {
    match s {
        Some(Signal::Silent) => "silent",
        Some(Signal::Slow) => "slow",
        Some(Signal::AllSilent) => "all carriers silent",
        None => "",
    }
}

fn traffic_cell(v: Option<&TrafficVerdict>, status: TrafficStatus) -> String {
    match (status, v) {
        (TrafficStatus::BaselineCorrupt | TrafficStatus::Unreadable, _) => "unreadable".to_owned(),
        (_, Some(v)) if v.degraded => {
            let since = v.degraded_since.map_or_else(String::new, |t| format!(" since {}", output::time(t)));
            format!("DEGRADED ({}){since}", signal_word(v.signal))
        }
        (_, Some(v)) if v.judged => "ok".to_owned(),
        (TrafficStatus::WarmingUp, _) => "not judged (baseline warming up)".to_owned(),
        _ => "not judged (no baseline for it)".to_owned(),
    }
}

/// What the operator reads under the table about the traffic signal.
fn traffic_lines(t: &TrafficView, policy: &TrafficPolicy, recipients_table: &str) -> Vec<String> {
    let delete = format!(
        "aws dynamodb delete-item --table-name {recipients_table} --key '{{\"pk\":{{\"S\":\"CARRIERS\"}},\"sk\":{{\"S\":\"TRAFFIC_BASELINE\"}}}}'"
    );
    match t.status {
        TrafficStatus::BaselineCorrupt => vec![
            format!("TRAFFIC BASELINE UNREADABLE — {}", t.error.as_deref().unwrap_or("no detail")),
            format!(
                "The traffic signal (every application's delivery records) is not shown; the in-flight view above stands. \
                 The sweep cannot judge the traffic either until the item is readable: if it is corrupt, delete it \
                 ({delete}) and the sweep builds a fresh baseline, judging again after {} minutes.",
                t.warmup_minutes
            ),
        ],
        TrafficStatus::Unreadable => vec![format!(
            "the carrier traffic could not be read: {}; the traffic signal is not shown, the in-flight view above stands.",
            t.error.as_deref().unwrap_or("no detail")
        )],
        TrafficStatus::WarmingUp => vec![format!(
            "traffic baseline warming up: {} of {} minutes of the account's delivery records folded; no carrier is judged by the traffic until then",
            t.baseline_minutes, t.warmup_minutes
        )],
        TrafficStatus::Judged => vec![format!(
            "traffic = every application's delivery records in the account for the carrier, {}–{}: on time (under the {}-min delay line) / what its baseline predicts; \
             degraded = at most a fifth of expected and that few by chance less than once in ten million, or at least {} late records, a fifth of its records and five times its usual late share. \
             usual = its rolling baseline (share over ~{} h, rate over ~{} min), folded through {} from {} minutes",
            t.window_from.format("%H:%M"),
            (t.window_to + chrono::Duration::minutes(1)).format("%H:%M UTC"),
            policy.slow_after.as_secs() / 60,
            policy.min_slow,
            (policy.half_life_minutes / 60.0).round(),
            policy.rate_half_life_minutes.round(),
            output::opt_time(t.baseline_through),
            t.baseline_minutes
        )],
    }
}

pub async fn show(ctx: &Context, delayed_after: Duration) -> CliResult<()> {
    let now = Utc::now();
    let policy = CarrierPolicy::new(delayed_after);
    let traffic_policy = TrafficPolicy::new(delayed_after);
    let spinner = Spinner::start("reading the SMS of the last 3 hours…");
    let sent = ctx
        .ledger
        .accepted_since(tocsin::ports::before(now, policy.lookback), RECENT_SENDS_MAX)
        .await
        .map_err(CliError::port("reading the in-flight index"))?;
    let recipients: Vec<_> = sent.iter().map(|s| s.recipient.clone()).collect();
    let carriers =
        ctx.registry.carriers_of(&recipients).await.map_err(CliError::port("reading the numbers' carriers"))?;
    let holds = ctx.registry.active_holds(now).await.map_err(CliError::port("reading the carrier holds"))?;
    spinner.set_message("reading the account's delivery records per carrier…");
    let traffic = read_traffic(ctx, now, &traffic_policy).await;
    spinner.done();
    let mut health = carrier::assess(
        sent.iter().map(|s| {
            let name = carriers.get(s.recipient.expose()).map_or(carrier::UNKNOWN, |c| c.carrier.as_str());
            (s, name.to_owned())
        }),
        now,
        &policy,
    );
    // As the sweep does: either signal degrades a carrier, and what the carrier-delayed alarm
    // reads is what this table says.
    carrier_traffic::merge(&mut health, &traffic.verdicts);
    let classification = carrier::classify(&health);
    let views: Vec<CarrierView> = health
        .into_values()
        .map(|h| CarrierView {
            delayed_share_percent: (h.delayed_share() * 100.0).round(),
            held_until: holds.iter().find(|x| x.carrier == h.carrier).map(|x| x.until),
            usual: traffic.baseline.as_ref().and_then(|b| usual(b, &h.carrier, &traffic_policy)),
            traffic_verdict: traffic.verdicts.get(&h.carrier).cloned(),
            countries: traffic.countries.get(&h.carrier).cloned().unwrap_or_default(),
            health: h,
        })
        .collect();
    if ctx.json {
        return output::json(&CarriersView { at: now, classification, carriers: views, holds, traffic: traffic.view });
    }
    if views.is_empty() {
        output::line(
            "no SMS accepted by SNS in the last 3 hours, and no carrier judged from the account's delivery records",
        )?;
    } else {
        let mut t = output::table([
            "carrier",
            "in flight",
            "delayed / judged",
            "delayed %",
            "p95 delay",
            "usual (other apps)",
            "on time / expected",
            "countries (all apps)",
            "traffic",
            "state",
        ]);
        for v in &views {
            let h = &v.health;
            let state = match (h.degraded, v.held_until) {
                (_, Some(until)) => format!("HELD until {}", output::time(until)),
                (true, None) => "DEGRADED".to_owned(),
                (false, None) => "ok".to_owned(),
            };
            t.add_row([
                h.carrier.clone(),
                h.in_flight.to_string(),
                format!("{} / {}", h.delayed, h.judged),
                format!("{}", v.delayed_share_percent),
                format!("{} min", h.p95_delay_s.div_ceil(60)),
                usual_cell(v.usual.as_ref()),
                observed_cell(v.traffic_verdict.as_ref()),
                countries_cell(&v.countries),
                traffic_cell(v.traffic_verdict.as_ref(), traffic.view.status),
                state,
            ]);
        }
        output::line(t)?;
        for v in views.iter().filter(|v| v.health.degraded) {
            let h = &v.health;
            if h.in_flight_degraded(&policy) {
                output::line(h.summary(&policy))?;
            }
            if let Some(line) = h.traffic_summary.as_deref().filter(|_| h.traffic_degraded) {
                output::line(line)?;
            }
        }
        output::line(format!(
            "{classification:?}: judged = SMS accepted {}–{} min ago; degraded = at least {} delayed and at least {}% of the judged, or the traffic says so",
            policy.delayed_after.as_secs() / 60,
            (policy.delayed_after + policy.window).as_secs() / 60,
            policy.min_delayed,
            (policy.degraded_share * 100.0).round()
        ))?;
    }
    for l in traffic_lines(&traffic.view, &traffic_policy, &ctx.names.recipients_table) {
        output::line(l)?;
    }
    for h in &holds {
        output::line(format!("hold on {} until {} by {}: {}", h.carrier, output::time(h.until), h.operator, h.reason))?;
    }
    Ok(())
}

pub async fn hold(ctx: &Context, name: &str, reason: &str, duration: Duration) -> CliResult<()> {
    let name = name.trim();
    if carrier::slice_of(Some(name)) != name || name == carrier::UNKNOWN {
        return Err(CliError::Usage(format!("'{name}' is not a carrier name as `tocsin carriers` shows it")));
    }
    if duration.is_zero() || duration > MAX_HOLD {
        return Err(CliError::Usage(format!(
            "--for must be between 1s and {} hours: a hold is a stop-gap for an incident",
            MAX_HOLD.as_secs() / 3600
        )));
    }
    let operator = ctx.operator().await?;
    let since = Utc::now();
    let hold = CarrierHold {
        carrier: name.to_owned(),
        operator,
        reason: reason.to_owned(),
        since,
        until: tocsin::ports::after(since, duration),
    };
    ctx.registry.hold(&hold).await.map_err(CliError::port(format!("holding {name}")))?;
    audit_trail(ctx, name, &hold).await
}

pub async fn release(ctx: &Context, name: &str, reason: &str) -> CliResult<()> {
    let operator = ctx.operator().await?;
    let released = ctx
        .registry
        .release(name, &operator, reason, Utc::now())
        .await
        .map_err(CliError::port(format!("releasing {name}")))?;
    match released {
        Released::NotHeld => Err(CliError::Refused(format!("{name} is not on hold: nothing changed"))),
        Released::Released(hold) => audit_trail(ctx, name, &hold).await,
    }
}

async fn audit_trail(ctx: &Context, name: &str, hold: &CarrierHold) -> CliResult<()> {
    let history =
        ctx.registry.hold_history(name).await.map_err(CliError::port(format!("reading {name}'s audit trail")))?;
    if ctx.json {
        return output::json(&serde_json::json!({"hold": hold, "history": history}));
    }
    output::line(format!("Audit trail of {name}'s holds, oldest first:"))?;
    for l in history {
        output::line(l)?;
    }
    Ok(())
}
