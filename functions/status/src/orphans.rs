//! Orphans: records that matched no intent (nearly all other applications' SMS), kept under their
//! message id for `ORPHAN_RETENTION` in as few writes as the store allows. Applies nothing.

use tocsin::domain::delivery::ORPHAN_RETENTION;
use tocsin::domain::phone::mask_phone_like;
use tocsin::ports::{Clock, OrphanRecord};

use crate::chunk::copy_error;
use crate::{EventOutcome, Parsed, Processed, StatusHandler, StatusRegistry, StatusStore};

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// Keeps records that matched no intent, for [`ORPHAN_RETENTION`], in as few writes as the
    /// store allows (25 per call on DynamoDB): nearly all are other applications' SMS.
    pub(crate) async fn orphans(&self, log_group: &str, records: &[&Parsed]) -> Vec<Processed> {
        if records.is_empty() {
            return Vec::new();
        }
        let now = self.clock.now();
        let batch: Vec<OrphanRecord> = records
            .iter()
            .map(|p| {
                // Debug, not info: most of these are other applications' SMS, by the thousand; the
                // batch line and the `foreign_records` metric count them.
                tracing::debug!(
                    log_event_id = %p.entry.id,
                    sns_message_id = %p.record.message_id,
                    destination = %p.record.destination.as_deref().map(mask_phone_like).unwrap_or_default(),
                    "delivery record matches no intent; kept as orphan"
                );
                OrphanRecord {
                    log_event_id: p.entry.id.clone(),
                    sns_message_id: p.record.message_id.clone(),
                    log_group: log_group.to_owned(),
                    message: p.entry.message.clone(),
                    received_at: now,
                    expires_at: now + ORPHAN_RETENTION,
                }
            })
            .collect();
        match self.store.keep_orphans(&batch).await {
            Ok(()) => records.iter().map(|_| (Ok(EventOutcome::Orphaned), false)).collect(),
            Err(e) => records.iter().map(|_| (Err(copy_error(&e)), false)).collect(),
        }
    }
}
