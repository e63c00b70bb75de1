//! `tocsin breaker [resume --reason …]`: the stack's SMS breaker (`SmsPartsPerHour`,
//! [`tocsin::domain::spend`]). Shows the hour's parts against the ceiling, whether the breaker is
//! open (since when, at what count) and the operators' resumes. `resume` closes it — sending
//! resumes, the hour's count starts again — recorded with who (your AWS identity), why and when,
//! in one transaction with the meter. Alerts withheld while it was open stay escalated.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::domain::spend::{BreakerEvent, MeterReading, OpenBreaker};

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct View {
    /// `SmsPartsPerHour` as deployed (unknown when the stack's parameters could not be read).
    parts_per_hour: Option<u32>,
    parts_this_hour: u32,
    open: Option<OpenBreaker>,
    resumes: Vec<BreakerEvent>,
}

fn ceiling(ctx: &Context) -> Option<u32> {
    ctx.outputs.parameter("SmsPartsPerHour").and_then(|v| v.parse().ok())
}

/// The check `tocsin doctor` makes: a problem while the breaker is open.
pub fn doctor_check(
    reading: Result<MeterReading, String>,
    parts_per_hour: Option<u32>,
    now: DateTime<Utc>,
) -> super::doctor::Check {
    use super::doctor::{ok, problem};
    const CHECK: &str = "SMS breaker";
    let of = parts_per_hour.map_or_else(String::new, |c| format!(" of {c}"));
    match reading {
        Err(e) => problem(CHECK, format!("the meter could not be read: {e}")),
        Ok(MeterReading { open: Some(b), .. }) => problem(
            CHECK,
            format!(
                "OPEN since {} ({} parts counted in that hour{of}): every alert is withheld and escalated; \
                 tocsin breaker resume --reason … once pumping is ruled out (docs/operations.md, sms-breaker-open)",
                output::time(b.opened_at),
                b.hour_parts
            ),
        ),
        Ok(r) => ok(CHECK, format!("closed: {} parts this hour{of}", r.parts_in_hour_of(now))),
    }
}

pub async fn show(ctx: &Context) -> CliResult<()> {
    let reading = ctx.ledger.spend_meter().await.map_err(CliError::port("reading the SMS spend meter"))?;
    let resumes = ctx.ledger.breaker_history().await.map_err(CliError::port("reading the breaker's resumes"))?;
    let now = Utc::now();
    let view = View {
        parts_per_hour: ceiling(ctx),
        parts_this_hour: reading.parts_in_hour_of(now),
        open: reading.open.clone(),
        resumes,
    };
    if ctx.json {
        return output::json(&view);
    }
    let of = view.parts_per_hour.map_or_else(|| " (SmsPartsPerHour unknown)".to_owned(), |c| format!(" of {c}"));
    match &view.open {
        Some(b) => output::line(format!(
            "OPEN since {} ({} parts counted in that hour{of}; a send of {} would have passed it): \
             nothing is sent, every alert is withheld and escalated.\n\
             Rule out SMS pumping (docs/operations.md, sms-breaker-open), then: \
             tocsin breaker resume --reason …",
            output::time(b.opened_at),
            b.hour_parts,
            b.refused_parts
        ))?,
        None => output::line(format!("closed: {} parts this hour{of}", view.parts_this_hour))?,
    }
    if !view.resumes.is_empty() {
        let mut t = output::table(["resumed", "by", "opened", "why"]);
        for e in &view.resumes {
            t.add_row([output::time(e.at), e.operator.clone(), output::time(e.closed.opened_at), e.reason.clone()]);
        }
        output::line(t)?;
    }
    Ok(())
}

pub async fn resume(ctx: &Context, reason: &str) -> CliResult<()> {
    let operator = ctx.operator().await?;
    let at = Utc::now();
    let Some(event) =
        ctx.ledger.resume_sending(&operator, reason, at).await.map_err(CliError::port("resuming sending"))?
    else {
        return Err(CliError::Refused("the SMS breaker is not open: nothing changed".into()));
    };
    if ctx.json {
        return output::json(&event);
    }
    output::line(format!(
        "resumed by {operator} at {} ({reason}): the breaker opened at {} is closed and the hour's count starts \
         again. Alerts withheld meanwhile stay escalated: tocsin list --state suppressed, tocsin resend KEY",
        output::time(at),
        output::time(event.closed.opened_at)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::Verdict;
    use chrono::TimeZone;

    #[test]
    fn doctor_calls_an_open_breaker_a_problem_and_a_closed_one_ok_with_the_hours_parts() {
        let now = Utc.with_ymd_and_hms(2026, 12, 3, 14, 30, 0).single().expect("instant");
        let hour = tocsin::domain::spend::hour_of(now);
        let closed = MeterReading { hour: Some(hour), parts: 12, open: None };
        let c = doctor_check(Ok(closed), Some(1000), now);
        assert_eq!((c.verdict, c.detail.as_str()), (Verdict::Ok, "closed: 12 parts this hour of 1000"));
        let open = MeterReading {
            hour: Some(hour),
            parts: 998,
            open: Some(OpenBreaker { opened_at: now, hour_parts: 998, refused_parts: 3 }),
        };
        let c = doctor_check(Ok(open), Some(1000), now);
        assert_eq!(c.verdict, Verdict::Problem);
        assert!(c.detail.contains("OPEN since") && c.detail.contains("tocsin breaker resume"), "{}", c.detail);
        let c = doctor_check(Err("AccessDenied".into()), None, now);
        assert_eq!(c.verdict, Verdict::Problem, "doctor never passes what it could not see");
    }
}
