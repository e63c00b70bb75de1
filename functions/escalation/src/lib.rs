//! Escalation: the scheduled sweep. Every undelivered intent past its deadline reaches on-call,
//! once; accepted intents that stay silent are flagged `delay_suspected`, then `expired_unknown`;
//! intents never enqueued are re-enqueued; lapsed sender leases become `send_unknown`.
//!
//! Reads only the sparse due-index (cost follows the due intents, not the table). Escalation is
//! lease → send → mark: overlapping runs cannot both take the lease, and a crash between send and
//! mark leaves the intent due, so the next run completes it (at least once, with the idempotency
//! key as a message attribute for consumers to de-duplicate). Work stops before the function's
//! own deadline; the rest stays due for the next run.

use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::config::EscalationConfig;
use tocsin::domain::carrier::{self, CarrierPolicy, SentSms};
use tocsin::domain::carrier_traffic::{self, TrafficPolicy, TrafficVerdict};
use tocsin::domain::intent::{Escalation, IntentRecord};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::reconcile::{ReconcileState, Rivals, Verdict, Window, judge, next_attempt};
use tocsin::domain::storm::Lane;
use tocsin::domain::sweep::{Action, decide, next_check};
use tocsin::domain::{IdempotencyKey, State};
use tocsin::ports::carriers::{BaselineSaved, CarrierBook, CarrierHolds, CarrierTraffic, RecentSends};
use tocsin::ports::{
    Clock, Commit, DeliveryLogSearch, DigestStore, DueIndex, Entropy, EscalationBacklog, EscalationMessage,
    EscalationQueue, IntentStore, LoggedRecord, MessageIndex, NextCheck, OpenAttempts, PortError, RecipientRegistry,
    SearchError, SendQueue, StatusPatch, Transition, TransitionOutcome, UnsettledAttempts, after, new_id, time_left,
    within,
};
use tocsin::services::receipts::{self, Link, LogEvent};
use tocsin::telemetry::{Metrics, Unit};

/// The longest one log search may take; a slow search never holds up the next run's escalations.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Records read per search at most (two log groups, a narrow window, one number).
const SEARCH_MAX_RECORDS: usize = 200;
/// The most SMS of the last hours the carrier view reads per run (newest first): at SNS's
/// default 20 SMS a second that is the last few minutes, at an alerting stack's volume the
/// whole lookback.
const RECENT_SENDS_MAX: usize = 20_000;
/// The earliest next check the sweep writes, from now: the schedule's own period.
const NEXT_CHECK_FLOOR_SECS: i64 = 60;

/// How an escalation attempt ended.
enum Escalated {
    /// Sent to on-call: the intent as the lease found it, and the fact recorded.
    Now(Box<IntentRecord>, Escalation),
    /// The intent, read at lease time, needs no escalation (it changed since the index was read).
    NotNeeded(Box<IntentRecord>),
    /// Another run holds the lease, or the intent is delivered or escalated already.
    NotLeased,
}

