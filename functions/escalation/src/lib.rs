//! Escalation: the scheduled sweep. Every undelivered intent past its deadline reaches on-call,
//! once; accepted intents that stay silent are flagged `delay_suspected`, then `expired_unknown`;
//! intents never enqueued are re-enqueued; lapsed sender leases become `send_unknown`.
//!
//! Reads only the sparse due-index (cost follows the due intents, not the table). Escalation is
//! lease → send → mark: overlapping runs cannot both take the lease, and a crash between send and
//! mark leaves the intent due, so the next run completes it (at least once, with the idempotency
//! key as a message attribute for consumers to de-duplicate). Work stops before the function's
//! own deadline; the rest stays due for the next run.
//!
//! The story of a run, one module a chapter: each due intent is swept ([`sweeping`]) — a digest's
//! recorded fate and an orphaned record applied first ([`digest_members`], [`orphans`]), then what
//! its state and deadline call for, escalating on-call as [`escalating`] says, or to the next
//! level of the alert's escalation chain ([`chaining`]); then the
//! [`carrier_view`]; then the unknown outcomes searched for in the delivery-status logs
//! ([`reconciling`]: only a record tied to the alert is its own) and what was found written
//! ([`settling`]). [`summary`] is what the run did.

mod carrier_view;
mod chaining;
mod digest_members;
mod escalating;
mod orphans;
mod reconciling;
mod settling;
mod summary;
mod sweeping;

use futures::StreamExt;

use chrono::{DateTime, Utc};
use tocsin::config::EscalationConfig;
use tocsin::domain::IdempotencyKey;
use tocsin::domain::intent::IntentRecord;
use tocsin::ports::carriers::{CarrierBook, CarrierHolds, CarrierTraffic, RecentSends};
use tocsin::ports::{
    ChainLedger, Clock, DeliveryLogSearch, DigestStore, DueIndex, Entropy, EscalationBacklog, EscalationQueue,
    EscalationQuota, IntentStore, MessageIndex, PortError, RecipientRegistry, SendQueue, new_id,
};

use reconciling::{longest_waiting_first, waiting_since};
pub use summary::{DegradedCarrier, RunSummary};

/// The ledger's ports the sweep uses: intents, the due-index, the message index, escalations and
/// their per-producer cap, digests and recent sends (one `DynamoLedger` in Lambda).
pub trait SweepStore:
    IntentStore + DueIndex + MessageIndex + EscalationBacklog + EscalationQuota + DigestStore + RecentSends + ChainLedger
{
}
impl<T> SweepStore for T where
    T: IntentStore
        + DueIndex
        + MessageIndex
        + EscalationBacklog
        + EscalationQuota
        + DigestStore
        + RecentSends
        + ChainLedger
{
}

/// The registry's ports the sweep uses: numbers (suppression), carriers, operator holds and the
/// carrier traffic tallies.
pub trait SweepRegistry: RecipientRegistry + CarrierBook + CarrierHolds + CarrierTraffic {}
impl<T: RecipientRegistry + CarrierBook + CarrierHolds + CarrierTraffic> SweepRegistry for T {}

/// The sweep's time and randomness (the wall clock in Lambda, simulated time in the simulation).
pub trait SweepClock: Clock + Entropy {}
impl<T: Clock + Entropy> SweepClock for T {}

