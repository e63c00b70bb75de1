//! Young records that match no index entry yet: they may be ahead of the sender's MessageId write,
//! so they wait (bounded) and are looked up again; those still unmatched are kept as orphans. A
//! record is applied only through the index — never matched to an alert by number and time (the
//! phone receives other senders' SMS too): an orphan that turns out to be an alert's, once its
//! message id is indexed, is applied by the sweep ([`tocsin::ports::MessageIndex::orphans_of`]).

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tocsin::domain::carrier_traffic::{CountryTallies, Sender};
use tocsin::ports::{Clock, after};

use crate::chunk::{copy_error, entry_of};
use crate::{CONCURRENCY, Parsed, Processed, StatusHandler, StatusRegistry, StatusStore};

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// Young unmatched records: one wait for the chunk (bounded as [`Self::handle`] says), one
    /// lookup again, then applied through the index, else kept as orphans. With their traffic
    /// tallies: tocsin's once the index has them, other applications' if it still has not.
    pub(crate) async fn settle_young(
        &self,
        log_group: &str,
        young: Vec<Parsed>,
        wait_horizon: DateTime<Utc>,
    ) -> (Vec<Processed>, CountryTallies) {
        if young.is_empty() {
            return (Vec::new(), CountryTallies::new());
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
            Err(e) => return (young.iter().map(|_| (Err(copy_error(&e)), false)).collect(), CountryTallies::new()),
        };
        let (mut indexed, mut unmatched) = (Vec::new(), Vec::new());
        for p in &young {
            match entry_of(&index, &p.record.message_id) {
                Some(entry) => indexed.push((p, entry)),
                None => unmatched.push(p),
            }
        }
        let traffic = self.traffic_tallies(
            indexed.iter().map(|(p, _)| (*p, Sender::Tocsin)).chain(unmatched.iter().map(|p| (*p, Sender::Other))),
        );
        let applied = futures::stream::iter(indexed)
            .map(|(p, entry)| async move {
                match entry {
                    Ok(entry) => self.apply_indexed(p, entry).await,
                    Err(e) => (Err(e), false),
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>();
        let (mut out, orphaned) = futures::join!(applied, self.orphans(log_group, &unmatched));
        out.extend(orphaned);
        (out, traffic)
    }
}
