//! Sweeping one due intent: what its state and deadline call for (re-enqueue, lease lapsed, delay
//! suspected, expired unknown, escalate, search the logs), then its next check. Sends nothing itself.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::Observation;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::storm::Lane;
use tocsin::domain::sweep::{Action, decide, next_check};
use tocsin::ports::{
    Commit, DeliveryLogSearch, EscalationQueue, NextCheck, PortError, SendQueue, StatusPatch, Transition,
    TransitionOutcome,
};

use crate::escalating::Escalated;
use crate::{Escalator, RunSummary, SweepClock, SweepRegistry, SweepStore};

/// The earliest next check the sweep writes, from now: just ahead of it, never in the past. A run
/// reads only what was due when it started (`Escalator::run`), so an intent it writes a next
/// check for is the next run's — and that run, a schedule period later, finds it due. (A floor of
/// a whole period put the check just after the next run's start: that run skipped it, and an
/// intent due at the deadline waited two periods, not one.)
const NEXT_CHECK_FLOOR_SECS: i64 = 1;

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    pub(crate) async fn sweep_one(
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
                    Escalated::NextLevel(current, e) => {
                        record = *current;
                        record.status.escalation = Some(e);
                        summary.chain_levels_started += 1;
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
            let due = next_check(&record, now, &self.config.sweep);
            let next = clamped(due, now);
            // Index writes cost a write on the index too: only when the next check changes.
            let unchanged = match next {
                NextCheck::At(t) => {
                    record.status.next_check.map(|c| c.timestamp_millis()) == Some(t.timestamp_millis())
                        // Due again at once, and due in the index already: the next run reads it
                        // either way. An unknown outcome waiting its turn for a log search (a run
                        // searches `TOCSIN_RECONCILE_BATCH`) was moved a second on by every run —
                        // a write and its index entry's delete and put, each minute, for each one
                        // of an outage's backlog.
                        || (due.is_some_and(|d| d <= floor(now)) && record.status.next_check.is_some_and(|c| c <= now))
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

    pub(crate) fn simple(
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
            carried_along: Vec::new(),
        }
    }

    /// True when applied now; false when another run got there first. Then `record` is
    /// refreshed, so the later actions and the next check are decided on the truth.
    pub(crate) async fn apply(&self, t: Transition, record: &mut IntentRecord) -> Result<bool, PortError> {
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
    pub(crate) fn next_check_from(&self, record: &IntentRecord, now: DateTime<Utc>) -> NextCheck {
        clamped(next_check(record, now, &self.config.sweep), now)
    }
}

/// The earliest next check the sweep writes at `now` ([`NEXT_CHECK_FLOOR_SECS`]).
fn floor(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::seconds(NEXT_CHECK_FLOOR_SECS)
}

/// When the intent is next due (`due`, from the sweep policy) as the sweep writes it: never
/// before the floor; none for an intent with nothing left to do.
fn clamped(due: Option<DateTime<Utc>>, now: DateTime<Utc>) -> NextCheck {
    match due {
        None => NextCheck::Remove,
        Some(t) => NextCheck::At(t.max(floor(now))),
    }
}
