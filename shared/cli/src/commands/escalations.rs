//! `tocsin escalations [--max N] [--ack]`: what on-call must handle, from the escalation queue.
//!
//! Messages are received with a short visibility timeout; without `--ack` they are released at
//! once (visibility 0) for other readers, with `--ack` each shown message is deleted. Nothing else
//! is recorded. A message whose body is not an escalation is never deleted: it is released and
//! reported.

use serde::Serialize;
use tocsin::ports::EscalationMessage;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::progress::Spinner;

/// How long received messages stay hidden if this command dies before releasing or deleting them.
const VISIBILITY_SECONDS: i32 = 30;

#[derive(Debug, Serialize)]
struct Shown {
    message_id: String,
    #[serde(flatten)]
    escalation: EscalationMessage,
}

#[derive(Debug, Serialize)]
struct EscalationsDocument<'a> {
    queue: &'a str,
    acknowledged: bool,
    escalations: Vec<Shown>,
    /// Message ids of bodies that are not escalations (released, never deleted).
    unreadable: Vec<String>,
}

struct Received {
    message_id: String,
    receipt_handle: String,
    escalation: Option<EscalationMessage>,
}

pub async fn run(ctx: &Context, max: u32, ack: bool) -> CliResult<()> {
    let queue = &ctx.names.escalation_queue;
    let url = ctx.queue_url(queue).await?;
    let spinner = Spinner::start(format!("reading {queue}…"));
    let received = receive(ctx, &url, max, &spinner).await;
    // Whatever happened, hand back what we hold before reporting.
    let (done, release): (Vec<&Received>, Vec<&Received>) = match &received {
        Ok(r) => r.iter().partition(|m| ack && m.escalation.is_some()),
        Err(_) => (Vec::new(), Vec::new()),
    };
    spinner.set_message(if ack { "acknowledging…" } else { "releasing…" });
    let settled = settle(ctx, &url, &done, &release).await;
    spinner.done();
    let received = received?;
    settled?;

    let mut shown = Vec::new();
    let mut unreadable = Vec::new();
    for m in received {
        match m.escalation {
            Some(e) => shown.push(Shown { message_id: m.message_id, escalation: e }),
            None => unreadable.push(m.message_id),
        }
    }
    if ctx.json {
        return output::json(&EscalationsDocument { queue, acknowledged: ack, escalations: shown, unreadable });
    }
    for id in &unreadable {
        eprintln!("warning: message {id} on {queue} is not an escalation; left on the queue");
    }
    if shown.is_empty() {
        return output::line(format!("no escalations waiting on {queue}"));
    }
    let mut t = output::table(["escalated", "key", "event id", "recipient", "state", "reason"]);
    for s in &shown {
        let e = &s.escalation;
        t.add_row([
            output::time(e.escalated_at),
            e.idempotency_key.get(..12).unwrap_or(&e.idempotency_key).to_owned(),
            e.event_id.clone(),
            e.recipient_masked.clone(),
            e.state.to_string(),
            e.reason.clone(),
        ]);
    }
    output::line(t)?;
    let what = if ack {
        "acknowledged (deleted from the queue)"
    } else {
        "left on the queue (acknowledge with --ack once handled)"
    };
    output::line(format!("{} {what}", output::count(shown.len(), "escalation")))
}

async fn receive(ctx: &Context, url: &str, max: u32, spinner: &Spinner) -> CliResult<Vec<Received>> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut out: Vec<Received> = Vec::new();
    while out.len() < max {
        let want = i32::try_from((max - out.len()).min(10)).unwrap_or(10);
        let page = ctx
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(want)
            .visibility_timeout(VISIBILITY_SECONDS)
            // A short long-poll: SQS answers from every server, so a small queue is read whole.
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(CliError::aws("SQS ReceiveMessage"))?;
        let messages = page.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let (Some(message_id), Some(receipt_handle)) = (m.message_id, m.receipt_handle) else { continue };
            let escalation = m.body.as_deref().and_then(|b| serde_json::from_str::<EscalationMessage>(b).ok());
            out.push(Received { message_id, receipt_handle, escalation });
        }
        spinner.set_message(format!("read {} messages…", out.len()));
    }
    Ok(out)
}

/// Deletes the acknowledged messages and releases the others, ten per batch call.
async fn settle(ctx: &Context, url: &str, delete: &[&Received], release: &[&Received]) -> CliResult<()> {
    use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry};
    let mut failures = Vec::new();
    for chunk in delete.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(&m.receipt_handle).build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(CliError::aws("SQS DeleteMessageBatch"))?;
        let out = ctx
            .sqs
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(CliError::aws("SQS DeleteMessageBatch"))?;
        failures
            .extend(out.failed.iter().map(|f| format!("delete {}: {}", f.id, f.message.as_deref().unwrap_or(&f.code))));
    }
    for chunk in release.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, m)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(&m.receipt_handle)
                    .visibility_timeout(0)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(CliError::aws("SQS ChangeMessageVisibilityBatch"))?;
        let out = ctx
            .sqs
            .change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(CliError::aws("SQS ChangeMessageVisibilityBatch"))?;
        failures.extend(
            out.failed.iter().map(|f| format!("release {}: {}", f.id, f.message.as_deref().unwrap_or(&f.code))),
        );
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::Aws { operation: "SQS batch", message: failures.join("; ") })
    }
}
