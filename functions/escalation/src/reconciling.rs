//! Reconciling unknown outcomes: the delivery logs searched for each, within the run's time, and
//! what was found judged — the alert's own SMS (tied to it by the key its events echo under End
//! User Messaging, else by the message index or a digest sibling's recorded answer), records
//! nothing ties to it (unattributed: never taken for its own), or nothing yet. [`crate::settling`]
//! writes it.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::reconcile::{Verdict, Window, judge};
use tocsin::domain::send_context::Subject;
use tocsin::ports::{
    DeliveryLogSearch, Entropy, EscalationQueue, SearchError, SearchFor, SendQueue, after, time_left, within,
};

use crate::{Escalator, RunSummary, SweepClock, SweepRegistry, SweepStore};

/// The longest one log search may take; a slow search never holds up the next run's escalations.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Records read per search at most (two log groups, a narrow window, one number).
const SEARCH_MAX_RECORDS: usize = 200;

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// Searches the delivery-status logs for each unknown outcome, within the time budget. A
    /// throttled search stops the searching for this run (the rest stays due for the next run).
    pub(crate) async fn reconcile(&self, records: Vec<IntentRecord>, stop_at: DateTime<Utc>, summary: &mut RunSummary) {
        let mut left = records.into_iter();
        for record in left.by_ref() {
            let remaining = time_left(&self.clock, stop_at);
            if remaining.is_zero() {
                summary.reconcile_deferred += 1;
                break;
            }
            let until = after(self.clock.now(), remaining.min(SEARCH_TIMEOUT));
            match self.reconcile_one(&record, until).await.transpose() {
                Some(Ok(Verdict::Link { .. })) => summary.reconciled += 1,
                Some(Ok(Verdict::Unattributed(_))) => summary.unattributed += 1,
                Some(Ok(Verdict::NoMatch)) => summary.still_unknown += 1,
                Some(Err(SearchError::Throttled)) => {
                    tracing::warn!("FilterLogEvents throttled; reconciliation resumes next run");
                    summary.reconcile_deferred += 1;
                    break;
                }
                Some(Err(SearchError::Failed(e))) => {
                    summary.errors += 1;
                    tracing::warn!(key = record.intent.key.short(), error = %e, "reconciliation failed; retried next run");
                }
                None => {
                    summary.reconcile_deferred += 1;
                    tracing::warn!(key = record.intent.key.short(), "log search too slow; retried next run");
                }
            }
        }
        summary.reconcile_deferred += left.count();
    }

    /// Searches for one unknown outcome and settles what the search found. Only the search is
    /// bounded by `search_until` (`None` when it ran out): once records are found, their writes
    /// run to the end, so a digest's members are never settled half way by a timeout.
    pub(crate) async fn reconcile_one(
        &self,
        record: &IntentRecord,
        search_until: DateTime<Utc>,
    ) -> Result<Option<Verdict>, SearchError> {
        let key = &record.intent.key;
        let recipient = &record.intent.recipient;
        let Some(claimed_at) = record.status.claimed_at else { return Ok(Some(Verdict::NoMatch)) };
        let window = Window::of_attempt(claimed_at, self.config.reconcile_margin);
        // A storm-mode digest's SMS is every member's. Its members learn what SNS answered each
        // with a write of their own; a member whose write never landed learns it from a sibling's.
        let mut digest = match &record.status.digest_id {
            Some(digest_id) => self.store.get_digest(digest_id).await?,
            // Its sender ended before recording which digest its SMS was: the digest recorded for
            // this recipient in the attempt's window that holds it.
            None => self
                .store
                .digests_to(recipient, window.from, window.to)
                .await?
                .into_iter()
                .find(|d| d.members.contains(key)),
        }
        // Only the current attempt's digest (an operator may have resent the member alone since).
        .filter(|d| window.contains(d.created_at));
        let sibling = match &digest {
            Some(d) => self.sibling_knows(record, d).await?,
            None => None,
        };
        let what = SearchFor { recipient, key, digest: digest.as_ref().map(|d| &d.id) };
        let Some(found) = within(
            &self.clock,
            search_until,
            self.logs.records_for(what, window.logged_by(self.clock.now()), SEARCH_MAX_RECORDS),
        )
        .await
        .transpose()?
        else {
            return Ok(None);
        };
        // Messages already tied to other intents (the same number alerted twice) do not count.
        let mut linked_elsewhere = HashSet::new();
        // Messages tied to this intent — by the context its events echo (End User Messaging), else
        // by the message index: the only records that are its own.
        let mut indexed_to_it = HashSet::new();
        for f in &found {
            let Some(context) = &f.record.context else { continue };
            let own = match &context.subject {
                // This attempt's SMS: the context names the alert and the attempt that sent it.
                Subject::Alert { key: k, attempt } => k == key && record.status.attempt_id.as_deref() == Some(attempt),
                Subject::Digest { id } => digest.as_ref().is_some_and(|d| &d.id == id),
                Subject::Reply { .. } => false,
            };
            if own {
                indexed_to_it.insert(f.record.message_id.clone());
            } else {
                linked_elsewhere.insert(f.record.message_id.clone());
            }
        }
        // In order: the lookups are the same whichever run makes them. A record that names its
        // alert needs none.
        let ids: std::collections::BTreeSet<String> =
            found.iter().filter(|f| f.record.context.is_none()).map(|f| f.record.message_id.clone()).collect();
        for id in ids {
            // A digest's SMS covering this intent is its own. One tied to another intent alone is
            // that intent's — even a digest sibling's: the sibling may have been sent alone since,
            // its stale digest id still naming this digest (the simulation's seed 10137).
            match self.store.lookup(&id).await? {
                Some(entry) if entry.covers(key) => {
                    // Indexed as a digest's SMS: that digest, whatever the member's own writes
                    // say and whether or not the recipient's digests are visible yet (the index
                    // of them lags) — its records then reach every member, and the digest's entry
                    // is never narrowed to this member alone (simulation seed 127064).
                    if digest.is_none()
                        && let Some((digest_id, _)) = &entry.digest
                    {
                        digest = self.store.get_digest(digest_id).await?.filter(|d| window.contains(d.created_at));
                    }
                    indexed_to_it.insert(id);
                }
                Some(_) => {
                    linked_elsewhere.insert(id);
                }
                None => {}
            }
        }
        let verdict = match sibling {
            // The digest's SMS is known: its records, or, with none yet, what SNS answered.
            Some((message_id, accepted_at)) => {
                let mut records: Vec<_> = found.into_iter().filter(|f| f.record.message_id == message_id).collect();
                // Progress (End User Messaging's non-final carrier acceptance) is no outcome: with
                // none among the records, the member is accepted as its siblings are, the same
                // as with no record at all (simulation seed 202813: it stayed `send_unknown`).
                if !records.iter().any(|f| f.record.status.receipt().is_some()) {
                    if let Some(d) = &digest {
                        self.accepted_as_sibling(record, d, &message_id, accepted_at).await?;
                    }
                    return Ok(Some(Verdict::Link { sns_message_id: message_id, records: Vec::new() }));
                }
                records.sort_by_key(|f| (f.timestamp_ms, f.log_event_id.clone()));
                Verdict::Link { sns_message_id: message_id, records }
            }
            // Only an SMS the index ties to this intent is its own; any other record to the
            // number in the window may be another sender's, and is kept for a human.
            None => judge(recipient, window, found, &indexed_to_it, &linked_elsewhere),
        };
        self.settle(record, &verdict, digest).await?;
        Ok(Some(verdict))
    }
}

/// Puts `items` in a random order drawn from `entropy` (Fisher–Yates).
pub(crate) fn shuffle<T, E: Entropy + ?Sized>(items: &mut [T], entropy: &E) {
    for i in (1..items.len()).rev() {
        let j = usize::try_from(entropy.next_u64() % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::shuffle;
    use tocsin::ports::Entropy;

    /// SplitMix64 over a counter: a deterministic stand-in for the system's randomness.
    struct Counter(AtomicU64);

    impl Entropy for Counter {
        fn next_u64(&self) -> u64 {
            let mut z = self.0.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// A run stops searching at its first throttled search: whatever order the due-index gives,
    /// each unknown outcome must come first in some run, or one listed last is never searched.
    #[test]
    fn every_unknown_outcome_is_searched_first_in_some_run_whatever_the_index_order() {
        let entropy = Counter(AtomicU64::new(7));
        let mut first = [false; 10];
        for _ in 0..100 {
            let mut due: Vec<usize> = (0..10).collect();
            shuffle(&mut due, &entropy);
            first[due[0]] = true;
            let mut sorted = due.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>(), "a permutation: nothing lost, nothing twice");
        }
        assert!(first.iter().all(|f| *f), "every one came first at least once: {first:?}");
    }
}
