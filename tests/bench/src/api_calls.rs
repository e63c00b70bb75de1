//! Measurement 4: AWS API calls per alert on the happy path (intake → sender → carrier record →
//! status → delivered), counted with the emulator's request recorder around each function's
//! handler, the real handlers and adapters in-process (`tocsin_tests::Pipeline`).
//!
//! Calls made by the harness where AWS itself acts are excluded from the per-function counts and
//! listed apart: the SQS event source mapping's ReceiveMessage/DeleteMessage (billed to the
//! account, made by Lambda, not by tocsin's code), SNS writing the delivery record to CloudWatch
//! Logs, and the subscription reading it (`Logs_…` calls in the status phase).
//!
//! Measured on each SMS provider ([`measure`] for SNS, [`measure_end_user_messaging`]). The End
//! User Messaging stand-in serves beside moto, outside its request recorder: the sender's
//! `SendTextMessage` calls are counted from the stand-in's own log of the texts it accepted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tocsin_harness::events::sqs_event;
use tocsin_tests::{Pipeline, alert, key_of};

use crate::{BenchError, Result};

/// The target: AWS calls made by tocsin's functions per alert.
pub const TARGET_CALLS: usize = 8;

/// The target under End User Messaging (issue 34): its events name their alert, so no message-id
/// index is written or read.
pub const TARGET_CALLS_EUM: usize = 9;

/// How the End User Messaging stand-in's accepted sends are named in the tables.
const SEND_TEXT_MESSAGE: &str = "PinpointSMSVoiceV2.SendTextMessage";

#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub function: &'static str,
    /// Operation → calls, made by the function.
    pub ops: BTreeMap<String, usize>,
    /// Items written by the phase's `TransactWriteItems` calls (for write-unit estimates).
    pub transact_items: usize,
    /// Handler wall time for this alert (in-process, against the emulator).
    pub handler: Duration,
}

impl Phase {
    pub fn calls(&self) -> usize {
        self.ops.values().sum()
    }
}

#[derive(Debug, Clone)]
pub struct ApiCalls {
    pub phases: Vec<Phase>,
    pub final_state: String,
}

impl ApiCalls {
    pub fn total(&self) -> usize {
        self.phases.iter().map(Phase::calls).sum()
    }
    /// Calls of one operation over all phases.
    pub fn count(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.phases.iter().flat_map(|p| p.ops.iter()).filter(|(o, _)| pred(o)).map(|(_, n)| n).sum()
    }
}

fn tally(ops: Vec<String>, keep: impl Fn(&str) -> bool) -> BTreeMap<String, usize> {
    ops.into_iter().filter(|o| keep(o)).fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o).or_insert(0) += 1;
        m
    })
}

async fn recorded<F: std::future::Future>(
    p: &Pipeline,
    function: &'static str,
    keep: impl Fn(&str) -> bool,
    f: F,
) -> Result<(Phase, F::Output)> {
    p.emulator.start_recording().await?;
    let started = Instant::now();
    let out = f.await;
    let handler = started.elapsed();
    let recorded = p.emulator.stop_recording_requests().await?;
    // Items in every `TransactWriteItems`.
    let transact_items = recorded
        .iter()
        .filter(|r| r.operation == "DynamoDB_20120810.TransactWriteItems")
        .filter_map(|r| r.body.get("TransactItems").and_then(serde_json::Value::as_array).map(Vec::len))
        .sum();
    let ops = recorded.into_iter().map(|r| r.operation).collect();
    Ok((Phase { function, ops: tally(ops, keep), transact_items, handler }, out))
}

/// One alert through the whole happy path; `label` keeps event ids unique.
async fn one_alert(p: &Pipeline, label: &str, recipient: &str) -> Result<ApiCalls> {
    let all = |_: &str| true;
    let (intake, (code, body)) = recorded(p, "intake", all, p.submit(&alert(label, recipient))).await?;
    if code != 201 {
        return Err(BenchError::Process(format!("intake answered {code}: {body}")));
    }
    let key = key_of(&body);

    let queue = p.stack.queue("SendQueue").clone();
    let msgs = p.receive(&queue.url, 10).await;
    let event = sqs_event(&queue.arn, &msgs);
    let eum = p.uses_end_user_messaging();
    let texts_before = if eum { sent_texts(p).await? } else { 0 };
    let (mut sender, resp) = recorded(p, "sender", all, p.sender.handle(event, p.clock.invocation_deadline())).await?;
    if eum {
        let sent = sent_texts(p).await? - texts_before;
        sender.ops.insert(SEND_TEXT_MESSAGE.to_owned(), sent);
    }
    if !resp.batch_item_failures.is_empty() {
        return Err(BenchError::Process(format!("sender reported failures: {:?}", resp.batch_item_failures)));
    }
    // The event source mapping deletes the handled message (not counted as a function call).
    for m in &msgs {
        p.sqs
            .delete_message()
            .queue_url(&queue.url)
            .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
            .send()
            .await
            .map_err(|e| BenchError::Aws("DeleteMessage", e.to_string()))?;
    }

    let message_id = p
        .record(&key)
        .await
        .status
        .sns_message_id
        .ok_or_else(|| BenchError::Process("the sender recorded no provider message id".into()))?;
    if !eum {
        // Under End User Messaging the stand-in's carrier already wrote the message's events
        // (TEXT_SUCCESSFUL, then TEXT_DELIVERED) into the stack's event group.
        p.carrier_reports(&message_id, recipient, true, "Message has been accepted by phone carrier").await;
    }
    // `Logs_…` are the harness reading the log group in place of the subscription.
    let (status, _) = recorded(p, "status", |o| !o.starts_with("Logs_"), p.run_status()).await?;

    let final_state = format!("{:?}", p.record(&key).await.status.state);
    Ok(ApiCalls { phases: vec![intake, sender, status], final_state })
}

async fn sent_texts(p: &Pipeline) -> Result<usize> {
    let texts = p.emulator.eum().sent_texts().await.map_err(|e| BenchError::Aws("stand-in texts", e.to_string()))?;
    Ok(texts.len())
}

/// A warm-up alert (connections, emulator caches), then the measured one to the same number (an
/// on-call phone's next alert: its carrier already written), sent through SNS.
/// Storm mode off (the default, on, adds the sender's backlog Query and send-log read and write:
/// BENCHMARKS.md section 4 says so beside the table).
pub async fn measure() -> Result<ApiCalls> {
    measure_with(tocsin_tests::Options::sns()).await
}

/// The same through AWS End User Messaging (the template's default provider).
pub async fn measure_end_user_messaging() -> Result<ApiCalls> {
    measure_with(tocsin_tests::Options::end_user_messaging()).await
}

async fn measure_with(mut options: tocsin_tests::Options) -> Result<ApiCalls> {
    options.env.push(("TOCSIN_STORM_MODE", "off"));
    let p = Pipeline::start_with(options).await;
    one_alert(&p, "calls-warmup", "+14155553001").await?;
    one_alert(&p, "calls-measured", "+14155553001").await
}
