//! End User Messaging SMS's side of `preflight` and `doctor`: what in the account stops an SMS
//! from leaving through End User Messaging, one line per blocker with its fix.
//!
//! - The region: End User Messaging SMS is offered in [`SMS_REGIONS`] only (AWS End User Messaging
//!   SMS User Guide, "Regional availability"); elsewhere a stack cannot send SMS with it at all.
//! - The account tier (DescribeAccountAttributes `ACCOUNT_TIER`): `SANDBOXED` sends only to
//!   verified destination numbers (DescribeVerifiedDestinationNumbers), and AWS verifies a number
//!   by texting it a code *from an active origination identity* — so the order AWS requires is the
//!   identity first, then the destinations, then production access.
//! - The origination identity (DescribePhoneNumbers, DescribePools, DescribeSenderIds): the one the
//!   stack names, or the account's; its type, status (`ACTIVE` or not), registration, country,
//!   two-way, opt-out list, and AWS's monthly lease for it.
//! - The opt-out list the stack names (DescribeOptOutLists) and the identity's.
//! - The text spend limit (DescribeSpendLimits: enforced against the account's maximum) and this
//!   month's spend (CloudWatch `AWS/SMSVoice` `TextMessageMonthlySpend`).
//! - A deployed stack's configuration set and its event destination (DescribeConfigurationSets):
//!   enabled, `TEXT_ALL`, writing to the stack's event group.
//! - A `SendTextMessage` with `DryRun` to each destination given, once the reads say it should
//!   pass: End User Messaging runs its own checks (identity, sandbox, opt-out list, configuration
//!   set) and sends nothing.
//!
//! Numbers are shown masked; identities by their id.

use aws_sdk_pinpointsmsvoicev2 as sms;
use aws_sdk_pinpointsmsvoicev2::error::{ProvideErrorMetadata, SdkError};
use serde::Serialize;
use tocsin::domain::PhoneNumber;
use tocsin::domain::phone::mask_phone_like;

use super::doctor::{Check, ok, problem, warning};
use super::preflight::countries_of;
use crate::error::describe;
use crate::output::mask_numbers_in;

/// AWS's SMS simulator destinations in the United States: a message to the first produces success
/// events, to the second failure events, without reaching a carrier network ("Simulator phone
/// numbers in AWS End User Messaging SMS",
/// <https://docs.aws.amazon.com/sms-voice/latest/userguide/test-phone-numbers.html>). Only a
/// SIMULATOR origination number of the same country can send to them.
pub const SIMULATOR_SUCCESS: &str = "+14254147755";
pub const SIMULATOR_FAILURE: &str = "+14254147167";

/// The AWS Regions where End User Messaging SMS sends SMS: the "Regional availability" table of
/// the AWS End User Messaging SMS User Guide
/// (<https://docs.aws.amazon.com/sms-voice/latest/userguide/what-is-sms-mms.html#sms-regions>),
/// every row of which supports the SMS channel. A region that is not listed but answers is said to
/// be so (a warning), never refused on this list alone.
pub const SMS_REGIONS: &[&str] = &[
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "af-south-1",
    "ap-south-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-south-1",
    "ap-northeast-3",
    "ap-northeast-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-northeast-1",
    "ap-southeast-6",
    "ap-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-west-1",
    "eu-west-2",
    "eu-south-1",
    "eu-west-3",
    "eu-south-2",
    "eu-north-1",
    "eu-central-2",
    "il-central-1",
    "me-south-1",
    "me-central-1",
    "sa-east-1",
];

/// Whether `number` is one of AWS's US simulator destinations (sandbox or not, no verification:
/// "while your account is in the sandbox, you can only send to verified destination phone
/// numbers, or between simulator numbers").
pub fn is_simulator_destination(number: &PhoneNumber) -> bool {
    [SIMULATOR_SUCCESS, SIMULATOR_FAILURE].contains(&number.expose())
}

/// The account tier (DescribeAccountAttributes `ACCOUNT_TIER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tier {
    Sandboxed,
    Production,
    Other(String),
}

/// The text spend limit (DescribeSpendLimits `TEXT_MESSAGE_MONTHLY_SPEND_LIMIT`), whole USD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendLimit {
    /// What End User Messaging stops at this month.
    pub enforced: i64,
    /// The account's limit, raised only by a quota request.
    pub max: i64,
    /// Whether `enforced` was set below `max` (SetTextMessageSpendLimitOverride).
    pub overridden: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A phone number, with its type (TOLL_FREE, TEN_DLC, SHORT_CODE, LONG_CODE, SIMULATOR).
    Number(String),
    Pool,
    SenderId,
}

/// One origination identity of the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub kind: Kind,
    pub id: String,
    pub arn: String,
    /// A number's E.164 form (never printed in clear).
    pub number: Option<String>,
    /// `ACTIVE`, `PENDING`, …; a sender ID has none and counts as active.
    pub status: String,
    pub iso: Option<String>,
    pub sms: bool,
    pub two_way: bool,
    /// Where End User Messaging publishes the replies it receives (two-way on).
    pub two_way_channel: Option<String>,
    pub international: bool,
    pub opt_out_list: Option<String>,
    pub registration: Option<String>,
    /// AWS's monthly lease for it, as DescribePhoneNumbers/DescribeSenderIds state it.
    pub monthly_lease_usd: Option<String>,
    /// The pool a number belongs to.
    pub pool: Option<String>,
}

impl Identity {
    pub fn active(&self) -> bool {
        self.status == "ACTIVE"
    }

    pub fn is_simulator(&self) -> bool {
        self.kind == Kind::Number("SIMULATOR".into())
    }

    /// Whether `wanted` (an id, an ARN, a number or a sender ID, as `SmsOriginationIdentity` may
    /// give it) names this identity.
    pub fn is(&self, wanted: &str) -> bool {
        let wanted = wanted.trim();
        wanted == self.id || wanted == self.arn || self.number.as_deref() == Some(wanted)
    }

