//! `tocsin preflight`: before the first `sam deploy`, with the deployer's credentials and no stack,
//! what in the account would make the deploy fail or the alerts not arrive. One line per check;
//! a BLOCKER line is something to fix before deploying (exit 1), a WARN line something to know.
//! With `--stack`, a deployed stack's provider, origination identity, opt-out list and
//! configuration set are read from its outputs and checked too.
//!
//! Under End User Messaging (`--sms-provider end-user-messaging`, the default): [`super::eum`] —
//! the region, the account tier and its verified numbers (in the order AWS requires: identity,
//! destinations, production access), the origination identity, the opt-out list, the spend limit
//! and this month's spend, a deployed stack's configuration set, and a DryRun to each `--to`.
//!
//! Under SNS (`--sms-provider sns`):
//! - The account's SNS delivery-status log groups (`sns/<region>/<account>/DirectPublishToPhoneNumber`
//!   and `/Failure`) and their subscription filters: which `CreateSmsLogGroups` to deploy with, and
//!   whether a filter is left (a log group takes at most 2).
//! - The account's SMS attributes that `ManageSmsPreferences=true` would overwrite, as a diff; with
//!   `false`, whether delivery-status logging is on without the stack.
//! - The SMS sandbox and its verified numbers, against the numbers given with `--to`.
//! - The SMS spend limit, and this month's spend against it.
//! - The account's origination numbers for the countries of the `--to` numbers.
//!
//! Under both: the Lambda concurrency quota (GetAccountSettings): a new account's 10 refuses any
//! reservation.

use aws_config::SdkConfig;
use serde::Serialize;
use tocsin::config::SendingProvider;
use tocsin::domain::PhoneNumber;

use super::doctor::{Check, Verdict, ok, problem, warning};
use crate::args::{PreflightArgs, ProviderArg};
use crate::context::{StackOutputs, sending_provider};
use crate::error::{CliError, CliResult, describe, exit};
use crate::output;

/// Lambda keeps at least this much of the account's concurrency unreserved: a reservation that
/// would leave less is refused (CloudFormation fails the function).
pub const MIN_UNRESERVED: i32 = 100;

/// One attribute `ManageSmsPreferences=true` would change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub attribute: &'static str,
    pub current: Option<String>,
    pub deployed: String,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    account: &'a str,
    region: &'a str,
    provider: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack: Option<&'a str>,
    ok: bool,
    blockers: usize,
    checks: &'a [Check],
    sms_preferences_diff: &'a [Change],
}

/// The attributes the stack's SMS-preferences resource sets, against what the account has now.
pub fn preferences_diff(current: &std::collections::HashMap<String, String>, spend_limit: Option<u32>) -> Vec<Change> {
    let get = |k: &str| current.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let mut wanted: Vec<(&'static str, String)> = vec![
        ("DeliveryStatusIAMRole", "this stack's SmsDeliveryStatusRole".to_owned()),
        ("DeliveryStatusSuccessSamplingRate", "100".to_owned()),
        ("DefaultSMSType", "Transactional".to_owned()),
    ];
    if let Some(limit) = spend_limit {
        wanted.push(("MonthlySpendLimit", limit.to_string()));
    }
    wanted
        .into_iter()
        .filter(|(k, v)| get(k).as_deref() != Some(v.as_str()))
        .map(|(attribute, deployed)| Change { attribute, current: get(attribute), deployed })
        .collect()
}

