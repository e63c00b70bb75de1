//! `tocsin doctor --probe NUMBER`: proves the delivery-status loop on the account, hop by hop, with
//! one real SMS through the deployed stack.
//!
//! 1. **sent** — an alert (template `tocsin_probe@1`, event id `probe-<time>-<ref>`) is POSTed to
//!    the stack's API as a producer would (SigV4, `execute-api:Invoke`); intake answers 201.
//! 2. **accepted** — the sender published it: the ledger's intent carries SNS's message id.
//! 3. **logged** — SNS wrote its delivery-status record: `FilterLogEvents` finds the message id in
//!    `DirectPublishToPhoneNumber` or its `/Failure` group (the account's SMS preferences, the
//!    delivery-status role and the carrier all had to work).
//! 4. **applied** — the status function applied that record: the intent is `delivered` or
//!    `failed` (the log group's subscription filter and the function had to work).
//!
//! Each hop is observed through a real AWS read, polled every `--probe-poll` up to `--probe-hop-timeout`;
//! the first hop that does not happen in time is where the probe stops, and its line says what
//! usually breaks there. The number is shown masked; the probe is a real alert, and one that is
//! never delivered escalates at its deadline like any other.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use tocsin::domain::delivery::{DeliveryRecord, DeliveryStatus, parse_record};
use tocsin::domain::{IdempotencyKey, IntentRecord, PhoneNumber, State};
use tocsin::ports::IntentStore;

use super::doctor::{Check, Verdict};
use crate::context::Context;
use crate::error::{CliError, CliResult, describe};

/// The probe's template (in the compiled-in catalog, pinned in `published.lock`).
pub const TEMPLATE: (&str, u32) = ("tocsin_probe", 1);

/// How the probe runs.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    pub number: String,
    /// The longest wait for each hop.
    pub hop_timeout: Duration,
    /// How often a hop is looked for.
    pub poll: Duration,
    /// The probe alert's deadline (intake's syntax, e.g. `15m`).
    pub deadline: String,
}

/// What the probe found, for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub recipient: String,
    pub key: Option<String>,
    pub sns_message_id: Option<String>,
    /// The hop that did not happen in time (`sent`, `accepted`, `logged`, `applied`), or `None`.
    pub stopped_at: Option<&'static str>,
    /// The final state the status function applied, when it got that far.
    pub outcome: Option<State>,
}

const HOPS: [&str; 4] = ["sent", "accepted", "logged", "applied"];

fn hop_check(n: usize, verdict: Verdict, detail: String) -> Check {
    let check = match n {
        1 => "probe 1/4 sent through the API",
        2 => "probe 2/4 accepted by SNS",
        3 => "probe 3/4 delivery record in the log group",
        _ => "probe 4/4 applied by status",
    };
    Check { check, verdict, detail }
}

/// A short reference, printed in the SMS and in the event id, to tell probes apart.
fn reference() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// The alert request the probe sends.
pub fn request(number: &PhoneNumber, now: DateTime<Utc>, reference: &str, deadline: &str) -> Value {
    json!({
        "event_id": format!("probe-{}-{reference}", now.format("%Y%m%dT%H%M%SZ")),
        "template": {"name": TEMPLATE.0, "version": TEMPLATE.1},
        "variables": {"ref": reference},
        "recipient": number.expose(),
        "deadline": deadline,
    })
}

/// A function's name from the stack's outputs (template.yaml names them `<stack>-<function>`).
fn function(ctx: &Context, output: &str, suffix: &str) -> String {
    ctx.outputs.get(output).map_or_else(|| format!("{}-{suffix}", ctx.names.stack), str::to_owned)
}

fn seconds(since: Instant) -> String {
    format!("{:.1} s", since.elapsed().as_secs_f64())
}