    /// Can send to a destination in one of `countries`: active, SMS-capable and from there (or
    /// allowed to send abroad). A simulator sends only to simulator destinations.
    fn serves(&self, countries: &[&str]) -> bool {
        let here = self.iso.as_deref().is_some_and(|c| countries.contains(&c));
        self.active() && self.sms && !self.is_simulator() && (here || self.international)
    }

    /// One line about it: id, type, number (masked), country, status, registration, two-way, list, lease.
    pub fn describe(&self) -> String {
        let kind = match &self.kind {
            Kind::Number(t) => t.clone(),
            Kind::Pool => "pool".into(),
            Kind::SenderId => "sender ID".into(),
        };
        let mut parts = vec![format!("{} ({kind}", self.id)];
        if let Some(n) = &self.number {
            parts[0].push_str(&format!(", {}", mask_phone_like(n)));
        }
        if let Some(c) = &self.iso {
            parts[0].push_str(&format!(", {c}"));
        }
        parts[0].push(')');
        parts.push(self.status.clone());
        match &self.registration {
            Some(r) => parts.push(format!("registration {r}")),
            None if matches!(&self.kind, Kind::Number(t) if t == "TOLL_FREE" || t == "TEN_DLC" || t == "SHORT_CODE") => {
                parts.push("no registration attached".into())
            }
            None => {}
        }
        parts.push(if self.two_way { "two-way on".into() } else { "two-way off".into() });
        if let Some(l) = &self.opt_out_list {
            parts.push(format!("opt-out list {l}"));
        }
        if let Some(p) = self.monthly_lease_usd.as_deref().filter(|p| !p.is_empty()) {
            parts.push(format!("{p} USD a month"));
        }
        parts.join(", ")
    }
}

/// One event destination of a configuration set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub name: String,
    pub enabled: bool,
    pub types: Vec<String>,
    /// The CloudWatch Logs group ARN it writes to, if it writes to CloudWatch Logs.
    pub log_group_arn: Option<String>,
}

/// What `SendTextMessage` with `DryRun` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DryRun {
    Passed,
    Refused {
        code: String,
        reason: Option<String>,
        message: String,
    },
    /// The call itself failed (no answer, access denied): nothing is known of the destination.
    Failed(String),
}

// ------------------------------------------------------------------------------- the judgements

/// Whether End User Messaging SMS serves `region`, from AWS's list and whether it answered there.
pub fn region_check(region: &str, answered: &Result<(), String>) -> Check {
    const C: &str = "End User Messaging region";
    let listed = SMS_REGIONS.contains(&region);
    match (listed, answered) {
        (true, Ok(())) => ok(C, format!("{region} offers End User Messaging SMS")),
        (true, Err(e)) => problem(C, format!("{region} offers End User Messaging SMS, but it did not answer: {e}")),
        (false, Err(e)) => problem(
            C,
            format!(
                "{region} does not offer End User Messaging SMS ({e}): a stack here cannot send SMS with it. Deploy in \
                 one of {} (AWS End User Messaging SMS User Guide, Regional availability), or with SmsProvider=sns \
                 where SNS sends SMS",
                SMS_REGIONS.join(", ")
            ),
        ),
        (false, Ok(())) => warning(
            C,
            format!(
                "{region} is not in the list of End User Messaging SMS regions this version knows, yet it answered: \
                 check AWS's current list before relying on it"
            ),
        ),
    }
}

/// The sandbox: what a sandboxed account needs, in the order AWS requires it.
pub fn tier_check(tier: &Tier, verified: &[String], to: &[PhoneNumber], has_active_identity: bool) -> Check {
    const C: &str = "SMS sandbox";
    match tier {
        Tier::Production => return ok(C, "account tier PRODUCTION: SMS reach any number"),
        Tier::Other(t) => return warning(C, format!("account tier {t}: not one this version knows")),
        Tier::Sandboxed => {}
    }
    const VERIFY: &str = "aws pinpoint-sms-voice-v2 create-verified-destination-number --destination-phone-number \
                          NUMBER; send-destination-number-verification-code --verified-destination-number-id ID \
                          --verification-channel TEXT --origination-identity IDENTITY; verify-destination-number \
                          --verified-destination-number-id ID --verification-code CODE";
    let order = "AWS's order: 1. an ACTIVE origination identity (AWS texts the verification code from it), 2. verify \
                 each destination, 3. request production access (a support case; inside the sandbox the spend limit \
                 stays 1 USD)";
    if !has_active_identity {
        return problem(
            C,
            format!(
                "account tier SANDBOXED, and no ACTIVE origination identity to verify a destination from: first get \
                 one (origination identity, below). {order}"
            ),
        );
    }
    let unverified: Vec<String> = to
        .iter()
        .filter(|n| !is_simulator_destination(n) && !verified.iter().any(|v| v == n.expose()))
        .map(PhoneNumber::masked)
        .collect();
    if !unverified.is_empty() {
        return problem(
            C,
            format!(
                "account tier SANDBOXED, and {} not verified: End User Messaging refuses them \
                 (DESTINATION_PHONE_NUMBER_NOT_VERIFIED). Verify each ({VERIFY}) or leave the sandbox. {order}",
                unverified.join(", ")
            ),
        );
    }
    if verified.is_empty() && to.iter().all(|n| !is_simulator_destination(n)) {
        return problem(
            C,
            format!(
                "account tier SANDBOXED with no verified destination number: no alert reaches anyone. Verify the \
                 on-call numbers ({VERIFY}). {order}"
            ),
        );
    }
    warning(
        C,
        format!(
            "account tier SANDBOXED: only the {} verified destination number(s) (and AWS's simulator numbers) \
             receive SMS; request production access before alerting anyone else. {order}",
            verified.len()
        ),
    )
}

