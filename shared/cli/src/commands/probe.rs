//! `tocsin doctor --probe NUMBER` (and `--simulator`): proves the delivery loop on the account,
//! hop by hop, with one real SMS through the deployed stack.
//!
//! 1. **sent** — an alert (template `tocsin_probe@1`, event id `probe-<time>-<ref>`) is POSTed to
//!    the stack's API as a producer would (SigV4, `execute-api:Invoke`); intake answers 201.
//! 2. **accepted** — the sender handed it to the provider: the ledger's intent carries the
//!    provider's message id (or the provider's refusal, which says what in the account is wrong).
//! 3. **logged** — the provider wrote what became of it. SNS: its delivery-status record,
//!    `FilterLogEvents` on the message id in `DirectPublishToPhoneNumber` or its `/Failure` group.
//!    End User Messaging: its events in the stack's own event group, found by the alert's key —
//!    the key the sender put in the message's `Context`, which every event echoes — until a final
//!    one; the line names each event and the origination number the SMS left from.
//! 4. **applied** — the status function applied it: the intent is `delivered` or `failed`.
//! 5. (the failure simulator only) **escalated** — the sweep escalated the failed alert as it
//!    escalates any (on-call is paged), and doctor acknowledges it, naming itself as the reason.
//!
//! `--simulator` (End User Messaging) sends two such probes from the account's SIMULATOR origination
//! number to AWS's simulator destinations ([`super::eum::SIMULATOR_SUCCESS`], which must be
//! delivered, and [`super::eum::SIMULATOR_FAILURE`], which must fail): a real account proves the
//! whole loop, failure path included, without a phone. A failure event suppresses its number like
//! any permanent failure; the next `--simulator` re-enables the failure simulator first (audited).
//!
//! Each hop is observed through a real AWS read, polled every `--probe-poll` up to
//! `--probe-hop-timeout`; the first hop that does not happen in time is where the probe stops,
//! and its line says what usually breaks there. Numbers are shown masked; the probe is a real
//! alert, and one that is never delivered escalates at its deadline like any other.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use tocsin::adapters::eum::EumEventSearch;
use tocsin::config::SendingProvider;
use tocsin::domain::delivery::{DeliveryRecord, DeliveryStatus, parse_record};
use tocsin::domain::phone::mask_phone_like;
use tocsin::domain::reconcile::Window;
use tocsin::domain::{IdempotencyKey, IntentRecord, PhoneNumber, State};
use tocsin::ports::{DeliveryLogSearch, IntentStore, RecipientRegistry, SearchFor};

use super::doctor::{Check, Verdict, problem};
use crate::context::Context;
use crate::error::{CliError, CliResult, describe};
use crate::output::mask_numbers_in;

/// The probe's template (in the compiled-in catalog, pinned in `published.lock`).
pub const TEMPLATE: (&str, u32) = ("tocsin_probe", 1);

/// What the probe must end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// A phone, or AWS's success simulator: delivered.
    Delivered,
    /// AWS's failure simulator: failed, then escalated (and acknowledged by doctor).
    Failed,
}

/// Which probe it is, for its lines' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Probe,
    SimulatorSuccess,
    SimulatorFailure,
}

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
    pub expect: Expect,
}

/// What the probe found, for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub kind: Kind,
    pub provider: &'static str,
    pub recipient: String,
    /// The number the SMS left from (masked), as the provider says it; or what the stack names.
    pub origination: Option<String>,
    pub key: Option<String>,
    /// The provider's message id.
    pub message_id: Option<String>,
    /// End User Messaging: the events seen, in order (`TEXT_SUCCESSFUL`, `TEXT_DELIVERED`, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// The hop that did not happen in time (`sent`, `accepted`, `logged`, `applied`,
    /// `escalated`), or `None`.
    pub stopped_at: Option<&'static str>,
    /// The final state the status function applied, when it got that far.
    pub outcome: Option<State>,
    /// The failure simulator's escalation, acknowledged by doctor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<bool>,
}

const HOPS: [&str; 5] = ["sent", "accepted", "logged", "applied", "escalated"];

