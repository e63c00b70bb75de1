//! The command line, as clap parses it.

use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use tocsin::domain::State;

/// tocsin's operator tool: look at alert intents, suppressed recipients and escalations; re-enable
/// a recipient or resend an alert, both audited with your AWS identity.
///
/// It reaches AWS (or a local emulator) through the standard AWS environment: credentials and
/// region from the usual chain (--profile / AWS_PROFILE, --region / AWS_REGION, …),
/// AWS_ENDPOINT_URL for an emulator; everything else comes from the stack's outputs.
#[derive(Debug, Parser)]
#[command(name = "tocsin", version, about, long_about, propagate_version = true)]
pub struct Cli {
    /// The deployed stack's name: every table, queue, log group and URL the commands use is read
    /// from its CloudFormation outputs (DescribeStacks).
    #[arg(long, env = "TOCSIN_STACK", global = true, value_parser = stack_name)]
    pub stack: Option<String>,

    /// The AWS profile to use, as the AWS CLI takes it (else AWS_PROFILE, else the default chain).
    #[arg(long, global = true)]
    pub profile: Option<String>,

    /// The AWS region of the stack, as the AWS CLI takes it (else AWS_REGION or the profile's).
    #[arg(long, global = true)]
    pub region: Option<String>,

    /// Print JSON (one document on stdout) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One intent and its full timeline, oldest first.
    Show {
        /// The idempotency key (64 hex characters), or a unique prefix of at least 8.
        key: String,
    },
    /// "I have this alert": records who (your AWS identity) and when on the intent; the sweep
    /// never escalates it after. For an alert not escalated yet; an escalation already sent is
    /// acknowledged with `tocsin escalations ack`.
    Ack {
        /// The idempotency key (64 hex characters), or a unique prefix of at least 8.
        key: String,
    },
    /// Recent intents, newest first.
    List {
        /// Only intents in this state (received, queued, sending, accepted, send_unknown,
        /// delay_suspected, delivered, failed, suppressed, stale, expired_unknown).
        #[arg(long, value_parser = state)]
        state: Option<State>,
        /// At most this many intents.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// How many days back (UTC creation days, today included) to look: the listing reads the
        /// list-index one day at a time, newest first, and stops when it has `--limit` intents.
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=400))]
        days: u32,
    },
    /// Suppressed recipients, since when and why (numbers masked).
    Suppressed {
        /// Show the numbers in clear (E.164), e.g. to call someone. Handle the output with care.
        #[arg(long)]
        reveal: bool,
    },
    /// Lifts a recipient's suppression; who (your AWS identity), why and when are recorded.
    ReEnable {
        /// The number, in E.164 (e.g. +14155550100).
        number: String,
        /// Why the number may be used again (e.g. "confirmed by phone: opted back in").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
        /// If SNS still has the number opted out, opt it back in (SNS OptInPhoneNumber: allowed
        /// once per 30 days per number). Without it such a number is not re-enabled: the person
        /// must reply START first.
        #[arg(long)]
        opt_in: bool,
    },
    /// The recipients roster: the numbers and prefixes (e.g. +44, +1206555) the stack may text
    /// under RecipientPolicy=roster. `recipients allow ENTRY --reason …` adds one,
    /// `recipients remove ENTRY --reason …` removes one (audited with your identity; intake sees a
    /// change within a minute).
    #[command(args_conflicts_with_subcommands = true)]
    Recipients {
        #[command(subcommand)]
        action: Option<RecipientsAction>,
        /// Show whole numbers in clear (E.164). Handle the output with care.
        #[arg(long)]
        reveal: bool,
    },
    /// Templates' escalation chains: the chain an alert of a template gets when its request names
    /// none. `chains set TEMPLATE --chain '{"wait": "5m", "then": [...]}' --reason …` sets one
    /// (replacing the template's last), `chains remove TEMPLATE --reason …` removes one (both
    /// audited with your identity; intake sees a change within a minute); `chains history` lists
    /// the changes.
    #[command(args_conflicts_with_subcommands = true)]
    Chains {
        #[command(subcommand)]
        action: Option<ChainsAction>,
        /// Show whole numbers in clear (E.164). Handle the output with care.
        #[arg(long)]
        reveal: bool,
    },
    /// The stack's SMS breaker (SmsPartsPerHour): the hour's parts, whether it is open, and the
    /// operators' resumes. `breaker resume --reason …` closes an open breaker (audited with your
    /// identity) and starts the hour's count again.
    Breaker {
        #[command(subcommand)]
        action: Option<BreakerAction>,
    },
    /// Sends an intent again, once, after an unknown outcome or a failure. See `tocsin resend --help`.
    #[command(long_about = RESEND_HELP)]
    Resend(ResendArgs),
    /// Lists the unacknowledged escalations, oldest first, from the ledger, with the escalation
    /// queue's depth; never receives a message. `--ack --reason …` acknowledges every one listed;
    /// `escalations ack KEY --reason …` acknowledges one (both recorded in the ledger).
    #[command(args_conflicts_with_subcommands = true)]
    Escalations {
        #[command(subcommand)]
        action: Option<EscalationsAction>,
        /// List at most this many escalations.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        max: u32,
        /// Acknowledge every escalation listed (recorded in each timeline with your identity and
        /// --reason, then deleted from the queue). Without it the listing changes nothing.
        #[arg(long, requires = "reason")]
        ack: bool,
        /// Why they are acknowledged (required with --ack).
        #[arg(long, requires = "ack", value_parser = reason)]
        reason: Option<String>,
    },
    /// Each carrier's health from tocsin's SMS of the last 3 hours (in flight, delayed share,
    /// degraded or held) and from every application's delivery records in the account against
    /// the carrier's rolling baseline (usual share and rate, on time / expected, the traffic
    /// verdict and since when); `carriers hold NAME --reason … [--for 2h]` escalates every new alert to
    /// the carrier's numbers at once while its SMS still goes out (audited, time-bounded);
    /// `carriers release NAME --reason …` ends it.
    #[command(args_conflicts_with_subcommands = true)]
    Carriers {
        #[command(subcommand)]
        action: Option<CarriersAction>,
        /// The stack's DelaySuspectedAfter: an SMS undelivered this long after SNS accepted it is
        /// delayed (the sweep uses the stack's own setting).
        #[arg(long, default_value = "10m", value_parser = duration)]
        delayed_after: Duration,
    },
    /// Submits an alert through the deployed intake (the stack's AlertApiUrl, SigV4-signed), as an
    /// upstream system would: the first check after a deploy, and for runbooks.
    Send(SendArgs),
    /// Checks what on-call must be able to trust, for the stack's SMS provider (End User Messaging:
    /// sandbox, origination identity, opt-out list, spend, configuration set and event group; SNS:
    /// SMS preferences, sandbox, spend, origination number, delivery-status logs), the on-call
    /// subscriptions, the sender's concurrency, queues, alarms; exits 1 with one line per problem.
    /// `--probe NUMBER` also sends one SMS through the stack and follows it hop by hop (sent,
    /// accepted, its delivery record or events logged, applied by status); `--simulator` does it on
    /// AWS's SMS simulator (End User Messaging), once to succeed and once to fail.
    Doctor(DoctorArgs),
    /// Before the first deploy, with the deployer's credentials (no stack needed; with --stack a
    /// deployed one is checked too): what in the account would make `sam deploy` fail or alerts not
    /// arrive, for the SMS provider you deploy with. One line per blocker, exit 1 if any.
    Preflight(PreflightArgs),
    /// Shows the delivery-status records that could settle an unknown outcome; links one by hand.
    Reconcile {
        key: String,
        /// The SNS message id to tie to the intent (from the listing).
        #[arg(long, requires = "reason")]
        link: Option<String>,
        /// Why this message is the intent's SMS (required with --link; recorded with your identity).
        #[arg(long, value_parser = reason)]
        reason: Option<String>,
        /// The attempt's search window after its claim.
        #[arg(long, env = "TOCSIN_RECONCILE_MARGIN", default_value = "15m", value_parser = duration)]
        margin: Duration,
    },
}