#[derive(Debug, thiserror::Error)]
pub enum EscalationError {
    #[error("the sweep could not read the due intents: {0}")]
    Dependency(#[from] PortError),
}

impl RunSummary {
    /// Adds the counts of one intent's sweep.
    fn absorb(&mut self, o: &RunSummary) {
        self.escalated += o.escalated;
        self.escalation_lease_held_elsewhere += o.escalation_lease_held_elsewhere;
        self.escalation_not_needed += o.escalation_not_needed;
        self.delay_suspected += o.delay_suspected;
        self.expired_unknown += o.expired_unknown;
        self.lease_expired_unknown += o.lease_expired_unknown;
        self.re_enqueued += o.re_enqueued;
        self.reconciled += o.reconciled;
        self.ambiguous += o.ambiguous;
        self.still_unknown += o.still_unknown;
        self.reconcile_deferred += o.reconcile_deferred;
        self.escalated_early += o.escalated_early;
        self.errors += o.errors;
    }
}

impl From<EscalationError> for lambda_runtime::Diagnostic {
    fn from(e: EscalationError) -> Self {
        lambda_runtime::Diagnostic { error_type: "tocsin.escalation.Dependency".into(), error_message: e.to_string() }
    }
}

#[derive(Debug, Default, Serialize, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub run_id: String,
    pub read: usize,
    pub escalated: usize,
    pub escalation_lease_held_elsewhere: usize,
    /// Due in the (lagging) index, but not escalatable when the lease read the intent.
    pub escalation_not_needed: usize,
    pub delay_suspected: usize,
    pub expired_unknown: usize,
    pub lease_expired_unknown: usize,
    pub re_enqueued: usize,
    /// Unknown outcomes settled from the delivery-status logs.
    pub reconciled: usize,
    /// Several candidate messages: left to a human.
    pub ambiguous: usize,
    /// Searched, nothing yet: searched again later.
    pub still_unknown: usize,
    /// One message found, but another alert to the number with an open outcome may own it:
    /// searched again later.
    pub contested: usize,
    /// Searches not made because FilterLogEvents was throttled or out of time (next run).
    pub reconcile_deferred: usize,
    pub errors: usize,
    /// Escalated before their deadline because their carrier is degraded or held (counted in
    /// `escalated` too).
    pub escalated_early: usize,
    /// Carriers degraded at this run ([`tocsin::domain::carrier`]).
    pub carriers_degraded: usize,
    /// Seconds the oldest unacknowledged escalation has waited (0: none), after this run's
    /// escalations; `None` when the list could not be read. Emitted every run as
    /// `oldest_unacknowledged_escalation_s`, the metric of the escalation-unacknowledged alarm:
    /// read from the ledger, so looking at the queue never hides an escalation from it, and an
    /// idle queue's paused SQS metrics do not matter.
    pub oldest_unacknowledged_s: Option<u64>,
    /// False when the run stopped at its time budget with due intents left for the next run.
    pub complete: bool,
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

impl<S, Q, E, L, R, C> Escalator<S, Q, E, L, R, C>
where
    S: IntentStore
        + DueIndex
        + MessageIndex
        + EscalationBacklog
        + DigestStore
        + RecentSends
        + OpenAttempts
        + UnsettledAttempts,
    Q: SendQueue,
    E: EscalationQueue,
    L: DeliveryLogSearch,
    R: RecipientRegistry + CarrierBook + CarrierHolds + CarrierTraffic,
    C: Clock + Entropy,
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
        let pages = shards.iter().map(|shard| self.due_records(shard.as_str()));
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
        // searching at the first throttle, so the order is drawn afresh each run: an unknown
        // outcome the due-index always lists last is never starved by the ones ahead of it.
        shuffle(&mut to_reconcile, &self.clock);
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
        let mut m = Metrics::new("escalation");
        if let Some(age) = summary.oldest_unacknowledged_s {
            m.add("oldest_unacknowledged_escalation_s", age as f64, Unit::Seconds);
        }
        m.count("reconciled", summary.reconciled as u64);
        m.count("reconcile_ambiguous", summary.ambiguous as u64);
        m.count("still_unknown", summary.still_unknown as u64);
        m.count("reconcile_contested", summary.contested as u64);
        m.count("reconcile_deferred", summary.reconcile_deferred as u64);
        m.count("escalated", summary.escalated as u64);
        m.count("escalated_early", summary.escalated_early as u64);
        m.count("delay_suspected", summary.delay_suspected as u64);
        m.count("expired_unknown", summary.expired_unknown as u64);
        m.count("lease_expired_unknown", summary.lease_expired_unknown as u64);
        m.count("re_enqueued", summary.re_enqueued as u64);
        m.count("due_read", summary.read as u64);
        m.count("sweep_errors", summary.errors as u64);
        m.count("incomplete_run", u64::from(!summary.complete));
        let took = self.clock.now().signed_duration_since(started).num_milliseconds().max(0);
        m.add("run_duration_ms", took as f64, Unit::Milliseconds);
        m.flush();
        tracing::info!(summary = ?summary, "sweep finished");
        Ok(summary)
    }

    /// The due intents' keys in one partition of the index, page after page.
    fn due_records<'a>(
        &'a self,
        shard: &'a str,
    ) -> impl futures::Stream<Item = Result<IdempotencyKey, PortError>> + Send + 'a {
        futures::stream::try_unfold((Some(None), Vec::new().into_iter()), move |(mut token, mut page)| async move {
            loop {
                if let Some(record) = page.next() {
                    return Ok(Some((record, (token, page))));
                }
                let Some(after) = token.take() else { return Ok(None) };
                let (records, next) = self.store.due(shard, self.clock.now(), self.config.page_size, after).await?;
                page = records.into_iter();
                token = next.map(Some);
            }
        })
    }

    /// The carrier view: tocsin's SMS of the last hours sliced by their number's last-seen
    /// carrier, each carrier's health published as metrics (dimension `carrier`), and the alerts
    /// caught in a degraded or operator-held carrier escalated before their deadline — once (the
    /// escalation lease and mark), and never for one slow message alone (a carrier is degraded
    /// only with several delayed SMS, [`CarrierPolicy`]).
    async fn carriers(&self, run_id: &str, summary: &mut RunSummary) -> Result<(), PortError> {
        let now = self.clock.now();
        let policy = CarrierPolicy::new(self.config.sweep.delay_suspected_after);
        let sent = self.store.accepted_since(tocsin::ports::before(now, policy.lookback), RECENT_SENDS_MAX).await?;
        let recipients: Vec<_> = sent.iter().map(|s| s.recipient.clone()).collect();
        let carriers = self.registry.carriers_of(&recipients).await?;
        let carrier_of = |s: &SentSms| {
            carriers.get(s.recipient.expose()).map_or_else(|| carrier::UNKNOWN.to_owned(), |c| c.carrier.clone())
        };
        let mut health = carrier::assess(sent.iter().map(|s| (s, carrier_of(s))), now, &policy);
        // Every application's delivery records: a failure here leaves the in-flight view standing.
        match self.traffic(now).await {
            Ok(verdicts) => carrier_traffic::merge(&mut health, &verdicts),
            Err(e) => {
                summary.errors += 1;
                tracing::warn!(error = %e, "the carrier traffic could not be judged this run; in-flight view only");
            }
        }
        let holds = self.registry.active_holds(now).await?;
        let classification = carrier::classify(&health);
        for h in health.values() {
            let mut m = Metrics::new("escalation").dimension("carrier", h.carrier.clone());
            m.count("carrier_in_flight", h.in_flight as u64);
            m.count("carrier_judged", h.judged as u64);
            m.add("carrier_delayed_share", (h.delayed_share() * 100.0).round(), Unit::None);
            m.count("carrier_delay_suspected", h.newly_delayed as u64);
            m.add("carrier_p95_delay_s", h.p95_delay_s as f64, Unit::Seconds);
            // Either signal: the carrier-delayed alarm (MAX(carrier_degraded) GROUP BY carrier)
            // fires on tocsin's in-flight SMS or on every application's records alike.
            m.count("carrier_degraded", u64::from(h.degraded));
            if h.traffic_judged || h.traffic_degraded {
                m.count("carrier_traffic_observed", h.traffic_observed);
                m.add("carrier_traffic_expected", h.traffic_expected, Unit::Count);
                m.count("carrier_traffic_degraded", u64::from(h.traffic_degraded));
            }
            m.flush();
            if h.degraded {
                summary.carriers_degraded += 1;
                tracing::warn!(carrier = %h.carrier, classification = ?classification, "{}", h.summary(&policy));
            }
        }
        let mut m = Metrics::new("escalation");
        m.count("carriers_degraded", summary.carriers_degraded as u64);
        m.count("carriers_all_slow", u64::from(classification == carrier::Classification::AllCarriersSlow));
        m.flush();
        for sms in sent.iter().filter(|s| s.in_flight() && !s.escalated) {
            let name = carrier_of(sms);
            let hold = holds.iter().find(|h| h.carrier == name);
            let h = health.get(&name);
            if hold.is_none() && !h.is_some_and(|h| h.degraded) {
                continue;
            }
            let Some(record) = self.store.get(&sms.key).await? else { continue };
            let Some(reason) =
                carrier::early_escalation(sms, record.intent.deadline, h, hold, self.clock.now(), &policy)
            else {
                continue;
            };
            if let Escalated::Now(..) = self.escalate(&record, run_id, self.clock.now(), Some(reason)).await? {
                summary.escalated += 1;
                summary.escalated_early += 1;
            }
        }
        Ok(())
    }

    /// The traffic signal: every application's delivery records of the last closed minutes
    /// (tallied by the status function), judged against the rolling per-carrier baseline, which
    /// is then folded forward — each minute once, whichever of two overlapping runs saves first
    /// (the save is conditional on the minute the baseline was read at), and without the minutes
    /// of a carrier judged degraded.
    async fn traffic(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, TrafficVerdict>, PortError> {
        let policy = TrafficPolicy::new(self.config.sweep.delay_suspected_after);
        let baseline = self.registry.baseline().await?;
        let (from, to) = policy.minutes_to_read(now, baseline.through);
        // Judged per carrier, its countries summed (the view lists them).
        let tallies = carrier_traffic::per_carrier(&self.registry.tallies(from, to).await?);
        let (verdicts, since) = carrier_traffic::judge(&baseline, &tallies, now, &policy);
        let through = policy.fold_through(now);
        let mut next =
            carrier_traffic::fold(&baseline, &tallies, through, &carrier_traffic::degraded(&verdicts), &policy);
        next.degraded_since = since;
        if next.through != baseline.through
            && self.registry.save_baseline(&next, baseline.through).await? == BaselineSaved::Stale
        {
            tracing::info!("another sweep folded the carrier traffic baseline first");
        }
        Ok(verdicts)
    }

    async fn sweep_one(
        &self,
        mut record: IntentRecord,
        run_id: &str,
        summary: &mut RunSummary,
        to_reconcile: &mut Vec<IntentRecord>,
    ) -> Result<(), PortError> {
        let now = self.clock.now();
        let key = record.intent.key.clone();
        if let Some(current) = self.digest_fate(&record, now).await? {
            record = current;
        }
        if let Some(current) = self.orphaned_fate(&record, now).await? {
            record = current;
        }
        let mut escalation_pending = false;
        for action in decide(&record, now, &self.config.sweep) {
            match action {
                Action::ReEnqueue => {
                    // Promoted to the urgent lane once its slack is under URGENT_SLACK.
                    let lane = Lane::of(now, record.intent.deadline, std::time::Duration::ZERO);
                    self.send_queue.enqueue(&key, lane, Duration::ZERO).await?;
                    let mut t = self.simple(
                        &record,
                        vec![record.status.state],
                        State::Queued,
                        format!("enqueue:sweep:{run_id}"),
                        ObservationKind::Enqueued { by: format!("sweep {run_id}") },
                        now,
                    );
                    t.patch.enqueued_at = Some(now);
                    if self.apply(t, &mut record).await? {
                        record.status.state = State::Queued;
                        record.status.enqueued_at = Some(now);
                    }
                    summary.re_enqueued += 1;
                }
                Action::LeaseExpired => {
                    let aid = record.status.attempt_id.clone().unwrap_or_default();
                    let mut t = self.simple(
                        &record,
                        vec![State::Sending],
                        State::SendUnknown,
                        tocsin::domain::observation::lease_expired_id(&aid),
                        ObservationKind::SendUnknown {
                            attempt_id: aid.clone(),
                            cause: "claim lease expired with no recorded result".into(),
                        },
                        now,
                    );
                    t.attempt_id = Some(aid);
                    t.patch.clear_claim = true;
                    if self.apply(t, &mut record).await? {
                        record.status.state = State::SendUnknown;
                        summary.lease_expired_unknown += 1;
                    }
                }
                Action::MarkDelaySuspected => {
                    let t = self.simple(
                        &record,
                        vec![State::Accepted],
                        State::DelaySuspected,
                        "sweep:delay_suspected".into(),
                        ObservationKind::DelaySuspected,
                        now,
                    );
                    if self.apply(t, &mut record).await? {
                        record.status.state = State::DelaySuspected;
                        summary.delay_suspected += 1;
                        tracing::warn!(key = key.short(), "accepted but no delivery receipt yet: delay suspected");
                    }
                }
                Action::MarkExpiredUnknown => {
                    let mut t = self.simple(
                        &record,
                        vec![State::Accepted, State::DelaySuspected],
                        State::ExpiredUnknown,
                        "sweep:expired_unknown".into(),
                        ObservationKind::ExpiredUnknown,
                        now,
                    );
                    t.patch.final_at = Some(now);
                    if self.apply(t, &mut record).await? {
                        record.status.state = State::ExpiredUnknown;
                        summary.expired_unknown += 1;
                    }
                }
                Action::Escalate { .. } => match self.escalate(&record, run_id, now, None).await? {
                    Escalated::Now(current, e) => {
                        record = *current;
                        record.status.escalation = Some(e);
                        summary.escalated += 1;
                    }
                    Escalated::NotNeeded(current) => {
                        tracing::info!(key = key.short(), state = %current.status.state, "the intent changed since the index was read; no escalation");
                        record = *current;
                        summary.escalation_not_needed += 1;
                    }
                    Escalated::NotLeased => {
                        summary.escalation_lease_held_elsewhere += 1;
                        escalation_pending = true;
                    }
                },
                Action::Reconcile => {
                    if to_reconcile.len() < self.config.reconcile_batch {
                        to_reconcile.push(record.clone());
                    } else {
                        summary.reconcile_deferred += 1;
                    }
                }
            }
        }
        // Another run holds the escalation, or the intent is delivered or escalated already (the
        // lease said no): leave its index entry to whoever holds the truth — this run's copy may be
        // older than the intent (the index lags) and must not re-add a settled intent.
        if !escalation_pending {
            let next = self.next_check_from(&record, now);
            // Index writes cost a write on the index too: only when the next check changes.
            let unchanged = match next {
                NextCheck::At(t) => {
                    record.status.next_check.map(|c| c.timestamp_millis()) == Some(t.timestamp_millis())
                }
                NextCheck::Remove => record.status.next_check.is_none(),
                NextCheck::Keep => true,
            };
            if !unchanged {
                self.store.set_next_check(&key, next, Some(record.status.state)).await?;
            }
        }
        Ok(())
    }

    /// Searches the delivery-status logs for each unknown outcome, within the time budget. A
    /// throttled search stops the searching for this run (the rest stays due for the next run).
    async fn reconcile(&self, records: Vec<IntentRecord>, stop_at: DateTime<Utc>, summary: &mut RunSummary) {
        let mut left = records.into_iter();
        for record in left.by_ref() {
            let remaining = time_left(&self.clock, stop_at);
            if remaining.is_zero() {
                summary.reconcile_deferred += 1;
                break;
            }
            let until = after(self.clock.now(), remaining.min(SEARCH_TIMEOUT));
            match self.reconcile_one(&record, until).await.transpose() {
                Some(Ok(Verdict::Link { .. })) => summary.reconciled += 1,
                Some(Ok(Verdict::Ambiguous(_))) => summary.ambiguous += 1,
                Some(Ok(Verdict::NoMatch)) => summary.still_unknown += 1,
                Some(Ok(Verdict::Contested { .. })) => summary.contested += 1,
                Some(Err(SearchError::Throttled)) => {
                    tracing::warn!("FilterLogEvents throttled; reconciliation resumes next run");
                    summary.reconcile_deferred += 1;
                    break;
                }
                Some(Err(SearchError::Failed(e))) => {
                    summary.errors += 1;
                    tracing::warn!(key = record.intent.key.short(), error = %e, "reconciliation failed; retried next run");
                }
                None => {
                    summary.reconcile_deferred += 1;
                    tracing::warn!(key = record.intent.key.short(), "log search too slow; retried next run");
                }
            }
        }
        summary.reconcile_deferred += left.count();
    }

    /// Searches for one unknown outcome and settles what the search found. Only the search is
    /// bounded by `search_until` (`None` when it ran out): once records are found, their writes
    /// run to the end, so a digest's members are never settled half way by a timeout.
    async fn reconcile_one(
        &self,
        record: &IntentRecord,
        search_until: DateTime<Utc>,
    ) -> Result<Option<Verdict>, SearchError> {
        let key = &record.intent.key;
        let recipient = &record.intent.recipient;
        let Some(claimed_at) = record.status.claimed_at else { return Ok(Some(Verdict::NoMatch)) };
        let window = Window::of_attempt(claimed_at, self.config.reconcile_margin);
        // A storm-mode digest's SMS is every member's. Its members learn what SNS answered each
        // with a write of their own; a member whose write never landed learns it from a sibling's.
        let digest = match &record.status.digest_id {
            Some(digest_id) => self.store.get_digest(digest_id).await?,
            // Its sender ended before recording which digest its SMS was: the digest recorded for
            // this recipient in the attempt's window that holds it.
            None => self
                .store
                .digests_to(recipient, window.from, window.to)
                .await?
                .into_iter()
                .find(|d| d.members.contains(key)),
        }
        // Only the current attempt's digest (an operator may have resent the member alone since).
        .filter(|d| window.contains(d.created_at));
        let sibling = match &digest {
            Some(d) => self.sibling_knows(record, d).await?,
            None => None,
        };
        let Some(found) = within(
            &self.clock,
            search_until,
            self.logs.records_to(recipient, window.logged_by(self.clock.now()), SEARCH_MAX_RECORDS),
        )
        .await
        .transpose()?
        else {
            return Ok(None);
        };
        // Messages already tied to other intents (the same number alerted twice) do not count.
        let mut linked_elsewhere = HashSet::new();
        // Messages the index already ties to this intent (its digest's entry names it).
        let mut indexed_to_it = HashSet::new();
        // In order: the lookups are the same whichever run makes them.
        let ids: std::collections::BTreeSet<String> = found.iter().map(|f| f.record.message_id.clone()).collect();
        for id in ids {
            // A digest's SMS covering this intent is its own; so is one tied alone to a sibling
            // whose current attempt is this same digest (a member reconciled before the digest
            // could be found). A sibling's SMS of another digest or attempt is not.
            match self.store.lookup(&id).await? {
                Some(entry) if entry.covers(key) => {
                    indexed_to_it.insert(id);
                }
                Some(entry) if !self.tied_to_a_sibling_alone(&entry, digest.as_ref()).await? => {
                    linked_elsewhere.insert(id);
                }
                _ => {}
            }
        }
        let verdict = match sibling {
            // The digest's SMS is known: its records, or, with none yet, what SNS answered.
            Some((message_id, accepted_at)) => {
                let mut records: Vec<_> = found.into_iter().filter(|f| f.record.message_id == message_id).collect();
                if records.is_empty() {
                    if let Some(d) = &digest {
                        self.accepted_as_sibling(record, d, &message_id, accepted_at).await?;
                    }
                    return Ok(Some(Verdict::Link { sns_message_id: message_id, records }));
                }
                records.sort_by_key(|f| (f.timestamp_ms, f.log_event_id.clone()));
                Verdict::Link { sns_message_id: message_id, records }
            }
            None => {
                let verdict = judge(recipient, window, found, &linked_elsewhere);
                // An SMS the index already ties to this intent (its digest's entry, written by the
                // sender or by a sibling's reconciliation, names it) is its own: no other alert
                // can own it, whatever a sibling whose own write was lost still says.
                let own =
                    matches!(&verdict, Verdict::Link { sns_message_id, .. } if indexed_to_it.contains(sns_message_id));
                let rivals = match verdict.link_time() {
                    Some(sent) if !own => self.rivals(record, digest.as_ref(), sent).await?,
                    _ => Rivals::default(),
                };
                verdict.unless_contested(rivals)
            }
        };
        let now = self.clock.now();
        let search = record.status.reconcile_attempts + 1;
        match &verdict {
            Verdict::Link { sns_message_id, records } => {
                // A storm-mode digest's SMS is every member's: its message id is indexed once for
                // all of them, and its records settle them together.
                let mut members = vec![key.clone()];
                let mut link = Link::Reconciled;
                if let Some(digest) = digest {
                    self.store.index_digest_message(sns_message_id, &digest).await?;
                    // The digest's fate on the digest itself first, as the status function records
                    // it, every waiting member brought forward: a member this run does not reach
                    // (its write fails, the run ends) learns it at the next sweep.
                    if let Some(first) = records.iter().find(|f| f.record.status.receipt().is_some()) {
                        for member in &digest.members {
                            self.store.bring_check_forward(member, now, &State::AWAITING_RECEIPT).await?;
                        }
                        let outcome = LoggedRecord {
                            log_event_id: first.log_event_id.clone(),
                            timestamp_ms: first.timestamp_ms,
                            message: first.message.clone(),
                        };
                        self.store.record_digest_outcome(&digest.id, &outcome).await?;
                    }
                    members = digest.members;
                    link = Link::ReconciledDigest;
                }
                // Every member is tried even when one's write fails: the failure is reported, never
                // a reason to leave its siblings unsettled.
                let mut first_error = None;
                for member in &members {
                    for f in records {
                        let event = LogEvent { id: &f.log_event_id, timestamp_ms: f.timestamp_ms };
                        if let Err(e) =
                            receipts::apply(&self.store, &self.registry, member, recipient, event, &f.record, link, now)
                                .await
                        {
                            tracing::warn!(key = member.short(), error = %e, "a reconciled record not applied to a member");
                            first_error.get_or_insert(e);
                            break;
                        }
                    }
                }
                if let Some(e) = first_error {
                    return Err(e.into());
                }
                tracing::info!(key = key.short(), sns_message_id = %sns_message_id, "unknown outcome reconciled from the delivery-status logs");
            }
            Verdict::Ambiguous(candidates) => {
                let t = self.bookkeeping(
                    record,
                    search,
                    None,
                    ReconcileState::Ambiguous,
                    if candidates.len() == 1 {
                        "one message to this number in the window, but another alert to it, its outcome unknown too, may own it: a human must decide"
                    } else {
                        "several messages to this number in the window: a human must decide"
                    },
                    candidates.clone(),
                    now,
                );
                self.store.transition(t).await?;
                tracing::warn!(
                    key = key.short(),
                    candidates = candidates.len(),
                    "reconciliation ambiguous; left to a human"
                );
            }
            Verdict::Contested { sns_message_id, rivals } => {
                let next = next_attempt(record.status.reconcile_attempts, now);
                let t = self.bookkeeping(
                    record,
                    search,
                    Some(next),
                    ReconcileState::Pending,
                    "one message to this number in the window, but another alert to it is being sent and may own it: searched again later",
                    vec![],
                    now,
                );
                self.store.transition(t).await?;
                tracing::info!(key = key.short(), sns_message_id = %sns_message_id, rivals, "reconciliation contested; searched again later");
            }
            Verdict::NoMatch => {
                let next = next_attempt(record.status.reconcile_attempts, now);
                let t = self.bookkeeping(
                    record,
                    search,
                    Some(next),
                    ReconcileState::Pending,
                    "no delivery record yet",
                    vec![],
                    now,
                );
                self.store.transition(t).await?;
            }
        }
        // Where the intent stands now decides its next check (delivered leaves the index).
        if let Some(current) = self.store.get(key).await? {
            let next = self.next_check_from(&current, now);
            self.store.set_next_check(key, next, Some(current.status.state)).await?;
        }
        Ok(Some(verdict))
    }

    /// A digest member still waiting for its SMS's delivery record, whose digest has one recorded
    /// (the status function records it on the digest before applying it to each member): it is
    /// applied here, so a member the status function never reached still learns its digest's
    /// fate. Returns the member as it is then.
    async fn digest_fate(&self, record: &IntentRecord, now: DateTime<Utc>) -> Result<Option<IntentRecord>, PortError> {
        let s = &record.status;
        let waiting = matches!(s.state, State::Accepted | State::DelaySuspected | State::SendUnknown);
        let Some(digest_id) = s.digest_id.as_ref().filter(|_| waiting) else { return Ok(None) };
        let Some(claimed_at) = s.claimed_at else { return Ok(None) };
        let window = Window::of_attempt(claimed_at, self.config.reconcile_margin);
        // Only the current attempt's digest (an operator may have resent the member alone since).
        let Some(outcome) =
            self.store.get_digest(digest_id).await?.filter(|d| window.contains(d.created_at)).and_then(|d| d.outcome)
        else {
            return Ok(None);
        };
        let Ok(delivery) = tocsin::domain::delivery::parse_record(&outcome.message) else { return Ok(None) };
        let link = if s.sns_message_id.as_deref() == Some(delivery.message_id.as_str()) {
            Link::Indexed
        } else {
            Link::ReconciledDigest
        };
        let event = LogEvent { id: &outcome.log_event_id, timestamp_ms: outcome.timestamp_ms };
        let key = &record.intent.key;
        receipts::apply(&self.store, &self.registry, key, &record.intent.recipient, event, &delivery, link, now)
            .await?;
        tracing::info!(
            key = key.short(),
            digest = digest_id.short(),
            "digest's delivery record applied to a member it had not reached"
        );
        self.store.get(key).await
    }

    /// An accepted intent still waiting for its delivery record, whose record overtook the
    /// sender's MessageId write: the status function saw it first, too old to wait for
    /// (`TOCSIN_ORPHAN_WAIT`), found no index entry, and kept it as an orphan under the message
    /// id. It is applied here — before a delay is suspected or the alert escalated as silent — so
    /// the alert says what its record says and a dead number is suppressed. One read per due,
    /// silent accepted intent (nearly always empty). Returns the intent as it is then.
    async fn orphaned_fate(
        &self,
        record: &IntentRecord,
        now: DateTime<Utc>,
    ) -> Result<Option<IntentRecord>, PortError> {
        let s = &record.status;
        if !matches!(s.state, State::Accepted | State::DelaySuspected) {
            return Ok(None);
        }
        let Some(message_id) = s.sns_message_id.as_deref() else { return Ok(None) };
        let orphans = self.store.orphans_of(message_id).await?;
        let key = &record.intent.key;
        let mut applied = 0usize;
        for orphan in &orphans {
            let Ok(delivery) = tocsin::domain::delivery::parse_record(&orphan.message) else { continue };
            if delivery.message_id != message_id {
                continue;
            }
            let event = LogEvent { id: &orphan.log_event_id, timestamp_ms: orphan.received_at.timestamp_millis() };
            receipts::apply(
                &self.store,
                &self.registry,
                key,
                &record.intent.recipient,
                event,
                &delivery,
                Link::Indexed,
                now,
            )
            .await?;
            applied += 1;
        }
        if applied == 0 {
            return Ok(None);
        }
        tracing::info!(
            key = key.short(),
            records = applied,
            "delivery records that overtook the sender's MessageId write applied"
        );
        self.store.get(key).await
    }

    /// The other intents to the record's number that could own an SMS written at `sent`: their
    /// outcome open too (`sending`, `send_unknown`) and their claim inside its window. This
    /// attempt's digest siblings share its SMS and do not count — those whose current attempt is
    /// that digest: a digest found by membership alone may never have been sent (handed back),
    /// its members since sent in another digest, which is not this one's SMS. Until they are told
    /// apart the SMS is not this attempt's to take — an alert whose publish never went out is
    /// never called delivered on another alert's SMS.
    async fn rivals(
        &self,
        record: &IntentRecord,
        digest: Option<&tocsin::ports::DigestRecord>,
        sent: DateTime<Utc>,
    ) -> Result<Rivals, PortError> {
        let Some(claims) = Window::claims_that_could_send(sent, self.config.reconcile_margin) else {
            return Ok(Rivals::default());
        };
        let key = &record.intent.key;
        let now = self.clock.now();
        let sibling = |r: &IntentRecord| digest.is_some_and(|d| r.status.digest_id.as_ref() == Some(&d.id));
        // Each rival once, and whether its sender is at work.
        let mut rivals: BTreeMap<IdempotencyKey, bool> = BTreeMap::new();
        let at_work =
            |r: &IntentRecord| r.status.state == State::Sending && r.status.lease_until.is_some_and(|l| l > now);
        for r in self.store.open_attempts_to(&record.intent.recipient, claims.from, claims.to).await? {
            if &r.intent.key != key && !sibling(&r) {
                rivals.insert(r.intent.key.clone(), at_work(&r));
            }
        }
        // Operators' attempts in the window: a resend's own (the pending-index may not show it)
        // while it is the intent's current attempt with its outcome open, and an attempt a resend
        // superseded with its outcome unknown.
        for (other, at) in self.store.unsettled_to(&record.intent.recipient, claims.from, claims.to).await? {
            if &other == key || rivals.contains_key(&other) {
                continue;
            }
            let Some(r) = self.store.get(&other).await? else { continue };
            let current = r.status.claimed_at.map(|c| c.timestamp_millis()) == Some(at.timestamp_millis());
            if !current {
                rivals.insert(other, false);
            } else if matches!(r.status.state, State::Sending | State::SendUnknown) && !sibling(&r) {
                rivals.insert(other, at_work(&r));
            }
        }
        let sending = rivals.values().filter(|w| **w).count();
        Ok(Rivals { sending, unknown: rivals.len() - sending })
    }

    /// Whether `entry` ties an SMS to one member of `digest` alone whose current attempt is that
    /// digest: the digest's SMS, indexed to that member by a search that did not find the digest.
    async fn tied_to_a_sibling_alone(
        &self,
        entry: &tocsin::ports::IndexEntry,
        digest: Option<&tocsin::ports::DigestRecord>,
    ) -> Result<bool, PortError> {
        let Some(d) = digest.filter(|d| entry.digest.is_none() && d.members.contains(&entry.key)) else {
            return Ok(false);
        };
        // Only a sibling that names this digest: one that names none may have been sent alone
        // since, and taking its SMS for the digest's would call an unsent alert delivered.
        Ok(self.store.get(&entry.key).await?.is_some_and(|sibling| sibling.status.digest_id.as_ref() == Some(&d.id)))
    }

    /// The message id of a digest's SMS as a sibling member recorded it (what SNS answered for
    /// the one SMS they all share), and when SNS accepted it, for a member whose own record of it
    /// never landed.
    async fn sibling_knows(
        &self,
        record: &IntentRecord,
        digest: &tocsin::ports::DigestRecord,
    ) -> Result<Option<(String, Option<DateTime<Utc>>)>, PortError> {
        let key = &record.intent.key;
        for sibling in digest.members.iter().filter(|m| *m != key) {
            let Some(s) = self.store.get(sibling).await? else { continue };
            if s.status.digest_id.as_ref() != Some(&digest.id) {
                continue;
            }
            // The sibling's message id is the digest's SMS only if it is indexed as the digest's
            // (an operator may have resent the sibling alone since).
            let Some(message_id) = s.status.sns_message_id else { continue };
            if self.store.lookup(&message_id).await?.is_some_and(|e| e.digest.is_some_and(|(id, _)| id == digest.id)) {
                return Ok(Some((message_id, s.status.accepted_at)));
            }
        }
        Ok(None)
    }

    /// A digest member whose own record of the SMS never landed, whose sibling recorded that SNS
    /// accepted it (message `message_id`, at `accepted_at`) and for which no delivery record has
    /// come yet: accepted, like its siblings — the same SMS, accepted when they say, so the
    /// member's receipt clock (delay suspected, expired unknown) is theirs, not the search's.
    async fn accepted_as_sibling(
        &self,
        record: &IntentRecord,
        digest: &tocsin::ports::DigestRecord,
        message_id: &str,
        accepted_at: Option<DateTime<Utc>>,
    ) -> Result<(), PortError> {
        let key = &record.intent.key;
        {
            let now = self.clock.now();
            self.store.index_digest_message(message_id, digest).await?;
            let mut after = record.clone();
            after.status.state = State::Accepted;
            after.status.accepted_at = Some(accepted_at.unwrap_or(now));
            let next = self.next_check_from(&after, now);
            let t = Transition {
                key: key.clone(),
                from: vec![State::SendUnknown, State::Sending],
                attempt_id: None,
                patch: StatusPatch {
                    state: Some(State::Accepted),
                    clear_claim: true,
                    sns_message_id: Some(message_id.to_owned()),
                    accepted_at: after.status.accepted_at,
                    digest_id: Some(digest.id.clone()),
                    ..Default::default()
                },
                observation: Observation::new(
                    format!("reconcile:digest:{message_id}"),
                    now,
                    ObservationKind::Reconciliation {
                        outcome: format!(
                            "its digest {}'s SMS was accepted by SNS (message id {message_id}, recorded by a sibling)",
                            digest.id.short()
                        ),
                        search: record.status.reconcile_attempts + 1,
                        candidates: vec![],
                    },
                )
                .with_state(State::Accepted),
                next_check: next,
                index_message: None,
                expect: Default::default(),
                retain_until: Some(record.intent.expires_at()),
                commit: Commit::Atomic,
            };
            self.store.transition(t).await?;
            tracing::info!(key = key.short(), digest = digest.id.short(), sns_message_id = %message_id, "unknown outcome settled from its digest's sibling");
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn bookkeeping(
        &self,
        record: &IntentRecord,
        search: u32,
        next: Option<DateTime<Utc>>,
        state: ReconcileState,
        outcome: &str,
        candidates: Vec<tocsin::domain::reconcile::Candidate>,
        now: DateTime<Utc>,
    ) -> Transition {
        Transition {
            key: record.intent.key.clone(),
            from: vec![State::SendUnknown],
            attempt_id: None,
            patch: StatusPatch { reconcile: Some((search, next, state)), ..Default::default() },
            observation: Observation::new(
                format!("reconcile:{search}"),
                now,
                ObservationKind::Reconciliation { outcome: outcome.into(), search, candidates },
            ),
            next_check: NextCheck::Keep,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
        }
    }

    fn simple(
        &self,
        record: &IntentRecord,
        from: Vec<State>,
        to: State,
        id: String,
        kind: ObservationKind,
        _decided_at: DateTime<Utc>,
    ) -> Transition {
        // Each observation takes its own reading of the clock, so a run's facts keep their order.
        let now = self.clock.now();
        Transition {
            key: record.intent.key.clone(),
            from,
            attempt_id: None,
            patch: StatusPatch { state: Some(to), ..Default::default() },
            observation: Observation::new(id, now, kind).with_state(to),
            next_check: NextCheck::Keep,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
        }
    }

    /// True when applied now; false when another run got there first. Then `record` is
    /// refreshed, so the later actions and the next check are decided on the truth.
    async fn apply(&self, t: Transition, record: &mut IntentRecord) -> Result<bool, PortError> {
        let key = t.key.clone();
        match self.store.transition(t).await? {
            TransitionOutcome::Applied => Ok(true),
            TransitionOutcome::AlreadyApplied => {
                if let Some(current) = self.store.get(&key).await? {
                    *record = current;
                }
                Ok(false)
            }
            TransitionOutcome::Refused(current) => {
                *record = *current;
                Ok(false)
            }
        }
    }

    /// The next check the sweep writes: never a time already past (that would make every later
    /// run read the intent first, ahead of newly due ones), and none for an intent with nothing
    /// left to do.
    fn next_check_from(&self, record: &IntentRecord, now: DateTime<Utc>) -> NextCheck {
        match next_check(record, now, &self.config.sweep) {
            None => NextCheck::Remove,
            Some(t) => NextCheck::At(t.max(now + chrono::Duration::seconds(NEXT_CHECK_FLOOR_SECS))),
        }
    }

    /// Lease → send → mark. The lease is taken on the intent as it is now and returns it: the
    /// escalation is decided again on that (the due-index the run read from lags behind the
    /// table), so a delivery that landed a moment ago is never escalated.
    ///
    /// `early`: the reason of an escalation before the deadline (a degraded or held carrier),
    /// made only while the intent is still in flight as the lease finds it.
    async fn escalate(
        &self,
        indexed: &IntentRecord,
        run_id: &str,
        now: DateTime<Utc>,
        early: Option<String>,
    ) -> Result<Escalated, PortError> {
        let key = &indexed.intent.key;
        let until =
            now + chrono::Duration::from_std(self.config.escalation_lease).unwrap_or(chrono::Duration::minutes(5));
        let Some(record) = self.store.lease_escalation(key, run_id, now, until).await? else {
            return Ok(Escalated::NotLeased);
        };
        let reason = match early {
            Some(reason) => {
                let s = &record.status;
                (s.escalation.is_none() && matches!(s.state, State::Accepted | State::DelaySuspected)).then_some(reason)
            }
            None => decide(&record, now, &self.config.sweep).into_iter().find_map(|a| match a {
                Action::Escalate { reason } => Some(reason),
                _ => None,
            }),
        };
        let Some(reason) = reason else { return Ok(Escalated::NotNeeded(Box::new(record))) };
        let reason = reason.as_str();
        let record = &record;
        let history = self.store.observations(key).await?;
        let mut lines = vec![format!(
            "{} received from {}",
            record.intent.created_at.format("%H:%M:%S"),
            record.intent.origin.as_str()
        )];
        lines.extend(history.iter().map(|o| format!("{} {}", o.at.format("%H:%M:%S"), o.summary())));
        let msg = EscalationMessage {
            idempotency_key: key.to_string(),
            event_id: record.intent.event_id.clone(),
            template: record.intent.template.to_string(),
            recipient_masked: record.intent.recipient.masked(),
            deadline: record.intent.deadline,
            state: record.status.state,
            reason: reason.to_owned(),
            escalated_at: now,
            sns_message_id: record.status.sns_message_id.clone(),
            history: lines,
        };
        self.escalations.escalate(&msg).await?;
        let escalation = Escalation { at: now, reason: reason.to_owned() };
        let t = Transition {
            key: key.clone(),
            from: vec![],
            attempt_id: None,
            patch: StatusPatch { escalation: Some(escalation.clone()), ..Default::default() },
            observation: Observation::new(
                "escalation",
                self.clock.now(),
                ObservationKind::Escalated { reason: reason.to_owned(), run_id: run_id.to_owned() },
            ),
            next_check: NextCheck::Keep,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
        };
        self.store.transition(t).await?;
        tracing::warn!(key = key.short(), recipient = %record.intent.recipient, state = %record.status.state, reason, "escalated to on-call");
        Ok(Escalated::Now(Box::new(record.clone()), escalation))
    }
}

/// Puts `items` in a random order drawn from `entropy` (Fisher–Yates).
fn shuffle<T, E: Entropy + ?Sized>(items: &mut [T], entropy: &E) {
    for i in (1..items.len()).rev() {
        let j = usize::try_from(entropy.next_u64() % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::shuffle;
    use tocsin::ports::Entropy;

    /// SplitMix64 over a counter: a deterministic stand-in for the system's randomness.
    struct Counter(AtomicU64);

    impl Entropy for Counter {
        fn next_u64(&self) -> u64 {
            let mut z = self.0.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// A run stops searching at its first throttled search: whatever order the due-index gives,
    /// each unknown outcome must come first in some run, or one listed last is never searched.
    #[test]
    fn every_unknown_outcome_is_searched_first_in_some_run_whatever_the_index_order() {
        let entropy = Counter(AtomicU64::new(7));
        let mut first = [false; 10];
        for _ in 0..100 {
            let mut due: Vec<usize> = (0..10).collect();
            shuffle(&mut due, &entropy);
            first[due[0]] = true;
            let mut sorted = due.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>(), "a permutation: nothing lost, nothing twice");
        }
        assert!(first.iter().all(|f| *f), "every one came first at least once: {first:?}");
    }
}
