//! Orphaned records: a delivery record that overtook the sender's MessageId write, kept by the
//! status function under its message id, applied to its intent at the intent's next check.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::reconcile::Window;
use tocsin::ports::{DeliveryLogSearch, EscalationQueue, LoggedRecord, OrphanRecord, PortError, SendQueue};
use tocsin::services::receipts::{self, Link, LogEvent};

use crate::{Escalator, SweepClock, SweepRegistry, SweepStore};

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// An accepted intent still waiting for its delivery record, whose record overtook the
    /// sender's MessageId write: the status function saw it first, too old to wait for
    /// (`TOCSIN_ORPHAN_WAIT`), found no index entry, and kept it as an orphan under the message
    /// id. It is applied here — before a delay is suspected or the alert escalated as silent — so
    /// the alert says what its record says and a dead number is suppressed. One read per due,
    /// silent accepted intent (nearly always empty). Returns the intent as it is then.
    pub(crate) async fn orphaned_fate(
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
        let mut digests_fate = None;
        for orphan in &orphans {
            let Ok(delivery) = tocsin::domain::delivery::parse_record(&orphan.message) else { continue };
            if delivery.message_id != message_id {
                continue;
            }
            if delivery.status.receipt().is_some() && digests_fate.is_none() {
                digests_fate = Some(orphan);
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
        if let Some(orphan) = digests_fate {
            self.orphans_fate_to_digest(record, orphan, now).await?;
        }
        tracing::info!(
            key = key.short(),
            records = applied,
            "delivery records that overtook the sender's MessageId write applied"
        );
        self.store.get(key).await
    }

    /// A digest member's orphaned record is its digest's SMS's: every member shares it. Kept as
    /// an orphan, it reaches each member only at that member's own next check — for a member
    /// already escalated and suspected late, days away, long after the orphan is forgotten
    /// (simulation seed 150546: two of seven members never learned their delivery). So the
    /// digest's fate is spread as the status function spreads it: every member still waiting is
    /// brought forward to the next run, then the fate is recorded on the digest, where each
    /// member's sweep finds it ([`Self::digest_fate`]).
    async fn orphans_fate_to_digest(
        &self,
        record: &IntentRecord,
        orphan: &OrphanRecord,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let s = &record.status;
        let (Some(digest_id), Some(claimed_at)) = (s.digest_id.as_ref(), s.claimed_at) else { return Ok(()) };
        let window = Window::of_attempt(claimed_at, self.config.reconcile_margin);
        let Some(digest) = self.store.get_digest(digest_id).await?.filter(|d| window.contains(d.created_at)) else {
            return Ok(());
        };
        if digest.outcome.is_some() {
            return Ok(());
        }
        let key = &record.intent.key;
        for member in digest.members.iter().filter(|m| *m != key) {
            self.store.bring_check_forward(member, now, &State::AWAITING_RECEIPT).await?;
        }
        let outcome = LoggedRecord {
            log_event_id: orphan.log_event_id.clone(),
            timestamp_ms: orphan.received_at.timestamp_millis(),
            message: orphan.message.clone(),
        };
        self.store.record_digest_outcome(digest_id, &outcome).await?;
        tracing::info!(
            key = key.short(),
            digest = digest_id.short(),
            "orphaned record of a digest's SMS spread to its members"
        );
        Ok(())
    }
}
