//! The ledger table, simulated: the items the DynamoDB adapter writes (intents, observations,
//! message index, digests, send logs, orphans, open escalations), with DynamoDB's semantics as the
//! adapter relies on them — conditional writes and what a refused one returns, transactions,
//! strongly consistent reads of the table, lagging GSIs (due-index, pending-index, list-index),
//! and TTL that deletes lazily (an expired item is still read, and counts as absent only where the
//! adapter's conditions say so). Every port method makes the same requests, in the same order, as
//! `shared/src/adapters/ledger/`; the contract tests (`tests/contract.rs`) hold the two to
//! the same answers.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, DurationRound, Utc};
use tocsin::adapters::commit::{self, TransitionWrites};
use tocsin::domain::acknowledgement::Acknowledgement;
use tocsin::domain::escalation_cap::EscalationCount;
use tocsin::domain::intent::{Escalation, IntentRecord, Status};
use tocsin::domain::observation::Observation;
use tocsin::domain::producer::{ProducerName, RateWindow};
use tocsin::domain::reconcile::ReconcileState;
use tocsin::domain::reply::code::{OPEN_FOR, REUSE_AFTER};
use tocsin::domain::reply::{AckSubject, HeldCode, ReplyCode};
use tocsin::domain::spend::{MeterReading, OpenBreaker, Spend, SpendCeiling, hour_of};
use tocsin::domain::storm::DigestId;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{
    Backlog, ChainLedger, ClaimOutcome, ConfirmationClaim, DigestRecord, DigestStore, DueIndex, EscalationBacklog,
    EscalationQuota, IndexEntries, IndexEntry, IntentStore, LevelStart, MessageIndex, NextCheck, OrphanRecord,
    PortError, PortResult, ProducerQuota, PutOutcome, ReplyCodes, ReplyConfirmations, SendBudget, SendLog, SpendMeter,
    Transition, TransitionOutcome,
};

use super::gsi::Gsi;
use crate::exec::{Millis, OpKind, Sim, to_ms};
use crate::world::World;

/// The adapter's partitions of the due-index (`TOCSIN_DUE_SHARDS` in the template), plus the
/// legacy one it still reads.
pub const LEGACY_SHARD: &str = "due";
/// The smallest key (range queries start there).
fn min_key() -> IdempotencyKey {
    static MIN: std::sync::OnceLock<IdempotencyKey> = std::sync::OnceLock::new();
    MIN.get_or_init(|| match IdempotencyKey::parse(&"0".repeat(64)) {
        Ok(k) => k,
        Err(_) => unreachable!("64 zeros are a key"),
    })
    .clone()
}

fn min_digest() -> DigestId {
    static MIN: std::sync::OnceLock<DigestId> = std::sync::OnceLock::new();
    MIN.get_or_init(|| DigestId::parse(&"0".repeat(64)).unwrap_or_else(|| unreachable!("64 zeros are a digest id")))
        .clone()
}

/// DynamoDB keeps timestamps as the adapter writes them: RFC 3339 with milliseconds.
pub fn ms(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::Duration::milliseconds(1)).unwrap_or(t)
}

fn opt_ms(t: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    t.map(ms)
}

/// An intent item: the record as `record_from_item` reads it, and the attributes beside it.
#[derive(Debug, Clone)]
pub struct IntentItem {
    pub record: IntentRecord,
    pub due_home: String,
    pub pending_to: PhoneNumber,
    /// `pending_by`: present while the intent is in the pending-index.
    pub pending_by: Option<DateTime<Utc>>,
    /// The observations carried on the intent (`obs#<id>`: `Commit::Carried`), by id.
    pub carried: BTreeMap<String, Observation>,
    /// Why each level of the chain started (`chain_reason_<level>`, on a root).
    pub chain_reasons: BTreeMap<u8, String>,
    /// TTL, epoch seconds.
    pub expires_at: i64,
}

impl IntentItem {
    fn due_entry(&self) -> Option<(String, Millis, IdempotencyKey)> {
        self.record.status.next_check.map(|t| (self.due_home.clone(), to_ms(t), self.record.intent.key.clone()))
    }
    fn pending_entry(&self) -> Option<(String, Millis, IdempotencyKey)> {
        self.pending_by.map(|by| (self.pending_to.expose().to_owned(), to_ms(by), self.record.intent.key.clone()))
    }
}

#[derive(Debug, Clone)]
pub struct ObsItem {
    pub obs: Observation,
    pub expires_at: i64,
}

#[derive(Debug, Clone)]
pub struct MsgItem {
    pub entry: IndexEntry,
    pub expires_at: i64,
    /// When the entry was written (simulated time): the oracle's "did the status function have a
    /// chance to read it".
    pub written: Millis,
}

#[derive(Debug, Clone)]
pub struct BudgetItem {
    pub sent: Vec<DateTime<Utc>>,
    pub version: u64,
    pub expires_at: i64,
}

#[derive(Debug, Clone)]
pub struct EscItem {
    pub at: DateTime<Utc>,
    pub expires_at: i64,
}

/// The table's items by kind, and its three GSIs.
#[derive(Default)]
pub struct Ledger {
    pub intents: BTreeMap<IdempotencyKey, IntentItem>,
    pub observations: BTreeMap<(IdempotencyKey, String), ObsItem>,
    pub messages: BTreeMap<String, MsgItem>,
    pub digests: BTreeMap<DigestId, DigestRecord>,
    pub budgets: BTreeMap<String, BudgetItem>,
    /// Per-producer admission counters: (producer, window start) → admitted.
    pub producer_quota: BTreeMap<(String, DateTime<Utc>), u32>,
    /// Per-producer escalation counters: (producer, UTC hour) → (escalations, notice sent).
    pub escalation_quota: BTreeMap<(String, DateTime<Utc>), (u32, bool)>,
    /// The stack's SMS spend meter (`METER#sms-parts`): its hour, the parts counted, the breaker.
    pub spend_meter: MeterReading,
    pub orphans: BTreeMap<(String, String), OrphanRecord>,
    pub escalations: BTreeMap<IdempotencyKey, EscItem>,
    pub due_index: Gsi<(String, Millis, IdempotencyKey), IdempotencyKey>,
    pub pending_index: Gsi<(String, Millis, IdempotencyKey), IdempotencyKey>,
    pub list_index: Gsi<(Millis, IdempotencyKey), IdempotencyKey>,
    /// The list-index's digest partitions (`dig#<e164>`, by creation time).
    pub digest_index: Gsi<(String, Millis, DigestId), DigestId>,
    /// Each phone's reply codes (`CODES#<e164>`): code → what it stands for.
    pub reply_codes: BTreeMap<String, BTreeMap<ReplyCode, HeldCode>>,
    /// Confirmations of replies (`CONFIRMS#<e164>`/`HOUR#<hour>`): how many, and which replies.
    pub confirmations: BTreeMap<(String, String), BTreeSet<String>>,
}

