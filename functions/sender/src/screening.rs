//! Screening a claimed intent before any send: past its deadline (stale), or its recipient
//! suppressed (the registry, and SNS's opt-out list after a re-enable). Publishes nothing.

use chrono::{DateTime, Utc};

use crate::claiming::Claimed;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::{PhoneNumber, State};
use tocsin::ports::{PortError, RecipientRegistry, SmsGateway, Standing, StatusPatch, Suppression};

impl<S: SenderStore, R: RecipientRegistry, G: SmsGateway, Q: SenderQueue, C: SenderClock> Sender<S, R, G, Q, C> {
    /// Past its deadline: not sent (the sweep escalates it).
    pub(crate) async fn stale(&self, c: &Claimed<'_>, now: DateTime<Utc>) -> Outcome {
        let t = self.settle(
            &c.record,
            &c.attempt_id,
            State::Stale,
            ObservationKind::Stale { deadline: c.record.intent.deadline },
            StatusPatch { clear_claim: true, ..Default::default() },
            now,
        );
        self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Stale)
    }

    pub(crate) async fn suppressed(&self, c: &Claimed<'_>, s: Suppression, now: DateTime<Utc>) -> Outcome {
        let t = self.settle(
            &c.record,
            &c.attempt_id,
            State::Suppressed,
            ObservationKind::Suppressed { registry_reason: s.reason },
            StatusPatch { clear_claim: true, ..Default::default() },
            now,
        );
        self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Suppressed)
    }

    /// The recipient's standing in the registry. Re-enabled by an operator: SNS may still hold the
    /// number as opted out, and would accept the publish and drop it — asked once, before the
    /// first send after re-enabling.
    pub(crate) async fn standing(&self, recipient: &PhoneNumber, now: DateTime<Utc>) -> Result<Standing, PortError> {
        match self.registry.standing(recipient).await? {
            Standing::ReEnabledUnchecked => {
                if self.gateway.is_opted_out(recipient).await? {
                    Ok(Standing::Suppressed(Suppression {
                        since: now,
                        reason:
                            "re-enabled, but SNS still holds the number as opted out: the person must reply START, \
                                 or re-enable with --opt-in"
                                .into(),
                    }))
                } else {
                    self.registry.opt_out_checked(recipient).await.map(|()| Standing::Clear)
                }
            }
            other => Ok(other),
        }
    }
}
