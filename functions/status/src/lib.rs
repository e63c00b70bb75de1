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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_lambda_events::cloudwatch_logs::LogEntry;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use payload::{Header, Payload, Piece};
use serde::Serialize;
use serde_json::Value;
use tocsin::config::StatusConfig;
use tocsin::domain::carrier::CarrierSeen;
use tocsin::domain::carrier_traffic::{self, CountryTallies, TrafficPolicy};
use tocsin::domain::delivery::{DeliveryRecord, country_of_mcc, parse_record};
use tocsin::domain::phone::mask_phone_like;
use tocsin::domain::provider::{FailureClass, classify};
use tocsin::domain::reconcile::Window;
use tocsin::domain::state::ReceiptEffect;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::carriers::{CarrierBook, CarrierTraffic};
use tocsin::ports::{
    Clock, DigestStore, DueIndex, IndexEntries, IndexEntry, IntentStore, LoggedRecord, MessageIndex, OpenAttempts,
    OrphanRecord, PortError, RecipientRegistry, UnsettledAttempts, after, before,
};
use tocsin::services::receipts::{self, Applied, Link, LogEvent};
use tocsin::telemetry::{Metrics, Unit};

/// Log events processed at once within one invocation.
const CONCURRENCY: usize = 16;

/// How long a digest's fan-out has before the sweep checks the members it did not reach: long
/// enough that the sweep does not race a fan-out in progress, short next to any deadline.
const FANOUT_GRACE: chrono::Duration = chrono::Duration::minutes(2);

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
    /// Records in the batch, tocsin's or other applications', saying the account's SMS spend limit
    /// is used up ([`FailureClass::AccountLimit`]): no SMS leaves the account until it is raised.
    pub spend_exhausted: usize,
}

pub struct StatusHandler<S, R, C> {
    pub store: S,
    pub registry: R,
    pub clock: C,
    pub config: StatusConfig,
}

/// Records looked up together: one BatchGetItem call (DynamoDB's limit is 100 keys).
pub const LOOKUP_CHUNK: usize = 100;

pub use tocsin::domain::delivery::ORPHAN_RETENTION;

/// Open-index queries one invocation may spend on records that matched no index entry even after
/// the wait. Each is one Query; this caps what a burst of other applications' SMS can cost.
pub const OPEN_MATCH_BUDGET: usize = 16;

/// No waiting for the sender's write closer than this to the invocation's deadline: the rest of
/// the batch still has to be written and answered.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// A parsed record and when it was written (its own timestamp, else the log event's).
struct Parsed {
    entry: LogEntry,
    record: DeliveryRecord,
    written_at: Option<chrono::DateTime<chrono::Utc>>,
}

type Processed = (Result<EventOutcome, PortError>, bool);

impl<
    S: IntentStore + MessageIndex + OpenAttempts + DigestStore + DueIndex + UnsettledAttempts,
    R: RecipientRegistry + CarrierBook + CarrierTraffic,
    C: Clock,