/// A transaction's cancellation reasons, as the adapter reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactResult {
    Applied,
    /// The observation was there already (its condition failed).
    ObservationExists,
    /// The intent's condition failed (and the observation's did not).
    IntentRefused,
}

fn retain_until(t: &Transition) -> DateTime<Utc> {
    t.retain_until.unwrap_or_else(|| {
        t.observation
            .at
            .checked_add_signed(tocsin::domain::intent::RETENTION_AFTER_DEADLINE)
            .unwrap_or(t.observation.at)
    })
}

impl World {
    /// Every write of an intent item goes through here: the GSIs follow it (with their lag), and
    /// the oracle sees each state change.
    fn store_intent(&mut self, key: &IdempotencyKey, item: IntentItem, by: &str) {
        let before = self.ledger.intents.get(key).map(|i| i.record.status.state);
        self.store_changed(key, before, item, by);
    }

    /// The item taken out of the ledger to be changed in place (no copy of it), and the state it
    /// was in: put it back with [`World::store_changed`].
    fn take_intent(&mut self, key: &IdempotencyKey) -> Option<(IntentItem, State)> {
        let item = self.ledger.intents.remove(key)?;
        let before = item.record.status.state;
        Some((item, before))
    }

    /// Stores `item` as `key`'s intent, which was in state `before` (none: new).
    fn store_changed(&mut self, key: &IdempotencyKey, before: Option<State>, item: IntentItem, by: &str) {
        let lag = self.gsi_lag();
        let now = self.now;
        let due_visible = self.ledger.due_index.write(key, item.due_entry(), now, lag);
        self.ledger.pending_index.write(key, item.pending_entry(), now, lag);
        let after = item.record.status.state;
        if before != Some(after) {
            let from = before.map_or("(none)", |b| b.as_str());
            let change = (format!("{from} → {}", after.as_str()), by.to_owned());
            *self.coverage.transitions.entry(change).or_default() += 1;
        }
        self.oracle.intent_written(now, before, after, &item.record, by);
        if let Some(visible) = due_visible.filter(|v| *v > now) {
            self.oracle.due_index_behind(key, now, visible);
            // Longer than a claim lease (2 minutes): the coverage table's count of index lag
            // without a small bound.
            if visible - now > 120_000 {
                self.coverage.count("GSI due-index (propagation)", "lagged past a lease", 1);
            }
        }
        self.ledger.intents.insert(key.clone(), item);
    }

    fn intent_condition(&self, t: &Transition) -> Result<&IntentItem, ()> {
        let item = self.ledger.intents.get(&t.key).ok_or(())?;
        let s = &item.record.status;
        let ok = (t.from.is_empty() || t.from.contains(&s.state))
            && t.attempt_id.as_ref().is_none_or(|a| s.attempt_id.as_ref() == Some(a))
            && t.expect.sns_message_id.as_ref().is_none_or(|m| s.sns_message_id.as_ref() == Some(m))
            && (!t.expect.not_escalated || s.escalation.is_none())
            && (!t.expect.not_acknowledged || s.acknowledgement.is_none())
            && (!t.expect.unchained || item.record.intent.chain.is_none())
            && t.expect
                .no_escalation_run_at
                .is_none_or(|now| item.record.status.escalation_run_until.is_none_or(|l| l < ms(now)));
        if ok { Ok(item) } else { Err(()) }
    }

    /// The adapter's `transition_update`, applied to the item.
    fn apply_patch(&mut self, t: &Transition, carry: bool) {
        let Some((mut item, before)) = self.take_intent(&t.key) else { return };
        let p = &t.patch;
        let s = &mut item.record.status;
        if let Some(st) = p.state {
            s.state = st;
        }
        if p.increment_attempts {
            s.attempts += 1;
        }
        if let Some((aid, at, until)) = &p.claim {
            s.attempt_id = Some(aid.clone());
            s.claimed_at = Some(ms(*at));
            s.lease_until = Some(ms(*until));
        } else if p.clear_claim {
            // As the ledger adapter: the last attempt's id stays.
            s.lease_until = None;
        }
        if let Some(m) = &p.sns_message_id {
            s.sns_message_id = Some(m.clone());
        }
        if let Some(a) = p.accepted_at {
            s.accepted_at = Some(ms(a));
        }
        if let Some(f) = p.final_at {
            s.final_at = Some(ms(f));
        }
        if let Some(e) = &p.escalation {
            s.escalation =
                Some(Escalation { at: ms(e.at), reason: e.reason.clone(), folded: e.folded, to_level: e.to_level });
            s.escalation_run_until = None;
        }
        if p.add_conflict {
            s.conflicts += 1;
        }
        if let Some(e) = &p.last_error {
            s.last_error = Some(e.clone());
        }
        if let Some(at) = p.enqueued_at {
            s.enqueued_at = Some(ms(at));
        }
        if let Some(d) = &p.digest_id {
            s.digest_id = Some(d.clone());
        }
        if let Some(l) = p.late_expected {
            s.late_expected = Some(ms(l));
        }
        if let Some(a) = &p.acknowledgement {
            s.acknowledgement = Some(Acknowledgement { at: ms(a.at), ..a.clone() });
            self.oracle.acknowledgement_written(self.now, &t.key);
            self.reply_acknowledged(&t.key, &t.observation.id);
        }
        if let Some((attempts, next, state)) = &p.reconcile {
            s.reconcile_attempts = *attempts;
            s.reconcile_next_at = opt_ms(*next);
            s.reconcile_state = *state;
        }
        match p.state {
            Some(st) if !st.is_pending() => item.pending_by = None,
            Some(_) => {
                if let Some((recipient, deadline)) = &p.pending_again {
                    item.pending_to = recipient.clone();
                    item.pending_by = Some(ms(*deadline));
                }
            }
            None => {}
        }
        match t.next_check {
            NextCheck::Keep => {}
            NextCheck::At(at) => item.record.status.next_check = Some(ms(at)),
            NextCheck::Remove => item.record.status.next_check = None,
        }
        if carry {
            // Earlier events of the same SMS, carried along: kept unless already carried.
            for along in &t.carried_along {
                if !item.carried.contains_key(&along.id) {
                    item.carried.insert(along.id.clone(), along.clone());
                    self.oracle.observation_written(self.now, &t.key, along);
                }
            }
            item.carried.insert(t.observation.id.clone(), t.observation.clone());
            self.oracle.observation_written(self.now, &t.key, &t.observation);
        }
        // Written by whom: the observation's source (`attempt`, `sns`, `lease`, `sweep`, …).
        let by = t.observation.id.split(':').next().unwrap_or("transition").to_owned();
        self.store_changed(&t.key, Some(before), item, &by);
    }