/// The countries (ISO 3166 alpha-2) an E.164 number's calling code belongs to, when preflight
/// knows it. +1 is the North American Numbering Plan: the United States, Canada and others.
pub fn countries_of(number: &PhoneNumber) -> Option<&'static [&'static str]> {
    const CODES: &[(&str, &[&str])] = &[
        ("1", &["US", "CA"]),
        ("7", &["RU", "KZ"]),
        ("27", &["ZA"]),
        ("31", &["NL"]),
        ("32", &["BE"]),
        ("33", &["FR"]),
        ("34", &["ES"]),
        ("39", &["IT"]),
        ("41", &["CH"]),
        ("43", &["AT"]),
        ("44", &["GB"]),
        ("45", &["DK"]),
        ("46", &["SE"]),
        ("47", &["NO"]),
        ("48", &["PL"]),
        ("49", &["DE"]),
        ("52", &["MX"]),
        ("55", &["BR"]),
        ("60", &["MY"]),
        ("61", &["AU"]),
        ("62", &["ID"]),
        ("63", &["PH"]),
        ("64", &["NZ"]),
        ("65", &["SG"]),
        ("66", &["TH"]),
        ("81", &["JP"]),
        ("82", &["KR"]),
        ("86", &["CN"]),
        ("91", &["IN"]),
        ("351", &["PT"]),
        ("353", &["IE"]),
        ("358", &["FI"]),
        ("852", &["HK"]),
        ("971", &["AE"]),
        ("972", &["IL"]),
    ];
    let digits = number.expose().trim_start_matches('+');
    // Calling codes are prefix-free: at most one matches.
    CODES.iter().find(|(code, _)| digits.starts_with(code)).map(|(_, c)| *c)
}

/// The template's `SmsAllowedCountries` default.
pub const TEMPLATE_ALLOWED_COUNTRIES: &str = "US";

/// End User Messaging: whether each `--to` number's country is one the stack may text
/// (`SmsAllowedCountries`, which its protect configuration enforces): BLOCKER when none of the
/// countries its calling code serves is allowed (every alert to it would fail), WARN when only some
/// are (`+1` is the US and Canada), WARN for a calling code preflight does not know.
pub fn allowed_country_checks(to: &[PhoneNumber], allowed: &str) -> Vec<Check> {
    let listed: Vec<&str> = allowed.split(',').map(str::trim).filter(|c| !c.is_empty()).collect();
    to.iter()
        .map(|n| {
            let who = tocsin::domain::phone::mask_phone_like(n.expose());
            let Some(countries) = countries_of(n) else {
                return warning(
                    "allowed countries",
                    format!("{who}: preflight does not know this calling code's country; check it is in SmsAllowedCountries ({allowed})"),
                );
            };
            let open: Vec<&str> = countries.iter().copied().filter(|c| listed.contains(c)).collect();
            match (open.len(), countries.len()) {
                (0, _) => problem(
                    "allowed countries",
                    format!(
                        "{who} ({}) is not in SmsAllowedCountries ({allowed}): the stack's protect configuration blocks it and every alert to it fails; deploy with SmsAllowedCountries={allowed},{}",
                        countries.join(" or "),
                        countries[0]
                    ),
                ),
                (o, all) if o < all => warning(
                    "allowed countries",
                    format!("{who}: its calling code also serves {}, not in SmsAllowedCountries ({allowed})", {
                        countries.iter().filter(|c| !open.contains(c)).copied().collect::<Vec<_>>().join(", ")
                    }),
                ),
                _ => ok("allowed countries", format!("{who} ({}) is in SmsAllowedCountries", open.join(", "))),
            }
        })
        .collect()
}

/// An origination number of the account (SNS ListOriginationNumbers).
#[derive(Debug, Clone)]
pub struct Origination {
    pub number: String,
    pub country: String,
    pub sms: bool,
    pub active: bool,
    pub kind: String,
}