/// The origination identity: the one the stack names (`wanted`), or the account's; and whether
/// each destination's country has one. The second value: whether an SMS can leave at all (an
/// ACTIVE identity to send from), for the sandbox check and the DryRun.
pub fn identity_checks(
    wanted: Option<&str>,
    identities: &[Identity],
    to: &[PhoneNumber],
    wanted_list: &str,
    region: &str,
) -> (Vec<Check>, bool) {
    const C: &str = "origination identity";
    let mut out = Vec::new();
    let request = "aws pinpoint-sms-voice-v2 request-phone-number --iso-country-code US --message-type TRANSACTIONAL \
                   --number-capabilities SMS --number-type TOLL_FREE, then submit its registration (US toll-free: up \
                   to 15 business days)";
    let Some(wanted) = wanted else {
        let usable: Vec<&Identity> = identities.iter().filter(|i| i.active() && i.sms && !i.is_simulator()).collect();
        if identities.is_empty() {
            out.push(problem(
                C,
                format!(
                    "the account has no origination identity in {region} (a number belongs to one region): request \
                     one ({request}); meanwhile a SIMULATOR number proves the loop without a phone (doctor --simulator)"
                ),
            ));
            return (out, false);
        }
        if usable.is_empty() {
            let all: Vec<String> = identities.iter().map(Identity::describe).collect();
            out.push(problem(
                C,
                format!("none of the account's is ACTIVE and able to text a phone: {}", all.join("; ")),
            ));
            return (out, false);
        }
        out.push(ok(
            C,
            format!(
                "SmsOriginationIdentity not set: End User Messaging chooses among {}: {}",
                usable.len(),
                usable.iter().map(|i| i.describe()).collect::<Vec<_>>().join("; ")
            ),
        ));
        out.extend(destination_checks(&usable, to));
        let lists: Vec<&str> = usable.iter().filter_map(|i| i.opt_out_list.as_deref()).collect();
        if lists.iter().any(|l| *l != wanted_list) {
            out.push(warning(
                "opt-out list",
                format!(
                    "SmsOptOutListName={wanted_list}, but the account's identities use {}: a STOP reply lands in the \
                     identity's list, and tocsin checks {wanted_list}; name one identity (SmsOriginationIdentity) and \
                     its list",
                    lists.join(", ")
                ),
            ));
        }
        return (out, true);
    };
    let Some(found) = identities.iter().find(|i| i.is(wanted)) else {
        out.push(problem(
            C,
            format!(
                "SmsOriginationIdentity {} is not an identity of this account in {region}: a number or pool belongs to \
                 one account and one region. Use one of this region's, or deploy in its region",
                mask_numbers_in(wanted)
            ),
        ));
        return (out, false);
    };
    // A pool sends from its members: the numbers whose PoolId is its id.
    let members: Vec<&Identity> = match found.kind {
        Kind::Pool => identities.iter().filter(|i| i.pool.as_deref() == Some(found.id.as_str())).collect(),
        _ => vec![found],
    };
    let sending: Vec<&Identity> = members.iter().copied().filter(|m| m.active() && m.sms).collect();
    let mut can_send = found.active() && !sending.is_empty();
    if !found.active() {
        let why = match found.status.as_str() {
            "PENDING" => format!(
                "a new number stays PENDING until its registration is approved (US toll-free: up to 15 business days \
                 after you submit it{})",
                found.registration.as_deref().map(|r| format!("; registration {r}")).unwrap_or_default()
            ),
            _ => "End User Messaging sends nothing from it".to_owned(),
        };
        out.push(problem(C, format!("{}: not ACTIVE, {why}", found.describe())));
    } else if sending.is_empty() {
        out.push(problem(C, format!("{}: no ACTIVE SMS-capable number in it", found.describe())));
    } else if members.iter().all(|m| m.is_simulator()) {
        out.push(warning(
            C,
            format!(
                "{}: a SIMULATOR number texts only AWS's simulator destinations, never a phone: right for doctor \
                 --simulator, not for alerts",
                found.describe()
            ),
        ));
        can_send = true;
    } else {
        out.push(ok(C, found.describe()));
    }
    if can_send {
        out.extend(destination_checks(&sending, to));
    }
    match found.opt_out_list.as_deref() {
        Some(l) if l != wanted_list => out.push(problem(
            "opt-out list",
            format!(
                "{} uses opt-out list {l}, but the stack names SmsOptOutListName={wanted_list}: a STOP reply lands in \
                 {l} while tocsin checks {wanted_list}. Deploy with SmsOptOutListName={l}",
                found.id
            ),
        )),
        _ => {}
    }
    (out, can_send)
}

/// Per destination: an identity that can text its country (US and Canada require one; elsewhere
/// End User Messaging may route otherwise, and some countries require a registered sender ID).
fn destination_checks(sending: &[&Identity], to: &[PhoneNumber]) -> Vec<Check> {
    const C: &str = "origination identity";
    to.iter()
        .filter_map(|n| {
            if is_simulator_destination(n) {
                return sending.iter().all(|i| !i.is_simulator()).then(|| {
                    warning(
                        C,
                        format!(
                            "{}: AWS's simulator destination answers only a SIMULATOR origination number",
                            n.masked()
                        ),
                    )
                });
            }
            let Some(countries) = countries_of(n) else {
                return Some(warning(
                    C,
                    format!("{}: this version does not know its country; check an identity serves it", n.masked()),
                ));
            };
            let serving: Vec<&&Identity> = sending.iter().filter(|i| i.serves(countries)).collect();
            Some(match (serving.is_empty(), countries.contains(&"US")) {
                (false, _) => ok(C, format!("{} ({}): sent from {}", n.masked(), countries.join("/"), serving[0].id)),
                (true, true) => problem(
                    C,
                    format!(
                        "{} (US/CA): no ACTIVE identity of that country to send from: US carriers block SMS without a \
                         registered toll-free, 10DLC or short-code number",
                        n.masked()
                    ),
                ),
                (true, false) => warning(
                    C,
                    format!(
                        "{} ({}): no identity of that country; some countries require a registered number or sender ID",
                        n.masked(),
                        countries.join("/")
                    ),
                ),
            })
        })
        .collect()
}

