//! `tocsin resend <key> --reason <text>`: a manual resend, exclusive with the automation.
//!
//! Order, as in the sender: refuse what must not be resent → check the recipient registry →
//! claim (a conditional write from the resendable states to `sending`, with the operator's
//! attempt id, a lease and the operator observation, atomically) → publish once, SDK retries off →
//! record the outcome with a transition conditioned on still holding the claim. A refused claim
//! publishes nothing; a command that dies after the claim leaves a lease that the sweep turns
//! into `send_unknown`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::adapters::operator::{OperatorClaim, OperatorClaimOutcome, RESENDABLE, operator_attempt_id};
use tocsin::adapters::sns::SnsGateway;
use tocsin::domain::intent::{IntentRecord, SmsOptions};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::{PhoneNumber, State};
use tocsin::ports::{
    Commit, IntentStore, NextCheck, PublishOutcome, RecipientRegistry, SmsGateway, SmsMessage, StatusPatch, Transition,
    TransitionOutcome,
};

use super::{load, resolve_key};
use crate::args::ResendArgs;
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

/// How a resend that got as far as the publish ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResendOutcome {
    /// SNS took it (not delivered yet).
    Accepted,
    /// SNS refused it for good; the intent is `failed`.
    Rejected,
    /// SNS proved it did not take it (throttled, 5xx); the intent is `failed`; run the command again.
    NotAcceptedRetryable,
    /// It may or may not have gone out; the intent is `send_unknown`.
    Unknown,
}

impl ResendOutcome {
    pub fn accepted(self) -> bool {
        self == ResendOutcome::Accepted
    }
}

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
    let record = load(ctx, &key).await?;
    refuse_unless_resendable(&record, false)?;

    // The registry first: a suppressed number is never published to.
    let recipient = &record.intent.recipient;
    let masked = recipient.masked();
    if let Some(s) = ctx
        .registry
        .suppression(recipient)
        .await
        .map_err(CliError::port(format!("checking whether {masked} is suppressed")))?
    {
        return Err(CliError::Refused(format!(
            "not resent: the recipient {masked} is suppressed since {} ({}). Re-enable the number first \
             (`tocsin re-enable <number> --reason …`, after confirming it works), then resend.",
            output::time(s.since),
            s.reason
        )));
    }

    let operator = ctx.operator().await?;
    let attempt_id = operator_attempt_id(uuid::Uuid::new_v4());
    let now = Utc::now();
    let lease_until = now + chrono::Duration::from_std(args.lease).unwrap_or(chrono::Duration::minutes(2));
    let claim = OperatorClaim {
        key: &key,
        attempt_id: &attempt_id,
        operator: &operator,
        reason: &args.reason,
        now,
        lease_until,
    };
    let record = match ctx.ledger.claim_for_operator(claim).await.map_err(CliError::port(format!("claiming {key}")))? {
        OperatorClaimOutcome::Claimed(r) => *r,
        OperatorClaimOutcome::NotResendable(current) => {
            refuse_unless_resendable(&current, true)?;
            // Resendable again, yet the claim was refused: it changed twice meanwhile.
            return Err(CliError::Refused(format!(
                "not resent: intent {key} changed while claiming it; nothing was sent — look at `tocsin show {key}`"
            )));
        }
        OperatorClaimOutcome::Missing => return Err(CliError::NotFound(key.to_string())),
    };

    // Claimed: this command alone may publish now, once.
    let gateway = SnsGateway::new(&ctx.sdk, args.publish_timeout);
    let options = record.intent.sms.or_defaults(&defaults);
    let published = gateway
        .publish(SmsMessage { to: &record.intent.recipient, body: record.intent.body.expose(), options: &options })
        .await;
    let now = Utc::now();
    let (outcome, state, sns_message_id, error) = match &published {
        PublishOutcome::Accepted { message_id } => {
            (ResendOutcome::Accepted, State::Accepted, Some(message_id.as_str()), None)
        }
        PublishOutcome::Rejected { error } => (ResendOutcome::Rejected, State::Failed, None, Some(error.as_str())),
        PublishOutcome::Retryable { error } => {
            (ResendOutcome::NotAcceptedRetryable, State::Failed, None, Some(error.as_str()))
        }
        PublishOutcome::Unknown { error } => (ResendOutcome::Unknown, State::SendUnknown, None, Some(error.as_str())),
    };
    record_outcome(ctx, &record, &attempt_id, &published, now).await?;

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

