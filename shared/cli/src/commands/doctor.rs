//! `tocsin doctor`: checks what on-call must be able to trust, one line per check, and exits 1
//! when any check finds a problem (warnings alone exit 0).
//!
//! - SMS preferences (SNS GetSMSAttributes): a delivery-status role set (this stack's, when the
//!   stack manages them), success sampling at 100 % (below it some deliveries are never logged),
//!   Transactional as the default type.
//! - The SMS sandbox (GetSMSSandboxAccountStatus, ListSMSSandboxPhoneNumbers): in it, only verified
//!   numbers receive SMS.
//! - Spend: the account's MonthlySpendLimit against this month's spend (CloudWatch GetMetricData,
//!   AWS/SNS SMSMonthToDateSpentUSD): SNS stops sending at the limit, on-call SMS included.
//! - Both delivery-status log groups exist with the stack's status function subscribed
//!   (DescribeLogGroups, DescribeSubscriptionFilters): without them no delivery is ever seen.
//! - Queues: escalations waiting, dead letters, parked rejects and status failures
//!   (GetQueueAttributes, which receives nothing).
//! - Alarms of this stack in ALARM (CloudWatch DescribeAlarms by the stack's alarm-name prefix).
//! - The on-call topic has a confirmed subscription (SNS ListSubscriptionsByTopic): an e-mail or
//!   webhook subscription SNS is still waiting to have confirmed pages nobody.
//! - The sender's reserved concurrency (Lambda GetFunctionConcurrency): a warning while none is
//!   reserved (ReserveSenderConcurrency=false, the default for accounts whose quota is 10).
//! - With `--probe NUMBER`, the delivery-status loop itself, hop by hop ([`super::probe`]).
//!
//! A check whose API call fails reports a problem saying so (e.g. a missing permission): doctor
//! never passes what it could not see.

use serde::Serialize;
use tocsin::domain::PhoneNumber;

use crate::args::DoctorArgs;
use crate::context::{Context, queue_depth, queue_name};
use crate::error::{CliResult, describe, exit};
use crate::output;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    Warning,
    Problem,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub verdict: Verdict,
    pub detail: String,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    stack: &'a str,
    ok: bool,
    problems: usize,
    checks: &'a [Check],
    #[serde(skip_serializing_if = "Option::is_none")]
    probe: Option<&'a super::probe::ProbeReport>,
}

pub(crate) fn ok(check: &'static str, detail: impl Into<String>) -> Check {
    Check { check, verdict: Verdict::Ok, detail: detail.into() }
}
pub(crate) fn warning(check: &'static str, detail: impl Into<String>) -> Check {
    Check { check, verdict: Verdict::Warning, detail: detail.into() }
}
pub(crate) fn problem(check: &'static str, detail: impl Into<String>) -> Check {
    Check { check, verdict: Verdict::Problem, detail: detail.into() }
}