/// The opt-out list the stack names exists.
pub fn opt_out_list_check(wanted: &str, lists: &[String]) -> Option<Check> {
    (!lists.iter().any(|l| l == wanted)).then(|| {
        problem(
            "opt-out list",
            format!(
                "SmsOptOutListName={wanted} does not exist in this region: create it (aws pinpoint-sms-voice-v2 \
                 create-opt-out-list --opt-out-list-name {wanted}) or deploy with the account's Default"
            ),
        )
    })
}

/// The text spend limit against this month's spend: 80 % is a blocker (the spend alarm's line).
pub fn spend_check(limit: Option<SpendLimit>, spent: Option<f64>, sandboxed: bool) -> Check {
    const C: &str = "SMS spend";
    let Some(limit) = limit else {
        return problem(C, "DescribeSpendLimits named no TEXT_MESSAGE_MONTHLY_SPEND_LIMIT: the limit is unknown");
    };
    let enforced = limit.enforced as f64;
    let raise = if sandboxed {
        "inside the sandbox the limit stays 1 USD: leave the sandbox, then request a higher TextMessageMonthlySpend \
         (Service Quotas, AWS End User Messaging)"
            .to_owned()
    } else if limit.enforced < limit.max {
        format!(
            "raise the enforced limit (aws pinpoint-sms-voice-v2 set-text-message-spend-limit-override --monthly-limit \
             N, up to the account's {} USD)",
            limit.max
        )
    } else {
        "request a higher TextMessageMonthlySpend (Service Quotas, AWS End User Messaging)".to_owned()
    };
    let limits = if limit.overridden {
        format!("enforced {} USD of the account's {} USD", limit.enforced, limit.max)
    } else {
        format!("{} USD (the account's)", limit.enforced)
    };
    let Some(spent) = spent else {
        return if limit.enforced <= 1 {
            warning(C, format!("no spend recorded in the last day; the limit is {limits}: {raise}"))
        } else {
            ok(C, format!("no spend recorded in the last day; limit {limits}"))
        };
    };
    let percent = if enforced > 0.0 { 100.0 * spent / enforced } else { 100.0 };
    let detail = format!("{spent:.2} USD this month of {limits} ({percent:.0} %)");
    if percent >= 100.0 {
        problem(C, format!("{detail}: End User Messaging has stopped sending SMS, on-call's included; {raise}"))
    } else if percent >= 80.0 {
        problem(C, format!("{detail}: End User Messaging stops sending at 100 %; {raise}"))
    } else if limit.enforced <= 1 {
        warning(C, format!("{detail}: {raise}"))
    } else {
        ok(C, detail)
    }
}

/// A deployed stack's configuration set: its event destination enabled, matching every SMS event,
/// writing to the stack's own event group.
pub fn configuration_set_check(name: &str, destinations: Option<&[Destination]>, event_group: &str) -> Check {
    const C: &str = "configuration set";
    let Some(destinations) = destinations else {
        return problem(
            C,
            format!(
                "{name} does not exist in this region: every send is refused (ResourceNotFoundException). Redeploy \
                 the stack (sam deploy) to recreate SmsConfigurationSet"
            ),
        );
    };
    let writes_to_group = |d: &&Destination| {
        d.log_group_arn.as_deref().is_some_and(|arn| {
            let arn = arn.strip_suffix(":*").unwrap_or(arn);
            arn.ends_with(&format!(":log-group:{event_group}"))
        })
    };
    let Some(d) = destinations.iter().find(writes_to_group) else {
        return problem(
            C,
            format!(
                "{name} has no event destination writing to {event_group}: no delivery event reaches tocsin, and every \
                 alert escalates as silent. Redeploy the stack"
            ),
        );
    };
    if !d.enabled {
        return problem(
            C,
            format!(
                "{name}'s event destination {} is disabled: no delivery event reaches tocsin. aws pinpoint-sms-voice-v2 \
                 update-event-destination --configuration-set-name {name} --event-destination-name {} --enabled (or \
                 redeploy)",
                d.name, d.name
            ),
        );
    }
    if !d.types.iter().any(|t| t == "TEXT_ALL" || t == "ALL") {
        return problem(
            C,
            format!(
                "{name}'s event destination {} matches only {}: events of other types never reach tocsin (an SMS \
                 whose only event is of another type looks silent). Redeploy the stack (TEXT_ALL)",
                d.name,
                d.types.join(", ")
            ),
        );
    }
    ok(C, format!("{name}: event destination {}, enabled, TEXT_ALL, writing to {event_group}", d.name))
}