/// A hop's line name: which probe, which provider, which hop of how many.
fn hop_name(kind: Kind, eum: bool, n: usize) -> &'static str {
    match (kind, eum, n) {
        (Kind::Probe, _, 1) => "probe 1/4 sent through the API",
        (Kind::Probe, false, 2) => "probe 2/4 accepted by SNS",
        (Kind::Probe, false, 3) => "probe 3/4 delivery record in the log group",
        (Kind::Probe, true, 2) => "probe 2/4 accepted by End User Messaging",
        (Kind::Probe, true, 3) => "probe 3/4 events in the stack's event group",
        (Kind::Probe, _, _) => "probe 4/4 applied by status",
        (Kind::SimulatorSuccess, _, 1) => "simulator probe (success) 1/4 sent through the API",
        (Kind::SimulatorSuccess, _, 2) => "simulator probe (success) 2/4 accepted by End User Messaging",
        (Kind::SimulatorSuccess, _, 3) => "simulator probe (success) 3/4 events in the stack's event group",
        (Kind::SimulatorSuccess, _, _) => "simulator probe (success) 4/4 applied by status",
        (Kind::SimulatorFailure, _, 1) => "simulator probe (failure) 1/5 sent through the API",
        (Kind::SimulatorFailure, _, 2) => "simulator probe (failure) 2/5 accepted by End User Messaging",
        (Kind::SimulatorFailure, _, 3) => "simulator probe (failure) 3/5 events in the stack's event group",
        (Kind::SimulatorFailure, _, 4) => "simulator probe (failure) 4/5 applied by status",
        (Kind::SimulatorFailure, _, _) => "simulator probe (failure) 5/5 escalated and acknowledged",
    }
}

/// A short reference, printed in the SMS and in the event id, to tell probes apart.
fn reference() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// The alert request the probe sends; `origination` names the number it must leave from.
pub fn request(
    number: &PhoneNumber,
    now: DateTime<Utc>,
    reference: &str,
    deadline: &str,
    origination: Option<&str>,
) -> Value {
    let mut r = json!({
        "event_id": format!("probe-{}-{reference}", now.format("%Y%m%dT%H%M%SZ")),
        "template": {"name": TEMPLATE.0, "version": TEMPLATE.1},
        "variables": {"ref": reference},
        "recipient": number.expose(),
        "deadline": deadline,
    });
    if let Some(o) = origination {
        r["sms"] = json!({ "origination_number": o });
    }
    r
}

/// Whether intake refused the request's origination number as outside the stack's SMS policy.
fn origination_refused(answer: &Value) -> bool {
    refused_field(answer, "sms.origination_number")
}

/// Whether intake refused the request's `field` as not allowed by the deployment.
fn refused_field(answer: &Value, field: &str) -> bool {
    answer["error"]["fields"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f["field"] == field && f["code"] == "not_allowed"))
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

/// The probe's delivery record in either SNS delivery-status group (its message id as a quoted
/// term: a pre-filter; the parsed record decides). (group, record)
async fn sns_record(
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

/// One End User Messaging event of the probe's SMS, as the line tells it.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    at_ms: i64,
    event_type: String,
    is_final: bool,
    origination: Option<String>,
    status: DeliveryStatus,
    said: Option<String>,
    stack: Option<String>,
}

/// The probe's events in the stack's event group, found by the alert's key (or its digest), oldest
/// first. The search keeps only events whose context names the alert.
async fn eum_events(search: &EumEventSearch, record: &IntentRecord, since: DateTime<Utc>) -> CliResult<Vec<Event>> {
    let what = SearchFor {
        recipient: &record.intent.recipient,
        key: &record.intent.key,
        digest: record.status.digest_id.as_ref(),
    };
    let window = Window { from: since - chrono::Duration::minutes(1), to: Utc::now() + chrono::Duration::minutes(1) };
    let found = search.records_for(what, window, 50).await.map_err(|e| CliError::Aws {
        operation: "CloudWatch Logs FilterLogEvents (the stack's event group)",
        message: format!("{e:?}"),
    })?;
    let mut events: Vec<Event> = found
        .into_iter()
        .map(|f| {
            // The fields the line shows and DeliveryRecord does not keep: read from the event itself.
            let raw: Value = serde_json::from_str(&f.message).unwrap_or(Value::Null);
            Event {
                at_ms: f.timestamp_ms,
                event_type: raw["eventType"].as_str().unwrap_or("?").to_owned(),
                is_final: raw["isFinal"].as_bool().unwrap_or(false),
                origination: raw["originationPhoneNumber"].as_str().map(str::to_owned),
                status: f.record.status.clone(),
                said: f.record.provider_response.clone(),
                stack: f.record.context.as_ref().map(|c| c.stack.clone()),
            }
        })
        .collect();
    events.sort_by_key(|e| e.at_ms);
    Ok(events)
}