pub async fn run(ctx: &Context, args: &DoctorArgs) -> CliResult<u8> {
    let spinner = crate::progress::Spinner::start("checking…");
    let sns = aws_sdk_sns::Client::new(&ctx.sdk);
    let mut checks = Vec::new();
    spinner.set_message(format!("SMS preferences… ({} checks done)", checks.len()));
    let limit = sms_preferences(ctx, &sns, &mut checks).await;
    spinner.set_message(format!("SMS sandbox… ({} checks done)", checks.len()));
    sandbox(&sns, &mut checks).await;
    spinner.set_message(format!("SMS spend… ({} checks done)", checks.len()));
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&ctx.sdk);
    checks.push(spend(&cloudwatch, limit).await);
    spinner.set_message(format!("delivery-status logs… ({} checks done)", checks.len()));
    delivery_logs(ctx, &mut checks).await;
    spinner.set_message(format!("queues… ({} checks done)", checks.len()));
    queues(ctx, &mut checks).await;
    spinner.set_message(format!("alarms… ({} checks done)", checks.len()));
    alarms(ctx, &cloudwatch, &mut checks).await;
    spinner.set_message(format!("on-call subscriptions… ({} checks done)", checks.len()));
    checks.push(alarm_subscriptions(ctx, &sns).await);
    spinner.set_message(format!("sender concurrency… ({} checks done)", checks.len()));
    checks.push(sender_concurrency(ctx).await);
    let probe = match &args.probe {
        Some(number) => {
            spinner.set_message(format!("probe: one SMS round the loop… ({} checks done)", checks.len()));
            let settings = super::probe::ProbeSettings {
                number: number.clone(),
                hop_timeout: args.probe_hop_timeout,
                poll: args.probe_poll,
                deadline: args.probe_deadline.clone(),
            };
            Some(super::probe::run(ctx, &settings, &mut checks).await?)
        }
        None => None,
    };
    spinner.done();

    let problems = checks.iter().filter(|c| c.verdict == Verdict::Problem).count();
    if ctx.json {
        let report =
            Report { stack: &ctx.names.stack, ok: problems == 0, problems, checks: &checks, probe: probe.as_ref() };
        output::json(&report)?;
    } else {
        for c in &checks {
            let tag = match c.verdict {
                Verdict::Ok => "ok     ",
                Verdict::Warning => "WARN   ",
                Verdict::Problem => "PROBLEM",
            };
            output::line(format!("{tag} {}: {}", c.check, c.detail))?;
        }
        output::line(match problems {
            0 => format!("{}: nothing to fix.", ctx.names.stack),
            n => format!("{}: {} to fix.", ctx.names.stack, output::count(n, "problem")),
        })?;
    }
    Ok(if problems == 0 { exit::OK } else { exit::REFUSED })
}

/// The account's SMS preferences; returns the monthly spend limit (USD) when it could be read.
async fn sms_preferences(ctx: &Context, sns: &aws_sdk_sns::Client, checks: &mut Vec<Check>) -> Option<f64> {
    const C: &str = "SMS preferences";
    let attrs = match sns.get_sms_attributes().send().await {
        Ok(out) => out.attributes.unwrap_or_default(),
        Err(e) => {
            checks.push(problem(C, format!("cannot read them (SNS GetSMSAttributes: {})", describe(&e))));
            return None;
        }
    };
    let get = |k: &str| attrs.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    match (get("DeliveryStatusIAMRole"), ctx.outputs.get("SmsDeliveryStatusRoleArn")) {
        (None, _) => checks.push(problem(
            "delivery-status role",
            "not set: SNS writes no delivery-status logs, so no SMS is ever seen delivered. Deploy with \
             ManageSmsPreferences=true (or set DeliveryStatusIAMRole by hand)",
        )),
        (Some(role), Some(ours)) if role != ours => checks.push(problem(
            "delivery-status role",
            format!("{role} is set, but this stack manages the preferences with {ours}: redeploy, or another stack changed them"),
        )),
        (Some(role), _) => checks.push(ok("delivery-status role", role)),
    }
    match get("DeliveryStatusSuccessSamplingRate") {
        Some("100") => checks.push(ok("success sampling", "100 %")),
        other => checks.push(problem(
            "success sampling",
            format!(
                "{}: below 100 % some delivered SMS are never logged and end as expired_unknown; set \
                 DeliveryStatusSuccessSamplingRate to 100",
                other.map_or_else(|| "not set".to_owned(), |v| format!("{v} %"))
            ),
        )),
    }
    match get("DefaultSMSType") {
        Some("Transactional") => checks.push(ok("default SMS type", "Transactional")),
        other => checks.push(warning(
            "default SMS type",
            format!(
                "{} (tocsin sends Transactional on every publish; other applications of the account get this default)",
                other.unwrap_or("not set")
            ),
        )),
    }
    let limit = get("MonthlySpendLimit").and_then(|v| v.parse::<f64>().ok());
    if limit.is_none() {
        checks.push(warning(
            "spend limit",
            "MonthlySpendLimit not set: the account default applies (1 USD for a new account)",
        ));
    }
    Some(limit.unwrap_or(1.0))
}