/// Polls `look` until it answers `Some`, at most `timeout`.
async fn poll<T, F, Fut>(timeout: Duration, every: Duration, mut look: F) -> CliResult<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = CliResult<Option<T>>>,
{
    let until = Instant::now() + timeout;
    loop {
        if let Some(found) = look().await? {
            return Ok(Some(found));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        tokio::time::sleep(every.min(until.saturating_duration_since(Instant::now()))).await;
    }
}

async fn intent(ctx: &Context, key: &IdempotencyKey) -> CliResult<Option<IntentRecord>> {
    ctx.ledger.get(key).await.map_err(CliError::port(format!("reading the probe's intent {key}")))
}

/// The probe's delivery record in either delivery-status group (its message id as a quoted term:
/// a pre-filter; the parsed record decides). (group, record)
async fn record(
    logs: &aws_sdk_cloudwatchlogs::Client,
    groups: &[String; 2],
    message_id: &str,
    since: DateTime<Utc>,
) -> CliResult<Option<(String, DeliveryRecord)>> {
    for group in groups {
        let out = logs
            .filter_log_events()
            .log_group_name(group)
            .filter_pattern(format!("\"{message_id}\""))
            .start_time((since - chrono::Duration::minutes(1)).timestamp_millis())
            .send()
            .await;
        let page = match out {
            Ok(p) => p,
            Err(e) if describe(&e).contains("ResourceNotFoundException") => continue,
            Err(e) => return Err(CliError::aws("CloudWatch Logs FilterLogEvents")(e)),
        };
        for ev in page.events() {
            if let Ok(r) = parse_record(ev.message().unwrap_or_default())
                && r.message_id == message_id
            {
                return Ok(Some((group.clone(), r)));
            }
        }
    }
    Ok(None)
}

/// Runs the probe; one check line per hop reached (the last a problem when it stopped there).
pub async fn run(ctx: &Context, settings: &ProbeSettings, checks: &mut Vec<Check>) -> CliResult<ProbeReport> {
    let number = PhoneNumber::parse(&settings.number).map_err(|e| {
        CliError::Usage(format!("--probe {}: {e}", tocsin::domain::phone::mask_phone_like(&settings.number)))
    })?;
    let groups = [
        ctx.outputs.require("SmsSuccessLogGroupName")?.to_owned(),
        ctx.outputs.require("SmsFailureLogGroupName")?.to_owned(),
    ];
    let mut report =
        ProbeReport { recipient: number.masked(), key: None, sns_message_id: None, stopped_at: None, outcome: None };
    let stop = |report: &mut ProbeReport, checks: &mut Vec<Check>, n: usize, detail: String| {
        report.stopped_at = Some(HOPS[n - 1]);
        checks.push(hop_check(n, Verdict::Problem, format!("{detail} (the probe stopped at hop {n} of 4)")));
    };
    let timeout = humantime::format_duration(settings.hop_timeout);
    let started = Instant::now();

    // 1. sent
    let body = request(&number, Utc::now(), &reference(), &settings.deadline);
    let (status, answer) = super::send::post(ctx, &body, settings.hop_timeout).await?;
    let key = match (status, answer.get("idempotency_key").and_then(Value::as_str)) {
        (200 | 201, Some(k)) => IdempotencyKey::parse(k).map_err(|e| CliError::Aws {
            operation: "POST AlertApiUrl",
            message: format!("intake answered key {k}: {e}"),
        })?,
        (403, _) => {
            stop(&mut report, checks, 1, super::send::forbidden(ctx).await);
            return Ok(report);
        }
        _ => {
            stop(&mut report, checks, 1, format!("intake answered {status}: {answer}"));
            return Ok(report);
        }
    };
    report.key = Some(key.to_string());
    checks.push(hop_check(
        1,
        Verdict::Ok,
        format!("intent {} to {} ({status}), {}", key.short(), number.masked(), seconds(started)),
    ));

    // 2. accepted: the sender recorded SNS's message id (or SNS refused it).
    let sent = poll(settings.hop_timeout, settings.poll, || async {
        Ok(intent(ctx, &key).await?.filter(|r| {
            r.status.sns_message_id.is_some()
                || matches!(r.status.state, State::Failed | State::Suppressed | State::Stale)
        }))
    })
    .await?;
    let (message_id, accepted_at) = match sent {
        Some(r) if r.status.sns_message_id.is_some() => {
            let id = r.status.sns_message_id.clone().unwrap_or_default();
            (id, r.status.accepted_at.unwrap_or_else(Utc::now))
        }
        Some(r) => {
            let why = r.status.last_error.clone().unwrap_or_else(|| r.status.state.to_string());
            stop(&mut report, checks, 2, format!("not sent: {} ({why}); tocsin show {}", r.status.state, key.short()));
            return Ok(report);
        }
        None => {
            let state = intent(ctx, &key).await?.map_or_else(|| "missing".to_owned(), |r| r.status.state.to_string());
            stop(
                &mut report,
                checks,
                2,
                format!(
                    "no SNS message id after {timeout} (state {state}): the sender has not published it — the send \
                     queue, the sender's errors (aws logs tail /aws/lambda/{}), throttling",
                    function(ctx, "SenderFunctionName", "sender")
                ),
            );
            return Ok(report);
        }
    };
    report.sns_message_id = Some(message_id.clone());
    checks.push(hop_check(2, Verdict::Ok, format!("message id {message_id}, {}", seconds(started))));

    // 3. logged: SNS wrote the delivery-status record.
    let logs = aws_sdk_cloudwatchlogs::Client::new(&ctx.sdk);
    let logged = poll(settings.hop_timeout, settings.poll, || record(&logs, &groups, &message_id, accepted_at)).await?;
    let Some((group, rec)) = logged else {
        stop(
            &mut report,
            checks,
            3,
            format!(
                "no delivery-status record for {message_id} in {} or its /Failure group after {timeout}: SNS is not \
                 logging SMS delivery status (the SMS preferences above: delivery-status role, success sampling \
                 100), or the carrier has not answered yet (try a longer --probe-hop-timeout)",
                groups[0]
            ),
        );
        return Ok(report);
    };
    let said = match (&rec.status, rec.provider_response.as_deref()) {
        (s, Some(why)) => format!("{} ({why})", s.as_str()),
        (s, None) => s.as_str().to_owned(),
    };
    checks.push(hop_check(3, Verdict::Ok, format!("{said} in {group}, {}", seconds(started))));

    // 4. applied: the status function moved the intent to its final state.
    let applied = poll(settings.hop_timeout, settings.poll, || async {
        Ok(intent(ctx, &key).await?.filter(|r| matches!(r.status.state, State::Delivered | State::Failed)))
    })
    .await?;
    let Some(done) = applied else {
        stop(
            &mut report,
            checks,
            4,
            format!(
                "the record is in {group} but the status function has not applied it after {timeout}: the log \
                 group's subscription filter (the log-group lines above), the function's errors (aws logs tail \
                 /aws/lambda/{}), the status-failures queue",
                function(ctx, "StatusFunctionName", "status")
            ),
        );
        return Ok(report);
    };
    report.outcome = Some(done.status.state);
    let verdict = match (&rec.status, done.status.state) {
        (DeliveryStatus::Success, State::Delivered) => Verdict::Ok,
        _ => Verdict::Problem,
    };
    let detail = match done.status.state {
        State::Delivered => format!("delivered to {}, {} after sending", number.masked(), seconds(started)),
        state => format!(
            "{state}: {} — the loop works, but this SMS did not arrive (tocsin show {})",
            done.status.last_error.as_deref().unwrap_or("no reason recorded"),
            key.short()
        ),
    };
    checks.push(hop_check(4, verdict, detail));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_request_names_its_template_a_fresh_event_id_and_the_number() {
        let n = PhoneNumber::parse("+14155550100").expect("number");
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").map(|d| d.with_timezone(&Utc)).expect("t");
        let r = request(&n, now, "3f9a0c12", "15m");
        assert_eq!(r["event_id"], "probe-20261201T100000Z-3f9a0c12");
        assert_eq!(r["template"], json!({"name": "tocsin_probe", "version": 1}));
        assert_eq!(r["variables"], json!({"ref": "3f9a0c12"}));
        let t = tocsin::domain::template::Catalog::builtin().get(TEMPLATE.0, TEMPLATE.1).expect("in the catalog");
        assert_eq!(t.variables(), std::collections::BTreeSet::from(["ref"]));
        assert_ne!(reference(), reference(), "every probe is a new event");
    }
}
