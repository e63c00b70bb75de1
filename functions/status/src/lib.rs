//! Status: learns the delivery truth from SNS SMS delivery-status logs (both the
//! `DirectPublishToPhoneNumber` and `/Failure` groups), through CloudWatch Logs subscriptions.
//!
//! Each log event becomes one observation keyed by its CloudWatch Logs event id (stored once
//! however often it is delivered). The state moves forward only; a permanent-for-recipient failure
//! suppresses the number before the function returns. A malformed log event is counted and
//! skipped; a dependency failure fails the invocation so Lambda retries it, and the retry finds
//! the already-stored observations and does not apply them twice.

use aws_lambda_events::cloudwatch_logs::LogEntry;
use futures::StreamExt;
use payload::{Payload, Piece};
use serde::Serialize;
use serde_json::Value;
use tocsin::config::StatusConfig;
use tocsin::domain::delivery::{DeliveryRecord, country_of_mcc, parse_record};
use tocsin::domain::phone::mask_phone_like;
use tocsin::domain::provider::FailureClass;
use tocsin::domain::reconcile::SKEW;
use tocsin::domain::state::ReceiptEffect;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{Clock, IntentStore, MessageIndex, OpenAttempts, OrphanRecord, PortError, RecipientRegistry};
use tocsin::services::receipts::{self, Applied, Link, LogEvent};
use tocsin::telemetry::{Metrics, Unit};

/// Log events processed at once within one invocation.
const CONCURRENCY: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("the subscription payload is not base64 + gzip + JSON as CloudWatch Logs writes it: {0}")]
    MalformedPayload(String),
    #[error("{failed} of {total} log events hit a dependency failure; the invocation will be retried: {first}")]
    Dependency { failed: usize, total: usize, first: PortError },
}