async fn sandbox(sns: &aws_sdk_sns::Client, checks: &mut Vec<Check>) {
    const C: &str = "SMS sandbox";
    let in_sandbox = match sns.get_sms_sandbox_account_status().send().await {
        Ok(out) => out.is_in_sandbox(),
        Err(e) => {
            checks.push(problem(C, format!("cannot read it (SNS GetSMSSandboxAccountStatus: {})", describe(&e))));
            return;
        }
    };
    if !in_sandbox {
        checks.push(ok(C, "out of the sandbox: SMS reach any number"));
        return;
    }
    let mut verified = Vec::new();
    let mut pending = 0usize;
    let mut token = None;
    loop {
        match sns.list_sms_sandbox_phone_numbers().set_next_token(token.take()).send().await {
            Ok(out) => {
                for n in out.phone_numbers() {
                    let masked =
                        n.phone_number().map(|p| PhoneNumber::parse(p).map_or_else(|_| "?".to_owned(), |p| p.masked()));
                    match n.status().map(|s| s.as_str()) {
                        Some("Verified") => verified.extend(masked),
                        _ => pending += 1,
                    }
                }
                match out.next_token {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break,
                }
            }
            Err(e) => {
                checks.push(problem(C, format!("in the sandbox; cannot list its numbers ({})", describe(&e))));
                return;
            }
        }
    }
    if verified.is_empty() {
        checks.push(problem(
            C,
            format!(
                "in the sandbox with no verified number ({pending} pending): no alert can reach anyone. Verify the \
                 on-call numbers (SNS console, Text messaging, Sandbox destination phone numbers) or request \
                 production access"
            ),
        ));
    } else {
        checks.push(warning(
            C,
            format!(
                "in the sandbox: only the {} verified number(s) {} receive SMS ({pending} pending); request \
                 production access before alerting anyone else",
                verified.len(),
                verified.join(", ")
            ),
        ));
    }
}

/// Month-to-date SMS spend against the limit: 80 % is a problem (the spend alarm's threshold).
pub(crate) async fn spend(cloudwatch: &aws_sdk_cloudwatch::Client, limit: Option<f64>) -> Check {
    use aws_sdk_cloudwatch::types::{Metric, MetricDataQuery, MetricStat};
    const C: &str = "SMS spend";
    let now = chrono::Utc::now();
    let query = MetricDataQuery::builder()
        .id("spend")
        .metric_stat(
            MetricStat::builder()
                .metric(Metric::builder().namespace("AWS/SNS").metric_name("SMSMonthToDateSpentUSD").build())
                .period(3600)
                .stat("Maximum")
                .build(),
        )
        .build();
    let out = cloudwatch
        .get_metric_data()
        .metric_data_queries(query)
        .start_time(aws_sdk_cloudwatch::primitives::DateTime::from_secs((now - chrono::Duration::days(1)).timestamp()))
        .end_time(aws_sdk_cloudwatch::primitives::DateTime::from_secs(now.timestamp()))
        .send()
        .await;
    let spent = match out {
        Ok(o) => o
            .metric_data_results()
            .iter()
            .flat_map(|r| r.values().iter().copied())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v)))),
        Err(e) => return problem(C, format!("cannot read it (CloudWatch GetMetricData: {})", describe(&e))),
    };
    let Some(limit) = limit else {
        return problem(C, "the spend limit could not be read (see SMS preferences)");
    };
    let Some(spent) = spent else {
        return ok(C, format!("no SMS spend recorded in the last day; limit {limit:.2} USD"));
    };
    let percent = if limit > 0.0 { 100.0 * spent / limit } else { 100.0 };
    let detail = format!("{spent:.2} of {limit:.2} USD this month ({percent:.0} %)");
    if percent >= 100.0 {
        problem(C, format!("{detail}: SNS has stopped sending SMS, on-call SMS included; raise the limit"))
    } else if percent >= 80.0 {
        problem(C, format!("{detail}: SNS stops sending at 100 %; raise the limit (AWS support case) now"))
    } else {
        ok(C, detail)
    }
}