/// The origination check for the `--to` numbers: BLOCKER for a US/Canada destination without an
/// active SMS-capable US or CA number (US carriers block unregistered traffic), WARN elsewhere.
pub fn origination_checks(to: &[PhoneNumber], numbers: &[Origination]) -> Vec<Check> {
    const C: &str = "origination numbers";
    let usable: Vec<&Origination> = numbers.iter().filter(|o| o.sms && o.active).collect();
    if to.is_empty() {
        return vec![if usable.is_empty() {
            warning(
                C,
                "none in the account: US destinations need one (a toll-free, 10DLC or short-code number, AWS End User Messaging SMS); give --to to check your destinations",
            )
        } else {
            ok(C, format!("{} usable: {}", usable.len(), describe_numbers(&usable)))
        }];
    }
    to.iter()
        .map(|n| {
            let Some(countries) = countries_of(n) else {
                return warning(
                    C,
                    format!(
                        "{}: preflight does not know this calling code's country; check it has a route",
                        n.masked()
                    ),
                );
            };
            let here: Vec<&Origination> =
                usable.iter().copied().filter(|o| countries.contains(&o.country.as_str())).collect();
            match (here.is_empty(), countries.contains(&"US")) {
                (false, _) => ok(C, format!("{} ({}): {}", n.masked(), countries.join("/"), describe_numbers(&here))),
                (true, true) => problem(
                    C,
                    format!(
                        "{} (US/CA): the account has no active SMS origination number in the US or Canada; US \
                         carriers block SMS without a registered toll-free, 10DLC or short-code number. Register one \
                         (AWS End User Messaging SMS), then deploy with SmsOriginationNumber",
                        n.masked()
                    ),
                ),
                (true, false) => warning(
                    C,
                    format!(
                        "{} ({}): no origination number there; SNS sends from a shared route (or SmsSenderId where the \
                         country allows one), and some countries require a registered sender",
                        n.masked(),
                        countries.join("/")
                    ),
                ),
            }
        })
        .collect()
}

