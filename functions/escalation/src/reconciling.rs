//! Reconciling unknown outcomes: the delivery logs searched for each, within the run's time, and
//! what was found judged — the alert's own SMS (tied to it by the key its events echo under End
//! User Messaging, else by the message index, the attempt's own stored answer or a digest
//! sibling's recorded answer), records nothing ties to it (unattributed: never taken for its
//! own), or nothing yet. [`crate::settling`] writes it.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::ObservationKind;
use tocsin::domain::reconcile::{Verdict, Window, judge};
use tocsin::domain::send_context::Subject;
use tocsin::ports::{DeliveryLogSearch, EscalationQueue, SearchError, SearchFor, SendQueue, after, time_left, within};

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
            // Its sender ended before recording which digest its SMS was: the digest its current
            // attempt made, if it made one — the latest recorded for this recipient that holds
            // it, made at or after its claim (the sender makes it after claiming, on the same
            // clock). One made before the claim is an earlier attempt's: its write landed with
            // its answer lost, the member was handed back unsent and claimed again a moment
            // later, into another digest (simulation seed 189177). Only a guess by time: what
            // ties the SMS found to a digest (its index entry, its context) overrides it below.
            None => self
                .store
                .digests_to(recipient, window.from, window.to)
                .await?
                .into_iter()
                .filter(|d| d.members.contains(key) && d.created_at >= claimed_at)
                .max_by_key(|d| d.created_at),
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
        // Of those, the SMS the index ties to this intent alone — an operator's resend of it since,
        // or its own earlier reconciliation: never its digest's, whatever digest it names.
        let mut its_alone = HashSet::new();
        for f in &found {
            let Some(context) = &f.record.context else { continue };
            let own = match &context.subject {
                // This attempt's SMS: the context names the alert and the attempt that sent it —
                // the alert alone, whatever digest the listing suggests.
                Subject::Alert { key: k, attempt } => {
                    let own = k == key && record.status.attempt_id.as_deref() == Some(attempt);
                    if own {
                        its_alone.insert(f.record.message_id.clone());
                    }
                    own
                }
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
        // What the provider answered this attempt, when its sender stored it (facts first) and the
        // writes after it never landed — read once, and only for a record no index names.
        let mut answered: Option<Option<String>> = None;
        for id in ids {
            // A digest's SMS covering this intent is its own. One tied to another intent alone is
            // that intent's — even a digest sibling's: the sibling may have been sent alone since,
            // its stale digest id still naming this digest (the simulation's seed 10137).
            match self.store.lookup(&id).await? {
                Some(entry) if entry.covers(key) => {
                    // Indexed as a digest's SMS: that digest, whatever the member's own writes
                    // say and whether or not the recipient's digests are visible yet (the index
                    // of them lags) — its records then reach every member, and the digest's entry
                    // is never narrowed to this member alone (simulation seed 127064). The entry
                    // ties the SMS to its digest by key, so it overrides a digest found by time:
                    // kept, the guess would be indexed to the SMS and its members settled on
                    // nobody's word (seed 189177: an earlier attempt's digest, never sent, took
                    // the SMS, and seven alerts it never carried were called delivered).
                    match &entry.digest {
                        Some((digest_id, _)) => {
                            if digest.as_ref().is_none_or(|d| &d.id != digest_id) {
                                digest =
                                    self.store.get_digest(digest_id).await?.filter(|d| window.contains(d.created_at));
                            }
                        }
                        None => {
                            its_alone.insert(id.clone());
                        }
                    }
                    indexed_to_it.insert(id);
                }
                Some(_) => {
                    linked_elsewhere.insert(id);
                }
                None => {
                    // No index names it — its sender's index write may never have landed (a
                    // partition failing every try until the invocation ended: simulation seed
                    // 227966). The attempt's own stored answer ties the SMS to this alert by key,
                    // as the index would have; a digest's SMS is its digest's (found above), so
                    // only an alert sent alone is tied this way.
                    if digest.is_none() {
                        if answered.is_none() {
                            answered = Some(self.answer_on_record(record).await?);
                        }
                        if answered.as_ref().is_some_and(|a| a.as_deref() == Some(id.as_str())) {
                            its_alone.insert(id.clone());
                            indexed_to_it.insert(id);
                        }
                    }
                }
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
                    self.searched_again_later_if_still_unknown(record, self.clock.now()).await?;
                    return Ok(Some(Verdict::Link { sns_message_id: message_id, records: Vec::new() }));
                }
                records.sort_by_key(|f| (f.timestamp_ms, f.log_event_id.clone()));
                Verdict::Link { sns_message_id: message_id, records }
            }
            // Only an SMS the index ties to this intent is its own; any other record to the
            // number in the window may be another sender's, and is kept for a human.
            None => judge(recipient, window, found, &indexed_to_it, &linked_elsewhere),
        };
        // An SMS tied to this intent alone settles it alone: its digest's members were not in it
        // (simulation seed 128945: an operator's resend of one member, delivered, was applied to
        // all fifteen members of the digest whose outcome was unknown — fourteen false
        // deliveries).
        let digest = match &verdict {
            Verdict::Link { sns_message_id, .. } if its_alone.contains(sns_message_id) => None,
            _ => digest,
        };
        self.settle(record, &verdict, digest).await?;
        Ok(Some(verdict))
    }
}

