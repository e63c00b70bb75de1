//! The stack's SMS breaker at send time ([`tocsin::domain::spend`]): every send counts its parts
//! against the hour just before it is published; with the breaker open nothing is published, and
//! each alert is withheld — `suppressed`, so the sweep escalates it (the escalation queue and its
//! alarms: a channel that is not tocsin's SMS) — until an operator resumes. Publishes nothing.

use chrono::{DateTime, Utc};

use crate::{Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::spend::Spend;
use tocsin::ports::{PortError, RecipientRegistry, RecipientRoster, SmsGateway, Suppression};
use tocsin::telemetry::Metrics;

/// Why a send may not go out now.
pub(crate) enum Withheld {
    /// The breaker is open: withhold the alert (suppressed, escalated).
    Breaker(Suppression),
    /// The meter could not be read or written: release the claim unsent, to be tried again.
    Unavailable(PortError),
}

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Counts `parts` for one send (an alert alone, or a digest of `alerts` alerts) against the
    /// stack's hourly ceiling; `Err` when it must not be published.
    pub(crate) async fn spend(&self, parts: u32, alerts: usize, now: DateTime<Utc>) -> Result<(), Withheld> {
        let ceiling = self.config.spend_ceiling;
        match self.store.spend(parts, now, ceiling).await {
            Ok(Spend::Counted) => Ok(()),
            Ok(Spend::Withheld { breaker, opened_here }) => {
                let mut m = Metrics::new("sender");
                m.count("breaker_withheld", alerts as u64);
                if opened_here {
                    m.count("breaker_opened", 1);
                }
                m.flush();
                tracing::warn!(
                    alerts,
                    parts,
                    opened_here,
                    "SMS breaker open: the send is withheld and its alerts escalated (tocsin breaker)"
                );
                Err(Withheld::Breaker(Suppression { since: now, reason: Spend::withheld_reason(&breaker, ceiling) }))
            }
            Err(e) => Err(Withheld::Unavailable(e)),
        }
    }
}