/// What a `DryRun` to `number` said, with the fix for each refusal.
pub fn dry_run_check(number: &PhoneNumber, answer: &DryRun) -> Check {
    const C: &str = "DryRun";
    let masked = number.masked();
    let (code, reason, message) = match answer {
        DryRun::Passed => {
            return ok(
                C,
                format!(
                    "{masked}: SendTextMessage with DryRun passed End User Messaging's own checks (identity, sandbox, \
                     opt-out list, configuration set); nothing was sent"
                ),
            );
        }
        DryRun::Failed(e) => return problem(C, format!("{masked}: the DryRun could not be made ({e})")),
        DryRun::Refused { code, reason, message } => (code, reason.as_deref(), message),
    };
    let fix = match (code.as_str(), reason) {
        ("ThrottlingException", _) => return warning(C, format!("{masked}: throttled ({message}); run again")),
        (_, Some("DESTINATION_PHONE_NUMBER_NOT_VERIFIED")) => "the account is in the sandbox: verify the number",
        (_, Some("DESTINATION_PHONE_NUMBER_OPTED_OUT")) => {
            "the person opted out (replied STOP): only they opt back in, by replying; remove the number from the \
             list (delete-opted-out-number) only at their request"
        }
        (_, Some("RESOURCE_NOT_ACTIVE")) => "the origination identity is not ACTIVE (its registration)",
        (_, Some("NO_ORIGINATION_IDENTITIES_FOUND")) => "no ACTIVE identity can text this number's country",
        (_, Some("MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT")) => "the month's text spend limit is reached",
        ("ResourceNotFoundException", _) => "a resource the send names does not exist (identity, configuration set)",
        ("AccessDeniedException", _) => "the caller may not send (sms-voice:SendTextMessage)",
        _ => "see End User Messaging's message",
    };
    let reason = reason.map(|r| format!(" {r}")).unwrap_or_default();
    problem(C, format!("{masked}: refused ({code}{reason}: {}): {fix}", mask_numbers_in(message)))
}

// ------------------------------------------------------------------------------- the reads

fn err<E: std::error::Error>(operation: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("End User Messaging {operation}: {}", describe(&e))
}

/// The account tier; `Err` also when End User Messaging cannot be reached here at all.
pub async fn tier(client: &sms::Client) -> Result<Tier, String> {
    let out = client.describe_account_attributes().send().await.map_err(err("DescribeAccountAttributes"))?;
    let tier = out
        .account_attributes()
        .iter()
        .find(|a| a.name().as_str() == "ACCOUNT_TIER")
        .map(|a| a.value().to_owned())
        .ok_or_else(|| "DescribeAccountAttributes named no ACCOUNT_TIER".to_owned())?;
    Ok(match tier.as_str() {
        "SANDBOXED" => Tier::Sandboxed,
        "PRODUCTION" => Tier::Production,
        _ => Tier::Other(tier),
    })
}

pub async fn spend_limit(client: &sms::Client) -> Result<Option<SpendLimit>, String> {
    let out = client.describe_spend_limits().send().await.map_err(err("DescribeSpendLimits"))?;
    Ok(out
        .spend_limits()
        .iter()
        .find(|l| l.name().as_str() == "TEXT_MESSAGE_MONTHLY_SPEND_LIMIT")
        .map(|l| SpendLimit { enforced: l.enforced_limit(), max: l.max_limit(), overridden: l.overridden() }))
}

/// Every phone number, pool and sender ID of the account in this region.
pub async fn identities(client: &sms::Client) -> Result<Vec<Identity>, String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .describe_phone_numbers()
            .set_next_token(token.take())
            .send()
            .await
            .map_err(err("DescribePhoneNumbers"))?;
        for n in page.phone_numbers() {
            out.push(Identity {
                kind: Kind::Number(n.number_type().as_str().to_owned()),
                id: n.phone_number_id().unwrap_or(n.phone_number_arn()).to_owned(),
                arn: n.phone_number_arn().to_owned(),
                number: Some(n.phone_number().to_owned()),
                status: n.status().as_str().to_owned(),
                iso: Some(n.iso_country_code().to_owned()),
                sms: n.number_capabilities().iter().any(|c| c.as_str() == "SMS"),
                two_way: n.two_way_enabled(),
                two_way_channel: n.two_way_channel_arn().map(str::to_owned),
                international: n.international_sending_enabled(),
                opt_out_list: Some(n.opt_out_list_name().to_owned()),
                registration: n.registration_id().map(str::to_owned),
                monthly_lease_usd: Some(n.monthly_leasing_price().to_owned()),
                pool: n.pool_id().map(str::to_owned),
            });
        }
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    let mut token = None;
    loop {
        let page = client.describe_pools().set_next_token(token.take()).send().await.map_err(err("DescribePools"))?;
        for p in page.pools() {
            out.push(Identity {
                kind: Kind::Pool,
                id: p.pool_id().to_owned(),
                arn: p.pool_arn().to_owned(),
                number: None,
                status: p.status().as_str().to_owned(),
                iso: None,
                sms: true,
                two_way: p.two_way_enabled(),
                two_way_channel: p.two_way_channel_arn().map(str::to_owned),
                international: false,
                opt_out_list: Some(p.opt_out_list_name().to_owned()),
                registration: None,
                monthly_lease_usd: None,
                pool: None,
            });
        }
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    let mut token = None;
    loop {
        let page =
            client.describe_sender_ids().set_next_token(token.take()).send().await.map_err(err("DescribeSenderIds"))?;
        for s in page.sender_ids() {
            out.push(Identity {
                kind: Kind::SenderId,
                id: s.sender_id().to_owned(),
                arn: s.sender_id_arn().to_owned(),
                number: None,
                // A sender ID has no status: it sends where its country allows one.
                status: "ACTIVE".into(),
                iso: Some(s.iso_country_code().to_owned()),
                sms: true,
                two_way: false,
                two_way_channel: None,
                international: false,
                opt_out_list: None,
                registration: s.registration_id().map(str::to_owned),
                monthly_lease_usd: Some(s.monthly_leasing_price().to_owned()),
                pool: None,
            });
        }
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    Ok(out)
}

/// The verified destination numbers (status VERIFIED) of a sandboxed account.
pub async fn verified_numbers(client: &sms::Client) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .describe_verified_destination_numbers()
            .set_next_token(token.take())
            .send()
            .await
            .map_err(err("DescribeVerifiedDestinationNumbers"))?;
        out.extend(
            page.verified_destination_numbers()
                .iter()
                .filter(|v| v.status().as_str() == "VERIFIED")
                .map(|v| v.destination_phone_number().to_owned()),
        );
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    Ok(out)
}

