//! `tocsin escalations [--max N] [--ack]` and `tocsin escalations ack KEY --reason …`: what
//! on-call must handle.
//!
//! Looking never touches the queue. SQS has no peek: every ReceiveMessage — with a visibility
//! timeout of 0 too — adds one to the message's receive count, and AWS leaves a message received
//! three times or more out of `ApproximateAgeOfOldestMessage` (documented for that metric, with or
//! without a redrive policy). So the listing reads the ledger instead — the open escalations of the
//! list-index, oldest first (a Query, never a scan) — next to the queue's depth
//! (GetQueueAttributes, which counts nothing). The age alarm reads the same ledger list (the sweep
//! reports its oldest entry's age every run), not the queue.
//!
//! `ack KEY --reason` records who, when and why in the intent's timeline (an operator
//! observation, stored once per escalation), takes the escalation off the open list, then deletes
//! that intent's message(s) from the queue. Finding them means receiving: the messages looked past
//! are released at once (visibility 0), each received once more — which no alarm reads any more.
//! `--ack` with a reason acknowledges every escalation shown the same way. A message that is not an
//! escalation is never deleted.

use chrono::{DateTime, Utc};
use tocsin::domain::{IdempotencyKey, IntentRecord, State};
use tocsin::ports::IntentStore;
use tocsin::services::operator::{AckError, Acknowledged, acknowledge};

use super::resolve_key;
use crate::context::{queue_depth, queue_name};
use serde::Serialize;
use tocsin::ports::EscalationMessage;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::progress::Spinner;

/// How long received messages stay hidden if this command dies before releasing or deleting them.
const VISIBILITY_SECONDS: i32 = 30;

struct Received {
    message_id: String,
    receipt_handle: String,
    escalation: Option<EscalationMessage>,
}

