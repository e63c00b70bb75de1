//! `tocsin doctor`: checks what on-call must be able to trust, one line per check, and exits 1
//! when any check finds a problem (warnings alone exit 0). What it checks of the SMS path follows
//! the stack's provider (its `SmsProvider` output).
//!
//! Under End User Messaging: the region, the account tier (the sandbox and its verified numbers),
//! the stack's origination identity (or the account's), its opt-out list, the text spend limit and
//! this month's spend, the stack's configuration set and event destination, the stack's event group
//! with the status function subscribed, and a DryRun to `CanaryNumber` when set ([`super::eum`]).
//!
//! Under SNS:
//! - SMS preferences (SNS GetSMSAttributes): a delivery-status role set (this stack's, when the
//!   stack manages them), success sampling at 100 % (below it some deliveries are never logged),
//!   Transactional as the default type.
//! - The SMS sandbox (GetSMSSandboxAccountStatus, ListSMSSandboxPhoneNumbers): in it, only verified
//!   numbers receive SMS.
//! - Spend: the account's MonthlySpendLimit against this month's spend (CloudWatch GetMetricData,
//!   AWS/SNS SMSMonthToDateSpentUSD): SNS stops sending at the limit, on-call SMS included.
//! - Both delivery-status log groups exist with the stack's status function subscribed
//!   (DescribeLogGroups, DescribeSubscriptionFilters): without them no delivery is ever seen.
//! - The origination number alerts leave from: the stack's `SmsOriginationNumber` (a parameter,
//!   from DescribeStacks) among the account's (ListOriginationNumbers), or that SNS chooses.
//!
//! Under both:
//! - Queues: escalations waiting, dead letters, parked rejects and status failures
//!   (GetQueueAttributes, which receives nothing).
//! - Alarms of this stack in ALARM (CloudWatch DescribeAlarms by the stack's alarm-name prefix).
//! - The on-call topic has a confirmed subscription (SNS ListSubscriptionsByTopic): an e-mail or
//!   webhook subscription SNS is still waiting to have confirmed pages nobody, and an SMS one
//!   (`OnCallSmsNumber`) that cannot receive — the account's SNS SMS sandbox with the number not
//!   verified, or a US/Canadian number and no origination number there — is not counted as one.
//! - The sender's reserved concurrency (Lambda GetFunctionConcurrency): a warning while none is
//!   reserved (ReserveSenderConcurrency=false, the default for accounts whose quota is 10).
//! - Intake's, status's and escalation's (ReserveFunctionConcurrency): a warning while any has
//!   none, since a flood elsewhere in the account can then delay delivery events and pages.
//! - The stack's producers (parameter `Producers`): a problem when there are none (intake then
//!   refuses every alert), a warning when the identity running doctor is not one of them (its
//!   `tocsin send` and `--probe` would be refused).
//! - The recipients roster (`RecipientPolicy`): a problem when it is empty (intake refuses every
//!   alert) or leaves out the canary's number, a warning when the stack is deployed open.
//! - The templates' escalation chains (`tocsin chains`): a problem when one no longer parses (intake
//!   ignores it) or, under `RecipientPolicy=roster`, names someone the roster no longer covers (their
//!   level fails at once and the chain moves on without their wait).
//! - The stack's SMS breaker (`SmsPartsPerHour`): a problem while it is open (every alert is
//!   withheld and escalated until an operator resumes), else the hour's parts.
//! - With `--probe NUMBER`, the delivery loop itself, hop by hop ([`super::probe`]); with
//!   `--simulator` (End User Messaging), the same on AWS's SMS simulator, success and failure.
//!
//! A check whose API call fails reports a problem saying so (e.g. a missing permission): doctor
//! never passes what it could not see.

use serde::Serialize;
use tocsin::adapters::chain_policies::ListedPolicy;
use tocsin::config::SendingProvider;
use tocsin::domain::PhoneNumber;
use tocsin::domain::chain::parse_chain_shape;
use tocsin::domain::producer::{Caller, Producers};
use tocsin::domain::roster::Roster;
use tocsin::ports::RecipientRoster;

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
    provider: &'a str,
    ok: bool,
    problems: usize,
    checks: &'a [Check],
    #[serde(skip_serializing_if = "Option::is_none")]
    probe: Option<&'a super::probe::ProbeReport>,
    /// `--simulator`: the success probe, then the failure probe.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    simulator: &'a [super::probe::ProbeReport],
}

