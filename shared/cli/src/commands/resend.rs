//! `tocsin resend <key> --reason <text>`: a manual resend, exclusive with the automation
//! ([`tocsin::services::operator::resend`]: refuse what must not be resent → check the recipient
//! registry → claim → publish once, SDK retries off → record the outcome as the sender does). This
//! module says in plain words what happened, or why nothing was sent.

use serde::Serialize;
use tocsin::adapters::sms::SmsProvider;
use tocsin::domain::intent::{IntentRecord, SmsOptions};
use tocsin::domain::{PhoneNumber, State};
use tocsin::ports::{PublishOutcome, System};
use tocsin::services::operator::{
    NotRecorded, RESENDABLE, ResendError, ResendOutcome, ResendRequest, operator_attempt_id, resend,
};

use super::resolve_key;
use crate::args::ResendArgs;
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct ResendDocument<'a> {
    key: String,
    outcome: ResendOutcome,
    state: State,
    attempt_id: &'a str,
    operator: &'a str,
    reason: &'a str,
    sns_message_id: Option<&'a str>,
    error: Option<&'a str>,
    message: String,
}

pub async fn run(ctx: &Context, args: &ResendArgs) -> CliResult<ResendOutcome> {
    if args.lease <= args.publish_timeout {
        return Err(CliError::Usage(format!(
            "--lease ({}) must be longer than --publish-timeout ({}): the claim must outlive the publish",
            humantime::format_duration(args.lease),
            humantime::format_duration(args.publish_timeout)
        )));
    }
    let defaults = sms_defaults(args)?;
    let key = resolve_key(ctx, &args.key).await?;
    let operator = ctx.operator().await?;
    let attempt_id = operator_attempt_id(&uuid::Uuid::new_v4().to_string());
    let gateway = SmsProvider::new(&ctx.sdk, &ctx.sending_provider()?, args.publish_timeout);
    let request = ResendRequest {
        key: &key,
        operator: &operator,
        reason: &args.reason,
        attempt_id: &attempt_id,
        lease: args.lease,
        defaults: &defaults,
        stack: &ctx.names.stack,
    };
    let resent = match resend(&ctx.ledger, &ctx.registry, &gateway, &System, request).await {
        Ok(r) => r,
        Err(ResendError::Missing(_)) => return Err(CliError::NotFound(key.to_string())),
        Err(ResendError::NotResendable { record, changed }) => {
            refuse_unless_resendable(&record, changed)?;
            // Resendable again, yet the claim was refused: it changed twice meanwhile.
            return Err(CliError::Refused(format!(
                "not resent: intent {key} changed while claiming it; nothing was sent — look at `tocsin show {key}`"
            )));
        }
        Err(ResendError::BeingEscalated { record }) => {
            let lease =
                record.status.escalation_run_until.map_or_else(|| "its lease's end".to_owned(), crate::output::time);
            return Err(CliError::Refused(format!(
                "not resent: intent {key} is being escalated right now — a sweep decided on it as it was ({}), and its \
                 page to on-call (or the chain's next person) is on its way; nothing was sent. Look at `tocsin show \
                 {key}`: once it shows the escalation (that run holds it until {lease}; if the run died, the next one \
                 escalates it after that), \
                 resend if the person still needs it.",
                record.status.state
            )));
        }
        Err(ResendError::Suppressed { record, suppression }) => {
            return Err(CliError::Refused(format!(
                "not resent: the recipient {} is suppressed since {} ({}). Re-enable the number first \
                 (`tocsin re-enable <number> --reason …`, after confirming it works), then resend.",
                record.intent.recipient.masked(),
                output::time(suppression.since),
                suppression.reason
            )));
        }
        Err(ResendError::Port { what, error }) => return Err(CliError::port(what.to_owned())(error)),
    };
    let masked = resent.record.intent.recipient.masked();
    let (state, sns_message_id, error) = match &resent.published {
        PublishOutcome::Accepted { message_id } => (State::Accepted, Some(message_id.as_str()), None),
        PublishOutcome::Rejected { error, refusal } => (refusal.state(), None, Some(error.as_str())),
        PublishOutcome::Retryable { error } => (State::Failed, None, Some(error.as_str())),
        PublishOutcome::Unknown { error } => (State::SendUnknown, None, Some(error.as_str())),
    };
    if let Err(why) = resent.recorded {
        let why = match why {
            NotRecorded::MovedOn(s) => format!("the intent moved on to {s}"),
            NotRecorded::Port(e) => e.to_string(),
        };
        return Err(CliError::Aws {
            operation: "recording the resend",
            message: match &resent.published {
                PublishOutcome::Accepted { message_id } => format!(
                    "SNS accepted the resend (message id {message_id}) but it could not be recorded: {why}. Do \
                     NOT resend: the claim's lease will lapse to send_unknown and the delivery receipt can still \
                     settle it"
                ),
                published => format!("the publish ended ({published:?}) but it could not be recorded: {why}"),
            },
        });
    }
    let outcome = resent.outcome;
    let message = match outcome {
        ResendOutcome::Accepted => format!(
            "Resent: SNS accepted it (message id {}). Accepted is not delivered: watch `tocsin show {key}` for \
             the delivery receipt.",
            sns_message_id.unwrap_or_default()
        ),
        ResendOutcome::Rejected => format!(
            "SNS rejected the resend ({}); nothing was sent. The intent is failed; reach {masked} another way.",
            error.unwrap_or_default()
        ),
        ResendOutcome::NotAcceptedRetryable => format!(
            "SNS did not accept the resend ({}); nothing was sent. The intent is marked failed — run the same \
             command again to retry.",
            error.unwrap_or_default()
        ),
        ResendOutcome::Unknown => format!(
            "The resend's outcome is unknown ({}): the SMS may or may not have gone out. The intent is \
             send_unknown. Do not resend blindly: look for a delivery-status record, or call the person.",
            error.unwrap_or_default()
        ),
    };
    if ctx.json {
        output::json(&ResendDocument {
            key: key.to_string(),
            outcome,
            state,
            attempt_id: &attempt_id,
            operator: &operator,
            reason: &args.reason,
            sns_message_id,
            error,
            message,
        })?;
    } else {
        output::line(message)?;
        output::line(format!("Recorded as {attempt_id} by {operator}."))?;
    }
    Ok(outcome)
}