/// `tocsin carriers hold | release`.
#[derive(Debug, Subcommand)]
pub enum CarriersAction {
    /// Puts a carrier on hold: until it ends, every alert to its numbers accepted by SNS is
    /// escalated at the next sweep (within a minute), and its SMS still goes out.
    Hold {
        /// The carrier's name as `tocsin carriers` shows it (SNS's phoneCarrier).
        name: String,
        /// Why (e.g. the carrier's incident reference); recorded with your identity.
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
        /// How long the hold lasts (at most 24h).
        #[arg(long = "for", default_value = "1h", value_parser = duration)]
        duration: Duration,
    },
    /// Ends a carrier's hold; who and why are recorded.
    Release {
        name: String,
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
}

/// `tocsin doctor`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("probing").args(["probe", "simulator"]).multiple(true)))]
pub struct DoctorArgs {
    /// Also send one SMS to this number (E.164) through the deployed stack and follow it: sent
    /// through the API, accepted by the provider, its delivery record (SNS) or events (End User
    /// Messaging: by the alert's key, in the stack's event group) logged, applied by status.
    /// Needs execute-api:Invoke (as `send`) and logs:FilterLogEvents on the group(s) it reads.
    #[arg(long, value_name = "NUMBER")]
    pub probe: Option<String>,
    /// End User Messaging: probe on AWS's SMS simulator instead of a phone — from the account's
    /// SIMULATOR origination number to AWS's US success (+14254147755) and failure (+14254147167)
    /// destinations. The failing one proves the failure path: applied as failed, escalated (on-call
    /// is paged, as for any failed alert) and acknowledged by doctor.
    #[arg(long)]
    pub simulator: bool,
    /// The longest wait for each hop of the probe (a carrier can take minutes to answer; the
    /// failure probe's escalation waits for the next sweep, a minute).
    #[arg(long, default_value = "5m", value_parser = duration, requires = "probing")]
    pub probe_hop_timeout: Duration,
    /// How often the probe looks for the next hop.
    #[arg(long, default_value = "2s", value_parser = duration, requires = "probing")]
    pub probe_poll: Duration,
    /// The probe alert's deadline: not delivered by then, it escalates like any alert.
    #[arg(long, default_value = "15m", requires = "probing")]
    pub probe_deadline: String,
}

/// The template's `SmsProvider` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    /// AWS End User Messaging SMS (the template's default).
    EndUserMessaging,
    /// Amazon SNS.
    Sns,
}

