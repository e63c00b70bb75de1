//! `tocsin reconcile <key> [--link <sns-message-id> --reason <text>]`: the manual half of
//! reconciliation. Without `--link`, shows the delivery-status records that could be the SMS of
//! an intent whose outcome is unknown (same destination, inside the attempt's window, in both
//! `DirectPublishToPhoneNumber` log groups) and which intent, if any, already owns each message.
//! With `--link`, ties that message to the intent — your identity and reason recorded — and
//! applies its records exactly as the automatic path would (delivered / failed, suppression).

use std::time::Duration;

use chrono::Utc;
use serde::Serialize;
use tocsin::adapters::sms::ProviderLogs;
use tocsin::domain::phone::mask_phone_like;
use tocsin::services::reconcile::{ManualError, candidates, link};

use super::resolve_key;
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct CandidateView {
    sns_message_id: String,
    log_group: String,
    log_event_id: String,
    time: Option<chrono::DateTime<Utc>>,
    status: String,
    provider_response: Option<String>,
    destination: String,
    linked_to: Option<String>,
}

fn manual(context: &str) -> impl FnOnce(ManualError) -> CliError + '_ {
    move |e| match e {
        ManualError::NotFound(k) => CliError::NotFound(k),
        ManualError::NoReason => CliError::Usage(e.to_string()),
        ManualError::Port(source) => CliError::Port { context: context.to_owned(), source },
        ManualError::Throttled => {
            CliError::Aws { operation: "CloudWatch Logs FilterLogEvents", message: e.to_string() }
        }
        other => CliError::Refused(other.to_string()),
    }
}

/// The stack's delivery logs: its End User Messaging event group, or the account's SNS groups.
async fn log_search(ctx: &Context) -> CliResult<ProviderLogs> {
    Ok(ProviderLogs::new(aws_sdk_cloudwatchlogs::Client::new(&ctx.sdk), &ctx.delivery_logs().await?))
}

pub async fn run(
    ctx: &Context,
    raw_key: &str,
    link_id: Option<&str>,
    reason: Option<&str>,
    margin: Duration,
) -> CliResult<()> {
    let key = resolve_key(ctx, raw_key).await?;
    let logs = log_search(ctx).await?;
    if let Some(message_id) = link_id {
        let reason = reason.ok_or_else(|| CliError::Usage("--link needs --reason".into()))?;
        let operator = ctx.operator().await?;
        let state = link(&ctx.ledger, &ctx.registry, &logs, &key, message_id, &operator, reason, margin, Utc::now())
            .await
            .map_err(manual("linking the message"))?;
        if ctx.json {
            return output::json(
                &serde_json::json!({"key": key, "linked": message_id, "operator": operator, "state": state}),
            );
        }
        return output::line(format!(
            "{}… linked to SNS message {message_id} by {operator}: now {state}.",
            key.short()
        ));
    }
    let found = candidates(&ctx.ledger, &logs, &key, margin, chrono::Utc::now())
        .await
        .map_err(manual("searching the delivery logs"))?;
    let views: Vec<CandidateView> = found
        .iter()
        .map(|c| CandidateView {
            sns_message_id: c.found.record.message_id.clone(),
            log_group: c.found.log_group.clone(),
            log_event_id: c.found.log_event_id.clone(),
            time: c.found.record.timestamp,
            status: c.found.record.status.as_str().to_owned(),
            provider_response: c.found.record.provider_response.clone(),
            destination: c.found.record.destination.as_deref().map(mask_phone_like).unwrap_or_default(),
            linked_to: c.linked_to.as_ref().map(|k| k.to_string()),
        })
        .collect();
    if ctx.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line(format!(
            "No delivery record to this recipient in the attempt's window yet (logs can take hours). {}… stays send_unknown.",
            key.short()
        ));
    }
    let mut t =
        output::table(["time", "SNS message id", "status", "provider response", "log group", "already linked to"]);
    for v in &views {
        t.add_row([
            output::opt_time(v.time),
            v.sns_message_id.clone(),
            v.status.clone(),
            output::opt(v.provider_response.as_deref()),
            if v.log_group.ends_with("/Failure") { "failure".to_owned() } else { "success".to_owned() },
            v.linked_to.as_deref().map_or_else(|| "—".to_owned(), |k| format!("{}…", &k[..12.min(k.len())])),
        ]);
    }
    output::line(t)?;
    output::line(format!("Link one with: tocsin reconcile {} --link <SNS message id> --reason \"…\"", key.short()))
}
