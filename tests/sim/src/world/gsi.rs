//! A global secondary index as DynamoDB keeps one: a view of the table, updated after each base
//! write with a delay (GSIs are eventually consistent; a query never reads them strongly), in
//! order per item.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::exec::Millis;

/// The view, keyed by the index's own sort order `K` (which ends with the base item's key, so
/// entries are unique), with each base item's entry as last scheduled.
pub struct Gsi<K: Ord + Clone, B: Ord + Clone> {
    view: BTreeMap<K, B>,
    /// Where each base item stands in the view now.
    visible: BTreeMap<B, K>,
    /// Each base item's last scheduled entry and when it becomes visible.
    scheduled: BTreeMap<B, (Option<K>, Millis)>,
    pending: BinaryHeap<Reverse<(Millis, u64, B)>>,
    updates: BTreeMap<u64, (B, Option<K>)>,
    seq: u64,
}

impl<K: Ord + Clone, B: Ord + Clone> Default for Gsi<K, B> {
    fn default() -> Self {
        Gsi {
            view: BTreeMap::new(),
            visible: BTreeMap::new(),
            scheduled: BTreeMap::new(),
            pending: BinaryHeap::new(),
            updates: BTreeMap::new(),
            seq: 0,
        }
    }
}

impl<K: Ord + Clone, B: Ord + Clone> Gsi<K, B> {
    /// The base item `base` now projects `entry` (or none): visible in the view from `now + lag`,
    /// never before an earlier write of the same item. Returns when the change shows in the view
    /// (none: the item's entry does not change).
    pub fn write(&mut self, base: &B, entry: Option<K>, now: Millis, lag: Millis) -> Option<Millis> {
        // No lag and nothing of this item still on its way: straight into the view.
        if lag == 0 && !self.scheduled.contains_key(base) {
            if self.visible.get(base) == entry.as_ref() {
                return None;
            }
            if let Some(old) = self.visible.remove(base) {
                self.view.remove(&old);
            }
            if let Some(k) = entry {
                self.view.insert(k.clone(), base.clone());
                self.visible.insert(base.clone(), k);
            }
            return Some(now);
        }
        let (last, last_at) =
            self.scheduled.get(base).cloned().unwrap_or_else(|| (self.visible.get(base).cloned(), now));
        if last == entry {
            return None;
        }
        let at = (now + lag).max(last_at);
        self.scheduled.insert(base.clone(), (entry.clone(), at));
        self.seq += 1;
        self.updates.insert(self.seq, (base.clone(), entry));
        self.pending.push(Reverse((at, self.seq, base.clone())));
        Some(at)
    }

    /// Applies every update visible at `now`.
    pub fn catch_up(&mut self, now: Millis) {
        while let Some(Reverse((at, seq, _))) = self.pending.peek().cloned() {
            if at > now {
                break;
            }
            self.pending.pop();
            let Some((base, entry)) = self.updates.remove(&seq) else { continue };
            if self.scheduled.get(&base).is_some_and(|(_, at)| *at <= now) {
                self.scheduled.remove(&base);
            }
            if let Some(old) = self.visible.remove(&base) {
                self.view.remove(&old);
            }
            if let Some(k) = entry {
                self.view.insert(k.clone(), base.clone());
                self.visible.insert(base, k);
            }
        }
    }

    /// The view as a query at `now` reads it, from `from` on, in index order.
    pub fn range_from<'a>(&'a mut self, now: Millis, from: &K) -> impl Iterator<Item = (&'a K, &'a B)> + use<'a, K, B> {
        self.catch_up(now);
        self.view.range(from.clone()..)
    }

    pub fn len(&self) -> usize {
        self.view.len()
    }

    pub fn is_empty(&self) -> bool {
        self.view.is_empty()
    }
}

/// A list-index partition per recipient, sorted by a time: `(recipient, time, base key)`.
impl<X: Ord + Clone, B: Ord + Clone> Gsi<(String, Millis, X), B> {
    /// The base items of `who`'s partition with times in [`from`, `to`], as the list-index query
    /// `list_pk = :p AND list_sk BETWEEN :from AND :to` at `now` reads them (`min`: the least
    /// base key, where the range starts).
    pub fn between<'a>(
        &'a mut self,
        now: Millis,
        who: &str,
        from: Millis,
        to: Millis,
        min: X,
    ) -> impl Iterator<Item = &'a B> + use<'a, X, B> {
        let who = who.to_owned();
        let start = (who.clone(), from, min);
        self.range_from(now, &start).take_while(move |((w, at, _), _)| *w == who && *at <= to).map(|(_, b)| b)
    }
}