fn describe_numbers(numbers: &[&Origination]) -> String {
    numbers
        .iter()
        .map(|o| format!("{} ({}, {})", tocsin::domain::phone::mask_phone_like(&o.number), o.country, o.kind))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The delivery-status log group check for one group's state (exists?, its subscription filters).
pub fn log_group_checks(groups: &[(String, Option<Vec<String>>); 2], create: bool) -> Vec<Check> {
    const C: &str = "delivery-status log groups";
    let mut out = Vec::new();
    let exists: Vec<bool> = groups.iter().map(|(_, f)| f.is_some()).collect();
    let names = format!("{} and {}", groups[0].0, groups[1].0);
    match (exists[0], exists[1], create) {
        (false, false, true) => out.push(ok(C, format!("{names} do not exist: CreateSmsLogGroups=true (the default) creates them"))),
        (false, false, false) => out.push(problem(
            C,
            format!("{names} do not exist: deploy with CreateSmsLogGroups=true (with false the subscription filters have nothing to attach to: ResourceNotFoundException)"),
        )),
        (true, true, true) => out.push(problem(
            C,
            format!("{names} exist (SMS delivery logging ran here before, or another stack made them): deploy with CreateSmsLogGroups=false (true fails with \"already exists\")"),
        )),
        (true, true, false) => out.push(ok(C, format!("{names} exist: CreateSmsLogGroups=false adopts them"))),
        _ => {
            let (have, lack) = if exists[0] { (&groups[0].0, &groups[1].0) } else { (&groups[1].0, &groups[0].0) };
            out.push(problem(
                C,
                format!("only {have} exists: either value of CreateSmsLogGroups fails; create {lack} (aws logs create-log-group --log-group-name {lack}), then deploy with CreateSmsLogGroups=false"),
            ));
        }
    }
    for (name, filters) in groups {
        match filters {
            Some(f) if f.len() >= 2 => out.push(problem(
                "subscription filters",
                format!("{name} has 2 already ({}): a log group takes at most 2, so this stack's would be a third (LimitExceededException). Remove one, or deploy in another region or account", f.join(", ")),
            )),
            Some(f) if f.len() == 1 => out.push(warning(
                "subscription filters",
                format!("{name}: 1 of 2 taken ({}); this stack takes the last", f[0]),
            )),
            _ => {}
        }
    }
    out
}

/// What ReserveFunctionConcurrency=true reserves: intake 10, status 5, escalation 2
/// (template.yaml).
pub const FUNCTION_RESERVATION: u32 = 10 + 5 + 2;

/// What a deploy with these switches would reserve of the account's concurrency, and which
/// switches reserve it.
pub fn planned_reservation(reserve_sender: bool, sender: u32, reserve_functions: bool) -> (i32, Vec<&'static str>) {
    let mut total = 0u32;
    let mut switches = Vec::new();
    if reserve_sender {
        total = total.saturating_add(sender);
        switches.push("ReserveSenderConcurrency=true");
    }
    if reserve_functions {
        total = total.saturating_add(FUNCTION_RESERVATION);
        switches.push("ReserveFunctionConcurrency=true");
    }
    (i32::try_from(total).unwrap_or(i32::MAX), switches)
}

/// The concurrency check: (the account's quota, what is unreserved now, what the deploy would
/// reserve and by which switches).
pub fn concurrency_check(limit: i32, unreserved: i32, reserved: i32, switches: &[&str]) -> Check {
    const C: &str = "Lambda concurrency";
    if reserved > 0 && unreserved.saturating_sub(reserved) < MIN_UNRESERVED {
        return problem(
            C,
            format!(
                "quota {limit}, {unreserved} unreserved: {} reserve {reserved} and Lambda keeps {MIN_UNRESERVED} unreserved, so CloudFormation would refuse the reservation. Deploy without it, or raise the quota first (Service Quotas, Lambda, Concurrent executions)",
                switches.join(" and ")
            ),
        );
    }
    if limit < 1000 {
        return warning(
            C,
            format!(
                "quota {limit} ({unreserved} unreserved): enough to deploy without reserved concurrency; a new account's 10 is shared by every function, so ask for more (Service Quotas) before relying on tocsin in a storm or a flood"
            ),
        );
    }
    ok(C, format!("quota {limit}, {unreserved} unreserved"))
}

/// The provider to check: a deployed stack's (its outputs), else `--sms-provider`, else the
/// template's default. A flag that contradicts the stack is refused rather than half-applied.
pub fn provider_to_check(args: &PreflightArgs, stack: Option<&StackOutputs>) -> CliResult<SendingProvider> {
    let flag = |p: ProviderArg| match p {
        ProviderArg::Sns => SendingProvider::Sns,
        ProviderArg::EndUserMessaging => SendingProvider::EndUserMessaging(tocsin::config::EumSettings {
            configuration_set: String::new(),
            origination_identity: args.origination_identity.clone().filter(|i| !i.trim().is_empty()),
            opt_out_list: args.opt_out_list.clone(),
            protect_configuration: None,
        }),
    };
    let Some(outputs) = stack else {
        return Ok(flag(args.sms_provider.unwrap_or(ProviderArg::EndUserMessaging)));
    };
    let deployed = sending_provider(outputs)?;
    match (args.sms_provider, &deployed) {
        (Some(ProviderArg::Sns), SendingProvider::EndUserMessaging(_))
        | (Some(ProviderArg::EndUserMessaging), SendingProvider::Sns) => Err(CliError::Usage(format!(
            "stack {} sends through {}: --sms-provider contradicts it (leave it out to check the stack as deployed)",
            outputs.stack,
            super::doctor::provider_name(&deployed)
        ))),
        _ => Ok(deployed),
    }
}

/// Runs every check and prints them; exit 1 when any is a blocker.
pub async fn run(sdk: &SdkConfig, args: &PreflightArgs, stack: Option<&StackOutputs>, json: bool) -> CliResult<u8> {
    let to: Vec<PhoneNumber> = args
        .to
        .iter()
        .map(|n| {
            PhoneNumber::parse(n)
                .map_err(|e| CliError::Usage(format!("--to {}: {e}", tocsin::domain::phone::mask_phone_like(n))))
        })
        .collect::<CliResult<_>>()?;
    let provider = provider_to_check(args, stack)?;
    let region = sdk.region().map(|r| r.to_string()).ok_or_else(|| CliError::Usage("no AWS region".into()))?;
    let sts = aws_sdk_sts::Client::new(sdk);
    let account = sts
        .get_caller_identity()
        .send()
        .await
        .map_err(CliError::aws("STS GetCallerIdentity"))?
        .account
        .unwrap_or_default();
    let spinner = crate::progress::Spinner::start("checking the account…");
    let mut checks = Vec::new();
    let mut diff = Vec::new();
    match &provider {
        SendingProvider::EndUserMessaging(eum) => {
            spinner.set_message("End User Messaging…");
            let group = stack.and_then(|o| o.get("SmsEventLogGroupName"));
            let deployed = match (eum.configuration_set.as_str(), group) {
                ("", _) | (_, None) => None,
                (cs, Some(g)) => Some((cs, g)),
            };
            let settings = super::eum::Settings {
                region: &region,
                identity: eum.origination_identity.as_deref(),
                opt_out_list: &eum.opt_out_list,
                deployed,
                to: &to,
                // Before the deploy there is no topic yet; doctor checks it on the deployed stack.
                replies_topic: stack.and_then(|o| o.get("RepliesTopicArn")),
            };
            checks.extend(super::eum::checks(sdk, &settings).await);
            let allowed = stack
                .and_then(|o| o.get("SmsAllowedCountries"))
                .map(str::to_owned)
                .or_else(|| args.allowed_countries.clone())
                .unwrap_or_else(|| TEMPLATE_ALLOWED_COUNTRIES.to_owned());
            checks.extend(allowed_country_checks(&to, &allowed));
        }
        SendingProvider::Sns => {
            diff = sns_checks(sdk, args, &to, &region, &account, &spinner, &mut checks).await;
        }
    }

    spinner.set_message("Lambda concurrency…");
    let lambda = aws_sdk_lambda::Client::new(sdk);
    match lambda.get_account_settings().send().await {
        Ok(out) => {
            let limit = out.account_limit().map(|l| l.concurrent_executions()).unwrap_or_default();
            let unreserved = out.account_limit().and_then(|l| l.unreserved_concurrent_executions()).unwrap_or(limit);
            let (reserved, switches) = planned_reservation(
                args.reserve_sender_concurrency,
                args.sender_max_concurrency,
                args.reserve_function_concurrency,
            );
            checks.push(concurrency_check(limit, unreserved, reserved, &switches));
        }
        Err(e) => checks.push(problem(
            "Lambda concurrency",
            format!("cannot read it (Lambda GetAccountSettings: {})", describe(&e)),
        )),
    }
    spinner.done();

    let blockers = checks.iter().filter(|c| c.verdict == Verdict::Problem).count();
    let provider = super::doctor::provider_name(&provider);
    if json {
        output::json(&Report {
            account: &account,
            region: &region,
            provider,
            stack: stack.map(|s| s.stack.as_str()),
            ok: blockers == 0,
            blockers,
            checks: &checks,
            sms_preferences_diff: &diff,
        })?;
    } else {
        for c in &checks {
            let tag = match c.verdict {
                Verdict::Ok => "ok     ",
                Verdict::Warning => "WARN   ",
                Verdict::Problem => "BLOCKER",
            };
            output::line(format!("{tag} {}: {}", c.check, c.detail))?;
        }
        output::line(match blockers {
            0 => format!("account {account}, {region}, SmsProvider={provider}: nothing blocks a deploy."),
            n => format!(
                "account {account}, {region}, SmsProvider={provider}: {} to fix before deploying.",
                output::count(n, "blocker")
            ),
        })?;
    }
    Ok(if blockers == 0 { exit::OK } else { exit::REFUSED })
}

/// SNS's checks (`SmsProvider=sns`); returns the SMS preferences' diff.
async fn sns_checks(
    sdk: &SdkConfig,
    args: &PreflightArgs,
    to: &[PhoneNumber],
    region: &str,
    account: &str,
    spinner: &crate::progress::Spinner,
    checks: &mut Vec<Check>,
) -> Vec<Change> {
    spinner.set_message("delivery-status log groups…");
    let logs = aws_sdk_cloudwatchlogs::Client::new(sdk);
    let base = format!("sns/{region}/{account}/DirectPublishToPhoneNumber");
    let mut groups: [(String, Option<Vec<String>>); 2] = [(base.clone(), None), (format!("{base}/Failure"), None)];
    let mut readable = true;
    for (name, filters) in &mut groups {
        match logs.describe_log_groups().log_group_name_prefix(name.as_str()).send().await {
            Ok(out) if out.log_groups().iter().any(|g| g.log_group_name() == Some(name.as_str())) => {
                match logs.describe_subscription_filters().log_group_name(name.as_str()).send().await {
                    Ok(f) => {
                        *filters = Some(
                            f.subscription_filters()
                                .iter()
                                .filter_map(|f| f.filter_name().map(str::to_owned))
                                .collect(),
                        )
                    }
                    Err(e) => {
                        checks.push(problem(
                            "subscription filters",
                            format!("{name}: cannot read them ({})", describe(&e)),
                        ));
                        *filters = Some(Vec::new());
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                checks
                    .push(problem("delivery-status log groups", format!("{name}: cannot read it ({})", describe(&e))));
                readable = false;
            }
        }
    }
    if readable {
        checks.extend(log_group_checks(&groups, args.create_sms_log_groups));
    }

    spinner.set_message("SMS preferences…");
    let sns = aws_sdk_sns::Client::new(sdk);
    let mut diff = Vec::new();
    let mut limit = None;
    match sns.get_sms_attributes().send().await {
        Ok(out) => {
            let attrs = out.attributes.unwrap_or_default();
            limit = Some(attrs.get("MonthlySpendLimit").and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(1.0));
            diff = preferences_diff(&attrs, args.monthly_spend_limit_usd);
            checks.push(preferences_check(&attrs, &diff, args.manage_sms_preferences));
        }
        Err(e) => checks
            .push(problem("SMS preferences", format!("cannot read them (SNS GetSMSAttributes: {})", describe(&e)))),
    }

    spinner.set_message("SMS sandbox…");
    checks.push(sandbox_check(&sns, to).await);

    spinner.set_message("SMS spend…");
    let cloudwatch = aws_sdk_cloudwatch::Client::new(sdk);
    let spend = super::doctor::spend(&cloudwatch, limit).await;
    checks.push(spend);
    if let (Some(current), Some(wanted)) = (limit, args.monthly_spend_limit_usd)
        && f64::from(wanted) > current
    {
        checks.push(warning(
            "SMS spend",
            format!("MonthlySpendLimitUsd={wanted} is above the account's {current:.0} USD: SNS refuses more than AWS granted, and the deploy fails on SmsPreferences unless the quota was raised to {wanted} (support case)"),
        ));
    } else if limit.is_some_and(|l| l <= 1.0) {
        checks.push(warning(
            "SMS spend",
            "the limit is 1 USD (a new account's; inside the SMS sandbox it stays 1 USD): leave the sandbox, raise the quota (support case), then deploy with MonthlySpendLimitUsd",
        ));
    }

    spinner.set_message("origination numbers…");
    match origination_numbers(&sns).await {
        Ok(numbers) => checks.extend(origination_checks(to, &numbers)),
        Err(e) => checks.push(problem("origination numbers", format!("cannot list them ({e})"))),
    }
    diff
}

fn preferences_check(attrs: &std::collections::HashMap<String, String>, diff: &[Change], manage: bool) -> Check {
    const C: &str = "SMS preferences";
    let shown =
        |c: &Change| format!("{} {} → {}", c.attribute, c.current.as_deref().unwrap_or("(not set)"), c.deployed);
    if manage {
        if diff.is_empty() {
            return ok(C, "ManageSmsPreferences=true changes nothing but the delivery-status role's ARN");
        }
        let others = attrs.get("DeliveryStatusIAMRole").is_some_and(|r| !r.trim().is_empty());
        let detail = format!(
            "ManageSmsPreferences=true would set, account-wide: {}{}",
            diff.iter().map(shown).collect::<Vec<_>>().join("; "),
            if others {
                ". A delivery-status role is set already: if another tocsin stack manages these, deploy with ManageSmsPreferences=false"
            } else {
                ""
            }
        );
        return warning(C, detail);
    }
    let role = attrs.get("DeliveryStatusIAMRole").is_some_and(|r| !r.trim().is_empty());
    let sampling = attrs.get("DeliveryStatusSuccessSamplingRate").map(|v| v.trim().to_owned());
    if role && sampling.as_deref() == Some("100") {
        ok(C, "ManageSmsPreferences=false: delivery-status logging is on (a role, success sampling 100)")
    } else {
        problem(
            C,
            format!(
                "ManageSmsPreferences=false, but delivery-status logging is not on (role {}, success sampling {}): no delivery would be seen. Deploy with ManageSmsPreferences=true, or let the stack that manages them set these",
                if role { "set" } else { "not set" },
                sampling.as_deref().unwrap_or("not set")
            ),
        )
    }
}

async fn sandbox_check(sns: &aws_sdk_sns::Client, to: &[PhoneNumber]) -> Check {
    const C: &str = "SMS sandbox";
    let in_sandbox = match sns.get_sms_sandbox_account_status().send().await {
        Ok(out) => out.is_in_sandbox(),
        Err(e) => return problem(C, format!("cannot read it (SNS GetSMSSandboxAccountStatus: {})", describe(&e))),
    };
    if !in_sandbox {
        return ok(C, "out of the sandbox: SMS reach any number");
    }
    let mut verified = Vec::new();
    let mut token = None;
    loop {
        match sns.list_sms_sandbox_phone_numbers().set_next_token(token.take()).send().await {
            Ok(out) => {
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
            Err(e) => return problem(C, format!("in the sandbox; cannot list its numbers ({})", describe(&e))),
        }
    }
    let unverified: Vec<String> =
        to.iter().filter(|n| !verified.iter().any(|v| v == n.expose())).map(|n| n.masked()).collect();
    if verified.is_empty() {
        return problem(
            C,
            "in the sandbox with no verified number: no alert can reach anyone. Verify the on-call numbers (aws sns create-sms-sandbox-phone-number, verify-sms-sandbox-phone-number) or request production access",
        );
    }
    if !unverified.is_empty() {
        return problem(
            C,
            format!(
                "in the sandbox, and {} not verified: SNS will not send to them. Verify them, or request production access",
                unverified.join(", ")
            ),
        );
    }
    warning(
        C,
        format!(
            "in the sandbox: only the {} verified number(s) receive SMS; request production access before alerting anyone else",
            verified.len()
        ),
    )
}

pub(crate) async fn origination_numbers(sns: &aws_sdk_sns::Client) -> Result<Vec<Origination>, String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = sns
            .list_origination_numbers()
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| format!("SNS ListOriginationNumbers: {}", describe(&e)))?;
        for n in page.phone_numbers() {
            out.push(Origination {
                number: n.phone_number().unwrap_or_default().to_owned(),
                country: n.iso2_country_code().unwrap_or_default().to_owned(),
                sms: n.number_capabilities().iter().any(|c| c.as_str() == "SMS"),
                active: n.status().is_none_or(|s| s.eq_ignore_ascii_case("ACTIVE")),
                kind: n.route_type().map_or_else(|| "?".to_owned(), |r| r.as_str().to_owned()),
            });
        }
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phone(n: &str) -> PhoneNumber {
        PhoneNumber::parse(n).expect("number")
    }

    #[test]
    fn the_diff_lists_only_what_the_stack_would_change() {
        let current = [("DeliveryStatusSuccessSamplingRate", "100"), ("DefaultSMSType", "Promotional")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let diff = preferences_diff(&current, Some(50));
        let changed: Vec<&str> = diff.iter().map(|c| c.attribute).collect();
        assert_eq!(changed, ["DeliveryStatusIAMRole", "DefaultSMSType", "MonthlySpendLimit"]);
        assert_eq!(diff[1].current.as_deref(), Some("Promotional"));
        assert_eq!(diff[2].deployed, "50");
    }

    #[test]
    fn a_destination_country_is_read_from_its_calling_code() {
        assert_eq!(countries_of(&phone("+14155550100")), Some(&["US", "CA"][..]));
        assert_eq!(countries_of(&phone("+447911123456")), Some(&["GB"][..]));
        assert_eq!(countries_of(&phone("+353851234567")), Some(&["IE"][..]));
        assert_eq!(countries_of(&phone("+2348012345678")), None);
    }

    #[test]
    fn a_us_destination_without_a_us_origination_number_blocks_and_elsewhere_warns() {
        let tfn = Origination {
            number: "+18445550100".into(),
            country: "US".into(),
            sms: true,
            active: true,
            kind: "Transactional".into(),
        };
        let us = [phone("+14155550100")];
        assert_eq!(origination_checks(&us, &[])[0].verdict, Verdict::Problem);
        assert_eq!(origination_checks(&us, std::slice::from_ref(&tfn))[0].verdict, Verdict::Ok);
        let inactive = Origination { active: false, ..tfn.clone() };
        assert_eq!(origination_checks(&us, &[inactive])[0].verdict, Verdict::Problem);
        assert_eq!(origination_checks(&[phone("+447911123456")], &[tfn])[0].verdict, Verdict::Warning);
    }

    #[test]
    fn a_number_in_a_country_the_stack_may_not_text_blocks_the_deploy_it_would_fail_under() {
        let verdicts = |allowed: &str| -> Vec<Verdict> {
            allowed_country_checks(&[phone("+447700900123"), phone("+14155550100"), phone("+2348012345678")], allowed)
                .into_iter()
                .map(|c| c.verdict)
                .collect()
        };
        // The template's default: a UK on-call number would never get an SMS; +1 is US or Canada.
        assert_eq!(verdicts(TEMPLATE_ALLOWED_COUNTRIES), [Verdict::Problem, Verdict::Warning, Verdict::Warning]);
        assert_eq!(verdicts("US,CA,GB"), [Verdict::Ok, Verdict::Ok, Verdict::Warning]);
        let detail = &allowed_country_checks(&[phone("+447700900123")], "US")[0].detail;
        assert!(detail.contains("SmsAllowedCountries=US,GB") && !detail.contains("7700900123"), "{detail}");
    }

    #[test]
    fn a_reservation_the_quota_cannot_hold_blocks() {
        let check = |limit, unreserved, sender, functions| {
            let (reserved, switches) = planned_reservation(sender, 2, functions);
            concurrency_check(limit, unreserved, reserved, &switches)
        };
        assert_eq!(check(10, 10, true, false).verdict, Verdict::Problem);
        assert_eq!(check(10, 10, false, false).verdict, Verdict::Warning);
        assert_eq!(check(1000, 1000, true, true).verdict, Verdict::Ok);
        assert_eq!(check(1000, 101, true, false).verdict, Verdict::Problem);
        assert_eq!(check(1000, 110, false, true).verdict, Verdict::Problem, "17 leave 93 unreserved");
        assert_eq!(check(1000, 117, false, true).verdict, Verdict::Ok);
        assert!(check(1000, 110, true, true).detail.contains("ReserveFunctionConcurrency=true"));
    }
}