/// The events as the line tells them: `TEXT_SUCCESSFUL → TEXT_DELIVERED (final)`.
fn event_chain(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| if e.is_final { format!("{} (final)", e.event_type) } else { e.event_type.clone() })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Runs one probe; one check line per hop reached (the last a problem when it stopped there).
pub async fn run(
    ctx: &Context,
    provider: &SendingProvider,
    settings: &ProbeSettings,
    checks: &mut Vec<Check>,
) -> CliResult<ProbeReport> {
    run_one(ctx, provider, settings, Kind::Probe, None, checks).await
}

async fn run_one(
    ctx: &Context,
    provider: &SendingProvider,
    settings: &ProbeSettings,
    kind: Kind,
    origination: Option<&str>,
    checks: &mut Vec<Check>,
) -> CliResult<ProbeReport> {
    let number = PhoneNumber::parse(&settings.number)
        .map_err(|e| CliError::Usage(format!("--probe {}: {e}", mask_phone_like(&settings.number))))?;
    let eum = matches!(provider, SendingProvider::EndUserMessaging(_));
    let total = if kind == Kind::SimulatorFailure { 5 } else { 4 };
    let mut report = ProbeReport {
        kind,
        provider: super::doctor::provider_name(provider),
        recipient: number.masked(),
        origination: None,
        key: None,
        message_id: None,
        events: Vec::new(),
        stopped_at: None,
        outcome: None,
        acknowledged: None,
    };
    let stop = |report: &mut ProbeReport, checks: &mut Vec<Check>, n: usize, detail: String| {
        report.stopped_at = Some(HOPS[n - 1]);
        checks.push(Check {
            check: hop_name(kind, eum, n),
            verdict: Verdict::Problem,
            detail: format!("{detail} (the probe stopped at hop {n} of {total})"),
        });
    };
    let hop = |checks: &mut Vec<Check>, n: usize, verdict: Verdict, detail: String| {
        checks.push(Check { check: hop_name(kind, eum, n), verdict, detail });
    };
    let timeout = humantime::format_duration(settings.hop_timeout);
    let started = Instant::now();

    // 1. sent
    let body = request(&number, Utc::now(), &reference(), &settings.deadline, origination);
    let (status, answer) = super::send::post(ctx, &body, settings.hop_timeout).await?;
    let key = match (status, answer.get("idempotency_key").and_then(Value::as_str)) {
        (200 | 201, Some(k)) => IdempotencyKey::parse(k).map_err(|e| CliError::Aws {
            operation: "POST AlertApiUrl",
            message: format!("intake answered key {k}: {e}"),
        })?,
        (403, _) => {
            stop(&mut report, checks, 1, super::send::forbidden(ctx, &answer).await);
            return Ok(report);
        }
        _ => {
            let hint = if origination_refused(&answer) {
                " — the stack's SMS policy refuses the probe's origination number: add it to \
                 SmsAllowedOriginationNumbers (sam deploy --parameter-overrides …) and run again"
            } else if refused_field(&answer, "recipient") {
                " — the probe's number is not on the stack's recipients roster: tocsin recipients allow NUMBER \
                 --reason … (intake sees it within a minute), then run again"
            } else {
                ""
            };
            let answer = mask_numbers_in(&answer.to_string());
            stop(&mut report, checks, 1, format!("intake answered {status}: {answer}{hint}"));
            return Ok(report);
        }
    };
    report.key = Some(key.to_string());
    hop(
        checks,
        1,
        Verdict::Ok,
        format!("intent {} to {} ({status}), {}", key.short(), number.masked(), seconds(started)),
    );

    // 2. accepted: the sender recorded the provider's message id (or the provider refused it).
    let sent = poll(settings.hop_timeout, settings.poll, || async {
        Ok(intent(ctx, &key).await?.filter(|r| {
            r.status.sns_message_id.is_some()
                || matches!(r.status.state, State::Failed | State::Suppressed | State::Stale)
        }))
    })
    .await?;
    let provider_name = if eum { "End User Messaging" } else { "SNS" };
    let (sent, message_id, accepted_at) = match sent {
        Some(r) if r.status.sns_message_id.is_some() => {
            let id = r.status.sns_message_id.clone().unwrap_or_default();
            let at = r.status.accepted_at.unwrap_or_else(Utc::now);
            (r, id, at)
        }
        Some(r) => {
            let why = r.status.last_error.clone().unwrap_or_else(|| r.status.state.to_string());
            stop(
                &mut report,
                checks,
                2,
                format!(
                    "not sent: {} ({}); tocsin show {} — and tocsin preflight, which names the account's blockers",
                    r.status.state,
                    mask_numbers_in(&why),
                    key.short()
                ),
            );
            return Ok(report);
        }
        None => {
            let state = intent(ctx, &key).await?.map_or_else(|| "missing".to_owned(), |r| r.status.state.to_string());
            // The sender may have said why it waits (storm mode's per-recipient budget, throttling).
            let last = ctx.ledger.observations(&key).await.ok().and_then(|t| t.last().map(|o| o.summary()));
            let said = last.map(|l| format!("; its last word: {}", mask_numbers_in(&l))).unwrap_or_default();
            stop(
                &mut report,
                checks,
                2,
                format!(
                    "no {provider_name} message id after {timeout} (state {state}{said}): the sender has not sent it — \
                     the send queue, the sender's errors (aws logs tail /aws/lambda/{}), throttling, storm mode's \
                     per-recipient budget",
                    function(ctx, "SenderFunctionName", "sender")
                ),
            );
            return Ok(report);
        }
    };
    report.message_id = Some(message_id.clone());
    // Where it left from, as far as is known now (End User Messaging's events say it exactly).
    let configured = match provider {
        SendingProvider::Sns => ctx.outputs.parameter("SmsOriginationNumber").map(str::to_owned),
        // The stack's SmsOriginationNumber wins over its SmsOriginationIdentity (the sender's order).
        SendingProvider::EndUserMessaging(s) => {
            ctx.outputs.parameter("SmsOriginationNumber").map(str::to_owned).or_else(|| s.origination_identity.clone())
        }
    };
    let leaves_from = match (origination, &configured, eum) {
        (Some(o), _, _) => format!("from {} (the request's origination number)", mask_phone_like(o)),
        (None, Some(c), false) => format!("from {} (SmsOriginationNumber)", mask_phone_like(c)),
        (None, None, false) => {
            "from a number SNS chose (no SmsOriginationNumber; SNS's records do not say which)".to_owned()
        }
        (None, Some(c), true) => format!("from {} (the stack's origination)", mask_numbers_in(c)),
        (None, None, true) => "from an identity End User Messaging chose (no SmsOriginationIdentity)".to_owned(),
    };
    report.origination = match (origination, &configured) {
        (Some(o), _) => Some(mask_phone_like(o)),
        (None, Some(c)) if !eum => Some(mask_phone_like(c)),
        _ => None,
    };
    hop(checks, 2, Verdict::Ok, format!("message id {message_id}, {leaves_from}, {}", seconds(started)));

    // 3. logged: the provider wrote what became of it.
    let (rec_status, logged_at) = match provider {
        SendingProvider::Sns => {
            let groups = [
                ctx.outputs.require("SmsSuccessLogGroupName")?.to_owned(),
                ctx.outputs.require("SmsFailureLogGroupName")?.to_owned(),
            ];
            let logs = aws_sdk_cloudwatchlogs::Client::new(&ctx.sdk);
            let logged =
                poll(settings.hop_timeout, settings.poll, || sns_record(&logs, &groups, &message_id, accepted_at))
                    .await?;
            let Some((group, rec)) = logged else {
                stop(
                    &mut report,
                    checks,
                    3,
                    format!(
                        "no delivery-status record for {message_id} in {} or its /Failure group after {timeout}: SNS \
                         is not logging SMS delivery status (the SMS preferences above: delivery-status role, success \
                         sampling 100), or the carrier has not answered yet (try a longer --probe-hop-timeout)",
                        groups[0]
                    ),
                );
                return Ok(report);
            };
            let said = match (&rec.status, rec.provider_response.as_deref()) {
                (s, Some(why)) => format!("{} ({why})", s.as_str()),
                (s, None) => s.as_str().to_owned(),
            };
            hop(checks, 3, Verdict::Ok, format!("{said} in {group}, {}", seconds(started)));
            (rec.status, group)
        }
        SendingProvider::EndUserMessaging(_) => {
            let group = ctx.outputs.require("SmsEventLogGroupName")?.to_owned();
            let search = EumEventSearch::new(aws_sdk_cloudwatchlogs::Client::new(&ctx.sdk), &group, &ctx.names.stack);
            // Polled by hand: the events seen so far are kept for the line, final or not.
            let until = Instant::now() + settings.hop_timeout;
            let (seen, final_event) = loop {
                let events = eum_events(&search, &sent, accepted_at).await?;
                if events.iter().any(|e| e.is_final) {
                    break (events, Some(()));
                }
                if Instant::now() >= until {
                    break (events, None);
                }
                tokio::time::sleep(settings.poll.min(until.saturating_duration_since(Instant::now()))).await;
            };
            report.events = seen.iter().map(|e| e.event_type.clone()).collect();
            if seen.is_empty() {
                stop(
                    &mut report,
                    checks,
                    3,
                    format!(
                        "no event naming this alert's key in {group} after {timeout}: the configuration set's event \
                         destination (the configuration set line above) or its role is not writing there, or End User \
                         Messaging has not written yet (try a longer --probe-hop-timeout)"
                    ),
                );
                return Ok(report);
            }
            let from = seen.iter().find_map(|e| e.origination.clone());
            if let Some(f) = &from {
                report.origination = Some(mask_phone_like(f));
            }
            if final_event.is_none() {
                stop(
                    &mut report,
                    checks,
                    3,
                    format!(
                        "{} in {group}, but no final event after {timeout}: the carrier has not answered (AWS reports \
                         UNKNOWN itself after 72 hours)",
                        event_chain(&seen)
                    ),
                );
                return Ok(report);
            }
            let last = seen.iter().rev().find(|e| e.is_final).cloned().unwrap_or_else(|| seen[seen.len() - 1].clone());
            let stacks: Vec<&str> = seen.iter().filter_map(|e| e.stack.as_deref()).collect();
            let context = if stacks.iter().all(|s| *s == ctx.names.stack) {
                format!("each naming {} and this alert's key in its context", ctx.names.stack)
            } else {
                format!("naming stack(s) {} in their context", stacks.join(", "))
            };
            hop(
                checks,
                3,
                Verdict::Ok,
                format!(
                    "{} from {}, {context}, in {group}{}, {}",
                    event_chain(&seen),
                    from.as_deref().map_or_else(|| "an unnamed number".to_owned(), mask_phone_like),
                    last.said.as_deref().map(|s| format!(" ({})", mask_numbers_in(s))).unwrap_or_default(),
                    seconds(started)
                ),
            );
            (last.status, group)
        }
    };

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
                "the record is in {logged_at} but the status function has not applied it after {timeout}: the log \
                 group's subscription filter (the log-group lines above), the function's errors (aws logs tail \
                 /aws/lambda/{}), the status-failures queue",
                function(ctx, "StatusFunctionName", "status")
            ),
        );
        return Ok(report);
    };
    report.outcome = Some(done.status.state);
    let why = done.status.last_error.as_deref().map(mask_numbers_in).unwrap_or_else(|| "no reason recorded".into());
    let (verdict, detail) = match (settings.expect, &rec_status, done.status.state) {
        (Expect::Delivered, DeliveryStatus::Success, State::Delivered) => {
            (Verdict::Ok, format!("delivered to {}, {} after sending", number.masked(), seconds(started)))
        }
        (Expect::Failed, DeliveryStatus::Failure, State::Failed) => (
            Verdict::Ok,
            format!(
                "failed, as AWS's failure simulator must ({why}): failures are read and applied, {}",
                seconds(started)
            ),
        ),
        (Expect::Delivered, _, state) => (
            Verdict::Problem,
            format!("{state}: {why} — the loop works, but this SMS did not arrive (tocsin show {})", key.short()),
        ),
        (Expect::Failed, _, state) => (
            Verdict::Problem,
            format!(
                "{state}, but AWS's failure simulator must fail: the failure path is not proven (tocsin show {})",
                key.short()
            ),
        ),
    };
    let proven = verdict == Verdict::Ok;
    hop(checks, 4, verdict, detail);
    if kind != Kind::SimulatorFailure || !proven {
        return Ok(report);
    }

    // 5. escalated: the sweep escalates a failed alert like any; doctor acknowledges it.
    let escalated = poll(settings.hop_timeout, settings.poll, || async {
        Ok(intent(ctx, &key).await?.filter(|r| r.status.escalation.is_some()))
    })
    .await?;
    let Some(escalated) = escalated else {
        stop(
            &mut report,
            checks,
            5,
            format!(
                "failed but not escalated after {timeout}: the escalation sweep (aws logs tail /aws/lambda/{}, its \
                 schedule)",
                function(ctx, "EscalationFunctionName", "escalation")
            ),
        );
        return Ok(report);
    };
    let operator = ctx.operator().await?;
    let reason = "tocsin doctor --simulator: the failure simulator's escalation, expected";
    tocsin::services::operator::acknowledge(&ctx.ledger, &key, &operator, reason, Utc::now()).await.map_err(|e| {
        CliError::Refused(format!("acknowledging the failure probe's escalation {}: {e:?}", key.short()))
    })?;
    let spinner = crate::progress::Spinner::start("removing the failure probe's escalation from the queue…");
    let (deleted, _) = super::escalations::delete_messages_of(ctx, &key, &spinner).await?;
    spinner.done();
    report.acknowledged = Some(true);
    let queue = match deleted {
        0 => format!("its queue message was not there yet: tocsin escalations ack {} if the alarm stays", key.short()),
        n => format!("{} deleted from the escalation queue", crate::output::count(n, "message")),
    };
    hop(
        checks,
        5,
        Verdict::Ok,
        format!(
            "escalated ({}), on-call was paged as for any failed alert; acknowledged by {operator}, {queue}",
            escalated.status.escalation.as_ref().map(|e| mask_numbers_in(&e.reason)).unwrap_or_default()
        ),
    );
    Ok(report)
}