/// The provider's name as the template's `SmsProvider` spells it.
pub fn provider_name(p: &SendingProvider) -> &'static str {
    match p {
        SendingProvider::Sns => "sns",
        SendingProvider::EndUserMessaging(_) => "end-user-messaging",
    }
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
    let provider = ctx.sending_provider()?;
    if args.simulator && provider == SendingProvider::Sns {
        // Refused before anything is read: the simulator exists only behind End User Messaging.
        return Err(crate::error::CliError::Usage(format!(
            "stack {} sends through SNS: AWS's SMS simulator is End User Messaging's. Use --probe NUMBER",
            ctx.names.stack
        )));
    }
    let spinner = crate::progress::Spinner::start("checking…");
    let sns = aws_sdk_sns::Client::new(&ctx.sdk);
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&ctx.sdk);
    let mut checks = Vec::new();
    match &provider {
        SendingProvider::Sns => {
            spinner.set_message(format!("SMS preferences… ({} checks done)", checks.len()));
            let limit = sms_preferences(ctx, &sns, &mut checks).await;
            spinner.set_message(format!("SMS sandbox… ({} checks done)", checks.len()));
            sandbox(&sns, &mut checks).await;
            spinner.set_message(format!("SMS spend… ({} checks done)", checks.len()));
            checks.push(spend(&cloudwatch, limit).await);
            spinner.set_message(format!("origination number… ({} checks done)", checks.len()));
            checks.push(sns_origination(ctx, &sns).await);
            spinner.set_message(format!("delivery-status logs… ({} checks done)", checks.len()));
            for (check, key) in
                [("delivered log group", "SmsSuccessLogGroupName"), ("failed log group", "SmsFailureLogGroupName")]
            {
                checks.push(match ctx.outputs.get(key) {
                    Some(group) => {
                        subscribed_log_group(
                            ctx,
                            check,
                            group,
                            "SNS has nowhere to write delivery status (deploy with CreateSmsLogGroups=true)",
                        )
                        .await
                    }
                    None => {
                        problem(check, format!("the stack has no output {key}: deploy this version of template.yaml"))
                    }
                });
            }
        }
        SendingProvider::EndUserMessaging(eum) => {
            spinner.set_message(format!("End User Messaging… ({} checks done)", checks.len()));
            let region = ctx.sdk.region().map(|r| r.to_string()).unwrap_or_default();
            let group = ctx.outputs.require("SmsEventLogGroupName")?.to_owned();
            // The canary's number is the one destination the stack itself texts on a schedule.
            let canary: Vec<PhoneNumber> =
                ctx.outputs.parameter("CanaryNumber").and_then(|n| PhoneNumber::parse(n).ok()).into_iter().collect();
            // What the sender leaves from when a request names nothing: the stack's
            // SmsOriginationNumber (a deployment-wide number) wins over SmsOriginationIdentity.
            let identity = ctx.outputs.parameter("SmsOriginationNumber").or(eum.origination_identity.as_deref());
            let settings = super::eum::Settings {
                region: &region,
                identity,
                opt_out_list: &eum.opt_out_list,
                deployed: Some((&eum.configuration_set, &group)),
                to: &canary,
                replies_topic: ctx.outputs.get("RepliesTopicArn"),
            };
            checks.extend(super::eum::checks(&ctx.sdk, &settings).await);
            spinner.set_message(format!("the stack's event group… ({} checks done)", checks.len()));
            checks.push(
                subscribed_log_group(
                    ctx,
                    "event log group",
                    &group,
                    "End User Messaging has nowhere to write the stack's events: redeploy the stack",
                )
                .await,
            );
        }
    }
    spinner.set_message(format!("queues… ({} checks done)", checks.len()));
    queues(ctx, &mut checks).await;
    spinner.set_message(format!("alarms… ({} checks done)", checks.len()));
    alarms(ctx, &cloudwatch, &mut checks).await;
    spinner.set_message(format!("on-call subscriptions… ({} checks done)", checks.len()));
    checks.push(alarm_subscriptions(ctx, &sns).await);
    spinner.set_message(format!("sender concurrency… ({} checks done)", checks.len()));
    checks.push(sender_concurrency(ctx).await);
    checks.push(function_concurrency(ctx).await);
    checks.push(producers_check(ctx.outputs.parameter_as_deployed("Producers"), ctx.operator().await.ok().as_deref()));
    let roster = ctx.registry.roster().await.map_err(|e| e.to_string());
    let canary = ctx.outputs.parameter("CanaryNumber").and_then(|n| PhoneNumber::parse(n).ok());
    checks.push(roster_check(ctx.outputs.parameter_as_deployed("RecipientPolicy"), roster.clone(), canary.as_ref()));
    let chains = ctx.registry.chain_policies_listed().await.map_err(|e| e.to_string());
    checks.push(chains_check(ctx.outputs.parameter_as_deployed("RecipientPolicy"), roster.ok().as_ref(), chains));
    let meter = ctx.ledger.spend_meter().await.map_err(|e| e.to_string());
    let parts_per_hour = ctx.outputs.parameter("SmsPartsPerHour").and_then(|v| v.parse().ok());
    checks.push(super::breaker::doctor_check(meter, parts_per_hour, chrono::Utc::now()));
    let settings = |number: String, expect: super::probe::Expect| super::probe::ProbeSettings {
        number,
        hop_timeout: args.probe_hop_timeout,
        poll: args.probe_poll,
        deadline: args.probe_deadline.clone(),
        expect,
    };
    let probe = match &args.probe {
        Some(number) => {
            spinner.set_message(format!("probe: one SMS round the loop… ({} checks done)", checks.len()));
            let s = settings(number.clone(), super::probe::Expect::Delivered);
            Some(super::probe::run(ctx, &provider, &s, &mut checks).await?)
        }
        None => None,
    };
    let simulator = if args.simulator {
        spinner.set_message(format!("probe on AWS's SMS simulator… ({} checks done)", checks.len()));
        super::probe::simulator(ctx, &provider, &settings, &mut checks).await?
    } else {
        Vec::new()
    };
    spinner.done();

    let problems = checks.iter().filter(|c| c.verdict == Verdict::Problem).count();
    if ctx.json {
        let report = Report {
            stack: &ctx.names.stack,
            provider: provider_name(&provider),
            ok: problems == 0,
            problems,
            checks: &checks,
            probe: probe.as_ref(),
            simulator: &simulator,
        };
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

/// The latest hourly maximum of a month-to-date spend metric over the last day (`None`: no data,
/// e.g. nothing sent yet).
pub(crate) async fn latest_maximum(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    namespace: &str,
    metric: &str,
) -> Result<Option<f64>, String> {
    use aws_sdk_cloudwatch::types::{Metric, MetricDataQuery, MetricStat};
    let now = chrono::Utc::now();
    let query = MetricDataQuery::builder()
        .id("spend")
        .metric_stat(
            MetricStat::builder()
                .metric(Metric::builder().namespace(namespace).metric_name(metric).build())
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
        .await
        .map_err(|e| format!("CloudWatch GetMetricData {namespace} {metric}: {}", describe(&e)))?;
    Ok(out
        .metric_data_results()
        .iter()
        .flat_map(|r| r.values().iter().copied())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v)))))
}

