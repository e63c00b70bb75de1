//! The carrier view: tocsin's SMS in flight and every application's delivery records, per carrier,
//! published as metrics; alerts caught in a degraded or held carrier escalated early. Reads only.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tocsin::domain::carrier::{self, CarrierPolicy, SentSms};
use tocsin::domain::carrier_traffic::{self, TrafficPolicy, TrafficVerdict};
use tocsin::ports::carriers::BaselineSaved;
use tocsin::ports::{DeliveryLogSearch, EscalationQueue, PortError, SendQueue};
use tocsin::telemetry::{Metrics, Unit};

use crate::escalating::Escalated;
use crate::{Escalator, RunSummary, SweepClock, SweepRegistry, SweepStore};

/// The most SMS of the last hours the carrier view reads per run (newest first): at SNS's
/// default 20 SMS a second that is the last few minutes, at an alerting stack's volume the
/// whole lookback.
const RECENT_SENDS_MAX: usize = 20_000;

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// The carrier view: tocsin's SMS of the last hours sliced by their number's last-seen
    /// carrier, each carrier's health published as metrics (dimension `carrier`), and the alerts
    /// caught in a degraded or operator-held carrier escalated before their deadline — once (the
    /// escalation lease and mark), and never for one slow message alone (a carrier is degraded
    /// only with several delayed SMS, [`CarrierPolicy`]).
    pub(crate) async fn carriers(&self, run_id: &str, summary: &mut RunSummary) -> Result<(), PortError> {
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
        summary.carrier_classification = Some(classification);
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
                summary.degraded_carriers.push(crate::summary::DegradedCarrier {
                    carrier: h.carrier.clone(),
                    in_flight: h.in_flight_degraded(&policy),
                    traffic: h.traffic_degraded,
                });
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
    pub(crate) async fn traffic(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, TrafficVerdict>, PortError> {
        let policy = TrafficPolicy::new(self.config.sweep.delay_suspected_after);
        let baseline = self.registry.baseline().await?;
        let (from, to) = policy.minutes_to_read(now, baseline.through);
        // Judged per carrier, its countries summed (the view lists them).
        let tallies = carrier_traffic::per_carrier(&self.registry.tallies(from, to).await?);
        let (verdicts, next) = carrier_traffic::step(&baseline, &tallies, now, &policy);
        if next.through != baseline.through
            && self.registry.save_baseline(&next, baseline.through).await? == BaselineSaved::Stale
        {
            tracing::info!("another sweep folded the carrier traffic baseline first");
        }
        Ok(verdicts)
    }
}