async fn delivery_logs(ctx: &Context, checks: &mut Vec<Check>) {
    let logs = aws_sdk_cloudwatchlogs::Client::new(&ctx.sdk);
    let status_fn = ctx.outputs.get("StatusFunctionArn");
    for (check, key) in
        [("delivered log group", "SmsSuccessLogGroupName"), ("failed log group", "SmsFailureLogGroupName")]
    {
        let Some(group) = ctx.outputs.get(key) else {
            checks.push(problem(check, format!("the stack has no output {key}: deploy this version of template.yaml")));
            continue;
        };
        let exists = match logs.describe_log_groups().log_group_name_prefix(group).send().await {
            Ok(out) => out.log_groups().iter().any(|g| g.log_group_name() == Some(group)),
            Err(e) => {
                checks.push(problem(check, format!("{group}: cannot read it ({})", describe(&e))));
                continue;
            }
        };
        if !exists {
            checks.push(problem(
                check,
                format!("{group} does not exist: SNS has nowhere to write delivery status (deploy with CreateSmsLogGroups=true)"),
            ));
            continue;
        }
        let filters = match logs.describe_subscription_filters().log_group_name(group).send().await {
            Ok(out) => out.subscription_filters().to_vec(),
            Err(e) => {
                checks
                    .push(problem(check, format!("{group}: cannot read its subscription filters ({})", describe(&e))));
                continue;
            }
        };
        let ours = |f: &aws_sdk_cloudwatchlogs::types::SubscriptionFilter| match status_fn {
            Some(arn) => f.destination_arn() == Some(arn),
            None => false,
        };
        match (status_fn, filters.iter().find(|f| ours(f))) {
            (None, _) => checks.push(problem(
                check,
                "the stack has no output StatusFunctionArn: deploy this version of template.yaml",
            )),
            (Some(_), Some(f)) => checks.push(ok(
                check,
                format!("{group}, subscribed by {}", f.filter_name().unwrap_or("the status function")),
            )),
            (Some(arn), None) => checks.push(problem(
                check,
                format!(
                    "{group} has no subscription filter to {arn} ({} other): delivery records are never applied",
                    filters.len()
                ),
            )),
        }
    }
}