/// Refuses, with the reason in plain words, unless the intent is in a resendable state.
/// `changed` says the state moved after it was first read (the automation or another operator).
fn refuse_unless_resendable(record: &IntentRecord, changed: bool) -> CliResult<()> {
    let s = &record.status;
    let key = &record.intent.key;
    if RESENDABLE.contains(&s.state) {
        return Ok(());
    }
    let meanwhile = if changed { " (it changed while claiming it)" } else { "" };
    let why = match s.state {
        State::Received | State::Queued | State::Sending => format!(
            "the automation owns it (state {}){meanwhile}: the sender will send it or record why not. Watch \
             `tocsin show {key}`",
            s.state
        ),
        State::Accepted | State::DelaySuspected => format!(
            "SNS already took it (state {}{}){meanwhile}: a resend would send a second SMS. Wait for the \
             delivery receipt",
            s.state,
            s.sns_message_id.as_deref().map(|m| format!(", message id {m}")).unwrap_or_default()
        ),
        State::Delivered => format!(
            "it was delivered{}{meanwhile}",
            s.final_at.map(|t| format!(" at {}", output::time(t))).unwrap_or_default()
        ),
        State::Suppressed => format!(
            "its recipient {} is suppressed{meanwhile}: re-enable the number first (`tocsin re-enable <number> \
             --reason …`), then resend",
            record.intent.recipient.masked()
        ),
        // RESENDABLE: handled above.
        State::SendUnknown | State::Failed | State::Stale | State::ExpiredUnknown => return Ok(()),
    };
    Err(CliError::Refused(format!("not resent: {why}. Nothing was sent.")))
}

/// The deployment-wide SMS settings given to the command (flags or the deployment's variables).
fn sms_defaults(args: &ResendArgs) -> CliResult<SmsOptions> {
    let origination_number = args
        .origination_number
        .as_deref()
        .map(|n| PhoneNumber::parse(n.trim()))
        .transpose()
        .map_err(|e| CliError::Usage(format!("--origination-number {e}")))?;
    Ok(SmsOptions {
        sender_id: args.sender_id.clone().filter(|s| !s.trim().is_empty()),
        origination_number,
        max_price_usd: args.max_price_usd.clone().filter(|s| !s.trim().is_empty()),
    })
}