/// `doctor --simulator`: the loop on AWS's SMS simulator, once to succeed and once to fail.
pub async fn simulator(
    ctx: &Context,
    provider: &SendingProvider,
    settings: &impl Fn(String, Expect) -> ProbeSettings,
    checks: &mut Vec<Check>,
) -> CliResult<Vec<ProbeReport>> {
    const C: &str = "simulator probe";
    if !matches!(provider, SendingProvider::EndUserMessaging(_)) {
        return Err(CliError::Usage(format!(
            "stack {} sends through SNS: AWS's SMS simulator is End User Messaging's. Use --probe NUMBER",
            ctx.names.stack
        )));
    }
    let client = aws_sdk_pinpointsmsvoicev2::Client::new(&ctx.sdk);
    let identities = match super::eum::identities(&client).await {
        Ok(i) => i,
        Err(e) => {
            checks.push(problem(C, format!("cannot list the origination identities ({e})")));
            return Ok(Vec::new());
        }
    };
    // The simulator destinations below are US numbers: only a US simulator origination reaches them.
    let Some(origin) = identities.iter().find(|i| i.is_simulator() && i.active() && i.iso.as_deref() == Some("US"))
    else {
        let region = ctx.sdk.region().map(|r| r.to_string()).unwrap_or_default();
        checks.push(problem(
            C,
            format!(
                "the account has no ACTIVE US SIMULATOR origination number in {region}: aws pinpoint-sms-voice-v2 \
                 request-phone-number --iso-country-code US --message-type TRANSACTIONAL --number-capabilities SMS \
                 --number-type SIMULATOR (nothing was sent)"
            ),
        ));
        return Ok(Vec::new());
    };
    let from = origin.number.clone().unwrap_or_default();
    // A failure event suppresses its number like any permanent failure: the failure simulator is
    // re-enabled first (audited), or this run would only find it suppressed.
    let failure = PhoneNumber::parse(super::eum::SIMULATOR_FAILURE)
        .map_err(|e| CliError::Usage(format!("the failure simulator's number: {e}")))?;
    let suppressed =
        ctx.registry.suppression(&failure).await.map_err(CliError::port(format!("reading {}", failure.masked())))?;
    if suppressed.is_some() {
        let operator = ctx.operator().await?;
        let reason = "tocsin doctor --simulator: AWS's failure simulator number, suppressed by the previous probe";
        ctx.registry
            .re_enable(&failure, &operator, reason, Utc::now())
            .await
            .map_err(CliError::port(format!("re-enabling {}", failure.masked())))?;
    }
    let success = run_one(
        ctx,
        provider,
        &settings(super::eum::SIMULATOR_SUCCESS.to_owned(), Expect::Delivered),
        Kind::SimulatorSuccess,
        Some(&from),
        checks,
    )
    .await?;
    // An origination number sends a few message parts a second at most (a US toll-free number's is
    // 3; a simulator's is not documented): a second between the two keeps the second send from
    // being throttled behind the first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let failed = run_one(
        ctx,
        provider,
        &settings(super::eum::SIMULATOR_FAILURE.to_owned(), Expect::Failed),
        Kind::SimulatorFailure,
        Some(&from),
        checks,
    )
    .await?;
    Ok(vec![success, failed])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_request_names_its_template_a_fresh_event_id_and_the_number() {
        let n = PhoneNumber::parse("+14155550100").expect("number");
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").map(|d| d.with_timezone(&Utc)).expect("t");
        let r = request(&n, now, "3f9a0c12", "15m", None);
        assert_eq!(r["event_id"], "probe-20261201T100000Z-3f9a0c12");
        assert_eq!(r["template"], json!({"name": "tocsin_probe", "version": 1}));
        assert_eq!(r["variables"], json!({"ref": "3f9a0c12"}));
        assert!(r.get("sms").is_none(), "the stack's origination unless told");
        let t = tocsin::domain::template::Catalog::builtin().get(TEMPLATE.0, TEMPLATE.1).expect("in the catalog");
        assert_eq!(t.variables(), std::collections::BTreeSet::from(["ref"]));
        assert_ne!(reference(), reference(), "every probe is a new event");
    }

    #[test]
    fn a_simulator_probe_leaves_from_the_simulator_number_it_names() {
        let n = PhoneNumber::parse(super::super::eum::SIMULATOR_SUCCESS).expect("number");
        let r = request(&n, Utc::now(), "ab", "15m", Some("+12065550001"));
        assert_eq!(r["sms"], json!({"origination_number": "+12065550001"}));
    }

    #[test]
    fn an_origination_number_outside_the_stacks_policy_is_told_apart_from_other_refusals() {
        let refused = json!({"error": {"code": "validation_failed", "fields": [
            {"field": "sms.origination_number", "code": "not_allowed", "message": "…"}]}});
        assert!(origination_refused(&refused));
        let other = json!({"error": {"code": "validation_failed", "fields": [
            {"field": "recipient", "code": "invalid_phone_number", "message": "…"}]}});
        assert!(!origination_refused(&other));
        assert!(!origination_refused(&json!({"error": {"code": "unavailable"}})));
    }

    #[test]
    fn each_probe_names_its_hops_by_provider_and_the_failure_probe_has_five() {
        assert_eq!(hop_name(Kind::Probe, false, 2), "probe 2/4 accepted by SNS");
        assert_eq!(hop_name(Kind::Probe, true, 3), "probe 3/4 events in the stack's event group");
        assert!(hop_name(Kind::SimulatorFailure, true, 5).ends_with("5/5 escalated and acknowledged"));
        let events = [
            Event {
                at_ms: 1,
                event_type: "TEXT_SUCCESSFUL".into(),
                is_final: false,
                origination: None,
                status: DeliveryStatus::Pending("TEXT_SUCCESSFUL".into()),
                said: None,
                stack: None,
            },
            Event {
                at_ms: 2,
                event_type: "TEXT_DELIVERED".into(),
                is_final: true,
                origination: None,
                status: DeliveryStatus::Success,
                said: None,
                stack: None,
            },
        ];
        assert_eq!(event_chain(&events), "TEXT_SUCCESSFUL → TEXT_DELIVERED (final)");
    }
}