async fn queues(ctx: &Context, checks: &mut Vec<Check>) {
    // (check, output, what a message there means; None = depth is information only)
    let wanted: [(&'static str, &str, Option<&str>); 5] = [
        ("escalation queue", "EscalationQueueUrl", Some("escalation(s) waiting for on-call: tocsin escalations")),
        ("send dead-letter queue", "SendDeadLetterQueueUrl", Some("send request(s) dead-lettered: inspect them")),
        (
            "intake rejects queue",
            "IntakeRejectsQueueUrl",
            Some("EventBridge alert request(s) rejected or undeliverable"),
        ),
        (
            "status failures queue",
            "StatusFailureQueueUrl",
            Some("delivery-status batch(es) not applied: delivery truth is missing"),
        ),
        ("send queue", "SendQueueUrl", None),
    ];
    for (check, key, meaning) in wanted {
        let Some(url) = ctx.outputs.get(key) else {
            checks.push(problem(check, format!("the stack has no output {key}: deploy this version of template.yaml")));
            continue;
        };
        let (visible, in_flight) = match queue_depth(&ctx.sqs, url).await {
            Ok((v, f)) => (v.unwrap_or(0), f.unwrap_or(0)),
            Err(e) => {
                checks.push(problem(check, format!("{}: cannot read it ({e})", queue_name(url))));
                continue;
            }
        };
        let detail = format!("{}: {visible} visible, {in_flight} in flight", queue_name(url));
        match meaning {
            Some(m) if visible + in_flight > 0 => checks.push(problem(check, format!("{detail} — {m}"))),
            _ => checks.push(ok(check, detail)),
        }
    }
}

async fn alarms(ctx: &Context, cloudwatch: &aws_sdk_cloudwatch::Client, checks: &mut Vec<Check>) {
    use aws_sdk_cloudwatch::types::StateValue;
    const C: &str = "alarms";
    let Some(prefix) = ctx.outputs.get("AlarmNamePrefix") else {
        checks.push(problem(C, "the stack has no output AlarmNamePrefix: deploy this version of template.yaml"));
        return;
    };
    let mut firing = Vec::new();
    let mut token = None;
    loop {
        let out = cloudwatch
            .describe_alarms()
            .alarm_name_prefix(prefix)
            .state_value(StateValue::Alarm)
            .set_next_token(token.take())
            .send()
            .await;
        match out {
            Ok(o) => {
                firing.extend(o.metric_alarms().iter().map(|a| {
                    format!("{} ({})", a.alarm_name().unwrap_or("?"), a.state_reason().unwrap_or("no reason given"))
                }));
                firing.extend(o.composite_alarms().iter().map(|a| a.alarm_name().unwrap_or("?").to_owned()));
                match o.next_token {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break,
                }
            }
            Err(e) => {
                checks.push(problem(C, format!("cannot read them (CloudWatch DescribeAlarms: {})", describe(&e))));
                return;
            }
        }
    }
    if firing.is_empty() {
        checks.push(ok(C, format!("none of {prefix}* in ALARM")));
    }
    for a in firing {
        checks.push(problem("alarm", format!("{a} is in ALARM (runbook: docs/operations.md, Alarms)")));
    }
}

/// A subscription's endpoint as doctor prints it: a number masked, an e-mail address with its
/// local part hidden, a URL by its host.
pub fn masked_endpoint(protocol: &str, endpoint: &str) -> String {
    match protocol {
        "sms" => tocsin::domain::phone::mask_phone_like(endpoint),
        "email" | "email-json" => match endpoint.split_once('@') {
            Some((local, domain)) => format!("{}…@{domain}", local.chars().next().unwrap_or('?')),
            None => "?".into(),
        },
        "http" | "https" => endpoint.split('/').nth(2).map_or_else(|| "?".into(), |h| format!("{protocol}://{h}/…")),
        _ => protocol.to_owned(),
    }
}

/// At least one confirmed subscription on the on-call topic: every alarm pages it.
async fn alarm_subscriptions(ctx: &Context, sns: &aws_sdk_sns::Client) -> Check {
    const C: &str = "on-call subscriptions";
    let Some(topic) = ctx.outputs.get("AlarmTopicArn") else {
        return problem(C, "the stack has no output AlarmTopicArn: deploy this version of template.yaml");
    };
    let (mut confirmed, mut pending) = (Vec::new(), Vec::new());
    let mut token = None;
    loop {
        match sns.list_subscriptions_by_topic().topic_arn(topic).set_next_token(token.take()).send().await {
            Ok(out) => {
                for sub in out.subscriptions() {
                    let shown = masked_endpoint(sub.protocol().unwrap_or_default(), sub.endpoint().unwrap_or_default());
                    match sub.subscription_arn() {
                        Some(arn) if arn.starts_with("arn:") => confirmed.push(shown),
                        _ => pending.push(shown),
                    }
                }
                match out.next_token {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break,
                }
            }
            Err(e) => return problem(C, format!("cannot read them (SNS ListSubscriptionsByTopic: {})", describe(&e))),
        }
    }
    let pending_text = if pending.is_empty() {
        String::new()
    } else {
        format!("; waiting for confirmation: {} (confirm from the message SNS sent)", pending.join(", "))
    };
    if confirmed.is_empty() {
        problem(
            C,
            format!(
                "nobody confirmed on {}: every alarm pages nobody{pending_text}. Redeploy with AlarmEmail, \
                 AlarmWebhookUrl or OnCallSmsNumber",
                topic.rsplit(':').next().unwrap_or(topic)
            ),
        )
    } else if pending.is_empty() {
        ok(C, format!("{} confirmed: {}", confirmed.len(), confirmed.join(", ")))
    } else {
        warning(C, format!("{} confirmed: {}{pending_text}", confirmed.len(), confirmed.join(", ")))
    }
}

/// The sender's reserved concurrency: none reserved is a warning (the event source mapping still
/// caps it, but other functions of the account can take every instance it would need).
async fn sender_concurrency(ctx: &Context) -> Check {
    const C: &str = "sender concurrency";
    let Some(function) = ctx.outputs.get("SenderFunctionName") else {
        return problem(C, "the stack has no output SenderFunctionName: deploy this version of template.yaml");
    };
    let lambda = aws_sdk_lambda::Client::new(&ctx.sdk);
    match lambda.get_function_concurrency().function_name(function).send().await {
        Ok(out) => match out.reserved_concurrent_executions() {
            Some(n) => ok(C, format!("{n} reserved for {function}")),
            None => warning(
                C,
                format!(
                    "none reserved for {function} (ReserveSenderConcurrency=false): the send queue's event source \
                     mapping caps it, but other functions can take the account's whole concurrency; reserve it \
                     once the account's quota allows (tocsin preflight shows the quota)"
                ),
            ),
        },
        Err(e) => problem(C, format!("cannot read it (Lambda GetFunctionConcurrency: {})", describe(&e))),
    }
}
