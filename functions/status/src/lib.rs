//! Status: learns the delivery truth from SNS SMS delivery-status logs (both the
//! `DirectPublishToPhoneNumber` and `/Failure` groups), through CloudWatch Logs subscriptions.
//!
//! Each log event becomes one observation keyed by its CloudWatch Logs event id (stored once
//! however often it is delivered). The state moves forward only; a permanent-for-recipient failure
//! suppresses the number before the function returns. A malformed log event is counted and
//! skipped; a dependency failure fails the invocation so Lambda retries it, and the retry finds
//! the already-stored observations and does not apply them twice.
//!
//! The log groups are the account's, so most records are other applications' SMS: each costs a
//! share of one batched lookup and one short-lived orphan write, and only a record too young to be
//! told apart from one of tocsin's own (ahead of the sender's MessageId write) is waited for —
//! never past the invocation's deadline ([`StatusHandler::handle`] says how).
//!
//! The story of a batch, one module a chapter: [`payload`] (decoding), then each [`chunk`] of up
//! to 100 log events looked up together, its records [`applying`] to their intents, the young
//! unmatched ones [`waiting`] for the sender's write, the rest kept as [`orphans`], every record
//! tallied for the carrier [`traffic`]; [`reporting`] is what the batch did. A number's carrier is
//! written only when it is news to what this instance already wrote ([`carriers_written`]).

mod applying;
mod carriers_written;
mod chunk;
mod orphans;
pub mod payload;
mod reporting;
mod traffic;
mod waiting;

pub use carriers_written::CarriersWritten;
pub use reporting::{EventOutcome, Summary};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_lambda_events::cloudwatch_logs::LogEntry;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use payload::{Header, Payload, Piece};
use serde_json::Value;
use tocsin::config::StatusConfig;
use tocsin::domain::State;
use tocsin::domain::carrier_traffic::CountryTallies;
use tocsin::domain::delivery::DeliveryRecord;
use tocsin::domain::state::ReceiptEffect;
use tocsin::ports::carriers::{CarrierBook, CarrierTraffic};
use tocsin::ports::{
    Clock, DigestStore, DueIndex, IntentStore, MessageIndex, PortError, RecipientRegistry, after, before,
};

/// Log events processed at once within one invocation.
pub(crate) const CONCURRENCY: usize = 16;

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

pub struct StatusHandler<S, R, C> {
    pub store: S,
    pub registry: R,
    pub clock: C,
    pub config: StatusConfig,
    /// The numbers' carriers this instance wrote (from its first invocation on).
    pub carriers_written: CarriersWritten,
}

/// Records looked up together: one BatchGetItem call (DynamoDB's limit is 100 keys).
pub const LOOKUP_CHUNK: usize = 100;

pub use tocsin::domain::delivery::ORPHAN_RETENTION;