pub async fn opt_out_lists(client: &sms::Client) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .describe_opt_out_lists()
            .set_next_token(token.take())
            .send()
            .await
            .map_err(err("DescribeOptOutLists"))?;
        out.extend(page.opt_out_lists().iter().map(|l| l.opt_out_list_name().to_owned()));
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    Ok(out)
}

/// A configuration set's event destinations; `None` when it does not exist.
pub async fn configuration_set(client: &sms::Client, name: &str) -> Result<Option<Vec<Destination>>, String> {
    match client.describe_configuration_sets().configuration_set_names(name).send().await {
        Ok(out) => Ok(out.configuration_sets().iter().find(|c| c.configuration_set_name() == name).map(|c| {
            c.event_destinations()
                .iter()
                .map(|d| Destination {
                    name: d.event_destination_name().to_owned(),
                    enabled: d.enabled(),
                    types: d.matching_event_types().iter().map(|t| t.as_str().to_owned()).collect(),
                    log_group_arn: d.cloud_watch_logs_destination().map(|l| l.log_group_arn().to_owned()),
                })
                .collect()
        })),
        Err(SdkError::ServiceError(e)) if e.err().is_resource_not_found_exception() => Ok(None),
        Err(e) => Err(err("DescribeConfigurationSets")(e)),
    }
}

/// `SendTextMessage` with `DryRun`: every check End User Messaging makes, nothing sent.
pub async fn dry_run(
    client: &sms::Client,
    to: &PhoneNumber,
    identity: Option<&str>,
    configuration_set: Option<&str>,
) -> DryRun {
    let res = client
        .send_text_message()
        .destination_phone_number(to.expose())
        .message_body("tocsin preflight (DryRun: not sent)")
        .message_type(sms::types::MessageType::Transactional)
        .set_origination_identity(identity.map(str::to_owned))
        .set_configuration_set_name(configuration_set.map(str::to_owned))
        .dry_run(true)
        .send()
        .await;
    match res {
        Ok(_) => DryRun::Passed,
        Err(SdkError::ServiceError(se)) => {
            use sms::operation::send_text_message::SendTextMessageError as E;
            let e = se.err();
            let reason = match e {
                E::ConflictException(c) => c.reason().map(|r| r.as_str().to_owned()),
                E::ValidationException(v) => v.reason().map(|r| r.as_str().to_owned()),
                E::ServiceQuotaExceededException(q) => q.reason().map(|r| r.as_str().to_owned()),
                E::AccessDeniedException(a) => a.reason().map(|r| r.as_str().to_owned()),
                _ => None,
            };
            DryRun::Refused {
                code: e.code().unwrap_or("error").to_owned(),
                reason,
                message: e.message().unwrap_or_default().to_owned(),
            }
        }
        Err(e) => DryRun::Failed(describe(&e)),
    }
}

// ------------------------------------------------------------------------------- all of it

/// What to check, from the deploy's parameters or the deployed stack's outputs.
#[derive(Debug, Clone)]
pub struct Settings<'a> {
    pub region: &'a str,
    /// `SmsOriginationIdentity` (empty = End User Messaging chooses).
    pub identity: Option<&'a str>,
    pub opt_out_list: &'a str,
    /// A deployed stack's configuration set and event group.
    pub deployed: Option<(&'a str, &'a str)>,
    /// Destinations to check (and DryRun).
    pub to: &'a [PhoneNumber],
    /// A deployed stack's replies topic (`Replies=on`): the identity's two-way channel must be it.
    pub replies_topic: Option<&'a str>,
}

/// With `Replies=on`: the identity the stack sends from must hand the replies it receives to the
/// stack's replies topic, or AWS drops every reply (and every SMS still shows its code).
pub fn replies_check(identity: Option<&str>, ids: &[Identity], topic: &str) -> Check {
    const CHECK: &str = "replies";
    let Some(wanted) = identity else {
        return problem(
            CHECK,
            "Replies=on, but SmsOriginationIdentity is empty: a reply goes back to the number End User Messaging chose, \
             whose two-way channel is not the stack's. Name the two-way number the stack sends from",
        );
    };
    let Some(id) = ids.iter().find(|i| i.is(wanted)) else {
        return problem(CHECK, format!("{wanted} is not an identity of this account: it cannot take replies"));
    };
    if id.kind == Kind::SenderId {
        return problem(
            CHECK,
            format!("{} is a sender ID: it cannot receive replies (use a two-way phone number)", id.id),
        );
    }
    let command = match id.kind {
        Kind::Pool => "update-pool --pool-id",
        _ => "update-phone-number --phone-number-id",
    };
    match (id.two_way, id.two_way_channel.as_deref()) {
        (true, Some(channel)) if channel == topic => {
            ok(CHECK, format!("{}: two-way on, replies go to the stack's topic", id.id))
        }
        (two_way, channel) => problem(
            CHECK,
            format!(
                "{}: {} - AWS drops every reply. Run: aws pinpoint-sms-voice-v2 {command} {} --two-way-enabled --two-way-channel-arn {topic}",
                id.id,
                match (two_way, channel) {
                    (false, _) => "two-way is off".to_owned(),
                    (true, None) => "two-way is on with no channel".to_owned(),
                    (true, Some(other)) => format!("replies go to {other}, not the stack's topic"),
                },
                id.id
            ),
        ),
    }
}