/// Without `ack`: the listing. With `ack` (a reason): acknowledges every escalation listed, as
/// `ack KEY` does for one — recorded in each timeline, then their messages deleted.
pub async fn run(ctx: &Context, max: u32, ack: Option<&str>) -> CliResult<()> {
    let Some(reason) = ack else {
        return look(ctx, max).await;
    };
    let url = ctx.names.escalation_queue_url.clone();
    let queue = queue_name(&url);
    let spinner = Spinner::start("reading the ledger for escalations…");
    let mut waiting = unacknowledged(ctx, &spinner).await?;
    waiting.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    let operator = ctx.operator().await?;
    let now = Utc::now();
    for (i, r) in waiting.iter().enumerate() {
        spinner.set_message(format!("recording acknowledgements: {i} of {} recorded…", waiting.len()));
        acknowledge(&ctx.ledger, &r.intent.key, &operator, reason, now).await.map_err(ack_error)?;
    }
    let keys: std::collections::HashSet<&str> = waiting.iter().map(|r| r.intent.key.as_str()).collect();
    spinner.set_message(format!("deleting their messages from {queue}…"));
    let (deleted, released) = delete_messages(ctx, &spinner, |k| keys.contains(k)).await?;
    spinner.done();
    let rows: Vec<Waiting> = waiting.iter().map(Waiting::from).collect();
    if ctx.json {
        return output::json(&serde_json::json!({
            "queue": queue, "acknowledged": true, "operator": operator, "reason": reason,
            "escalations": rows, "deleted": deleted, "released": released,
        }));
    }
    if rows.is_empty() {
        return output::line(format!("no escalations waiting ({queue}): nothing acknowledged"));
    }
    output::line(format!(
        "{} acknowledged by {operator} ({reason}); {} deleted from {queue}:",
        output::count(rows.len(), "escalation"),
        output::count(deleted, "message")
    ))?;
    for e in &rows {
        output::line(format!("  {} {} {} {}", e.idempotency_key, e.event_id, e.recipient_masked, e.state))?;
    }
    Ok(())
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

/// An escalation as the ledger holds it (the listing's row).
#[derive(Debug, Serialize)]
struct Waiting {
    idempotency_key: String,
    event_id: String,
    template: String,
    recipient_masked: String,
    deadline: DateTime<Utc>,
    state: State,
    reason: String,
    escalated_at: DateTime<Utc>,
    sns_message_id: Option<String>,
}

impl From<&IntentRecord> for Waiting {
    fn from(r: &IntentRecord) -> Self {
        let (i, s) = (&r.intent, &r.status);
        let (escalated_at, reason) =
            s.escalation.as_ref().map_or((i.deadline, String::new()), |e| (e.at, e.reason.clone()));
        Waiting {
            idempotency_key: i.key.to_string(),
            event_id: i.event_id.clone(),
            template: i.template.to_string(),
            recipient_masked: i.recipient.masked(),
            deadline: i.deadline,
            state: s.state,
            reason,
            escalated_at,
            sns_message_id: s.sns_message_id.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
struct LookDocument<'a> {
    queue: &'a str,
    acknowledged: bool,
    /// Messages on the queue now (visible, and received by someone but not deleted).
    queue_visible: Option<u64>,
    queue_in_flight: Option<u64>,
    escalations: Vec<Waiting>,
}

/// The escalated intents nobody acknowledged yet, oldest escalation first: the list-index's open
/// escalations (an acknowledgement takes one off), each read from the table.
async fn unacknowledged(ctx: &Context, spinner: &Spinner) -> CliResult<Vec<IntentRecord>> {
    let open = ctx.ledger.open_escalations(usize::MAX).await.map_err(CliError::port("reading the open escalations"))?;
    let mut out = Vec::with_capacity(open.len());
    for (i, (_, key)) in open.iter().enumerate() {
        spinner.set_message(format!("reading escalations: {i} of {} read…", open.len()));
        // Gone (expired with its intent): nothing left to handle.
        if let Some(r) = ctx.ledger.get(key).await.map_err(CliError::port(format!("reading intent {key}")))? {
            out.push(r);
        }
    }
    Ok(out)
}

async fn look(ctx: &Context, max: u32) -> CliResult<()> {
    let url = &ctx.names.escalation_queue_url;
    let queue = queue_name(url);
    let spinner = Spinner::start("reading the ledger for escalations…");
    let mut waiting = unacknowledged(ctx, &spinner).await?;
    let (visible, in_flight) = queue_depth(&ctx.sqs, url).await?;
    spinner.done();
    let total = waiting.len();
    waiting.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    let rows: Vec<Waiting> = waiting.iter().map(Waiting::from).collect();
    if ctx.json {
        return output::json(&LookDocument {
            queue,
            acknowledged: false,
            queue_visible: visible,
            queue_in_flight: in_flight,
            escalations: rows,
        });
    }
    let on_queue = format!(
        "{queue}: {} visible, {} in flight",
        visible.map_or_else(|| "?".to_owned(), |v| v.to_string()),
        in_flight.map_or_else(|| "?".to_owned(), |v| v.to_string())
    );
    if rows.is_empty() {
        return output::line(format!("no escalations waiting ({on_queue})"));
    }
    let mut t = output::table(["escalated", "key", "event id", "recipient", "state", "reason"]);
    for e in &rows {
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
    output::line(format!(
        "{} of {total} unacknowledged, oldest first; left on the queue ({on_queue}). Acknowledge one with \
         `tocsin escalations ack <key> --reason …` once handled.",
        output::count(rows.len(), "escalation")
    ))
}

#[derive(Debug, Serialize)]
struct AckDocument<'a> {
    key: String,
    operator: &'a str,
    reason: &'a str,
    at: DateTime<Utc>,
    /// Recorded by this command (false: it was acknowledged before; that record stands).
    recorded: bool,
    /// Messages for this intent deleted from the escalation queue.
    deleted: usize,
    /// Other messages received on the way and released at once.
    released: usize,
}

/// `tocsin escalations ack KEY --reason …`.
pub async fn ack(ctx: &Context, raw_key: &str, reason: &str) -> CliResult<()> {
    let key = resolve_key(ctx, raw_key).await?;
    let operator = ctx.operator().await?;
    let now = Utc::now();
    // The ledger first: if the queue call fails, running the command again finds the record and
    // only deletes the message.
    let acknowledged = acknowledge(&ctx.ledger, &key, &operator, reason, now).await.map_err(ack_error)?;
    let recorded = acknowledged == Acknowledged::Now;
    let spinner = Spinner::start(format!("removing {}'s escalation from the queue…", key.short()));
    let (deleted, released) = delete_messages_of(ctx, &key, &spinner).await?;
    spinner.done();
    let (by, at, why) = match &acknowledged {
        Acknowledged::Before { operator: o, at, reason: r } => (o.as_str(), *at, r.as_str()),
        Acknowledged::Now => (operator.as_str(), now, reason),
    };
    if ctx.json {
        return output::json(&AckDocument {
            key: key.to_string(),
            operator: by,
            reason: why,
            at,
            recorded,
            deleted,
            released,
        });
    }
    if recorded {
        output::line(format!("Escalation of {key} acknowledged by {by} at {}: {why}.", output::time(at)))?;
    } else {
        output::line(format!(
            "Escalation of {key} was already acknowledged by {by} at {} ({why}); nothing new recorded.",
            output::time(at)
        ))?;
    }
    output::line(match deleted {
        0 => "No message of it was on the escalation queue (deleted before, or held by another reader: run again \
              in 30 s if the alarm still fires)."
            .to_owned(),
        n => format!("{} deleted from the escalation queue.", output::count(n, "message")),
    })
}

/// A refused or failed acknowledgement, as the command says it.
fn ack_error(e: AckError) -> CliError {
    match e {
        AckError::Missing(key) => CliError::NotFound(key.to_string()),
        AckError::NotEscalated(state) => {
            CliError::Refused(format!("the intent was not escalated (state {state}): nothing to acknowledge"))
        }
        AckError::Port { what, error } => CliError::port(what.to_owned())(error),
    }
}

/// Receives the queue through, deletes `key`'s messages and releases every other one at once.
pub(crate) async fn delete_messages_of(
    ctx: &Context,
    key: &IdempotencyKey,
    spinner: &Spinner,
) -> CliResult<(usize, usize)> {
    delete_messages(ctx, spinner, |k| k == key.as_str()).await
}

/// Receives the queue through, deletes the escalations whose key `wanted` accepts and releases
/// every other message at once (a message that is not an escalation is never deleted).
async fn delete_messages(ctx: &Context, spinner: &Spinner, wanted: impl Fn(&str) -> bool) -> CliResult<(usize, usize)> {
    let url = ctx.names.escalation_queue_url.clone();
    let received = receive(ctx, &url, 1000, spinner).await;
    let (mine, others): (Vec<&Received>, Vec<&Received>) = match &received {
        Ok(r) => r.iter().partition(|m| m.escalation.as_ref().is_some_and(|e| wanted(&e.idempotency_key))),
        Err(_) => (Vec::new(), Vec::new()),
    };
    for m in others.iter().filter(|m| m.escalation.is_none()) {
        eprintln!("warning: message {} on {} is not an escalation; left on the queue", m.message_id, queue_name(&url));
    }
    let counts = (mine.len(), others.len());
    let settled = settle(ctx, &url, &mine, &others).await;
    received?;
    settled?;
    Ok(counts)
}
