//! `tocsin carriers [hold NAME --reason … [--for 2h] | release NAME --reason …]`: each carrier's
//! health as the sweep measures it (in flight, delayed share, state, holds), and the operator's
//! manual failover — a time-bounded, audited hold under which every new alert to the carrier's
//! numbers is escalated at once (the non-SMS paging path) while its SMS still goes out.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::domain::carrier::{self, CarrierHealth, CarrierHold, CarrierPolicy, MAX_HOLD};
use tocsin::ports::carriers::{CarrierBook, CarrierHolds, RecentSends, Released};

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
}

#[derive(Debug, Serialize)]
struct CarrierView {
    #[serde(flatten)]
    health: CarrierHealth,
    delayed_share_percent: f64,
    held_until: Option<DateTime<Utc>>,
}

pub async fn show(ctx: &Context, delayed_after: Duration) -> CliResult<()> {
    let now = Utc::now();
    let policy = CarrierPolicy::new(delayed_after);
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
    spinner.done();
    let health = carrier::assess(
        sent.iter().map(|s| {
            let name = carriers.get(s.recipient.expose()).map_or(carrier::UNKNOWN, |c| c.carrier.as_str());
            (s, name.to_owned())
        }),
        now,
        &policy,
    );
    let classification = carrier::classify(&health);
    let views: Vec<CarrierView> = health
        .into_values()
        .map(|h| CarrierView {
            delayed_share_percent: (h.delayed_share() * 100.0).round(),
            held_until: holds.iter().find(|x| x.carrier == h.carrier).map(|x| x.until),
            health: h,
        })
        .collect();
    if ctx.json {
        return output::json(&CarriersView { at: now, classification, carriers: views, holds });
    }
    if views.is_empty() {
        output::line("no SMS accepted by SNS in the last 3 hours")?;
    } else {
        let mut t = output::table(["carrier", "in flight", "delayed / judged", "delayed %", "p95 delay", "state"]);
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
                state,
            ]);
        }
        output::line(t)?;
        output::line(format!(
            "{classification:?}: judged = SMS accepted {}–{} min ago; degraded = at least {} delayed and at least {}% of the judged",
            policy.delayed_after.as_secs() / 60,
            (policy.delayed_after + policy.window).as_secs() / 60,
            policy.min_delayed,
            (policy.degraded_share * 100.0).round()
        ))?;
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
