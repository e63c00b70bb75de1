//! Orphaned records: a delivery record that overtook the sender's MessageId write, kept by the
//! status function under its message id, applied to its intent at the intent's next check.

use chrono::{DateTime, Utc};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::ports::{DeliveryLogSearch, EscalationQueue, PortError, SendQueue};
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
}