/// `tocsin preflight`.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// A number alerts will go to (E.164; repeat for each): checked against the sandbox's verified
    /// numbers and the account's origination identities for its country; under End User Messaging
    /// also a SendTextMessage DryRun (nothing is sent).
    #[arg(long = "to", value_name = "NUMBER")]
    pub to: Vec<String>,
    /// The SmsProvider you mean to deploy with (default: end-user-messaging; with --stack, the
    /// deployed stack's).
    #[arg(long, value_enum)]
    pub sms_provider: Option<ProviderArg>,
    /// End User Messaging: the SmsOriginationIdentity you mean to deploy with (a phone number id,
    /// pool id, ARN or number; empty: End User Messaging chooses among the account's).
    #[arg(long, value_name = "ID")]
    pub origination_identity: Option<String>,
    /// End User Messaging: the SmsOptOutListName you mean to deploy with.
    #[arg(long, default_value = "Default", value_name = "NAME")]
    pub opt_out_list: String,
    /// End User Messaging: the SmsAllowedCountries you mean to deploy with (ISO codes, e.g.
    /// US,GB; default: the template's, US; with --stack, the deployed stack's).
    #[arg(long, value_name = "CODES")]
    pub allowed_countries: Option<String>,
    /// The CreateSmsLogGroups you mean to deploy with (default: the template's, true).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub create_sms_log_groups: bool,
    /// The ManageSmsPreferences you mean to deploy with (default: the template's, true).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub manage_sms_preferences: bool,
    /// The MonthlySpendLimitUsd you mean to deploy with (empty: leave the account's).
    #[arg(long)]
    pub monthly_spend_limit_usd: Option<u32>,
    /// Whether you mean to deploy with ReserveSenderConcurrency=true, and SenderMaxConcurrency.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub reserve_sender_concurrency: bool,
    #[arg(long, default_value_t = 2)]
    pub sender_max_concurrency: u32,
    /// Whether you mean to deploy with ReserveFunctionConcurrency=true (17 instances reserved
    /// for intake, status and escalation).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub reserve_function_concurrency: bool,
}