    fn observation_absent(&self, t: &Transition) -> bool {
        match self.ledger.observations.get(&(t.key.clone(), t.observation.id.clone())) {
            None => true,
            // ABSENT_OR_EXPIRED: a leftover of an earlier life counts as absent.
            Some(o) => o.expires_at < t.observation.at.timestamp(),
        }
    }

    fn write_observation(&mut self, t: &Transition) {
        let item = ObsItem { obs: t.observation.clone(), expires_at: retain_until(t).timestamp() };
        self.oracle.observation_written(self.now, &t.key, &t.observation);
        self.ledger.observations.insert((t.key.clone(), t.observation.id.clone()), item);
    }

    fn write_message_index(&mut self, t: &Transition) {
        if let Some((mid, recipient)) = &t.index_message {
            let entry = IndexEntry::single(t.key.clone(), recipient.clone());
            let item = MsgItem { entry, expires_at: retain_until(t).timestamp(), written: self.now };
            self.ledger.messages.insert(mid.clone(), item);
        }
    }

    pub fn ledger_put_new(&mut self, record: &IntentRecord, next_check: DateTime<Utc>, shard: u32) -> PutOutcome {
        let key = &record.intent.key;
        if let Some(existing) = self.ledger.intents.get(key)
            && existing.expires_at >= record.intent.created_at.timestamp()
        {
            return PutOutcome::Exists(Box::new(existing.record.clone()));
        }
        let mut status = Status::new();
        status.state = record.status.state;
        status.next_check = Some(ms(next_check));
        status.late_expected = opt_ms(record.status.late_expected);
        let item = IntentItem {
            record: IntentRecord { intent: record.intent.clone(), status },
            due_home: format!("due#{shard}"),
            pending_to: record.intent.recipient.clone(),
            pending_by: record.status.state.is_pending().then(|| ms(record.intent.deadline)),
            carried: BTreeMap::new(),
            chain_reasons: BTreeMap::new(),
            expires_at: record.intent.expires_at().timestamp(),
        };
        self.oracle.intent_created(self.now, &item.record);
        if let Some(chain) = item.record.intent.chain.as_ref().filter(|c| c.is_root()) {
            let from = if chain.policy.is_some() { "from its template's policy" } else { "named by its request" };
            self.coverage.count(super::CHAIN_COVERAGE, from, 1);
        }
        self.store_intent(key, item, "put_new");
        PutOutcome::Created
    }

    /// One try of a claim, as `shared/src/adapters/ledger/intents.rs` makes it: unless
    /// `move_due`, refused (`None`) when the intent is claimable but its due-index entry is later
    /// than the lease's end; with `move_due`, the entry is moved there.
    pub fn ledger_claim(
        &mut self,
        key: &IdempotencyKey,
        attempt_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        move_due: bool,
    ) -> Option<ClaimOutcome> {
        let Some(item) = self.ledger.intents.get(key) else { return Some(ClaimOutcome::Missing) };
        let s = &item.record.status;
        let claimable = State::CLAIMABLE.contains(&s.state);
        if claimable && !move_due && s.next_check.is_some_and(|c| c > ms(lease_until)) {
            return None;
        }
        if !claimable {
            // Our own claim whose answer was lost and retried by the SDK: it is ours.
            if s.state == State::Sending && s.attempt_id.as_deref() == Some(attempt_id) {
                return Some(ClaimOutcome::Claimed(Box::new(item.record.clone())));
            }
            return Some(ClaimOutcome::NotClaimable(Box::new(item.record.clone())));
        }
        let Some((mut item, before)) = self.take_intent(key) else { return Some(ClaimOutcome::Missing) };
        let s = &mut item.record.status;
        s.state = State::Sending;
        s.attempt_id = Some(attempt_id.to_owned());
        s.claimed_at = Some(ms(now));
        s.lease_until = Some(ms(lease_until));
        // An intent with no due-index entry gets the lease's end in the claim itself, and so does
        // one whose entry is later (the claim's second try).
        if s.next_check.is_none() || move_due {
            s.next_check = Some(ms(lease_until));
        }
        let record = item.record.clone();
        self.store_changed(key, Some(before), item, "claim");
        self.oracle.claimed(self.now, key, attempt_id, to_ms(now));
        Some(ClaimOutcome::Claimed(Box::new(record)))
    }