/// Month-to-date SNS SMS spend against the limit: 80 % is a problem (the spend alarm's threshold).
pub(crate) async fn spend(cloudwatch: &aws_sdk_cloudwatch::Client, limit: Option<f64>) -> Check {
    const C: &str = "SMS spend";
    let spent = match latest_maximum(cloudwatch, "AWS/SNS", "SMSMonthToDateSpentUSD").await {
        Ok(s) => s,
        Err(e) => return problem(C, format!("cannot read it ({e})")),
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

/// The origination number SNS sends the stack's alerts from: its `SmsOriginationNumber` among the
/// account's numbers, or SNS's choice among them (its delivery records do not say which).
async fn sns_origination(ctx: &Context, sns: &aws_sdk_sns::Client) -> Check {
    const C: &str = "origination number";
    let numbers = match super::preflight::origination_numbers(sns).await {
        Ok(n) => n,
        Err(e) => return problem(C, format!("cannot list them ({e})")),
    };
    sns_origination_check(ctx.outputs.parameter("SmsOriginationNumber"), &numbers)
}

/// [`sns_origination`]'s judgement.
pub fn sns_origination_check(configured: Option<&str>, numbers: &[super::preflight::Origination]) -> Check {
    const C: &str = "origination number";
    let shown = |o: &super::preflight::Origination| {
        format!("{} ({}, {})", tocsin::domain::phone::mask_phone_like(&o.number), o.country, o.kind)
    };
    match configured {
        Some(n) => match numbers.iter().find(|o| o.number == n) {
            Some(o) if o.active && o.sms => ok(C, format!("{}: alerts leave from it (SmsOriginationNumber)", shown(o))),
            Some(o) => {
                problem(C, format!("{}: SmsOriginationNumber names it, but it is not an active SMS number", shown(o)))
            }
            None => problem(
                C,
                format!(
                    "SmsOriginationNumber {} is not an origination number of this account in this region (a number \
                     belongs to one region): SNS refuses the publish",
                    tocsin::domain::phone::mask_phone_like(n)
                ),
            ),
        },
        None => {
            let usable: Vec<String> = numbers.iter().filter(|o| o.active && o.sms).map(shown).collect();
            if usable.is_empty() {
                warning(
                    C,
                    "SmsOriginationNumber not set and the account has none: SNS sends from a shared route where a \
                     country allows one, and US and Canadian numbers receive nothing",
                )
            } else {
                ok(
                    C,
                    format!(
                        "SmsOriginationNumber not set: SNS chooses among {}: {}; its delivery records do not say which",
                        usable.len(),
                        usable.join(", ")
                    ),
                )
            }
        }
    }
}

/// A log group the status function must be subscribed to: it exists and has the stack's filter.
async fn subscribed_log_group(ctx: &Context, check: &'static str, group: &str, missing: &str) -> Check {
    let logs = aws_sdk_cloudwatchlogs::Client::new(&ctx.sdk);
    let Some(status_fn) = ctx.outputs.get("StatusFunctionArn") else {
        return problem(check, "the stack has no output StatusFunctionArn: deploy this version of template.yaml");
    };
    let exists = match logs.describe_log_groups().log_group_name_prefix(group).send().await {
        Ok(out) => out.log_groups().iter().any(|g| g.log_group_name() == Some(group)),
        Err(e) => return problem(check, format!("{group}: cannot read it ({})", describe(&e))),
    };
    if !exists {
        return problem(check, format!("{group} does not exist: {missing}"));
    }
    let filters = match logs.describe_subscription_filters().log_group_name(group).send().await {
        Ok(out) => out.subscription_filters().to_vec(),
        Err(e) => return problem(check, format!("{group}: cannot read its subscription filters ({})", describe(&e))),
    };
    match filters.iter().find(|f| f.destination_arn() == Some(status_fn)) {
        Some(f) => ok(check, format!("{group}, subscribed by {}", f.filter_name().unwrap_or("the status function"))),
        None => problem(
            check,
            format!(
                "{group} has no subscription filter to {status_fn} ({} other): delivery records are never applied",
                filters.len()
            ),
        ),
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

/// At least one confirmed subscription on the on-call topic that can be reached: every alarm pages
/// it. An SMS subscription needs no confirmation, so SNS lists it as confirmed whether or not its
/// number can receive: it counts only when the account's SNS SMS can reach the number.
async fn alarm_subscriptions(ctx: &Context, sns: &aws_sdk_sns::Client) -> Check {
    const C: &str = "on-call subscriptions";
    let Some(topic) = ctx.outputs.get("AlarmTopicArn") else {
        return problem(C, "the stack has no output AlarmTopicArn: deploy this version of template.yaml");
    };
    let mut subscriptions = Vec::new();
    let mut token = None;
    loop {
        match sns.list_subscriptions_by_topic().topic_arn(topic).set_next_token(token.take()).send().await {
            Ok(out) => {
                for sub in out.subscriptions() {
                    subscriptions.push(Subscription {
                        protocol: sub.protocol().unwrap_or_default().to_owned(),
                        endpoint: sub.endpoint().unwrap_or_default().to_owned(),
                        confirmed: sub.subscription_arn().is_some_and(|a| a.starts_with("arn:")),
                    });
                }
                match out.next_token {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break,
                }
            }
            Err(e) => return problem(C, format!("cannot read them (SNS ListSubscriptionsByTopic: {})", describe(&e))),
        }
    }
    let reach = if subscriptions.iter().any(|s| s.confirmed && s.protocol == "sms") {
        Some(sms_reach(sns).await)
    } else {
        None
    };
    subscriptions_check(topic.rsplit(':').next().unwrap_or(topic), &subscriptions, reach.as_ref())
}

/// One subscription of the on-call topic.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub protocol: String,
    pub endpoint: String,
    pub confirmed: bool,
}

/// What decides whether SNS can text a number: its SMS sandbox and the account's origination numbers.
#[derive(Debug, Clone)]
pub struct SmsReach {
    /// `None`: the sandbox could not be read (a problem of its own).
    pub in_sandbox: Result<bool, String>,
    pub verified: Vec<String>,
    pub origination: Result<Vec<super::preflight::Origination>, String>,
}

async fn sms_reach(sns: &aws_sdk_sns::Client) -> SmsReach {
    let in_sandbox = sns
        .get_sms_sandbox_account_status()
        .send()
        .await
        .map(|o| o.is_in_sandbox())
        .map_err(|e| format!("SNS GetSMSSandboxAccountStatus: {}", describe(&e)));
    let mut verified = Vec::new();
    if in_sandbox == Ok(true) {
        let mut token = None;
        while let Ok(out) = sns.list_sms_sandbox_phone_numbers().set_next_token(token.take()).send().await {
            verified.extend(
                out.phone_numbers()
                    .iter()
                    .filter(|n| n.status().map(|s| s.as_str()) == Some("Verified"))
                    .filter_map(|n| n.phone_number().map(str::to_owned)),
            );
            match out.next_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
    }
    SmsReach { in_sandbox, verified, origination: super::preflight::origination_numbers(sns).await }
}

/// Why SNS cannot text `number`, if it cannot.
pub fn sms_unreachable(number: &str, reach: &SmsReach) -> Option<String> {
    match &reach.in_sandbox {
        Err(e) => return Some(format!("the SMS sandbox could not be read ({e})")),
        Ok(true) if !reach.verified.iter().any(|v| v == number) => {
            return Some("the account's SNS SMS is in the sandbox and the number is not verified".into());
        }
        _ => {}
    }
    let north_american =
        PhoneNumber::parse(number).ok().and_then(|p| super::preflight::countries_of(&p)) == Some(&["US", "CA"][..]);
    match &reach.origination {
        Err(e) if north_american => Some(format!("the origination numbers could not be read ({e})")),
        Ok(numbers)
            if north_american
                && !numbers.iter().any(|o| o.active && o.sms && (o.country == "US" || o.country == "CA")) =>
        {
            Some("a US/Canadian number, and the account has no active origination number there".into())
        }
        _ => None,
    }
}

/// [`alarm_subscriptions`]' judgement.
pub fn subscriptions_check(topic: &str, subscriptions: &[Subscription], reach: Option<&SmsReach>) -> Check {
    const C: &str = "on-call subscriptions";
    let (mut confirmed, mut pending, mut unreachable) = (Vec::new(), Vec::new(), Vec::new());
    for s in subscriptions {
        let shown = masked_endpoint(&s.protocol, &s.endpoint);
        let cannot = match (s.protocol.as_str(), reach) {
            ("sms", Some(r)) if s.confirmed => sms_unreachable(&s.endpoint, r),
            _ => None,
        };
        match (s.confirmed, cannot) {
            (true, None) => confirmed.push(shown),
            (true, Some(why)) => unreachable.push(format!("{shown} ({why})")),
            (false, _) => pending.push(shown),
        }
    }
    let mut notes = String::new();
    if !unreachable.is_empty() {
        notes.push_str(&format!("; cannot receive, so not counted: {}", unreachable.join(", ")));
    }
    if !pending.is_empty() {
        notes.push_str(&format!(
            "; waiting for confirmation: {} (confirm from the message SNS sent)",
            pending.join(", ")
        ));
    }
    if confirmed.is_empty() {
        problem(
            C,
            format!(
                "nobody confirmed and reachable on {topic}: every alarm pages nobody{notes}. Redeploy with AlarmEmail, \
                 AlarmWebhookUrl or a reachable OnCallSmsNumber"
            ),
        )
    } else if notes.is_empty() {
        ok(C, format!("{} confirmed: {}", confirmed.len(), confirmed.join(", ")))
    } else {
        warning(C, format!("{} confirmed: {}{notes}", confirmed.len(), confirmed.join(", ")))
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

/// Intake's, status's and escalation's reserved concurrency (ReserveFunctionConcurrency): a
/// warning while any has none (a flood elsewhere in the account can take every instance status
/// and escalation need, and intake is then capped by nothing but the API's throttle).
async fn function_concurrency(ctx: &Context) -> Check {
    const C: &str = "function concurrency";
    let lambda = aws_sdk_lambda::Client::new(&ctx.sdk);
    let (mut reserved, mut none) = (Vec::new(), Vec::new());
    for output in ["IntakeFunctionName", "StatusFunctionName", "EscalationFunctionName"] {
        let Some(function) = ctx.outputs.get(output) else {
            return problem(C, format!("the stack has no output {output}: deploy this version of template.yaml"));
        };
        match lambda.get_function_concurrency().function_name(function).send().await {
            Ok(out) => match out.reserved_concurrent_executions() {
                Some(n) => reserved.push(format!("{n} for {function}")),
                None => none.push(function.to_owned()),
            },
            Err(e) => return problem(C, format!("cannot read it (Lambda GetFunctionConcurrency: {})", describe(&e))),
        }
    }
    if none.is_empty() {
        return ok(C, format!("reserved: {}", reserved.join(", ")));
    }
    warning(
        C,
        format!(
            "none reserved for {} (ReserveFunctionConcurrency=false): a flood elsewhere in the account can delay \
             delivery events and pages; reserve once the account's quota allows (tocsin preflight shows the quota)",
            none.join(", ")
        ),
    )
}

/// Who may submit alerts (parameter `Producers`), and whether `caller` (the identity running
/// doctor) is one of them.
fn producers_check(listed: Option<&str>, caller: Option<&str>) -> Check {
    const C: &str = "producers";
    let Some(listed) = listed else {
        return warning(C, "the stack names no parameter Producers: deployed from an older template.yaml?");
    };
    let producers = match Producers::parse(listed) {
        Ok(p) => p,
        Err(errors) => {
            let why: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return problem(C, format!("Producers does not parse: {}", why.join("; ")));
        }
    };
    if producers.is_empty() {
        return problem(
            C,
            "none: intake refuses every alert; list your producers' role ARNs in Producers (docs/deployment.md, \
             \"Adding a producer\")",
        );
    }
    let names: Vec<String> = producers.iter().map(|p| p.name.to_string()).collect();
    let listed = format!("{}: {}", names.len(), names.join(", "));
    match caller {
        Some(arn) if producers.identify(Caller::Signed { arn: Some(arn) }).is_err() => warning(
            C,
            format!("{listed}; you ({arn}) are not one: your `tocsin send` and `doctor --probe` are refused"),
        ),
        _ => ok(C, listed),
    }
}

/// Whom the stack may text: the roster as read, under the policy as deployed.
fn roster_check(policy: Option<&str>, roster: Result<Roster, String>, canary: Option<&PhoneNumber>) -> Check {
    const C: &str = "recipients roster";
    if policy == Some("open") {
        return warning(
            C,
            "RecipientPolicy=open: anyone who can submit an alert can make the stack text any number \
             (docs/security.md)",
        );
    }
    let roster = match roster {
        Ok(r) => r,
        Err(e) => return problem(C, format!("cannot read it ({e})")),
    };
    if roster.entries.is_empty() {
        return problem(C, "empty: intake refuses every alert; add the people you page (tocsin recipients allow)");
    }
    if let Some(canary) = canary
        && roster.entry_for(canary).is_none()
    {
        return problem(
            C,
            format!(
                "the canary's number {} is on no entry: every canary run is refused (tocsin recipients allow)",
                canary.masked()
            ),
        );
    }
    let whole = roster.entries.iter().filter(|e| e.as_str().len() >= 11).count();
    let n = roster.entries.len();
    let entries = if n == 1 { "1 entry".to_owned() } else { format!("{n} entries") };
    ok(C, format!("{entries}: {whole} whole numbers, {} prefixes", n - whole))
}

/// The templates' chains against the roster in force: every person each names must still be
/// covered (under `RecipientPolicy=roster`), and every chain must still parse.
fn chains_check(policy: Option<&str>, roster: Option<&Roster>, listed: Result<Vec<ListedPolicy>, String>) -> Check {
    const C: &str = "template chains";
    let listed = match listed {
        Ok(l) => l,
        Err(e) => return problem(C, format!("cannot read them ({e})")),
    };
    if listed.is_empty() {
        return ok(C, "none set: an alert whose request names no chain goes to its recipient, then on-call");
    }
    let mut problems = Vec::new();
    for p in &listed {
        let Ok(shape) = parse_chain_shape(&p.chain) else {
            problems.push(format!("{}'s chain does not parse: intake ignores it (tocsin chains set …)", p.template));
            continue;
        };
        if policy == Some("open") {
            continue;
        }
        let Some(roster) = roster else { continue };
        for (i, person) in shape.people().enumerate() {
            if roster.entry_for(person).is_none() {
                problems.push(format!(
                    "{}'s chain names {} (chain.then[{i}].to), on no roster entry: their level fails at once and \
                     the chain moves on without their wait (tocsin chains set …)",
                    p.template,
                    person.masked()
                ));
            }
        }
    }
    if problems.is_empty() {
        let names: Vec<&str> = listed.iter().map(|p| p.template.as_str()).collect();
        ok(C, format!("{}: {}", listed.len(), names.join(", ")))
    } else {
        problem(C, problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::preflight::Origination;

    #[test]
    fn doctor_says_when_a_templates_chain_names_someone_the_roster_no_longer_covers() {
        use tocsin::domain::roster::RosterEntry;
        let policy = |template: &str, chain: serde_json::Value| ListedPolicy {
            template: template.into(),
            chain,
            set_by: "alice".into(),
            reason: "rota".into(),
            set_at: chrono::Utc::now(),
        };
        let roster = Roster { entries: vec![RosterEntry::parse("+1415555").expect("entry")] };
        let fine = vec![policy(
            "disk_full",
            serde_json::json!({"wait": "5m", "then": [{"to": "+14155550101", "wait": "5m"}]}),
        )];
        let check = chains_check(Some("roster"), Some(&roster), Ok(fine.clone()));
        assert_eq!((check.verdict, check.detail.as_str()), (Verdict::Ok, "1: disk_full"));
        let gone = vec![policy(
            "disk_full",
            serde_json::json!({"wait": "5m", "then": [{"to": "+447700900123", "wait": "5m"}]}),
        )];
        let check = chains_check(Some("roster"), Some(&roster), Ok(gone.clone()));
        assert_eq!(check.verdict, Verdict::Problem);
        assert!(
            check.detail.contains("+4*******0123 (chain.then[0].to)") && !check.detail.contains("7700900123"),
            "{}",
            check.detail
        );
        assert_eq!(chains_check(Some("open"), Some(&roster), Ok(gone)).verdict, Verdict::Ok);
        let broken = vec![policy("service_down", serde_json::Value::Null)];
        assert_eq!(chains_check(Some("roster"), Some(&roster), Ok(broken)).verdict, Verdict::Problem);
        assert_eq!(chains_check(Some("roster"), Some(&roster), Ok(Vec::new())).verdict, Verdict::Ok);
        assert_eq!(chains_check(Some("roster"), None, Err("AccessDenied".into())).verdict, Verdict::Problem);
    }

    #[test]
    fn doctor_says_when_the_roster_lets_nobody_or_anybody_be_texted() {
        use tocsin::domain::roster::RosterEntry;
        let entries = |e: &[&str]| Roster { entries: e.iter().filter_map(|x| RosterEntry::parse(x).ok()).collect() };
        let canary = PhoneNumber::parse("+14155550199").expect("number");
        let fine = roster_check(Some("roster"), Ok(entries(&["+1", "+447700900123"])), Some(&canary));
        assert_eq!((fine.verdict, fine.detail.as_str()), (Verdict::Ok, "2 entries: 1 whole numbers, 1 prefixes"));
        assert_eq!(roster_check(Some("roster"), Ok(entries(&[])), None).verdict, Verdict::Problem);
        let no_canary = roster_check(Some("roster"), Ok(entries(&["+44"])), Some(&canary));
        assert_eq!(no_canary.verdict, Verdict::Problem);
        assert!(!no_canary.detail.contains("5550199"), "masked: {}", no_canary.detail);
        assert_eq!(roster_check(Some("open"), Ok(entries(&[])), None).verdict, Verdict::Warning);
        assert_eq!(roster_check(None, Err("AccessDenied".into()), None).verdict, Verdict::Problem);
    }

    #[test]
    fn doctor_says_when_nobody_may_send_and_when_the_caller_is_not_a_producer() {
        let listed = "arn:aws:iam::123456789012:role/billing,arn:aws:iam::123456789012:role/oncall";
        let session = "arn:aws:sts::123456789012:assumed-role/oncall/alice";
        let check = producers_check(Some(listed), Some(session));
        assert_eq!((check.verdict, check.detail.as_str()), (Verdict::Ok, "2: billing, oncall"));
        let stranger = producers_check(Some(listed), Some("arn:aws:sts::123456789012:assumed-role/Admin/bob"));
        assert_eq!(stranger.verdict, Verdict::Warning);
        assert!(stranger.detail.contains("are not one"), "{}", stranger.detail);
        assert_eq!(producers_check(Some(""), Some(session)).verdict, Verdict::Problem);
        assert_eq!(producers_check(None, Some(session)).verdict, Verdict::Warning);
    }

    fn tfn(country: &str, active: bool) -> Origination {
        Origination {
            number: "+18445550100".into(),
            country: country.into(),
            sms: true,
            active,
            kind: "Transactional".into(),
        }
    }

    #[test]
    fn sns_doctor_names_the_number_alerts_leave_from_or_that_sns_chooses() {
        let named = sns_origination_check(Some("+18445550100"), &[tfn("US", true)]);
        assert_eq!(named.verdict, Verdict::Ok);
        assert!(named.detail.starts_with("+1******0100 (US, Transactional): alerts leave from it"), "{}", named.detail);
        assert_eq!(sns_origination_check(Some("+18445550199"), &[tfn("US", true)]).verdict, Verdict::Problem);
        assert_eq!(sns_origination_check(Some("+18445550100"), &[tfn("US", false)]).verdict, Verdict::Problem);
        let chosen = sns_origination_check(None, &[tfn("US", true)]);
        assert!(chosen.detail.contains("SNS chooses among 1") && chosen.detail.contains("do not say which"));
        assert_eq!(sns_origination_check(None, &[]).verdict, Verdict::Warning);
    }

    fn sub(protocol: &str, endpoint: &str) -> Subscription {
        Subscription { protocol: protocol.into(), endpoint: endpoint.into(), confirmed: true }
    }

    #[test]
    fn an_sms_only_paging_target_that_cannot_receive_is_not_counted_as_confirmed() {
        let sandboxed = SmsReach { in_sandbox: Ok(true), verified: vec![], origination: Ok(vec![tfn("US", true)]) };
        let only_sms = [sub("sms", "+14155550123")];
        let c = subscriptions_check("tocsin-prod-oncall", &only_sms, Some(&sandboxed));
        assert_eq!(c.verdict, Verdict::Problem);
        assert!(
            c.detail.contains("cannot receive, so not counted: +1******0123 (the account's SNS SMS is in the sandbox")
        );
        assert!(!c.detail.contains("+14155550123"), "masked");
        let no_number = SmsReach { in_sandbox: Ok(false), verified: vec![], origination: Ok(vec![]) };
        let c = subscriptions_check("tocsin-prod-oncall", &only_sms, Some(&no_number));
        assert!(c.detail.contains("no active origination number there"), "{}", c.detail);
        // Beside a reachable target it is a warning, not a problem.
        let both = [sub("email", "oncall@example.com"), sub("sms", "+14155550123")];
        assert_eq!(subscriptions_check("t", &both, Some(&sandboxed)).verdict, Verdict::Warning);
        let verified = SmsReach { verified: vec!["+14155550123".into()], ..sandboxed };
        assert_eq!(subscriptions_check("t", &only_sms, Some(&verified)).verdict, Verdict::Ok);
    }
}
