//! What one sweep did: the counts of a run, summed from each intent's sweep, and published as
//! the escalation function's metrics. Knows no ports.

use serde::Serialize;
use tocsin::telemetry::{Metrics, Unit};

#[derive(Debug, Default, Serialize, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub run_id: String,
    pub read: usize,
    pub escalated: usize,
    /// Levels of escalation chains started: their person texted (not paged; not in `escalated`).
    pub chain_levels_started: usize,
    pub escalation_lease_held_elsewhere: usize,
    /// Due in the (lagging) index, but not escalatable when the lease read the intent.
    pub escalation_not_needed: usize,
    pub delay_suspected: usize,
    pub expired_unknown: usize,
    pub lease_expired_unknown: usize,
    pub re_enqueued: usize,
    /// Unknown outcomes settled from the delivery-status logs: their own SMS found (tied to them
    /// by the message index, or a digest sibling's recorded answer).
    pub reconciled: usize,
    /// Searched: records to the number in the window that nothing ties to the alert (another
    /// sender's, as likely as its own): kept for a human, never taken for its own; searched again.
    pub unattributed: usize,
    /// Searched, nothing yet: searched again later.
    pub still_unknown: usize,
    /// Searches not made because FilterLogEvents was throttled or out of time (next run).
    pub reconcile_deferred: usize,
    pub errors: usize,
    /// Escalated before their deadline because their carrier is degraded or held (counted in
    /// `escalated` too).
    pub escalated_early: usize,
    /// Carriers degraded at this run ([`tocsin::domain::carrier`]).
    pub carriers_degraded: usize,
    /// Which carriers, and which signal said so: the run's answer names them, as its log does.
    pub degraded_carriers: Vec<DegradedCarrier>,
    /// What the carrier view says overall (`None`: it did not run): one carrier slow, or all of
    /// them — the delay is then upstream of the carriers, or in the logs' path.
    pub carrier_classification: Option<tocsin::domain::carrier::Classification>,
    /// Seconds the oldest unacknowledged escalation has waited (0: none), after this run's
    /// escalations; `None` when the list could not be read. Emitted every run as
    /// `oldest_unacknowledged_escalation_s`, the metric of the escalation-unacknowledged alarm:
    /// read from the ledger, so looking at the queue never hides an escalation from it, and an
    /// idle queue's paused SQS metrics do not matter.
    pub oldest_unacknowledged_s: Option<u64>,
    /// False when the run stopped at its time budget with due intents left for the next run.
    pub complete: bool,
}

/// A carrier the run judged degraded, and by which signal (either or both).
#[derive(Debug, Serialize, Clone, PartialEq, Eq)]
pub struct DegradedCarrier {
    pub carrier: String,
    /// tocsin's own SMS to it are in flight too long ([`tocsin::domain::carrier::assess`]).
    pub in_flight: bool,
    /// Every application's delivery records from it fell silent or slow
    /// ([`tocsin::domain::carrier_traffic`]).
    pub traffic: bool,
}

impl RunSummary {
    /// Adds the counts of one intent's sweep.
    pub(crate) fn absorb(&mut self, o: &RunSummary) {
        self.escalated += o.escalated;
        self.chain_levels_started += o.chain_levels_started;
        self.escalation_lease_held_elsewhere += o.escalation_lease_held_elsewhere;
        self.escalation_not_needed += o.escalation_not_needed;
        self.delay_suspected += o.delay_suspected;
        self.expired_unknown += o.expired_unknown;
        self.lease_expired_unknown += o.lease_expired_unknown;
        self.re_enqueued += o.re_enqueued;
        self.reconciled += o.reconciled;
        self.unattributed += o.unattributed;
        self.still_unknown += o.still_unknown;
        self.reconcile_deferred += o.reconcile_deferred;
        self.escalated_early += o.escalated_early;
        self.errors += o.errors;
    }

    /// Publishes the run's counts as the escalation function's metrics (EMF), its duration
    /// `took_ms`.
    pub(crate) fn publish(&self, took_ms: i64) {
        let mut m = Metrics::new("escalation");
        if let Some(age) = self.oldest_unacknowledged_s {
            m.add("oldest_unacknowledged_escalation_s", age as f64, Unit::Seconds);
        }
        m.count("reconciled", self.reconciled as u64);
        m.count("reconcile_unattributed", self.unattributed as u64);
        m.count("still_unknown", self.still_unknown as u64);
        m.count("reconcile_deferred", self.reconcile_deferred as u64);
        m.count("escalated", self.escalated as u64);
        m.count("escalated_early", self.escalated_early as u64);
        m.count("chain_levels_started", self.chain_levels_started as u64);
        m.count("delay_suspected", self.delay_suspected as u64);
        m.count("expired_unknown", self.expired_unknown as u64);
        m.count("lease_expired_unknown", self.lease_expired_unknown as u64);
        m.count("re_enqueued", self.re_enqueued as u64);
        m.count("due_read", self.read as u64);
        m.count("sweep_errors", self.errors as u64);
        m.count("incomplete_run", u64::from(!self.complete));
        m.add("run_duration_ms", took_ms as f64, Unit::Milliseconds);
        m.flush();
    }
}