    pub fn ledger_update(
        &mut self,
        t: &Transition,
        carry: bool,
    ) -> PortResult<Option<(IntentRecord, Option<Observation>)>> {
        // Carried: refused too when the intent carries the observation already.
        let ok = self.intent_condition(t).is_ok_and(|item| !(carry && item.carried.contains_key(&t.observation.id)));
        if ok {
            self.apply_patch(t, carry);
            return Ok(None);
        }
        match self.ledger.intents.get(&t.key) {
            Some(item) => Ok(Some((item.record.clone(), item.carried.get(&t.observation.id).cloned()))),
            None => Err(PortError::Corrupt { what: t.key.to_string(), message: "intent missing".into() }),
        }
    }

    pub fn ledger_put_observation(&mut self, t: &Transition) -> bool {
        if self.observation_absent(t) {
            self.write_observation(t);
            true
        } else {
            false
        }
    }

    pub fn ledger_put_message_index(&mut self, t: &Transition) {
        self.write_message_index(t);
    }

    pub fn ledger_transact(&mut self, t: &Transition) -> TransactResult {
        let obs_ok = self.observation_absent(t);
        let intent_ok = self.intent_condition(t).is_ok();
        if !obs_ok {
            return TransactResult::ObservationExists;
        }
        if !intent_ok {
            return TransactResult::IntentRefused;
        }
        if t.changes_intent() {
            self.apply_patch(t, false);
        }
        self.write_observation(t);
        self.write_message_index(t);
        if let Some(e) = t.patch.escalation.as_ref().filter(|e| e.to_level.is_none()) {
            let lag = self.gsi_lag();
            let now = self.now;
            self.ledger.list_index.write(&t.key, Some((to_ms(ms(e.at)), t.key.clone())), now, lag);
            self.ledger
                .escalations
                .insert(t.key.clone(), EscItem { at: ms(e.at), expires_at: retain_until(t).timestamp() });
            if e.folded {
                let producer = self.ledger.intents.get(&t.key).and_then(|i| i.record.intent.producer.clone());
                self.oracle.escalation_folded(now, &t.key, producer.as_ref().map(ToString::to_string), to_ms(e.at));
            }
            self.oracle.escalation_marked(now, &t.key);
        }
        if t.patch.escalation.as_ref().is_some_and(|e| e.to_level.is_some()) {
            self.oracle.escalation_handed_on(self.now, &t.key);
        }
        TransactResult::Applied
    }

    pub fn ledger_get(&self, key: &IdempotencyKey) -> Option<IntentRecord> {
        self.ledger.intents.get(key).map(|i| i.record.clone())
    }

    pub fn ledger_observations(&self, key: &IdempotencyKey) -> Vec<Observation> {
        let created = self.ledger.intents.get(key).map(|i| i.record.intent.created_at.timestamp());
        let mut out: Vec<Observation> = self
            .ledger
            .observations
            .range((key.clone(), String::new())..)
            .take_while(|((k, _), _)| k == key)
            .filter(|(_, o)| created.is_none_or(|c| o.expires_at >= c))
            .map(|(_, o)| o.obs.clone())
            .collect();
        if let Some(item) = self.ledger.intents.get(key) {
            // As the adapter: the carried observation is the one that tells the change.
            for (id, o) in &item.carried {
                out.retain(|kept| kept.id != *id);
                out.push(o.clone());
            }
        }
        out.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        out
    }