/// No waiting for the sender's write closer than this to the invocation's deadline: the rest of
/// the batch still has to be written and answered.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// A parsed record and when it was written (its own timestamp, else the log event's).
pub(crate) struct Parsed {
    pub(crate) entry: LogEntry,
    pub(crate) record: DeliveryRecord,
    pub(crate) written_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A log event's outcome, and whether its number was suppressed.
pub(crate) type Processed = (Result<EventOutcome, PortError>, bool);

/// The ledger's ports the status function uses: intents, the message index (and orphans),
/// digests and the due-index (one `DynamoLedger` in Lambda).
pub trait StatusStore: IntentStore + MessageIndex + DigestStore + DueIndex {}
impl<T: IntentStore + MessageIndex + DigestStore + DueIndex> StatusStore for T {}

/// The registry's ports: numbers (suppression), their last-seen carrier, the carrier traffic.
pub trait StatusRegistry: RecipientRegistry + CarrierBook + CarrierTraffic {}
impl<T: RecipientRegistry + CarrierBook + CarrierTraffic> StatusRegistry for T {}

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// Handles one subscription invocation. `deadline` is when Lambda ends the invocation (its
    /// context deadline): waits for the sender's write never reach past it.
    ///
    /// What a record costs. Records are looked up 100 at a time (one BatchGetItem); a record whose
    /// message id is indexed is applied as usual. One that is not is, nearly always, another
    /// application's SMS (Cognito MFA codes, other stacks — the log groups are the account's):
    /// it is kept as an orphan at once, with no further read, **unless it is younger than
    /// `TOCSIN_ORPHAN_WAIT`** — only then can it be ours and ahead of the sender's MessageId write,
    /// which lands right after SNS answers. The young ones of a chunk wait together, at most until
    /// their own time + the wait, never past `invocation start + wait` nor `deadline −
    /// DEADLINE_MARGIN`, and are looked up again in one call. Those still unmatched are kept as
    /// orphans too: a record is applied only through the index, never matched to an alert by
    /// number and time — the phone receives other senders' SMS. If one is an alert's after all
    /// (its sender's write came later still, or never: the alert is then `send_unknown`), the
    /// sweep applies it from the orphans once the message id is indexed, or escalates the alert.
    pub async fn handle(&self, mut event: Value, deadline: DateTime<Utc>) -> Result<Summary, StatusError> {
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
        let events = futures::stream::unfold(rx, |mut rx| async move {
            loop {
                if let Piece::Event(e) = rx.recv().await? {
                    return Some((e, rx));
                }
            }
        });
        let processed = self.process(header.as_ref(), events, deadline).await;
        match decoder.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(StatusError::MalformedPayload(e.to_string())),
            Err(e) => return Err(StatusError::MalformedPayload(format!("the decoder stopped: {e}"))),
        }
        self.report(header.as_ref(), processed)
    }

    /// Handles one subscription batch already decoded: the header, then its log events as they
    /// come. What [`Self::handle`] does once the payload is unpacked.
    pub async fn handle_decoded(
        &self,
        header: Option<&Header>,
        events: impl Stream<Item = LogEntry>,
        deadline: DateTime<Utc>,
    ) -> Result<Summary, StatusError> {
        let processed = self.process(header, events, deadline).await;
        self.report(header, processed)
    }

    /// Applies, waits for or keeps every log event of a batch.
    async fn process(
        &self,
        header: Option<&Header>,
        events: impl Stream<Item = LogEntry>,
        deadline: DateTime<Utc>,
    ) -> (Summary, Vec<PortError>) {
        let started = self.clock.now();
        let mut summary = Summary::default();
        let mut errors = Vec::new();
        let Some(header) = header else { return (summary, errors) };
        if header.is_control() {
            summary.control_message = true;
            return (summary, errors);
        }
        // Waiting for the sender's write ends here for every record of the invocation: each was
        // written before the invocation started.
        let wait_horizon = after(started, self.config.orphan_wait).min(before(deadline, DEADLINE_MARGIN).max(started));
        let group = header.log_group.as_str();
        let spend_exhausted = AtomicUsize::new(0);
        let chunks = events.chunks(LOOKUP_CHUNK).map(|c| self.process_chunk(group, c, wait_horizon, &spend_exhausted));
        let mut results = std::pin::pin!(chunks.buffer_unordered(2));
        let mut traffic = CountryTallies::new();
        while let Some((chunk, tallies)) = results.next().await {
            traffic::add_all(&mut traffic, tallies);
            for (r, suppressed) in chunk {
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
                    Ok(EventOutcome::Progress) => summary.progress += 1,
                    Ok(EventOutcome::OtherStack) => summary.other_stack += 1,
                    Ok(EventOutcome::NoSuchIntent) => summary.no_such_intent += 1,
                    Ok(EventOutcome::Confirmation) => summary.confirmations += 1,
                    Ok(EventOutcome::Duplicate) => summary.duplicates += 1,
                    Ok(EventOutcome::Orphaned) => summary.orphaned += 1,
                    Ok(EventOutcome::Unparseable) => summary.unparseable += 1,
                    Err(e) => errors.push(e),
                }
            }
        }
        summary.spend_exhausted = spend_exhausted.load(Ordering::Relaxed);
        // The batch's traffic is tallied once it has all succeeded: a failed try is tried again
        // whole (Lambda's retries), and counting each try would multiply a batch's records by its
        // tries — an outage's worth of tries taught the baseline a rate ten times the carrier's,
        // and the carrier then looked silent (simulation seed 151048).
        if errors.is_empty() {
            self.add_traffic(&traffic).await;
        }
        (summary, errors)
    }
}