#[derive(Debug, Subcommand)]
pub enum RecipientsAction {
    /// Adds a number or a prefix to the roster.
    Allow {
        /// `+` and digits: a whole number (+14155550100) or a prefix (+1206555, +44).
        entry: String,
        /// Why (e.g. "on-call rota, team payments").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
    /// Removes a number or a prefix from the roster (alerts accepted but not yet sent to it are
    /// not sent: suppressed and escalated).
    Remove {
        /// The entry exactly as listed (`tocsin recipients --reveal`).
        entry: String,
        /// Why (e.g. "left the rota").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ChainsAction {
    /// Sets a template's chain (every version of the template), replacing the one it had.
    /// Alerts already accepted keep the chain they were accepted with.
    Set {
        /// The template's name (e.g. disk_full).
        template: String,
        /// The chain as a request's `chain` field gives it (docs/acknowledgement.md, "Chains"):
        /// the recipient's wait and repeats, then each person. Everyone named must be on the
        /// roster under RecipientPolicy=roster.
        #[arg(long, required = true)]
        chain: String,
        /// Why (e.g. "payments rota: primary, then the team lead").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
    /// Removes a template's chain: its alerts get the default chain (the recipient, then on-call)
    /// unless the request names one.
    Remove {
        template: String,
        /// Why (e.g. "the team left the rota").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
    /// Every change of the templates' chains, oldest first (kept 400 days).
    History,
}

#[derive(Debug, Subcommand)]
pub enum BreakerAction {
    /// Closes the open breaker: sending resumes and the hour's count starts again. Alerts withheld
    /// while it was open stay escalated (send one again with `tocsin resend`).
    Resume {
        /// What was checked (e.g. "pumping ruled out: one producer's runaway loop, fixed").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum EscalationsAction {
    /// Acknowledges one escalation: deletes its message(s) from the escalation queue and records
    /// who (your AWS identity), when and why in the intent's timeline.
    Ack {
        /// The escalated intent's idempotency key (64 hex characters), or a unique prefix of at least 8.
        key: String,
        /// What was done about it (e.g. "called the DBA; disk cleaned").
        #[arg(long, required = true, value_parser = reason)]
        reason: String,
    },
}

const RESEND_HELP: &str = "Sends an intent again, once, after an unknown outcome or a failure.

Allowed from send_unknown, failed, stale and expired_unknown. Refused while the automation owns \
the intent (received, queued, sending), once SNS took it (accepted, delay_suspected: wait for the \
receipt), after delivered, and while the recipient is suppressed (re-enable first).

The resend takes the same claim as the sender, so it cannot race the automation or another \
operator into a second SMS; your AWS identity and the reason are recorded in the timeline. SNS is \
called once, without retries: if it throttles, nothing was sent, the intent is marked failed and \
you may run the command again.";

#[derive(Debug, Args)]
pub struct ResendArgs {
    /// The idempotency key (64 hex characters), or a unique prefix of at least 8.
    pub key: String,
    /// Why it is resent (recorded in the intent's timeline).
    #[arg(long, required = true, value_parser = reason)]
    pub reason: String,
    /// Bound on the SNS publish; past it the outcome is unknown (never retried). Same variable as
    /// the sender's.
    #[arg(long, env = "TOCSIN_PUBLISH_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub publish_timeout: Duration,
    /// How long the resend holds its claim; if the command dies, the sweep marks the intent
    /// send_unknown after it. Must exceed the publish timeout. Same variable as the sender's.
    #[arg(long, env = "TOCSIN_CLAIM_LEASE", default_value = "2m", value_parser = duration)]
    pub lease: Duration,
    /// Origination number when the intent names none (the deployment's default, if it has one).
    #[arg(long, env = "TOCSIN_SMS_ORIGINATION_NUMBER")]
    pub origination_number: Option<String>,
    /// Sender ID when the intent names none (the deployment's default, if it has one).
    #[arg(long, env = "TOCSIN_SMS_SENDER_ID")]
    pub sender_id: Option<String>,
    /// Maximum price in USD when the intent names none (the deployment's default, if it has one).
    #[arg(long, env = "TOCSIN_SMS_MAX_PRICE_USD")]
    pub max_price_usd: Option<String>,
}

/// `tocsin send`: the request from a file, or built from flags.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The alert request document (JSON, as in docs/alert-requests.md); `-` reads stdin.
    #[arg(long, conflicts_with_all = ["event_id", "template", "vars", "to", "deadline"])]
    pub file: Option<String>,
    /// The business event id (one event, one alert: sending it again is a replay).
    #[arg(long, required_unless_present = "file")]
    pub event_id: Option<String>,
    /// The template as NAME@VERSION (e.g. disk_full@1).
    #[arg(long, required_unless_present = "file", value_parser = template)]
    pub template: Option<(String, u32)>,
    /// A template variable, KEY=VALUE (repeat for each).
    #[arg(long = "var", value_parser = variable)]
    pub vars: Vec<(String, String)>,
    /// The recipient, in E.164 (e.g. +14155550100).
    #[arg(long, required_unless_present = "file")]
    pub to: Option<String>,
    /// The deadline: a duration from now ("15m") or an RFC 3339 instant; the stack's default if absent.
    #[arg(long)]
    pub deadline: Option<String>,
    /// Give up on the HTTP call after this long.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub timeout: Duration,
}

fn template(raw: &str) -> Result<(String, u32), String> {
    let (name, version) = raw.split_once('@').ok_or("NAME@VERSION, e.g. disk_full@1")?;
    let version = version.trim_start_matches('v').parse::<u32>().map_err(|e| format!("version: {e}"))?;
    if name.is_empty() {
        return Err("NAME@VERSION, e.g. disk_full@1".into());
    }
    Ok((name.to_owned(), version))
}

fn variable(raw: &str) -> Result<(String, String), String> {
    let (k, v) = raw.split_once('=').ok_or("KEY=VALUE")?;
    if k.is_empty() { Err("KEY=VALUE with a non-empty KEY".into()) } else { Ok((k.to_owned(), v.to_owned())) }
}

fn duration(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be longer than zero".into()),
        Err(e) => Err(format!("not a duration like \"10s\" or \"2m\": {e}")),
    }
}

fn state(raw: &str) -> Result<State, String> {
    raw.parse::<State>().map_err(|e| {
        let all: Vec<&str> = tocsin::domain::state::ALL_STATES.iter().map(|s| s.as_str()).collect();
        format!("{e}; one of: {}", all.join(", "))
    })
}

fn reason(raw: &str) -> Result<String, String> {
    let r = raw.trim();
    if r.is_empty() { Err("a reason must say something".into()) } else { Ok(r.to_owned()) }
}

fn stack_name(raw: &str) -> Result<String, String> {
    let ok = !raw.is_empty()
        && raw.len() <= 128
        && raw.starts_with(|c: char| c.is_ascii_alphabetic())
        && raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Ok(raw.to_owned())
    } else {
        Err("a CloudFormation stack name: letters, digits and '-', starting with a letter".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn resend_and_re_enable_require_a_reason() {
        assert!(Cli::try_parse_from(["tocsin", "--stack", "s", "re-enable", "+14155550100"]).is_err());
        assert!(Cli::try_parse_from(["tocsin", "--stack", "s", "resend", "abcdef0123"]).is_err());
        assert!(Cli::try_parse_from(["tocsin", "--stack", "s", "resend", "abcdef0123", "--reason", "  "]).is_err());
        assert!(Cli::try_parse_from(["tocsin", "--stack", "s", "resend", "abcdef0123", "--reason", "x"]).is_ok());
    }

    #[test]
    fn escalations_help_says_it_reads_the_ledger_and_never_receives() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let help = cli.find_subcommand_mut("escalations").expect("escalations").render_long_help().to_string();
        assert!(help.contains("from the ledger") && help.contains("never receives"), "{help}");
        assert!(!help.contains("Reads escalations from the escalation queue"), "{help}");
        assert!(Cli::try_parse_from(["tocsin", "escalations", "--ack"]).is_err(), "--ack needs --reason");
    }

    #[test]
    fn doctor_probe_options_need_a_number_and_preflight_takes_destinations() {
        assert!(Cli::try_parse_from(["tocsin", "doctor", "--probe-hop-timeout", "1m"]).is_err());
        assert!(Cli::try_parse_from(["tocsin", "doctor", "--simulator", "--probe-hop-timeout", "1m"]).is_ok());
        assert!(
            Cli::try_parse_from(["tocsin", "doctor", "--probe", "+14155550100", "--probe-hop-timeout", "1m"]).is_ok()
        );
        let p =
            Cli::try_parse_from(["tocsin", "preflight", "--to", "+14155550100", "--create-sms-log-groups", "false"])
                .expect("parses");
        match p.command {
            Command::Preflight(a) => {
                assert_eq!((a.to.len(), a.create_sms_log_groups, a.sms_provider), (1, false, None));
                assert_eq!(a.opt_out_list, "Default");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn preflight_takes_the_provider_as_the_template_spells_it() {
        let p = Cli::try_parse_from(["tocsin", "preflight", "--sms-provider", "end-user-messaging"]).expect("parses");
        assert!(matches!(
            p.command,
            Command::Preflight(PreflightArgs { sms_provider: Some(ProviderArg::EndUserMessaging), .. })
        ));
        assert!(Cli::try_parse_from(["tocsin", "preflight", "--sms-provider", "sns"]).is_ok());
        assert!(Cli::try_parse_from(["tocsin", "preflight", "--sms-provider", "pinpoint"]).is_err());
    }

    #[test]
    fn states_and_durations_are_checked_when_parsing() {
        assert!(Cli::try_parse_from(["tocsin", "list", "--state", "send_unknown"]).is_ok());
        assert!(Cli::try_parse_from(["tocsin", "list", "--state", "lost"]).is_err());
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert!(duration("soon").is_err());
        assert!(stack_name("tocsin-prod").is_ok());
        assert!(stack_name("bad name").is_err());
    }
}