> StatusHandler<S, R, C>
{
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
    /// DEADLINE_MARGIN`, and are looked up again in one call. Those still unmatched are matched
    /// against open attempts to their number (the open-index: a sender that crashed right after
    /// publishing), at most [`OPEN_MATCH_BUDGET`] queries per invocation. An older unmatched record
    /// never pays that query: if it is ours, its intent is `sending`/`send_unknown` and the
    /// sweep's reconciliation finds it in the log groups by number and time window.
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
        let budget = AtomicUsize::new(OPEN_MATCH_BUDGET);
        let group = header.log_group.as_str();
        let spend_exhausted = AtomicUsize::new(0);
        let chunks =
            events.chunks(LOOKUP_CHUNK).map(|c| self.process_chunk(group, c, wait_horizon, &budget, &spend_exhausted));
        let mut results = std::pin::pin!(chunks.buffer_unordered(2));
        while let Some(chunk) = results.next().await {
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
                    Ok(EventOutcome::Duplicate) => summary.duplicates += 1,
                    Ok(EventOutcome::Orphaned) => summary.orphaned += 1,
                    Ok(EventOutcome::Unparseable) => summary.unparseable += 1,
                    Err(e) => errors.push(e),
                }
            }
        }
        summary.spend_exhausted = spend_exhausted.load(Ordering::Relaxed);
        (summary, errors)
    }

    /// The batch's metrics and log line, and its result: an error when a dependency failed (the
    /// whole batch is then retried; what was stored is found again as duplicates).
    fn report(
        &self,
        header: Option<&Header>,
        (summary, errors): (Summary, Vec<PortError>),
    ) -> Result<Summary, StatusError> {
        if summary.control_message {
            return Ok(summary);
        }
        let group = header.map_or("", |h| h.log_group.as_str());
        let mut m = Metrics::new("status");
        for (name, v) in [
            ("delivered", summary.delivered),
            ("failed", summary.failed),
            ("conflicting", summary.conflicting),
            ("late", summary.late),
            ("unrecognised_status", summary.unrecognised),
            ("duplicate", summary.duplicates),
            ("orphaned", summary.orphaned),
            // The same records under the name that says what they almost always are: other
            // applications' SMS in the account's delivery-status log groups.
            ("foreign_records", summary.orphaned),
            ("unparseable", summary.unparseable),
            ("suppressed", summary.suppressed),
            ("spend_exhausted", summary.spend_exhausted),
            ("dependency_error", errors.len()),
        ] {
            if v > 0 {
                m.count(name, v as u64);
            }
        }
        m.flush();
        if summary.spend_exhausted > 0 {
            tracing::error!(
                records = summary.spend_exhausted,
                "the account's SMS spend limit is reached: SNS is sending no SMS (tocsin's or anyone's) until it is raised"
            );
        }
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

    /// One chunk of log events: parsed, looked up in one call, then applied, waited for, or kept.
    async fn process_chunk(
        &self,
        log_group: &str,
        entries: Vec<LogEntry>,
        wait_horizon: DateTime<Utc>,
        budget: &AtomicUsize,
        spend_exhausted: &AtomicUsize,
    ) -> Vec<Processed> {
        let mut out: Vec<Processed> = Vec::with_capacity(entries.len());
        let mut parsed = Vec::with_capacity(entries.len());
        for entry in entries {
            match parse_record(&entry.message) {
                Ok(record) => {
                    let written_at =
                        record.timestamp.or_else(|| chrono::DateTime::from_timestamp_millis(entry.timestamp));
                    parsed.push(Parsed { entry, record, written_at })
                }
                Err(e) => {
                    // Never log the message: it holds a phone number.
                    tracing::warn!(log_event_id = %entry.id, error = %e, "unparseable delivery record skipped");
                    out.push((Ok(EventOutcome::Unparseable), false));
                }
            }
        }
        if parsed.is_empty() {
            return out;
        }
        // Any application's record counts: the limit is the account's, so a foreign SMS refused
        // for it means tocsin's are refused too.
        let refused_for_spend = parsed.iter().filter(|p| says_spend_exhausted(&p.record)).count();
        spend_exhausted.fetch_add(refused_for_spend, Ordering::Relaxed);
        // Every record's carrier, minute, outcome and dwell — tocsin's and other applications' —
        // for the carrier view's traffic signal; written alongside the receipts, best effort.
        let traffic = self.traffic_tallies(&parsed);
        let ids: Vec<String> = parsed.iter().map(|p| p.record.message_id.clone()).collect();
        let index = match self.store.lookup_many(&ids).await {
            Ok(index) => index,
            Err(e) => {
                out.extend(parsed.iter().map(|_| (Err(copy_error(&e)), false)));
                return out;
            }
        };
        let now = self.clock.now();
        let wait = chrono::Duration::from_std(self.config.orphan_wait).unwrap_or(chrono::Duration::zero());
        let (mut indexed, mut young, mut old) = (Vec::new(), Vec::new(), Vec::new());
        for p in parsed {
            // `get`, not `remove`: one batch can carry the same message id twice (a redelivery).
            match entry_of(&index, &p.record.message_id) {
                Some(entry) => indexed.push((p, entry)),
                // Younger than the wait (or stamped in the future): it may be ahead of the sender.
                None if p.written_at.is_none_or(|at| now.signed_duration_since(at) < wait) => young.push(p),
                None => old.push(p),
            }
        }
        let old: Vec<&Parsed> = old.iter().collect();
        let (applied, waited, orphaned, ()) = futures::join!(
            futures::stream::iter(indexed)
                .map(|(p, entry)| async move {
                    match entry {
                        Ok(entry) => self.apply_indexed(&p, entry).await,
                        Err(e) => (Err(e), false),
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect::<Vec<_>>(),
            self.settle_young(log_group, young, wait_horizon, budget),
            self.orphans(log_group, &old),
            self.add_traffic(&traffic),
        );
        out.extend(applied);
        out.extend(waited);
        out.extend(orphaned);
        out
    }

    /// The chunk's records tallied by minute, carrier and country: counts and dwell times only,
    /// never a number or a text ([`carrier_traffic::tally`]).
    fn traffic_tallies(&self, parsed: &[Parsed]) -> CountryTallies {
        let policy = TrafficPolicy::new(self.config.delay_suspected_after);
        carrier_traffic::tally(parsed.iter().map(|p| (&p.record, p.written_at)), self.clock.now(), &policy)
    }

    /// Adds the chunk's tallies to the carrier view's traffic. Best effort: a failed write is
    /// logged and counted (`traffic_tally_failed`) and never fails the batch nor holds up a
    /// delivery record — the traffic signal is a statistic, the receipts are facts. (A batch
    /// Lambda retries for another reason counts its records again: the detector judges ratios
    /// against the other carriers, which the retry inflates alike.)
    async fn add_traffic(&self, tallies: &CountryTallies) {
        if tallies.is_empty() {
            return;
        }
        if let Err(e) = self.registry.add_tallies(tallies).await {
            tracing::warn!(error = %e, tallies = tallies.len(), "carrier traffic not tallied for this chunk");
            let mut m = Metrics::new("status");
            m.count("traffic_tally_failed", tallies.len() as u64);
            m.flush();
        }
    }

    /// Young unmatched records: one wait for the chunk (bounded as [`Self::handle`] says), one
    /// lookup again, then the open-index within the invocation's budget, else an orphan.
    async fn settle_young(
        &self,
        log_group: &str,
        young: Vec<Parsed>,
        wait_horizon: DateTime<Utc>,
        budget: &AtomicUsize,
    ) -> Vec<Processed> {
        if young.is_empty() {
            return Vec::new();
        }
        let until = young
            .iter()
            .filter_map(|p| p.written_at)
            .map(|at| after(at, self.config.orphan_wait))
            .max()
            .map_or(wait_horizon, |t| t.min(wait_horizon));
        self.clock.sleep_until(until).await;
        let ids: Vec<String> = young.iter().map(|p| p.record.message_id.clone()).collect();
        let index = match self.store.lookup_many(&ids).await {
            Ok(index) => index,
            Err(e) => return young.iter().map(|_| (Err(copy_error(&e)), false)).collect(),
        };
        // `None`: matched nothing, to be kept as an orphan with the others.
        let settled: Vec<(&Parsed, Option<Processed>)> = futures::stream::iter(&young)
            .map(|p| {
                let entry = entry_of(&index, &p.record.message_id);
                async move {
                    match entry {
                        Some(Ok(entry)) => return (p, Some(self.apply_indexed(p, entry).await)),
                        Some(Err(e)) => return (p, Some((Err(e), false))),
                        None => {}
                    }
                    if budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok() {
                        match self.open_attempt_for(p).await {
                            Ok(Some((key, recipient))) => {
                                return (p, Some(self.apply(p, key, recipient, Link::Reconciled).await));
                            }
                            Ok(None) => {}
                            Err(e) => return (p, Some((Err(e), false))),
                        }
                    }
                    (p, None)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let unmatched: Vec<&Parsed> = settled.iter().filter(|(_, r)| r.is_none()).map(|(p, _)| *p).collect();
        let mut out = self.orphans(log_group, &unmatched).await;
        out.extend(settled.into_iter().filter_map(|(_, r)| r));
        out
    }

    /// Applies a record found in the message index: to its intent, or, for a storm-mode digest, to
    /// every member (each member's write is conditioned and idempotent on the log event id, as for
    /// a single intent, so a redelivery after a crash half way finishes the rest). The record's
    /// outcome is the first member's; any member's failure fails the record (retried whole).
    async fn apply_indexed(&self, p: &Parsed, entry: IndexEntry) -> Processed {
        let Some((digest_id, members)) = &entry.digest else {
            return self.apply(p, entry.key, entry.recipient, Link::Indexed).await;
        };
        // The digest's fate first, once, on the digest itself: a member this invocation does not
        // reach (it ends half way, and Lambda gives up on the batch) still learns it from the
        // sweep — at once, because every member still waiting is brought forward in the sweep's
        // index before the fate is recorded (otherwise its next check may be days away).
        if p.record.status.receipt().is_some() {
            let by = self.clock.now() + FANOUT_GRACE;
            let brought = futures::stream::iter(members.iter())
                .map(|key| self.store.bring_check_forward(key, by, &State::AWAITING_RECEIPT))
                .buffered(CONCURRENCY)
                .collect::<Vec<_>>()
                .await;
            if let Some(Err(e)) = brought.into_iter().find(Result::is_err) {
                return (Err(e), false);
            }
            let outcome = LoggedRecord {
                log_event_id: p.entry.id.clone(),
                timestamp_ms: p.entry.timestamp,
                message: p.entry.message.clone(),
            };
            if let Err(e) = self.store.record_digest_outcome(digest_id, &outcome).await {
                return (Err(e), false);
            }
        }
        let results = futures::stream::iter(members.iter().cloned())
            .map(|key| self.apply(p, key, entry.recipient.clone(), Link::Indexed))
            .buffered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let suppressed = results.iter().any(|(_, s)| *s);
        let mut first = None;
        for (result, _) in results {
            match result {
                Err(e) => return (Err(e), suppressed),
                Ok(outcome) => {
                    first.get_or_insert(outcome);
                }
            }
        }
        (
            first.ok_or_else(|| PortError::Corrupt { what: "digest index entry".into(), message: "no members".into() }),
            suppressed,
        )
    }

    /// Applies a record to the intent it belongs to; returns the outcome and whether the
    /// recipient was suppressed.
    async fn apply(&self, p: &Parsed, key: IdempotencyKey, recipient: PhoneNumber, link: Link) -> Processed {
        let event = LogEvent { id: &p.entry.id, timestamp_ms: p.entry.timestamp };
        let now = self.clock.now();
        match receipts::apply(&self.store, &self.registry, &key, &recipient, event, &p.record, link, now).await {
            Ok(o) => {
                // The number's carrier, for the carrier view of its next SMS (kept on a retry too:
                // the write is idempotent and an older record never overwrites a newer one).
                if let Some(seen) = CarrierSeen::from_record(&p.record, p.written_at.unwrap_or(now))
                    && let Err(e) = self.registry.record_carrier(&recipient, &seen).await
                {
                    return (Err(e), o.suppressed);
                }
                emit_delivery_metrics(&p.record, o.class.map(|c| (c, o.recognised)));
                if matches!(o.applied, Applied::Effect(ReceiptEffect::Moved { to: State::Delivered, .. })) {
                    self.count_canary(&recipient);
                }
                let outcome = match o.applied {
                    Applied::Effect(effect) => EventOutcome::Applied(effect),
                    Applied::Duplicate => EventOutcome::Duplicate,
                };
                (Ok(outcome), o.suppressed)
            }
            Err(e) => (Err(e), false),
        }
    }

    /// A delivery to the canary's number (`TOCSIN_CANARY_NUMBER`): the whole loop worked, from the
    /// schedule through intake, the sender, SNS, the delivery-status logs and their subscription to
    /// here. The canary-not-delivered alarm pages when a window passes without one.
    fn count_canary(&self, recipient: &PhoneNumber) {
        if self.config.canary_number.as_ref() == Some(recipient) {
            let mut m = Metrics::new("status");
            m.count("canary_delivered", 1);
            m.flush();
            tracing::info!(recipient = %recipient, "canary delivered");
        }
    }

    /// Keeps a record that matched no intent, for [`ORPHAN_RETENTION`].
    /// Keeps records that matched no intent, for [`ORPHAN_RETENTION`], in as few writes as the
    /// store allows (25 per call on DynamoDB): nearly all are other applications' SMS.
    async fn orphans(&self, log_group: &str, records: &[&Parsed]) -> Vec<Processed> {
        if records.is_empty() {
            return Vec::new();
        }
        let now = self.clock.now();
        let batch: Vec<OrphanRecord> = records
            .iter()
            .map(|p| {
                // Debug, not info: most of these are other applications' SMS, by the thousand; the
                // batch line and the `foreign_records` metric count them.
                tracing::debug!(
                    log_event_id = %p.entry.id,
                    sns_message_id = %p.record.message_id,
                    destination = %p.record.destination.as_deref().map(mask_phone_like).unwrap_or_default(),
                    "delivery record matches no intent; kept as orphan"
                );
                OrphanRecord {
                    log_event_id: p.entry.id.clone(),
                    sns_message_id: p.record.message_id.clone(),
                    log_group: log_group.to_owned(),
                    message: p.entry.message.clone(),
                    received_at: now,
                    expires_at: now + ORPHAN_RETENTION,
                }
            })
            .collect();
        match self.store.keep_orphans(&batch).await {
            Ok(()) => records.iter().map(|_| (Ok(EventOutcome::Orphaned), false)).collect(),
            Err(e) => records.iter().map(|_| (Err(copy_error(&e)), false)).collect(),
        }
    }

    /// A record whose message id is in no index may still be ours: the sender crashed after
    /// publishing, or its MessageId write has not landed. One open attempt (sending or
    /// send_unknown) to the record's destination, claimed inside the record's window, is it.
    async fn open_attempt_for(&self, p: &Parsed) -> Result<Option<(IdempotencyKey, PhoneNumber)>, PortError> {
        let record = &p.record;
        let Some(destination) = record.destination.as_deref().and_then(|d| PhoneNumber::parse(d).ok()) else {
            return Ok(None);
        };
        let Some(at) = p.written_at else {
            return Ok(None);
        };
        // The record's own timestamp is untrusted input: never let it overflow the calendar.
        let Some(claims) = Window::claims_that_could_send(at, self.config.reconcile_margin) else {
            return Ok(None);
        };
        let open = self.store.open_attempts_to(&destination, claims.from, claims.to).await?;
        match open.as_slice() {
            // An operator's attempt in the window (a resend past its deadline, which the
            // pending-index no longer shows) could own the record as well: not this function's to
            // decide; the sweep's reconciliation leaves it to a human.
            [one]
                if self
                    .store
                    .unsettled_to(&destination, claims.from, claims.to)
                    .await?
                    .iter()
                    .any(|(key, _)| key != &one.intent.key) =>
            {
                Ok(None)
            }
            [one] => {
                tracing::info!(key = one.intent.key.short(), sns_message_id = %record.message_id, "orphan record matched to an open attempt");
                Ok(Some((one.intent.key.clone(), one.intent.recipient.clone())))
            }
            _ => Ok(None),
        }
    }
}

fn entry_of(index: &IndexEntries, message_id: &str) -> Option<Result<IndexEntry, PortError>> {
    index.get(message_id).map(|e| match e {
        Ok(found) => Ok(found.clone()),
        Err(err) => Err(copy_error(err)),
    })
}

/// The same failure, for every record of a chunk whose shared lookup failed.
fn copy_error(e: &PortError) -> PortError {
    match e {
        PortError::Unavailable { operation, message } => PortError::Unavailable { operation, message: message.clone() },
        PortError::Corrupt { what, message } => PortError::Corrupt { what: what.clone(), message: message.clone() },
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

/// A failure record whose provider response says the account's SMS spend limit is used up.
fn says_spend_exhausted(r: &DeliveryRecord) -> bool {
    r.status.receipt() == Some(tocsin::domain::state::Receipt::Failed)
        && classify(r.provider_response.as_deref()).class == FailureClass::AccountLimit
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
                    FailureClass::AccountLimit => "failure_account_limit",
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