impl<S: SweepStore, Q: SendQueue, E: EscalationQueue, L: DeliveryLogSearch, R: SweepRegistry, C: SweepClock>
    Escalator<S, Q, E, L, R, C>
{
    /// The message id the provider gave the intent's current attempt, if that attempt stored its
    /// answer: the sender writes its observation before the message index and the state, so a
    /// sender whose later writes never landed (its claim lapsed to `send_unknown`) still left it.
    async fn answer_on_record(&self, record: &IntentRecord) -> Result<Option<String>, SearchError> {
        let Some(attempt) = record.status.attempt_id.as_deref() else { return Ok(None) };
        let observations = self.store.observations(&record.intent.key).await?;
        Ok(observations.into_iter().find_map(|o| match o.kind {
            ObservationKind::Accepted { attempt_id, sns_message_id } if attempt_id == attempt => Some(sns_message_id),
            _ => None,
        }))
    }
}

/// Since when an unknown outcome has waited for its next search: its next search's time, or its
/// claim when it was never searched.
pub(crate) fn waiting_since(record: &IntentRecord) -> (Option<DateTime<Utc>>, String) {
    let s = &record.status;
    (s.reconcile_next_at.or(s.claimed_at), record.intent.key.to_string())
}

/// Orders the unknown outcomes due a search, the one that has waited longest first (`since`; the
/// key breaks ties). A run searches at most a batch and stops at its first throttle: in this
/// order whoever has waited longest is searched next, and one searched goes to the back (its next
/// search is later), so none is starved however many are due. (A random order each run starved
/// one: simulation seed 129865, about 300 due and 10 searched per run — one waited 113 runs, never
/// searched, its digest's sibling delivered.)
pub(crate) fn longest_waiting_first<T, K: Ord>(items: &mut [T], since: impl Fn(&T) -> K) {
    items.sort_by_cached_key(since);
}

#[cfg(test)]
mod tests {
    use super::longest_waiting_first;

    /// Whatever order the due-index gives, and however many are due, every unknown outcome is
    /// searched within as many runs as there are batches of them.
    #[test]
    fn every_unknown_outcome_due_is_searched_within_a_run_per_batch_ahead_of_it() {
        const BATCH: usize = 3;
        // (next search due at, id), listed by the index in reverse.
        let mut due: Vec<(u64, usize)> = (0..10).rev().map(|i| (100 + i as u64, i)).collect();
        let mut searched_in = [None; 10];
        for run in 0..4u64 {
            let now = 1_000 + run;
            longest_waiting_first(&mut due, |&(at, id)| (at, id));
            for item in due.iter_mut().take(BATCH) {
                searched_in[item.1].get_or_insert(run);
                item.0 = now + 600; // its next search, later than every one waiting now
            }
        }
        assert!(searched_in.iter().all(Option::is_some), "every one searched within 4 runs: {searched_in:?}");
        assert_eq!(searched_in[0], Some(0), "the longest waiting first");
    }
}