    pub fn ledger_lease_escalation(
        &mut self,
        key: &IdempotencyKey,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Option<IntentRecord> {
        let item = self.ledger.intents.get(key)?;
        let s = &item.record.status;
        let free = item.record.status.escalation_run_until.is_none_or(|l| l < ms(now));
        // A delivered intent is leased only as a level of a chain (`chain_root` in the adapter).
        let delivered = s.state == State::Delivered && item.record.intent.chain.is_none();
        if s.escalation.is_some() || delivered || !free {
            return None;
        }
        let mut item = item.clone();
        item.record.status.escalation_run_until = Some(ms(until));
        let record = item.record.clone();
        self.ledger.intents.insert(key.clone(), item);
        self.oracle.escalation_leased(self.now, key, to_ms(ms(until)));
        Some(record)
    }

    pub fn ledger_set_next_check(&mut self, key: &IdempotencyKey, next: NextCheck, in_state: Option<State>) {
        if next == NextCheck::Keep {
            return;
        }
        if self.ledger.intents.get(key).is_none_or(|item| in_state.is_some_and(|s| s != item.record.status.state)) {
            return;
        }
        let Some((mut item, before)) = self.take_intent(key) else { return };
        item.record.status.next_check = match next {
            NextCheck::At(t) => Some(ms(t)),
            _ => None,
        };
        self.store_changed(key, Some(before), item, "set_next_check");
    }

    pub fn ledger_bring_check_forward(&mut self, key: &IdempotencyKey, by: DateTime<Utc>, while_in: &[State]) {
        let Some(item) = self.ledger.intents.get(key) else { return };
        if !while_in.contains(&item.record.status.state) || item.record.status.next_check.is_some_and(|t| t <= ms(by)) {
            return;
        }
        let Some((mut item, before)) = self.take_intent(key) else { return };
        item.record.status.next_check = Some(ms(by));
        self.store_changed(key, Some(before), item, "bring_check_forward");
    }

    pub fn ledger_due(
        &mut self,
        shard: &str,
        now: DateTime<Utc>,
        limit: usize,
        after: Option<(Millis, IdempotencyKey)>,
    ) -> (Vec<IdempotencyKey>, Option<(Millis, IdempotencyKey)>) {
        let now_ms = to_ms(now);
        let start = match &after {
            Some((at, key)) => (shard.to_owned(), *at, key.clone()),
            None => (shard.to_owned(), i64::MIN, min_key()),
        };
        let clock = self.now;
        let mut keys = Vec::new();
        let mut last = None;
        let mut more = false;
        for ((s, at, key), _) in self.ledger.due_index.range_from(clock, &start) {
            if s != shard || *at > now_ms {
                break;
            }
            if after.as_ref().is_some_and(|(a, k)| (a, k) == (at, key)) {
                continue;
            }
            if keys.len() == limit {
                more = true;
                break;
            }
            keys.push(key.clone());
            last = Some((*at, key.clone()));
        }
        (keys, if more { last } else { None })
    }

    pub fn ledger_pending(
        &mut self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        limit: usize,
    ) -> Vec<(IdempotencyKey, DateTime<Utc>)> {
        let from_ms = to_ms(ms(from));
        let start = (recipient.expose().to_owned(), from_ms, min_key());
        let clock = self.now;
        self.ledger
            .pending_index
            .range_from(clock, &start)
            .take_while(|((r, _, _), _)| r == recipient.expose())
            .filter(|((_, by, _), _)| *by > from_ms)
            .take(limit)
            .map(|((_, by, key), _)| (key.clone(), crate::exec::to_time(*by)))
            .collect()
    }

    pub fn ledger_record_send(
        &mut self,
        recipient: &PhoneNumber,
        read: &SendLog,
        at: DateTime<Utc>,
        keep: usize,
        expires_at: DateTime<Utc>,
    ) -> bool {
        let current = self.ledger.budgets.get(recipient.expose()).map(|b| b.version);
        if current != read.version {
            return false;
        }
        let mut sent: Vec<DateTime<Utc>> = read.sent.iter().copied().map(ms).collect();
        sent.push(ms(at));
        sent.sort();
        let drop = sent.len().saturating_sub(keep.max(1));
        sent.drain(..drop);
        let version = read.version.map_or(1, |v| v + 1);
        self.ledger
            .budgets
            .insert(recipient.expose().to_owned(), BudgetItem { sent, version, expires_at: expires_at.timestamp() });
        true
    }

    pub fn ledger_oldest_open_escalation(&mut self) -> Option<DateTime<Utc>> {
        let clock = self.now;
        self.ledger
            .list_index
            .range_from(clock, &(i64::MIN, min_key()))
            .next()
            .map(|((at, _), _)| crate::exec::to_time(*at))
    }
}

/// The ledger as the functions use it, over the simulated table.
#[derive(Clone)]
pub struct SimLedger {
    pub sim: Sim,
    /// Due-index partitions (`TOCSIN_DUE_SHARDS`).
    pub shards: u32,
}

fn unavailable(label: &'static str, why: &str) -> PortError {
    PortError::Unavailable { operation: label, message: why.to_owned() }
}

/// Maps an op's fault to what the adapter reports: every fault of a DynamoDB call surfaces as a
/// failed call once the SDK's own retries are spent.
pub(crate) fn port<T>(r: Result<T, (crate::exec::Fault, &'static str)>) -> PortResult<T> {
    r.map_err(|(f, label)| unavailable(label, &format!("{f:?} (simulated)")))
}

impl IntentStore for SimLedger {
    async fn put_new(&self, record: &IntentRecord, next_check: DateTime<Utc>) -> PortResult<PutOutcome> {
        let record = record.clone();
        let shards = self.shards.max(1);
        let shard = (self.sim.lock().world.draw() % u64::from(shards)) as u32;
        port(
            self.sim
                .call("DynamoDB PutItem (intent)", OpKind::Write, move |w| w.ledger_put_new(&record, next_check, shard))
                .await,
        )
    }

    async fn get(&self, key: &IdempotencyKey) -> PortResult<Option<IntentRecord>> {
        let key = key.clone();
        port(self.sim.call("DynamoDB GetItem (intent)", OpKind::Read, move |w| w.ledger_get(&key)).await)
    }

    async fn transition(&self, t: Transition) -> PortResult<TransitionOutcome> {
        commit::transition(self, t).await
    }

    async fn claim(
        &self,
        key: &IdempotencyKey,
        attempt_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> PortResult<ClaimOutcome> {
        let claim = |op: &'static str, move_due: bool| {
            let (k, attempt) = (key.clone(), attempt_id.to_owned());
            self.sim.call(op, OpKind::Write, move |w| w.ledger_claim(&k, &attempt, now, lease_until, move_due))
        };
        if let Some(outcome) = port(claim("DynamoDB UpdateItem (claim)", false).await)? {
            return Ok(outcome);
        }
        // Its due-index entry is later than the lease's end: claimed again, moving it there.
        port(claim("DynamoDB UpdateItem (claim, its check moved to the lease's end)", true).await)?
            .ok_or_else(|| PortError::Corrupt { what: key.to_string(), message: "claim refused twice".into() })
    }

    async fn observations(&self, key: &IdempotencyKey) -> PortResult<Vec<Observation>> {
        let key = key.clone();
        port(self.sim.call("DynamoDB Query (observations)", OpKind::Read, move |w| w.ledger_observations(&key)).await)
    }
}

impl TransitionWrites for SimLedger {
    async fn put_observation(&self, t: &Transition) -> PortResult<bool> {
        let t = t.clone();
        port(
            self.sim.call("DynamoDB PutItem (observation)", OpKind::Write, move |w| w.ledger_put_observation(&t)).await,
        )
    }

    async fn put_message_index(&self, t: &Transition) -> PortResult<()> {
        if t.index_message.is_none() {
            return Ok(());
        }
        let t = t.clone();
        port(
            self.sim
                .call("DynamoDB PutItem (message index)", OpKind::Write, move |w| w.ledger_put_message_index(&t))
                .await,
        )
    }

    async fn update_intent(
        &self,
        t: &Transition,
        carry: bool,
    ) -> PortResult<Option<(IntentRecord, Option<Observation>)>> {
        let t = t.clone();
        port(
            self.sim.call("DynamoDB UpdateItem (transition)", OpKind::Write, move |w| w.ledger_update(&t, carry)).await,
        )?
    }

    async fn transact(&self, t: &Transition) -> PortResult<TransitionOutcome> {
        let tt = t.clone();
        let result = port(
            self.sim.call("DynamoDB TransactWriteItems", OpKind::TokenWrite, move |w| w.ledger_transact(&tt)).await,
        )?;
        match result {
            TransactResult::Applied => Ok(TransitionOutcome::Applied),
            TransactResult::ObservationExists => Ok(TransitionOutcome::AlreadyApplied),
            // The adapter reads the intent again (a second request).
            TransactResult::IntentRefused => match self.get(&t.key).await? {
                Some(r) => Ok(TransitionOutcome::Refused(Box::new(r))),
                None => Err(PortError::Corrupt { what: t.key.to_string(), message: "intent missing".into() }),
            },
        }
    }
}

impl MessageIndex for SimLedger {
    async fn lookup(&self, sns_message_id: &str) -> PortResult<Option<IndexEntry>> {
        let id = sns_message_id.to_owned();
        port(
            self.sim
                .call("DynamoDB GetItem (message index)", OpKind::Read, move |w| {
                    w.ledger.messages.get(&id).map(|m| m.entry.clone())
                })
                .await,
        )
    }

    async fn keep_orphans(&self, orphans: &[OrphanRecord]) -> PortResult<()> {
        // BatchWriteItem, 25 per call, the calls side by side.
        let calls = orphans.chunks(25).map(|chunk| {
            let chunk = chunk.to_vec();
            self.sim.call("DynamoDB BatchWriteItem (orphans)", OpKind::Write, move |w| {
                for o in &chunk {
                    w.ledger.orphans.insert((o.sns_message_id.clone(), o.log_event_id.clone()), o.clone());
                }
            })
        });
        for r in futures::future::join_all(calls).await {
            port(r)?;
        }
        Ok(())
    }

    async fn orphans_of(&self, sns_message_id: &str) -> PortResult<Vec<OrphanRecord>> {
        let id = sns_message_id.to_owned();
        port(
            self.sim
                .call("DynamoDB Query (orphans)", OpKind::Read, move |w| {
                    w.ledger
                        .orphans
                        .range((id.clone(), String::new())..)
                        .take_while(|((mid, _), _)| *mid == id)
                        .map(|(_, o)| o.clone())
                        .collect()
                })
                .await,
        )
    }

    async fn lookup_many(&self, sns_message_ids: &[String]) -> PortResult<IndexEntries> {
        let mut unique: Vec<String> = sns_message_ids.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let mut found = IndexEntries::new();
        for chunk in unique.chunks(100) {
            let chunk = chunk.to_vec();
            let entries = port(
                self.sim
                    .call("DynamoDB BatchGetItem (message index)", OpKind::Read, move |w| {
                        chunk
                            .iter()
                            .filter_map(|id| w.ledger.messages.get(id).map(|m| (id.clone(), m.entry.clone())))
                            .collect::<Vec<_>>()
                    })
                    .await,
            )?;
            for (id, entry) in entries {
                found.insert(id, Ok(entry));
            }
        }
        Ok(found)
    }
}

impl DueIndex for SimLedger {
    fn due_shards(&self) -> Vec<String> {
        let mut shards: Vec<String> = (0..self.shards.max(1)).map(|n| format!("due#{n}")).collect();
        shards.push(LEGACY_SHARD.to_owned());
        shards
    }

    async fn due(
        &self,
        shard: &str,
        now: DateTime<Utc>,
        limit: i32,
        after: Option<String>,
    ) -> PortResult<(Vec<IdempotencyKey>, Option<String>)> {
        let after = match after {
            None => None,
            Some(token) => {
                let (at, key) = token.split_once('|').ok_or_else(|| PortError::Corrupt {
                    what: "due-index page token".into(),
                    message: token.clone(),
                })?;
                let at: Millis =
                    at.parse().map_err(|_| PortError::Corrupt { what: "page token".into(), message: token.clone() })?;
                let key = IdempotencyKey::parse(key)
                    .map_err(|_| PortError::Corrupt { what: "page token".into(), message: token.clone() })?;
                Some((at, key))
            }
        };
        let shard = shard.to_owned();
        let limit = usize::try_from(limit.max(1)).unwrap_or(1);
        let (keys, next) = port(
            self.sim
                .call("DynamoDB Query (due-index)", OpKind::Read, move |w| {
                    w.ledger_due(&shard, now, limit, after.clone())
                })
                .await,
        )?;
        Ok((keys, next.map(|(at, key)| format!("{at}|{key}"))))
    }

    async fn lease_escalation(
        &self,
        key: &IdempotencyKey,
        _run_id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> PortResult<Option<IntentRecord>> {
        let key = key.clone();
        port(
            self.sim
                .call("DynamoDB UpdateItem (escalation lease)", OpKind::Write, move |w| {
                    w.ledger_lease_escalation(&key, now, until)
                })
                .await,
        )
    }

    async fn set_next_check(&self, key: &IdempotencyKey, next: NextCheck, in_state: Option<State>) -> PortResult<()> {
        if next == NextCheck::Keep {
            return Ok(());
        }
        let key = key.clone();
        port(
            self.sim
                .call("DynamoDB UpdateItem (next check)", OpKind::Write, move |w| {
                    w.ledger_set_next_check(&key, next, in_state)
                })
                .await,
        )
    }

    async fn bring_check_forward(&self, key: &IdempotencyKey, by: DateTime<Utc>, while_in: &[State]) -> PortResult<()> {
        let (key, while_in) = (key.clone(), while_in.to_vec());
        port(
            self.sim
                .call("DynamoDB UpdateItem (next check forward)", OpKind::Write, move |w| {
                    w.ledger_bring_check_forward(&key, by, &while_in)
                })
                .await,
        )
    }
}

impl Backlog for SimLedger {
    async fn pending_for(
        &self,
        recipient: &PhoneNumber,
        due_after: DateTime<Utc>,
        limit: usize,
    ) -> PortResult<Vec<(IdempotencyKey, DateTime<Utc>)>> {
        let recipient = recipient.clone();
        port(
            self.sim
                .call("DynamoDB Query (pending-index)", OpKind::Read, move |w| {
                    w.ledger_pending(&recipient, due_after, limit.max(1))
                })
                .await,
        )
    }
}

impl SendBudget for SimLedger {
    async fn send_log(&self, recipient: &PhoneNumber) -> PortResult<SendLog> {
        let r = recipient.expose().to_owned();
        port(
            self.sim
                .call("DynamoDB GetItem (send log)", OpKind::Read, move |w| match w.ledger.budgets.get(&r) {
                    Some(b) => SendLog { sent: b.sent.clone(), version: Some(b.version) },
                    None => SendLog::default(),
                })
                .await,
        )
    }

    async fn record_send(
        &self,
        recipient: &PhoneNumber,
        read: &SendLog,
        at: DateTime<Utc>,
        keep: usize,
        expires_at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let (r, read) = (recipient.clone(), read.clone());
        port(
            self.sim
                .call("DynamoDB PutItem (send log)", OpKind::Write, move |w| {
                    w.ledger_record_send(&r, &read, at, keep, expires_at)
                })
                .await,
        )
    }
}

impl ReplyCodes for SimLedger {
    async fn held_codes(&self, phone: &PhoneNumber) -> PortResult<Vec<HeldCode>> {
        let p = phone.expose().to_owned();
        port(
            self.sim
                .call("DynamoDB GetItem (reply codes)", OpKind::Read, move |w| {
                    w.ledger.reply_codes.get(&p).map(|codes| codes.values().cloned().collect()).unwrap_or_default()
                })
                .await,
        )
    }

    async fn give_code(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
        _expires_at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let (p, subject) = (phone.expose().to_owned(), subject.clone());
        port(
            self.sim
                .call("DynamoDB UpdateItem (give a reply code)", OpKind::Write, move |w| {
                    let codes = w.ledger.reply_codes.entry(p.clone()).or_default();
                    let reusable = codes.get(&code).is_none_or(|h| {
                        h.closed_at.is_some_and(|x| x <= at - REUSE_AFTER) || h.given_at <= at - REUSE_AFTER - OPEN_FOR
                    });
                    if reusable {
                        let held =
                            HeldCode { code, subject: subject.clone(), given_at: at, sent_at: None, closed_at: None };
                        codes.insert(code, held);
                    }
                    reusable
                })
                .await,
        )
    }

    async fn code_sent(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.stamp_open_code("DynamoDB UpdateItem (reply code sent)", phone, code, subject, move |h| {
            h.sent_at = Some(at)
        })
        .await
    }

    async fn close_code(
        &self,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        self.stamp_open_code("DynamoDB UpdateItem (close a reply code)", phone, code, subject, move |h| {
            h.closed_at = Some(at)
        })
        .await
    }
}

impl SimLedger {
    /// As the adapter's: `stamp` applies only while `code` is `subject`'s and open.
    async fn stamp_open_code(
        &self,
        label: &'static str,
        phone: &PhoneNumber,
        code: ReplyCode,
        subject: &AckSubject,
        stamp: impl Fn(&mut HeldCode) + Send + 'static,
    ) -> PortResult<bool> {
        let (p, subject) = (phone.expose().to_owned(), subject.clone());
        port(
            self.sim
                .call(label, OpKind::Write, move |w| {
                    match w.ledger.reply_codes.get_mut(&p).and_then(|codes| codes.get_mut(&code)) {
                        Some(h) if h.subject == subject && h.is_open() => {
                            stamp(h);
                            true
                        }
                        _ => false,
                    }
                })
                .await,
        )
    }
}

impl ReplyConfirmations for SimLedger {
    async fn claim_confirmation(
        &self,
        phone: &PhoneNumber,
        inbound: &str,
        arrived: DateTime<Utc>,
        cap: u32,
        _expires_at: DateTime<Utc>,
    ) -> PortResult<ConfirmationClaim> {
        let k = (phone.expose().to_owned(), arrived.format("%Y-%m-%dT%H").to_string());
        let inbound = inbound.to_owned();
        port(
            self.sim
                .call("DynamoDB UpdateItem (claim a reply's confirmation)", OpKind::Write, move |w| {
                    let ids = w.ledger.confirmations.entry(k.clone()).or_default();
                    if ids.contains(&inbound) {
                        ConfirmationClaim::AlreadyClaimed
                    } else if ids.len() >= cap as usize {
                        ConfirmationClaim::Capped
                    } else {
                        ids.insert(inbound.clone());
                        ConfirmationClaim::Claimed
                    }
                })
                .await,
        )
    }
}

impl ChainLedger for SimLedger {
    async fn start_level(
        &self,
        root: &IdempotencyKey,
        level: u8,
        _now: DateTime<Utc>,
        reason: &str,
    ) -> PortResult<LevelStart> {
        let (root, reason) = (root.clone(), reason.to_owned());
        port(
            self.sim
                .call("DynamoDB UpdateItem (start a chain's level)", OpKind::Write, move |w| {
                    // The adapter's condition: the root exists, nobody acknowledged it, the level
                    // never moves back.
                    let Some(item) = w.ledger.intents.get_mut(&root) else { return LevelStart::Missing };
                    let s = &mut item.record.status;
                    if let Some(ack) = &s.acknowledgement {
                        return LevelStart::Acknowledged(ack.clone());
                    }
                    if s.chain_level.is_some_and(|l| l >= level) {
                        let reason = item.chain_reasons.get(&level).cloned();
                        return LevelStart::StartedBefore { reason };
                    }
                    s.chain_level = Some(level);
                    item.chain_reasons.insert(level, reason.clone());
                    let now = w.now;
                    w.oracle.chain_level_started(now, &root, level);
                    LevelStart::Started
                })
                .await,
        )
    }
}

impl EscalationQuota for SimLedger {
    async fn count_escalation(&self, producer: &ProducerName, now: DateTime<Utc>) -> PortResult<EscalationCount> {
        let k = (producer.to_string(), hour_of(now));
        port(
            self.sim
                .call("DynamoDB UpdateItem (escalation cap)", OpKind::Write, move |w| {
                    let (n, notice_sent) = w.ledger.escalation_quota.entry(k.clone()).or_default();
                    *n += 1;
                    EscalationCount { n: *n, notice_sent: *notice_sent }
                })
                .await,
        )
    }

    async fn escalation_notice_sent(&self, producer: &ProducerName, now: DateTime<Utc>) -> PortResult<()> {
        let k = (producer.to_string(), hour_of(now));
        port(
            self.sim
                .call("DynamoDB UpdateItem (escalation cap notice)", OpKind::Write, move |w| {
                    w.ledger.escalation_quota.entry(k.clone()).or_default().1 = true;
                })
                .await,
        )
    }
}

impl ProducerQuota for SimLedger {
    async fn admit(&self, producer: &ProducerName, window: &RateWindow, limit: u32) -> PortResult<bool> {
        let k = (producer.to_string(), window.start);
        port(
            self.sim
                .call("DynamoDB UpdateItem (producer quota)", OpKind::Write, move |w| {
                    let admitted = w.ledger.producer_quota.entry(k.clone()).or_default();
                    if *admitted >= limit {
                        return false;
                    }
                    *admitted += 1;
                    true
                })
                .await,
        )
    }
}

impl SpendMeter for SimLedger {
    async fn spend(&self, parts: u32, now: DateTime<Utc>, ceiling: SpendCeiling) -> PortResult<Spend> {
        port(
            self.sim
                .call("DynamoDB UpdateItem (SMS spend meter)", OpKind::Write, move |w| {
                    let meter = &mut w.ledger.spend_meter;
                    if let Some(breaker) = &meter.open {
                        return Spend::Withheld { breaker: breaker.clone(), opened_here: false };
                    }
                    let hour = hour_of(now).max(meter.hour.unwrap_or(hour_of(now)));
                    let counted = meter.parts_in_hour_of(hour);
                    if counted.saturating_add(parts) > ceiling.parts_per_hour {
                        let breaker = OpenBreaker { opened_at: ms(now), hour_parts: counted, refused_parts: parts };
                        meter.open = Some(breaker.clone());
                        return Spend::Withheld { breaker, opened_here: true };
                    }
                    meter.hour = Some(hour);
                    meter.parts = counted + parts;
                    Spend::Counted
                })
                .await,
        )
    }
}

impl DigestStore for SimLedger {
    async fn put_digest(&self, digest: &DigestRecord) -> PortResult<()> {
        let d = digest.clone();
        port(
            self.sim
                .call("DynamoDB PutItem (digest)", OpKind::Write, move |w| {
                    let mut d = d.clone();
                    d.created_at = ms(d.created_at);
                    // A put replaces the item (and any outcome on it), as DynamoDB's PutItem does.
                    w.oracle.digest_recorded(&d);
                    let (now, lag) = (w.now, w.gsi_lag());
                    let entry = (d.recipient.expose().to_owned(), to_ms(d.created_at), d.id.clone());
                    w.ledger.digest_index.write(&d.id, Some(entry), now, lag);
                    w.ledger.digests.insert(d.id.clone(), d);
                })
                .await,
        )
    }

    async fn index_digest_message(&self, sns_message_id: &str, digest: &DigestRecord) -> PortResult<()> {
        let Some(first) = digest.members.first().cloned() else {
            return Err(PortError::Corrupt { what: format!("DIGEST#{}", digest.id), message: "no members".into() });
        };
        let (id, d) = (sns_message_id.to_owned(), digest.clone());
        port(
            self.sim
                .call("DynamoDB PutItem (digest message index)", OpKind::Write, move |w| {
                    let entry = IndexEntry {
                        key: first.clone(),
                        recipient: d.recipient.clone(),
                        digest: Some((d.id.clone(), d.members.clone())),
                    };
                    let item = MsgItem { entry, expires_at: d.expires_at.timestamp(), written: w.now };
                    w.ledger.messages.insert(id.clone(), item);
                })
                .await,
        )
    }

    async fn digests_to(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> PortResult<Vec<DigestRecord>> {
        self.digests_to_impl(recipient, from, to).await
    }

    async fn record_digest_outcome(&self, id: &DigestId, outcome: &tocsin::ports::LoggedRecord) -> PortResult<()> {
        let (id, outcome) = (id.clone(), outcome.clone());
        port(
            self.sim
                .call("DynamoDB UpdateItem (digest outcome)", OpKind::Write, move |w| {
                    if let Some(d) = w.ledger.digests.get_mut(&id)
                        && d.outcome.is_none()
                    {
                        d.outcome = Some(outcome.clone());
                    }
                })
                .await,
        )
    }

    async fn get_digest(&self, id: &DigestId) -> PortResult<Option<DigestRecord>> {
        let id = id.clone();
        port(
            self.sim.call("DynamoDB GetItem (digest)", OpKind::Read, move |w| w.ledger.digests.get(&id).cloned()).await,
        )
    }
}

impl SimLedger {
    async fn digests_to_impl(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> PortResult<Vec<DigestRecord>> {
        let r = recipient.expose().to_owned();
        let (from, to) = (to_ms(ms(from)), to_ms(ms(to)));
        let ids = port(
            self.sim
                .call("DynamoDB Query (list-index, digests)", OpKind::Read, move |w| {
                    let clock = w.now;
                    w.ledger.digest_index.between(clock, &r, from, to, min_digest()).cloned().collect::<Vec<_>>()
                })
                .await,
        )?;
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.get_digest(&id).await?);
        }
        Ok(out)
    }
}

impl EscalationBacklog for SimLedger {
    async fn oldest_open_escalation(&self) -> PortResult<Option<DateTime<Utc>>> {
        port(self.sim.call("DynamoDB Query (list-index)", OpKind::Read, |w| w.ledger_oldest_open_escalation()).await)
    }

    async fn close_escalation(&self, key: &IdempotencyKey) -> PortResult<()> {
        let key = key.clone();
        port(
            self.sim
                .call("DynamoDB DeleteItem (open escalation)", OpKind::Write, move |w| {
                    let (now, lag) = (w.now, w.gsi_lag());
                    w.ledger.list_index.write(&key, None, now, lag);
                    w.ledger.escalations.remove(&key);
                })
                .await,
        )
    }
}

/// Reconciliation state as the adapter stores it (`pending` / `ambiguous`).
pub fn reconcile_state_name(s: ReconcileState) -> &'static str {
    if s == ReconcileState::Ambiguous { "ambiguous" } else { "pending" }
}