/// Records the publish outcome exactly as the sender does: a transition out of `sending` held by
/// this attempt, with its observation; accepted also indexes the SNS message id in the same write.
async fn record_outcome(
    ctx: &Context,
    record: &IntentRecord,
    attempt_id: &str,
    published: &PublishOutcome,
    now: DateTime<Utc>,
) -> CliResult<()> {
    let intent = &record.intent;
    let base = StatusPatch { clear_claim: true, increment_attempts: true, ..Default::default() };
    let (to, kind, patch, tag) = match published {
        PublishOutcome::Accepted { message_id } => (
            State::Accepted,
            ObservationKind::Accepted { attempt_id: attempt_id.into(), sns_message_id: message_id.clone() },
            StatusPatch { sns_message_id: Some(message_id.clone()), accepted_at: Some(now), ..base },
            "accepted",
        ),
        PublishOutcome::Rejected { error } => (
            State::Failed,
            ObservationKind::PublishRejected { attempt_id: attempt_id.into(), error: error.clone() },
            StatusPatch { last_error: Some(format!("SNS rejected the operator's resend: {error}")), ..base },
            "rejected",
        ),
        PublishOutcome::Retryable { error } => (
            State::Failed,
            ObservationKind::PublishRejected {
                attempt_id: attempt_id.into(),
                error: format!(
                    "not accepted, retryable ({error}); nothing was sent, the operator may run the resend again"
                ),
            },
            StatusPatch {
                last_error: Some(format!("SNS did not accept the operator's resend (retryable: {error})")),
                ..base
            },
            "retryable",
        ),
        PublishOutcome::Unknown { error } => (
            State::SendUnknown,
            ObservationKind::SendUnknown { attempt_id: attempt_id.into(), cause: error.clone() },
            StatusPatch { last_error: Some(error.clone()), ..base },
            "unknown",
        ),
    };
    let mut patch = patch;
    patch.state = Some(to);
    if to.is_final() {
        patch.final_at = Some(now);
    }
    let mut t = Transition {
        key: intent.key.clone(),
        from: vec![State::Sending],
        attempt_id: Some(attempt_id.to_owned()),
        patch,
        observation: Observation::new(format!("attempt:{attempt_id}:{tag}"), now, kind).with_state(to),
        // Earlier than needed is always safe: the next sweep sets the right time with the
        // deployment's own thresholds (delay suspected, receipt window, escalation).
        next_check: NextCheck::At(now),
        index_message: None,
        expect: Default::default(),
        retain_until: Some(intent.expires_at()),
        commit: Commit::Atomic,
    };
    if let PublishOutcome::Accepted { message_id } = published {
        t.index_message = Some((message_id.clone(), intent.recipient.clone()));
    }
    let lost = |why: String| match published {
        PublishOutcome::Accepted { message_id } => CliError::Aws {
            operation: "recording the resend",
            message: format!(
                "SNS accepted the resend (message id {message_id}) but it could not be recorded: {why}. Do NOT \
                 resend: the claim's lease will lapse to send_unknown and the delivery receipt can still settle it"
            ),
        },
        _ => CliError::Aws {
            operation: "recording the resend",
            message: format!("the publish ended ({published:?}) but it could not be recorded: {why}"),
        },
    };
    match ctx.ledger.transition(t.clone()).await {
        Ok(TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied) => Ok(()),
        Ok(TransitionOutcome::Refused(current)) if current.status.state == State::SendUnknown => {
            // The sweep gave up on our lease while we waited; we know better now (as the sender).
            t.from = vec![State::SendUnknown];
            t.attempt_id = None;
            match ctx.ledger.transition(t).await {
                Ok(TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied) => Ok(()),
                Ok(TransitionOutcome::Refused(c)) => Err(lost(format!("the intent moved on to {}", c.status.state))),
                Err(e) => Err(lost(e.to_string())),
            }
        }
        Ok(TransitionOutcome::Refused(current)) => {
            Err(lost(format!("the intent moved on to {}", current.status.state)))
        }
        Err(e) => Err(lost(e.to_string())),
    }
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