#[derive(Debug, thiserror::Error)]
pub enum EscalationError {
    #[error("the sweep could not read the due intents: {0}")]
    Dependency(#[from] PortError),
}

impl From<EscalationError> for lambda_runtime::Diagnostic {
    fn from(e: EscalationError) -> Self {
        lambda_runtime::Diagnostic { error_type: "tocsin.escalation.Dependency".into(), error_message: e.to_string() }
    }
}

pub struct Escalator<S, Q, E, L, R, C> {
    pub store: S,
    pub send_queue: Q,
    pub escalations: E,
    pub logs: L,
    pub registry: R,
    pub clock: C,
    pub config: EscalationConfig,
}

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// One sweep. `stop_at` is when to stop taking new work (the function's deadline minus the
    /// configured safety margin). Every partition of the due-index is read at once, and up to
    /// `concurrency` due intents are handled at once, so one slow intent (a slow dependency, a
    /// retried write) never holds up the others; what is not started by `stop_at` stays due.
    pub async fn run(&self, stop_at: DateTime<Utc>) -> Result<RunSummary, EscalationError> {
        let started = self.clock.now();
        let run_id = new_id(&self.clock);
        let mut summary = RunSummary { run_id: run_id.clone(), complete: true, ..Default::default() };
        let mut to_reconcile: Vec<IntentRecord> = Vec::new();
        let shards = self.store.due_shards();
        // What was due when the run started, page after page: a next check this run writes is
        // the next run's, never read again here.
        let pages = shards.iter().map(|shard| self.due_records(shard.as_str(), started));
        let mut due = std::pin::pin!(futures::stream::select_all(pages.map(Box::pin)));
        let mut index_error = None;
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let concurrency = self.config.concurrency.max(1);
        loop {
            // Keep `concurrency` intents in hand while there is time and due work.
            while in_flight.len() < concurrency {
                if self.clock.now() >= stop_at {
                    break;
                }
                match due.next().await {
                    Some(Ok(key)) => {
                        summary.read += 1;
                        let run_id = run_id.as_str();
                        in_flight.push(async move {
                            let mut part = RunSummary::default();
                            let mut found = Vec::new();
                            // The index only proposes: decide on the intent as the table has it now.
                            let r = match self.store.get(&key).await {
                                Ok(Some(record)) => self.sweep_one(record, run_id, &mut part, &mut found).await,
                                Ok(None) => Ok(()),
                                Err(e) => Err(e),
                            };
                            (r, part, found)
                        });
                    }
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "a due-index partition could not be read; its intents wait for the next run");
                        index_error.get_or_insert(e);
                    }
                    None => break,
                }
            }
            let Some((result, part, found)) = in_flight.next().await else { break };
            summary.absorb(&part);
            to_reconcile.extend(found);
            if let Err(e) = result {
                summary.errors += 1;
                tracing::warn!(error = %e, "sweep of one intent failed; it stays due for the next run");
            }
        }
        if self.clock.now() >= stop_at && due.next().await.is_some() {
            summary.complete = false;
        }
        if let Some(e) = index_error {
            return Err(EscalationError::Dependency(e));
        }
        // The carrier view: after the due intents (their escalations come first), before the
        // log searches. A failure here is reported and the run goes on: the due intents matter more.
        if self.clock.now() < stop_at
            && let Err(e) = Box::pin(self.carriers(&run_id, &mut summary)).await
        {
            summary.errors += 1;
            tracing::warn!(error = %e, "the carrier view could not be computed this run");
        }
        // Log searches are rate-limited: at most a batch per run, the rest stay due. A run stops
        // searching at the first throttle, so the one that has waited longest goes first: an
        // unknown outcome is never starved by the ones ahead of it in the index, nor by chance.
        longest_waiting_first(&mut to_reconcile, waiting_since);
        summary.reconcile_deferred += to_reconcile.len().saturating_sub(self.config.reconcile_batch);
        to_reconcile.truncate(self.config.reconcile_batch);
        // Escalations first; log searches only with the time that is left.
        self.reconcile(to_reconcile, stop_at, &mut summary).await;
        let now = self.clock.now();
        summary.oldest_unacknowledged_s = match self.store.oldest_open_escalation().await {
            Ok(oldest) => Some(oldest.map_or(0, |at| u64::try_from((now - at).num_seconds()).unwrap_or(0))),
            Err(e) => {
                summary.errors += 1;
                tracing::warn!(error = %e, "the open escalations could not be read; their age is not reported this run");
                None
            }
        };
        let took_ms = self.clock.now().signed_duration_since(started).num_milliseconds().max(0);
        summary.publish(took_ms);
        tracing::info!(summary = ?summary, "sweep finished");
        Ok(summary)
    }

    /// The keys of the intents in one partition of the index that were due at `until`, page after
    /// page.
    fn due_records<'a>(
        &'a self,
        shard: &'a str,
        until: DateTime<Utc>,
    ) -> impl futures::Stream<Item = Result<IdempotencyKey, PortError>> + Send + 'a {
        futures::stream::try_unfold((Some(None), Vec::new().into_iter()), move |(mut token, mut page)| async move {
            loop {
                if let Some(record) = page.next() {
                    return Ok(Some((record, (token, page))));
                }
                let Some(after) = token.take() else { return Ok(None) };
                let (records, next) = self.store.due(shard, until, self.config.page_size, after).await?;
                page = records.into_iter();
                token = next.map(Some);
            }
        })
    }
}
