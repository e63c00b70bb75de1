//! Measurement 12 (issue 37): acknowledgement by reply, on the emulator. A stack with
//! `Replies=on` sends one alert to each of [`REPLIES`] phones; each person texts the code back;
//! the stand-in publishes the reply to the stack's replies topic and moto's SNS delivers it to the
//! replies queue. Per reply, the replies function's handler runs alone (a batch of one, as a
//! quiet stack's event source mapping hands it) in-process with the real adapters, and is
//! measured: wall time from the message taken off the queue to the acknowledgement recorded and
//! the confirmation sent, this process's CPU time, and every AWS call it makes (moto's request
//! recorder; the confirmation's `SendTextMessage` from the stand-in's own log).
//!
//! What it leaves out: on AWS a reply also waits for End User Messaging → SNS → SQS, and for the
//! event source mapping's poll (it long-polls: within a second while messages arrive); moto's
//! loopback latencies are not AWS's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tocsin::domain::PhoneNumber;
use tocsin::domain::reply::AckSubject;
use tocsin::ports::ReplyCodes;
use tocsin_harness::events::sqs_event;
use tocsin_tests::{Options, Pipeline, alert, key_of};

use crate::cost;
use crate::cpu_clock;
use crate::stats::{Summary, summarise};
use crate::{BenchError, Result};

/// Phones, alerts and replies (one warm-up reply before them): half measured for the handler's
/// time, CPU and calls, half watched for the acknowledgement's.
pub const REPLIES: usize = 200;

/// The target for a reply's acknowledgement on the emulator, from the handler's start (p90).
pub const TARGET_P90: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct RepliesRun {
    pub replies: usize,
    /// From the message handed to the handler to the acknowledgement visible in the ledger
    /// (read in a loop beside the handler).
    pub to_acknowledged: Summary,
    /// Its 99th percentile (the watched replies are enough for one).
    pub to_acknowledged_p99: Duration,
    /// The handler's wall time per reply (the confirmation's send included, with its backoff
    /// when the origination number's parts per second are spent).
    pub wall: Summary,
    /// This process's CPU time per reply (the handler and its SDK clients; moto runs apart).
    pub cpu_per_reply: Duration,
    /// Operation → calls per acknowledged alert (the confirmation's send included).
    pub calls: BTreeMap<String, f64>,
    /// Write units per acknowledged alert: each write request (a transaction's items counted one
    /// by one) is at least one write unit, and every item the replies function writes is small.
    pub write_units: f64,
    /// Read units per acknowledged alert (consistent reads of items under 4 KB: one each).
    pub read_units: f64,
    /// Confirmations sent per acknowledged alert.
    pub confirmations: f64,
}

impl RepliesRun {
    pub fn calls_total(&self) -> f64 {
        self.calls.values().sum()
    }

    /// AWS cost of a million acknowledged alerts, USD, split: the replies function's own
    /// (Lambda, DynamoDB, SQS, KMS none: it decrypts nothing per call), and the confirmation SMS.
    pub fn cost_per_million(&self) -> (f64, f64) {
        let m = 1e6;
        // One invocation per reply (a quiet stack's batch of one); 128 MB at the measured wall.
        let lambda =
            m * (cost::LAMBDA_REQUEST + self.wall.median.as_secs_f64() * cost::MEMORY_GB * cost::LAMBDA_ARM_GB_S);
        let dynamo = m * (self.write_units * cost::DDB_WRU + self.read_units * cost::DDB_RRU);
        // SNS → SQS delivery is free; the mapping's receive and delete, the topic's publish.
        let queue = m * 2.0 * cost::SQS_REQUEST;
        let sms = m * self.confirmations * cost::SMS_US_PART;
        (lambda + dynamo + queue, sms)
    }
}

