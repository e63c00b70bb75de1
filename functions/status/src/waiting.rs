//! Young records that match no index entry yet: they may be ahead of the sender's MessageId write,
//! so they wait (bounded), are looked up again, then matched to an open attempt or kept as orphans.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tocsin::domain::reconcile::Window;
use tocsin::domain::{IdempotencyKey, PhoneNumber};
use tocsin::ports::{Clock, PortError, after};
use tocsin::services::receipts::Link;

use crate::chunk::{copy_error, entry_of};
use crate::{CONCURRENCY, Parsed, Processed, StatusHandler, StatusRegistry, StatusStore};

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// Young unmatched records: one wait for the chunk (bounded as [`Self::handle`] says), one
    /// lookup again, then the open-index within the invocation's budget, else an orphan.
    pub(crate) async fn settle_young(
        &self,
        log_group: &str,
        young: Vec<Parsed>,
        wait_horizon: DateTime<Utc>,
        budget: &AtomicUsize,
    ) -> Vec<Processed> {
        if young.is_empty() {
            return Vec::new();
        }
        let until = young
            .iter()
            .filter_map(|p| p.written_at)
            .map(|at| after(at, self.config.orphan_wait))
            .max()
            .map_or(wait_horizon, |t| t.min(wait_horizon));
        self.clock.sleep_until(until).await;
        let ids: Vec<String> = young.iter().map(|p| p.record.message_id.clone()).collect();
        let index = match self.store.lookup_many(&ids).await {
            Ok(index) => index,
            Err(e) => return young.iter().map(|_| (Err(copy_error(&e)), false)).collect(),
        };
        // `None`: matched nothing, to be kept as an orphan with the others.
        let settled: Vec<(&Parsed, Option<Processed>)> = futures::stream::iter(&young)
            .map(|p| {
                let entry = entry_of(&index, &p.record.message_id);
                async move {
                    match entry {
                        Some(Ok(entry)) => return (p, Some(self.apply_indexed(p, entry).await)),
                        Some(Err(e)) => return (p, Some((Err(e), false))),
                        None => {}
                    }
                    if budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok() {
                        match self.open_attempt_for(p).await {
                            Ok(Some((key, recipient))) => {
                                return (p, Some(self.apply(p, key, recipient, Link::Reconciled).await));
                            }
                            Ok(None) => {}
                            Err(e) => return (p, Some((Err(e), false))),
                        }
                    }
                    (p, None)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let unmatched: Vec<&Parsed> = settled.iter().filter(|(_, r)| r.is_none()).map(|(p, _)| *p).collect();
        let mut out = self.orphans(log_group, &unmatched).await;
        out.extend(settled.into_iter().filter_map(|(_, r)| r));
        out
    }

    /// A record whose message id is in no index may still be ours: the sender crashed after
    /// publishing, or its MessageId write has not landed. One open attempt (sending or
    /// send_unknown) to the record's destination, claimed inside the record's window, is it.
    pub(crate) async fn open_attempt_for(
        &self,
        p: &Parsed,
    ) -> Result<Option<(IdempotencyKey, PhoneNumber)>, PortError> {
        let record = &p.record;
        let Some(destination) = record.destination.as_deref().and_then(|d| PhoneNumber::parse(d).ok()) else {
            return Ok(None);
        };
        let Some(at) = p.written_at else {
            return Ok(None);
        };
        // The record's own timestamp is untrusted input: never let it overflow the calendar.
        let Some(claims) = Window::claims_that_could_send(at, self.config.reconcile_margin) else {
            return Ok(None);
        };
        let open = self.store.open_attempts_to(&destination, claims.from, claims.to).await?;
        match open.as_slice() {
            // An operator's attempt in the window (a resend past its deadline, which the
            // pending-index no longer shows) could own the record as well: not this function's to
            // decide; the sweep's reconciliation leaves it to a human.
            [one]
                if self
                    .store
                    .unsettled_to(&destination, claims.from, claims.to)
                    .await?
                    .iter()
                    .any(|(key, _)| key != &one.intent.key) =>
            {
                Ok(None)
            }
            [one] => {
                tracing::info!(key = one.intent.key.short(), sns_message_id = %record.message_id, "orphan record matched to an open attempt");
                Ok(Some((one.intent.key.clone(), one.intent.recipient.clone())))
            }
            _ => Ok(None),
        }
    }
}