/// Every End User Messaging check, in the order a newcomer fixes them.
pub async fn checks(sdk: &aws_config::SdkConfig, s: &Settings<'_>) -> Vec<Check> {
    let client = sms::Client::new(sdk);
    let mut out = Vec::new();
    let tier = tier(&client).await;
    out.push(region_check(s.region, &tier.as_ref().map(|_| ()).map_err(Clone::clone)));
    let tier = match tier {
        Ok(t) => t,
        // Nothing else can be read where End User Messaging does not answer.
        Err(_) => return out,
    };
    let mut can_send = false;
    match identities(&client).await {
        Ok(ids) => {
            let (lines, sends) = identity_checks(s.identity, &ids, s.to, s.opt_out_list, s.region);
            can_send = sends;
            if let Some(topic) = s.replies_topic {
                out.push(replies_check(s.identity, &ids, topic));
            }
            match verified_numbers(&client).await {
                Ok(v) => out.push(tier_check(&tier, &v, s.to, sends)),
                Err(e) => out.push(problem("SMS sandbox", format!("cannot read the verified numbers ({e})"))),
            }
            out.extend(lines);
        }
        Err(e) => out.push(problem("origination identity", format!("cannot list them ({e})"))),
    }
    match opt_out_lists(&client).await {
        Ok(lists) => out.extend(opt_out_list_check(s.opt_out_list, &lists)),
        Err(e) => out.push(problem("opt-out list", format!("cannot list them ({e})"))),
    }
    let cloudwatch = aws_sdk_cloudwatch::Client::new(sdk);
    match (
        spend_limit(&client).await,
        super::doctor::latest_maximum(&cloudwatch, "AWS/SMSVoice", "TextMessageMonthlySpend").await,
    ) {
        (Ok(limit), Ok(spent)) => out.push(spend_check(limit, spent, tier == Tier::Sandboxed)),
        (Err(e), _) | (_, Err(e)) => out.push(problem("SMS spend", format!("cannot read it ({e})"))),
    }
    if let Some((name, group)) = s.deployed {
        match configuration_set(&client, name).await {
            Ok(d) => out.push(configuration_set_check(name, d.as_deref(), group)),
            Err(e) => out.push(problem("configuration set", format!("{name}: cannot read it ({e})"))),
        }
    }
    // A DryRun proves something only where the reads say the SMS should go: an identity to send
    // from, and no blocker already naming why it would not.
    if can_send && !out.iter().any(|c| c.verdict == super::doctor::Verdict::Problem) {
        for n in s.to {
            let answer = dry_run(&client, n, s.identity, s.deployed.map(|(cs, _)| cs)).await;
            out.push(dry_run_check(n, &answer));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::Verdict;

    fn phone(n: &str) -> PhoneNumber {
        PhoneNumber::parse(n).expect("number")
    }

    fn number(id: &str, kind: &str, status: &str) -> Identity {
        Identity {
            kind: Kind::Number(kind.into()),
            id: id.into(),
            arn: format!("arn:aws:sms-voice:us-east-1:123456789012:phone-number/{id}"),
            number: Some("+18335550001".into()),
            status: status.into(),
            iso: Some("US".into()),
            sms: true,
            two_way: false,
            two_way_channel: None,
            international: false,
            opt_out_list: Some("Default".into()),
            registration: None,
            monthly_lease_usd: Some("2.00".into()),
            pool: None,
        }
    }

    #[test]
    fn every_region_aws_lists_is_known_and_an_unlisted_silent_one_cannot_send() {
        assert_eq!(SMS_REGIONS.len(), 32, "the Regional availability table's rows");
        assert_eq!(region_check("eu-west-1", &Ok(())).verdict, Verdict::Ok);
        let silent = region_check("ap-east-1", &Err("dispatch failure".into()));
        assert_eq!(silent.verdict, Verdict::Problem);
        assert!(silent.detail.contains("cannot send SMS with it"), "{}", silent.detail);
        assert_eq!(region_check("xx-new-1", &Ok(())).verdict, Verdict::Warning);
    }

    #[test]
    fn a_sandboxed_account_needs_an_identity_before_any_verified_number_and_each_destination_verified() {
        let to = [phone("+14155550100")];
        let no_identity = tier_check(&Tier::Sandboxed, &["+14155550100".into()], &to, false);
        assert_eq!(no_identity.verdict, Verdict::Problem);
        assert!(no_identity.detail.contains("1. an ACTIVE origination identity"), "{}", no_identity.detail);
        let unverified = tier_check(&Tier::Sandboxed, &[], &to, true);
        assert!(unverified.detail.contains("+1******0100 not verified"), "{}", unverified.detail);
        assert!(!unverified.detail.contains("+14155550100"), "masked");
        assert_eq!(tier_check(&Tier::Sandboxed, &["+14155550100".into()], &to, true).verdict, Verdict::Warning);
        // AWS's simulator destinations need no verification, sandbox or not.
        let sim = [phone(SIMULATOR_SUCCESS)];
        assert_eq!(tier_check(&Tier::Sandboxed, &[], &sim, true).verdict, Verdict::Warning);
        assert_eq!(tier_check(&Tier::Production, &[], &to, false).verdict, Verdict::Ok);
    }

    #[test]
    fn the_named_identity_must_exist_here_be_active_and_share_the_stacks_opt_out_list() {
        let to = [phone("+14155550100")];
        let ids = [number("phone-1", "TOLL_FREE", "ACTIVE")];
        let (lines, sends) = identity_checks(Some("phone-1"), &ids, &to, "Default", "us-east-1");
        assert!(sends);
        assert!(lines.iter().all(|c| c.verdict == Verdict::Ok), "{lines:?}");
        assert!(lines[0].detail.contains("TOLL_FREE, +1******0001, US"), "{}", lines[0].detail);
        assert!(lines[0].detail.contains("2.00 USD a month"), "{}", lines[0].detail);

        let (lines, sends) = identity_checks(Some("phone-9"), &ids, &to, "Default", "us-east-1");
        assert!(!sends && lines[0].detail.contains("not an identity of this account in us-east-1"), "{lines:?}");

        let pending =
            [Identity { registration: Some("registration-7".into()), ..number("phone-1", "TOLL_FREE", "PENDING") }];
        let (lines, sends) = identity_checks(Some("phone-1"), &pending, &to, "Default", "us-east-1");
        assert!(!sends);
        assert!(lines[0].detail.contains("PENDING until its registration is approved"), "{}", lines[0].detail);
        assert!(lines[0].detail.contains("registration-7"), "{}", lines[0].detail);

        let (lines, _) = identity_checks(Some("phone-1"), &ids, &to, "alerts", "us-east-1");
        assert!(lines.iter().any(|c| c.check == "opt-out list" && c.verdict == Verdict::Problem), "{lines:?}");

        let (lines, sends) = identity_checks(None, &[], &to, "Default", "us-east-1");
        assert!(!sends && lines[0].detail.contains("no origination identity in us-east-1"), "{lines:?}");
        let sim = [number("phone-s", "SIMULATOR", "ACTIVE")];
        let (lines, sends) = identity_checks(None, &sim, &to, "Default", "us-east-1");
        assert!(!sends && lines[0].verdict == Verdict::Problem, "a simulator texts no phone: {lines:?}");
    }

    #[test]
    fn with_replies_on_the_identity_must_hand_its_replies_to_the_stacks_topic() {
        let topic = "arn:aws:sns:us-east-1:123456789012:tocsin-dev-replies";
        let off = [number("phone-1", "TOLL_FREE", "ACTIVE")];
        let c = replies_check(Some("phone-1"), &off, topic);
        assert_eq!(c.verdict, Verdict::Problem);
        assert!(c.detail.contains("two-way is off - AWS drops every reply"), "{}", c.detail);
        assert!(
            c.detail.contains(&format!(
                "update-phone-number --phone-number-id phone-1 --two-way-enabled --two-way-channel-arn {topic}"
            )),
            "{}",
            c.detail
        );
        let elsewhere = [Identity {
            two_way: true,
            two_way_channel: Some("arn:aws:sns:us-east-1:123456789012:other".into()),
            ..number("phone-1", "TOLL_FREE", "ACTIVE")
        }];
        let c = replies_check(Some("phone-1"), &elsewhere, topic);
        assert!(
            c.verdict == Verdict::Problem
                && c.detail.contains("replies go to arn:aws:sns:us-east-1:123456789012:other"),
            "{}",
            c.detail
        );
        let right = [Identity {
            two_way: true,
            two_way_channel: Some(topic.into()),
            ..number("phone-1", "TOLL_FREE", "ACTIVE")
        }];
        assert_eq!(replies_check(Some("phone-1"), &right, topic).verdict, Verdict::Ok);
        assert_eq!(replies_check(None, &right, topic).verdict, Verdict::Problem, "no named identity");
        let sender_id = [Identity { kind: Kind::SenderId, ..number("TOCSIN", "x", "ACTIVE") }];
        assert!(replies_check(Some("TOCSIN"), &sender_id, topic).detail.contains("cannot receive replies"));
    }

    #[test]
    fn the_spend_limit_says_what_stops_sending_and_that_the_sandbox_keeps_it_at_one_dollar() {
        let new = SpendLimit { enforced: 1, max: 1, overridden: false };
        let c = spend_check(Some(new), None, true);
        assert_eq!(c.verdict, Verdict::Warning);
        assert!(c.detail.contains("inside the sandbox the limit stays 1 USD"), "{}", c.detail);
        assert_eq!(spend_check(Some(new), Some(1.0), true).verdict, Verdict::Problem);
        let raised = SpendLimit { enforced: 100, max: 100, overridden: false };
        assert_eq!(spend_check(Some(raised), Some(85.0), false).verdict, Verdict::Problem);
        assert_eq!(spend_check(Some(raised), Some(5.0), false).verdict, Verdict::Ok);
        let held = SpendLimit { enforced: 10, max: 100, overridden: true };
        let c = spend_check(Some(held), Some(10.0), false);
        assert!(c.detail.contains("set-text-message-spend-limit-override"), "{}", c.detail);
    }

    #[test]
    fn the_stacks_event_destination_must_be_enabled_match_every_sms_event_and_write_to_its_group() {
        let good = Destination {
            name: "tocsin-prod-status".into(),
            enabled: true,
            types: vec!["TEXT_ALL".into()],
            log_group_arn: Some("arn:aws:logs:us-east-1:1:log-group:/tocsin/tocsin-prod/sms-events:*".into()),
        };
        let group = "/tocsin/tocsin-prod/sms-events";
        assert_eq!(
            configuration_set_check("tocsin-prod", Some(std::slice::from_ref(&good)), group).verdict,
            Verdict::Ok
        );
        assert_eq!(configuration_set_check("tocsin-prod", None, group).verdict, Verdict::Problem);
        let off = Destination { enabled: false, ..good.clone() };
        assert!(configuration_set_check("tocsin-prod", Some(&[off]), group).detail.contains("is disabled"));
        let narrow = Destination { types: vec!["TEXT_DELIVERED".into()], ..good.clone() };
        assert!(configuration_set_check("tocsin-prod", Some(&[narrow]), group).detail.contains("matches only"));
        let elsewhere = Destination { log_group_arn: Some("arn:aws:logs:us-east-1:1:log-group:other".into()), ..good };
        assert!(
            configuration_set_check("tocsin-prod", Some(&[elsewhere]), group).detail.contains("no event destination")
        );
    }

    #[test]
    fn a_dry_run_refusal_is_named_with_its_fix_and_the_number_masked() {
        let n = phone("+14155550100");
        assert_eq!(dry_run_check(&n, &DryRun::Passed).verdict, Verdict::Ok);
        let refused = DryRun::Refused {
            code: "ConflictException".into(),
            reason: Some("DESTINATION_PHONE_NUMBER_OPTED_OUT".into()),
            message: "+14155550100 is opted out in Default".into(),
        };
        let c = dry_run_check(&n, &refused);
        assert_eq!(c.verdict, Verdict::Problem);
        assert!(c.detail.contains("replied STOP") && !c.detail.contains("+14155550100"), "{}", c.detail);
    }
}