impl From<StatusError> for lambda_runtime::Diagnostic {
    fn from(e: StatusError) -> Self {
        let error_type = match e {
            StatusError::MalformedPayload(_) => "tocsin.status.MalformedPayload",
            StatusError::Dependency { .. } => "tocsin.status.Dependency",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}

pub mod payload;

/// Decodes a whole CloudWatch Logs subscription invocation
/// (`{"awslogs":{"data": base64(gzip(JSON))}}`) as the runtime hands it over. Pure: the fuzz
/// target calls it on arbitrary bytes. The handler streams instead ([`payload::decode_each`]).
pub fn decode(invocation: &[u8]) -> Result<Payload, StatusError> {
    let event: Value = serde_json::from_slice(invocation).map_err(|e| StatusError::MalformedPayload(e.to_string()))?;
    payload::decode_all(data_of(&event)?).map_err(|e| StatusError::MalformedPayload(e.to_string()))
}

fn data_of(event: &Value) -> Result<&str, StatusError> {
    event
        .pointer("/awslogs/data")
        .and_then(Value::as_str)
        .ok_or_else(|| StatusError::MalformedPayload("no `awslogs.data` string".into()))
}

/// What happened to one log event.
#[derive(Debug, Clone, PartialEq)]
pub enum EventOutcome {
    Applied(ReceiptEffect),
    Duplicate,
    Orphaned,
    Unparseable,
}

#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub control_message: bool,
    pub events: usize,
    pub delivered: usize,
    pub failed: usize,
    pub redundant: usize,
    pub conflicting: usize,
    pub late: usize,
    pub unrecognised: usize,
    pub duplicates: usize,
    pub orphaned: usize,
    pub unparseable: usize,
    pub suppressed: usize,
}

pub struct StatusHandler<S, R, C> {
    pub store: S,
    pub registry: R,
    pub clock: C,
    pub config: StatusConfig,
}

impl<S: IntentStore + MessageIndex + OpenAttempts, R: RecipientRegistry, C: Clock> StatusHandler<S, R, C> {
    pub async fn handle(&self, mut event: Value) -> Result<Summary, StatusError> {
        data_of(&event)?;
        let data = event.pointer_mut("/awslogs/data").map(Value::take).and_then(|v| match v {
            Value::String(s) => Some(s),
            _ => None,
        });
        let data = data.ok_or_else(|| StatusError::MalformedPayload("no `awslogs.data` string".into()))?;
        // Decoding is synchronous work on a stream: it runs on a blocking thread and hands the log
        // events over a bounded channel, so only a window of the batch is in memory at once. A
        // payload that breaks off (never seen from CloudWatch Logs) fails the invocation after the
        // whole records before the break were applied: they are facts, stored once, and a retry
        // finds them as duplicates.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Piece>(CONCURRENCY * 4);
        let decoder = tokio::task::spawn_blocking(move || payload::decode_each(&data, |p| tx.blocking_send(p).is_ok()));
        let header = match rx.recv().await {
            Some(Piece::Header(h)) => Some(h),
            _ => None,
        };
        let mut summary = Summary::default();
        let mut errors = Vec::new();
        if let Some(header) = &header {
            if header.is_control() {
                summary.control_message = true;
                drop(rx);
            } else {
                let group = header.log_group.as_str();
                let events = futures::stream::unfold(rx, |mut rx| async move {
                    loop {
                        if let Piece::Event(e) = rx.recv().await? {
                            return Some((e, rx));
                        }
                    }
                });
                let mut results = std::pin::pin!(events.map(|e| self.process(group, e)).buffer_unordered(CONCURRENCY));
                while let Some((r, suppressed)) = results.next().await {
                    summary.events += 1;
                    summary.suppressed += usize::from(suppressed);
                    match r {
                        Ok(EventOutcome::Applied(ReceiptEffect::Moved { to: State::Delivered, .. })) => {
                            summary.delivered += 1
                        }
                        Ok(EventOutcome::Applied(ReceiptEffect::Moved { .. })) => summary.failed += 1,
                        Ok(EventOutcome::Applied(ReceiptEffect::Redundant)) => summary.redundant += 1,
                        Ok(EventOutcome::Applied(ReceiptEffect::Conflicting)) => summary.conflicting += 1,
                        Ok(EventOutcome::Applied(ReceiptEffect::Late)) => summary.late += 1,
                        Ok(EventOutcome::Applied(ReceiptEffect::Unrecognised)) => summary.unrecognised += 1,
                        Ok(EventOutcome::Duplicate) => summary.duplicates += 1,
                        Ok(EventOutcome::Orphaned) => summary.orphaned += 1,
                        Ok(EventOutcome::Unparseable) => summary.unparseable += 1,
                        Err(e) => errors.push(e),
                    }
                }
            }
        }
        match decoder.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(StatusError::MalformedPayload(e.to_string())),
            Err(e) => return Err(StatusError::MalformedPayload(format!("the decoder stopped: {e}"))),
        }
        if summary.control_message {
            return Ok(summary);
        }
        let group = header.as_ref().map_or("", |h| h.log_group.as_str());
        let mut m = Metrics::new("status");
        for (name, v) in [
            ("delivered", summary.delivered),
            ("failed", summary.failed),
            ("conflicting", summary.conflicting),
            ("late", summary.late),
            ("unrecognised_status", summary.unrecognised),
            ("duplicate", summary.duplicates),
            ("orphaned", summary.orphaned),
            ("unparseable", summary.unparseable),
            ("suppressed", summary.suppressed),
            ("dependency_error", errors.len()),
        ] {
            if v > 0 {
                m.count(name, v as u64);
            }
        }
        m.flush();
        tracing::info!(log_group = group, summary = ?summary, "status batch processed");
        match errors.into_iter().next() {
            None => Ok(summary),
            Some(first) => Err(StatusError::Dependency {
                failed: summary.events - handled(&summary),
                total: summary.events,
                first,
            }),
        }
    }

    /// Returns the outcome and whether the recipient was suppressed.
    async fn process(&self, log_group: &str, entry: LogEntry) -> (Result<EventOutcome, PortError>, bool) {
        let record = match parse_record(&entry.message) {
            Ok(r) => r,
            Err(e) => {
                // Never log the message: it holds a phone number.
                tracing::warn!(log_event_id = %entry.id, error = %e, "unparseable delivery record skipped");
                return (Ok(EventOutcome::Unparseable), false);
            }
        };
        let found = match self.lookup_with_wait(&record.message_id).await {
            Ok(f) => f,
            Err(e) => return (Err(e), false),
        };
        let (key, recipient, link) = match found {
            Some((key, recipient)) => (key, recipient, Link::Indexed),
            None => match self.open_attempt_for(&record, &entry).await {
                Ok(Some((key, recipient))) => (key, recipient, Link::Reconciled),
                Ok(None) => {
                    let orphan = OrphanRecord {
                        log_event_id: entry.id.clone(),
                        sns_message_id: record.message_id.clone(),
                        log_group: log_group.to_owned(),
                        message: entry.message.clone(),
                        received_at: self.clock.now(),
                    };
                    tracing::info!(
                        log_event_id = %entry.id,
                        sns_message_id = %record.message_id,
                        destination = %record.destination.as_deref().map(mask_phone_like).unwrap_or_default(),
                        "delivery record matches no intent; kept as orphan"
                    );
                    return (self.store.keep_orphan(&orphan).await.map(|()| EventOutcome::Orphaned), false);
                }
                Err(e) => return (Err(e), false),
            },
        };
        let event = LogEvent { id: &entry.id, timestamp_ms: entry.timestamp };
        let now = self.clock.now();
        match receipts::apply(&self.store, &self.registry, &key, &recipient, event, &record, link, now).await {
            Ok(o) => {
                emit_delivery_metrics(&record, o.class.map(|c| (c, o.recognised)));
                let outcome = match o.applied {
                    Applied::Effect(effect) => EventOutcome::Applied(effect),
                    Applied::Duplicate => EventOutcome::Duplicate,
                };
                (Ok(outcome), o.suppressed)
            }
            Err(e) => (Err(e), false),
        }
    }