/// The measurement.
pub async fn measure() -> Result<RepliesRun> {
    let mut options = Options::end_user_messaging();
    options.parameters.push(("Replies", "on"));
    // All the alerts come from one producer within the minute.
    options.parameters.push(("ProducerRatePerMinute", "1000"));
    options.env.push(("TOCSIN_STORM_MODE", "off"));
    let p = Pipeline::start_with(options).await;
    // Each person one alert (the local roster covers +1415555….).
    let phones: Vec<String> = (0..=REPLIES).map(|i| format!("+1415555{:04}", 4000 + i)).collect();
    for (i, to) in phones.iter().enumerate() {
        let (status, body) = p.submit(&alert(&format!("bench-reply-{i}"), to)).await;
        if status != 201 {
            return Err(BenchError::Process(format!("intake answered {status}: {body}")));
        }
        key_of(&body);
    }
    Box::pin(p.run_sender()).await;
    let handler = p.replies.as_ref().ok_or_else(|| BenchError::Process("the stack takes no replies".into()))?;
    let queue = p.stack.queue("RepliesQueue").clone();
    let texts = |p: &Pipeline| {
        let eum = p.emulator.eum();
        async move { eum.sent_texts().await.map(|t| t.len()).map_err(|e| BenchError::Aws("stand-in texts", e.to_string())) }
    };
    let (mut walls, mut cpu, mut calls) = (Vec::new(), Duration::ZERO, BTreeMap::<String, f64>::new());
    let mut to_ack = Vec::new();
    let (mut writes, mut reads, mut acknowledged, mut confirmations) = (0usize, 0usize, 0usize, 0usize);
    for (i, to) in phones.iter().enumerate() {
        let held = p.inspect.held_codes(&PhoneNumber::parse(to).map_err(|e| BenchError::Process(e.to_string()))?).await;
        let held = held.map_err(|e| BenchError::Process(e.to_string()))?;
        let (code, key) = held
            .iter()
            .find_map(|h| match &h.subject {
                AckSubject::Alert(key) => Some((h.code, key.clone())),
                AckSubject::Digest(_) => None,
            })
            .ok_or_else(|| BenchError::Process(format!("{to} holds no code")))?;
        p.person_replies(to, &code.to_string()).await;
        let msgs = tocsin_tests::receive_with(&p.sqs, &queue.url, 10).await;
        if msgs.len() != 1 {
            return Err(BenchError::Process(format!("{} messages on the replies queue, not 1", msgs.len())));
        }
        let event = sqs_event(&queue.arn, &msgs);
        let texts_before = texts(&p).await?;
        p.emulator.start_recording().await?;
        // Every other reply is watched instead of measured: the acknowledgement is recorded when the
        // ledger shows it, read in a loop beside the handler (each read a few milliseconds on
        // loopback: the figure's resolution). Those reads would count as the handler's calls and
        // CPU, so the watched replies give only that figure.
        let watched = i % 2 == 1;
        let (cpu0, started) = (cpu_clock::own(), Instant::now());
        let (response, seen) = if watched {
            let watch = async {
                loop {
                    if p.record(&key).await.status.acknowledgement.is_some() {
                        return started.elapsed();
                    }
                }
            };
            let (response, seen) =
                tokio::join!(handler.handle(event), tokio::time::timeout(Duration::from_secs(30), watch));
            let seen = seen.map_err(|_| BenchError::Process(format!("{to}'s alert was not acknowledged")))?;
            (response, Some(seen))
        } else {
            (handler.handle(event).await, None)
        };
        let (wall, cpu1) = (started.elapsed(), cpu_clock::own());
        let recorded = p.emulator.stop_recording_requests().await?;
        let sent = texts(&p).await? - texts_before;
        if !response.batch_item_failures.is_empty() {
            return Err(BenchError::Process(format!("the reply failed: {:?}", response.batch_item_failures)));
        }
        for m in &msgs {
            let handle = m.receipt_handle.clone().unwrap_or_default();
            let _ = p.sqs.delete_message().queue_url(&queue.url).receipt_handle(handle).send().await;
        }
        if i == 0 {
            continue; // the warm-up: connections, the emulator's caches
        }
        if let Some(seen) = seen {
            to_ack.push(seen);
            continue;
        }
        walls.push(wall);
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            cpu += b.saturating_sub(a);
        }
        acknowledged += 1;
        confirmations += sent;
        if sent > 0 {
            *calls.entry("PinpointSMSVoiceV2.SendTextMessage".into()).or_default() += sent as f64;
        }
        for r in &recorded {
            *calls.entry(r.operation.clone()).or_default() += 1.0;
            match r.operation.as_str() {
                "DynamoDB_20120810.TransactWriteItems" => {
                    writes += r.body.get("TransactItems").and_then(serde_json::Value::as_array).map_or(1, Vec::len)
                }
                "DynamoDB_20120810.UpdateItem" | "DynamoDB_20120810.PutItem" | "DynamoDB_20120810.DeleteItem" => {
                    writes += 1
                }
                "DynamoDB_20120810.GetItem" | "DynamoDB_20120810.Query" => reads += 1,
                _ => {}
            }
        }
    }
    let n = acknowledged.max(1) as f64;
    for v in calls.values_mut() {
        *v /= n;
    }
    Ok(RepliesRun {
        replies: acknowledged,
        wall: summarise(&walls).ok_or_else(|| BenchError::Process("no reply measured".into()))?,
        to_acknowledged: summarise(&to_ack).ok_or_else(|| BenchError::Process("no reply measured".into()))?,
        to_acknowledged_p99: {
            let mut sorted = to_ack.clone();
            sorted.sort();
            sorted.get((sorted.len().saturating_sub(1) * 99).div_ceil(100)).copied().unwrap_or_default()
        },
        cpu_per_reply: cpu / acknowledged.max(1) as u32,
        calls,
        write_units: writes as f64 / n,
        read_units: reads as f64 / n,
        confirmations: confirmations as f64 / n,
    })
}
