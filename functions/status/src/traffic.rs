//! The carrier traffic signal: every record of a batch, tocsin's or another application's, tallied
//! by minute, carrier and country (counts and dwell times only), tocsin's own counted apart, and
//! written once the whole batch has succeeded (a failed try is tried again whole: counted once,
//! not once a try). Best effort; never fails a batch.

use tocsin::domain::carrier_traffic::{self, CountryTallies, Sender, TrafficPolicy};
use tocsin::ports::Clock;
use tocsin::telemetry::Metrics;

use crate::{Parsed, StatusHandler, StatusRegistry, StatusStore};

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// The chunk's records tallied by minute, carrier and country: counts and dwell times only,
    /// never a number or a text ([`carrier_traffic::tally`]), each marked with who sent it.
    pub(crate) fn traffic_tallies<'a>(&self, parsed: impl IntoIterator<Item = (&'a Parsed, Sender)>) -> CountryTallies {
        let policy = TrafficPolicy::new(self.config.delay_suspected_after);
        carrier_traffic::tally(
            parsed.into_iter().map(|(p, by)| (&p.record, p.written_at, by)),
            self.clock.now(),
            &policy,
        )
    }

    /// Adds the batch's tallies to the carrier view's traffic. Best effort: a failed write is
    /// logged and counted (`traffic_tally_failed`) and never fails the batch nor holds up a
    /// delivery record — the traffic signal is a statistic, the receipts are facts. Called once a
    /// batch has succeeded: a try that fails tallies nothing. (A batch CloudWatch Logs delivers
    /// twice is counted twice: the detector judges ratios against the other carriers, which the
    /// second delivery inflates alike.)
    pub(crate) async fn add_traffic(&self, tallies: &CountryTallies) {
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
}

/// Adds `more` into `tallies`.
pub(crate) fn add_all(tallies: &mut CountryTallies, more: CountryTallies) {
    for (key, t) in more {
        tallies.entry(key).or_default().add(&t);
    }
}
