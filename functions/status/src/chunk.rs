//! One chunk of log events (up to 100): parsed; the records that name their alert by key applied
//! at once; the rest looked up in one call, then each sent on its way — applied, waited for, or
//! kept as an orphan. Writes nothing itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_lambda_events::cloudwatch_logs::LogEntry;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tocsin::domain::carrier_traffic::{CountryTallies, Sender};
use tocsin::domain::delivery::{DeliveryRecord, parse_record};
use tocsin::domain::provider::FailureClass;
use tocsin::ports::{Clock, IndexEntries, IndexEntry, PortError};

use crate::traffic::add_all;
use crate::{CONCURRENCY, EventOutcome, Parsed, Processed, StatusHandler, StatusRegistry, StatusStore};

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// One chunk of log events: parsed, looked up in one call, then applied, waited for, or kept.
    pub(crate) async fn process_chunk(
        &self,
        log_group: &str,
        entries: Vec<LogEntry>,
        wait_horizon: DateTime<Utc>,
        spend_exhausted: &AtomicUsize,
    ) -> (Vec<Processed>, CountryTallies) {
        let mut out: Vec<Processed> = Vec::with_capacity(entries.len());
        let mut parsed = Vec::with_capacity(entries.len());
        for entry in entries {
            match parse_record(&entry.message) {
                Ok(record) => {
                    let written_at =
                        record.timestamp.or_else(|| chrono::DateTime::from_timestamp_millis(entry.timestamp));
                    parsed.push(Parsed { entry, record, written_at })
                }
                Err(e) => {
                    // Never log the message: it holds a phone number.
                    tracing::warn!(log_event_id = %entry.id, error = %e, "unparseable delivery record skipped");
                    out.push((Ok(EventOutcome::Unparseable), false));
                }
            }
        }
        if parsed.is_empty() {
            return (out, CountryTallies::new());
        }
        // Any application's record counts: the limit is the account's, so a foreign SMS refused
        // for it means tocsin's are refused too.
        let refused_for_spend = parsed.iter().filter(|p| says_spend_exhausted(&p.record)).count();
        spend_exhausted.fetch_add(refused_for_spend, Ordering::Relaxed);
        // Every record's carrier, minute, outcome and dwell — tocsin's and other applications' —
        // for the carrier view's traffic signal, returned for the invocation to write once the
        // whole batch has succeeded ([`Self::process`]); a record is tocsin's when its context
        // names an alert, or once this stack's index has it.
        // A record whose context names its alert needs no index: it is applied by its key. The
        // rest (SNS's records, another application's events) are looked up by message id. One
        // alert's (or digest's) events are applied one after another, in the order they were
        // logged — the carrier's acceptance before its delivery — and different alerts' side by
        // side: two events of one alert applied at once would contend for its item, and the loser
        // would be refused, read it and write again.
        let (keyed, parsed): (Vec<Parsed>, Vec<Parsed>) = parsed.into_iter().partition(|p| p.record.context.is_some());
        // A record whose context names an alert is a tocsin stack's (this one's, or another's that
        // shares the event group): alert traffic, not the carrier's steady load.
        let mut traffic = self.traffic_tallies(keyed.iter().map(|p| (p, Sender::Tocsin)));
        let keyed = futures::stream::iter(by_subject(keyed))
            .map(|events| self.apply_keyed_group(events))
            .buffer_unordered(CONCURRENCY)
            .flat_map(futures::stream::iter)
            .collect::<Vec<_>>();
        if parsed.is_empty() {
            out.extend(keyed.await);
            return (out, traffic);
        }
        let ids: Vec<String> = parsed.iter().map(|p| p.record.message_id.clone()).collect();
        let (index, keyed) = futures::join!(self.store.lookup_many(&ids), keyed);
        out.extend(keyed);
        let index = match index {
            Ok(index) => index,
            Err(e) => {
                // The batch fails and is tried again: that try tallies it, knowing whose each is.
                out.extend(parsed.iter().map(|_| (Err(copy_error(&e)), false)));
                return (out, traffic);
            }
        };
        let now = self.clock.now();
        let wait = chrono::Duration::from_std(self.config.orphan_wait).unwrap_or(chrono::Duration::zero());
        let (mut indexed, mut young, mut old) = (Vec::new(), Vec::new(), Vec::new());
        for p in parsed {
            // `get`, not `remove`: one batch can carry the same message id twice (a redelivery).
            match entry_of(&index, &p.record.message_id) {
                Some(entry) => indexed.push((p, entry)),
                // Younger than the wait (or stamped in the future): it may be ahead of the sender.
                None if p.written_at.is_none_or(|at| now.signed_duration_since(at) < wait) => young.push(p),
                None => old.push(p),
            }
        }
        add_all(
            &mut traffic,
            self.traffic_tallies(
                indexed.iter().map(|(p, _)| (p, Sender::Tocsin)).chain(old.iter().map(|p| (p, Sender::Other))),
            ),
        );
        let old: Vec<&Parsed> = old.iter().collect();
        let (applied, (waited, young_traffic), orphaned) = futures::join!(
            futures::stream::iter(indexed)
                .map(|(p, entry)| async move {
                    match entry {
                        Ok(entry) => self.apply_indexed(&p, entry).await,
                        Err(e) => (Err(e), false),
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect::<Vec<_>>(),
            self.settle_young(log_group, young, wait_horizon),
            self.orphans(log_group, &old),
        );
        add_all(&mut traffic, young_traffic);
        out.extend(applied);
        out.extend(waited);
        out.extend(orphaned);
        (out, traffic)
    }
}

/// Keyed records grouped by what their context names (a stack's alert or digest), each group in
/// log order, the groups in the order their first record came.
fn by_subject(keyed: Vec<Parsed>) -> Vec<Vec<Parsed>> {
    let mut groups: Vec<Vec<Parsed>> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for p in keyed {
        let Some(context) = &p.record.context else {
            groups.push(vec![p]);
            continue;
        };
        let subject = (context.stack.clone(), context.search_term().to_owned());
        match index.get(&subject) {
            Some(&at) => groups[at].push(p),
            None => {
                index.insert(subject, groups.len());
                groups.push(vec![p]);
            }
        }
    }
    groups
}

pub(crate) fn entry_of(index: &IndexEntries, message_id: &str) -> Option<Result<IndexEntry, PortError>> {
    index.get(message_id).map(|e| match e {
        Ok(found) => Ok(found.clone()),
        Err(err) => Err(copy_error(err)),
    })
}

/// The same failure, for every record of a chunk whose shared lookup failed.
pub(crate) fn copy_error(e: &PortError) -> PortError {
    match e {
        PortError::Unavailable { operation, message } => PortError::Unavailable { operation, message: message.clone() },
        PortError::Corrupt { what, message } => PortError::Corrupt { what: what.clone(), message: message.clone() },
    }
}

/// A failure record whose provider response says the account's SMS spend limit is used up.
pub(crate) fn says_spend_exhausted(r: &DeliveryRecord) -> bool {
    r.failure.is_some_and(|c| c.class == FailureClass::AccountLimit)
}
