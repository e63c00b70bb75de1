//! Screening a claimed intent before any send: past its deadline (stale), or its recipient
//! suppressed (off the recipients roster since the alert was accepted, the registry, and the
//! provider's opt-out list after a re-enable). Publishes nothing.

use chrono::{DateTime, Utc};

use crate::claiming::Claimed;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::roster::RecipientPolicy;
use tocsin::domain::{PhoneNumber, State};
use tocsin::ports::{
    OptIn, PortError, RecipientRegistry, RecipientRoster, SmsGateway, Standing, StatusPatch, Suppression,
};

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
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
            ObservationKind::Suppressed { registry_reason: s.reason.clone() },
            // The reason travels to the escalation on-call reads.
            StatusPatch { clear_claim: true, last_error: Some(s.reason), ..Default::default() },
            now,
        );
        self.record(t).await.map_or(Outcome::Retry, |()| Outcome::Suppressed)
    }

    /// The recipient's standing in the registry. Re-enabled by an operator: the provider may still
    /// hold the number as opted out (SNS would accept the publish and drop it, End User Messaging
    /// refuses it) — asked once, before the first send after re-enabling. If the operator asked
    /// for it (`tocsin re-enable --opt-in`, audited), the number is opted back in here: no
    /// operator role may call OptInPhoneNumber or DeleteOptedOutNumber itself.
    pub(crate) async fn standing(&self, recipient: &PhoneNumber, now: DateTime<Utc>) -> Result<Standing, PortError> {
        // The roster in force now, not the one intake saw: an entry removed since the alert was
        // accepted stops its SMS (the alert is suppressed, so the sweep escalates it).
        if self.config.recipient_policy == RecipientPolicy::Roster
            && self.roster.roster(&self.registry, now).await?.entry_for(recipient).is_none()
        {
            return Ok(Standing::Suppressed(Suppression {
                since: now,
                reason: "not on the recipients roster any more (removed after the alert was accepted)".into(),
            }));
        }
        match self.registry.standing(recipient).await? {
            Standing::ReEnabledUnchecked { opt_in } => {
                if !self.gateway.is_opted_out(recipient).await? {
                    return self.registry.opt_out_checked(recipient).await.map(|()| Standing::Clear);
                }
                if !opt_in {
                    return Ok(Standing::Suppressed(Suppression {
                        since: now,
                        reason: "re-enabled, but the SMS provider still holds the number as opted out: the person \
                                 must reply START, or re-enable with --opt-in"
                            .into(),
                    }));
                }
                match self.gateway.opt_in(recipient).await? {
                    OptIn::Done => {
                        tracing::warn!(recipient = %recipient.masked(), "opted back in at the provider, as the operator's audited re-enable asked");
                        self.registry.opt_out_checked(recipient).await.map(|()| Standing::Clear)
                    }
                    OptIn::Refused(why) => Ok(Standing::Suppressed(Suppression {
                        since: now,
                        reason: format!(
                            "re-enabled with --opt-in, but the SMS provider refused to opt the number back in \
                             ({why}; AWS allows it once per 30 days): the person must reply START"
                        ),
                    })),
                }
            }
            other => Ok(other),
        }
    }
}