    /// A record whose message id is in no index may still be ours: the sender crashed after
    /// publishing, or its MessageId write has not landed. One open attempt (sending or
    /// send_unknown) to the record's destination, claimed inside the record's window, is it.
    async fn open_attempt_for(
        &self,
        record: &DeliveryRecord,
        entry: &LogEntry,
    ) -> Result<Option<(IdempotencyKey, PhoneNumber)>, PortError> {
        let Some(destination) = record.destination.as_deref().and_then(|d| PhoneNumber::parse(d).ok()) else {
            return Ok(None);
        };
        let Some(at) = record.timestamp.or_else(|| chrono::DateTime::from_timestamp_millis(entry.timestamp)) else {
            return Ok(None);
        };
        let margin = chrono::Duration::from_std(self.config.reconcile_margin).unwrap_or(chrono::Duration::zero());
        let skew = chrono::Duration::from_std(SKEW).unwrap_or(chrono::Duration::zero());
        // The record's own timestamp is untrusted input: never let it overflow the calendar.
        let (Some(from), Some(to)) = (at.checked_sub_signed(margin), at.checked_add_signed(skew)) else {
            return Ok(None);
        };
        let open = self.store.open_attempts_to(&destination, from, to).await?;
        match open.as_slice() {
            [one] => {
                tracing::info!(key = one.intent.key.short(), sns_message_id = %record.message_id, "orphan record matched to an open attempt");
                Ok(Some((one.intent.key.clone(), one.intent.recipient.clone())))
            }
            _ => Ok(None),
        }
    }

    /// The sender writes the message-id index right after SNS accepts; a record can (rarely)
    /// overtake that write. Look a few times within the configured wait before giving up.
    async fn lookup_with_wait(&self, message_id: &str) -> Result<Option<(IdempotencyKey, PhoneNumber)>, PortError> {
        let tries = 3u32;
        for i in 0..tries {
            if let Some(found) = self.store.lookup(message_id).await? {
                return Ok(Some(found));
            }
            if i + 1 < tries && !self.config.orphan_wait.is_zero() {
                tokio::time::sleep(self.config.orphan_wait / (tries - 1)).await;
            }
        }
        Ok(None)
    }
}

fn handled(s: &Summary) -> usize {
    s.delivered
        + s.failed
        + s.redundant
        + s.conflicting
        + s.late
        + s.unrecognised
        + s.duplicates
        + s.orphaned
        + s.unparseable
}

/// Latency and price by carrier and country, so p95/p99 per carrier can be graphed.
fn emit_delivery_metrics(r: &DeliveryRecord, class: Option<(FailureClass, bool)>) {
    let carrier = r.carrier.clone().unwrap_or_else(|| "unknown".into());
    let country = r.mcc.as_deref().map(country_of_mcc).unwrap_or("unknown").to_owned();
    let mut m = Metrics::new("status").dimension("carrier", carrier).dimension("country", country);
    if let Some(d) = r.dwell_ms {
        m.add("dwell_ms", d as f64, Unit::Milliseconds);
    }
    if let Some(d) = r.dwell_until_ack_ms {
        m.add("dwell_until_device_ack_ms", d as f64, Unit::Milliseconds);
    }
    if let Some(p) = r.price_usd {
        m.add("price_usd", p, Unit::None);
    }
    match class {
        Some((c, recognised)) => {
            m.count(
                match c {
                    FailureClass::PermanentRecipient => "failure_permanent_recipient",
                    FailureClass::PermanentMessage => "failure_permanent_message",
                    FailureClass::Transient => "failure_transient",
                    FailureClass::Unknown => "failure_unknown",
                },
                1,
            );
            if !recognised {
                m.count("unrecognised_provider_response", 1);
            }
        }
        None if r.status.receipt().is_some() => m.count("delivery_success", 1),
        None => m.count("delivery_status_unrecognised", 1),
    }
    m.flush();
}
