//! Rivals: the other alerts to a number, their outcome open too, that could own an SMS a search
//! found. Reads only; an SMS with rivals is not the searching alert's to take.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::reconcile::{Rivals, Window};
use tocsin::domain::{IdempotencyKey, State};
use tocsin::ports::{DeliveryLogSearch, DigestRecord, EscalationQueue, PortError, SendQueue};

use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// The other intents to the record's number that could own an SMS written at `sent`: their
    /// outcome open too (`sending`, `send_unknown`) and their claim inside its window. This
    /// attempt's digest siblings share its SMS and do not count — those whose current attempt is
    /// that digest: a digest found by membership alone may never have been sent (handed back),
    /// its members since sent in another digest, which is not this one's SMS. Until they are told
    /// apart the SMS is not this attempt's to take — an alert whose publish never went out is
    /// never called delivered on another alert's SMS.
    pub(crate) async fn rivals(
        &self,
        record: &IntentRecord,
        digest: Option<&DigestRecord>,
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
}
