//! The ledger table in DynamoDB: intents, their observations, the SNS message-id index, orphaned
//! delivery records. Item layout (documented in docs/data-model.md, "Data model"):
//!
//! | item | pk | sk |
//! |---|---|---|
//! | intent | `INTENT#<key>` | `INTENT` |
//! | observation | `INTENT#<key>` | `OBS#<source>:<id>` |
//! | message index | `MSG#<sns message id>` | `MSG` |
//! | storm-mode digest | `DIGEST#<digest id>` | `DIGEST` (in the list-index under `dig#<e164>`) |
//! | storm-mode send log | `BUDGET#<e164>` | `BUDGET` |
//! | orphaned record | `ORPHAN#<sns message id>` | `LOG#<log event id>` |
//!
//! Intents that need the sweep carry `due_shard`/`due_at`, the keys of the sparse `due-index`.
//! `due_shard` is `due#<n>`, n < `TOCSIN_DUE_SHARDS`, chosen once at intake — round robin from a
//! random start per instance, which spreads intents more evenly than a hash (a hash leaves some
//! partitions ~25 % above the mean at 1,000 intents over 16) — and kept in `due_home`: every later
//! write copies it, so the writers after intake need not know the shard count, and one intent's
//! index entries always share one partition.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

use super::commit::{self, TransitionWrites};
use super::describe;
use crate::domain::intent::{Escalation, Intent, IntentRecord, Status};
use crate::domain::observation::Observation;
use crate::domain::reconcile::ReconcileState;
use crate::domain::storm::DigestId;
use crate::domain::{IdempotencyKey, PhoneNumber, State};
use crate::ports::{
    Backlog, ClaimOutcome, DigestRecord, DigestStore, DueIndex, IndexEntry, IntentStore, MessageIndex, NextCheck,
    OpenAttempts, OrphanRecord, PortError, PortResult, PutOutcome, SendBudget, SendLog, Transition, TransitionOutcome,
};

pub const DUE_INDEX: &str = "due-index";
/// Sparse index of pending intents (keys only: `pending_to` = the recipient, `pending_by` = the
/// deadline): an intent is in it from intake until an SMS for it is known to be with SNS or it is
/// settled otherwise. An orphaned delivery record is matched against it; it is also a person's
/// backlog in deadline order. It replaced `open-index` (by number and claim time, projecting
/// whole items), which is no longer written and leaves the template in the next release
/// (CloudFormation changes one GSI per stack update).
pub const PENDING_INDEX: &str = "pending-index";
/// At most this many of a recipient's pending intents are compared with an orphaned record.
pub const ORPHAN_CANDIDATES: usize = 100;
/// The one partition of the due-index before it was sharded: still read by the sweep, so intents
/// written by an earlier version are never missed.
pub const DUE_SHARD: &str = "due";

/// The operator listings' index (KEYS_ONLY, keys `list_pk`/`list_sk`): every intent under its
/// creation day, and every unacknowledged escalation under [`OPEN_ESCALATIONS`]. One index for
/// both because CloudFormation adds at most one GSI per stack update.
pub const LIST_INDEX: &str = "list-index";
/// Partitions per creation day (`c#<YYYY-MM-DD>#<n>`): intake's writes of a day spread over
/// them (n follows the due shard), and a listing reads them all. Writers and readers share it.
pub const LIST_SHARDS: u32 = 16;
/// The list-index partition of escalations nobody acknowledged yet, oldest first.
pub const OPEN_ESCALATIONS: &str = "esc#open";

/// The list-index partition of one recipient's storm-mode digests, by creation time.
pub fn digests_partition(recipient: &PhoneNumber) -> String {
    format!("dig#{}", recipient.expose())
}

/// The list-index partition of intents created on `day` whose due shard is `n`.
pub fn created_partition(day: NaiveDate, n: u32) -> String {
    format!("c#{}#{}", day.format("%Y-%m-%d"), n % LIST_SHARDS)
}

/// The name of due-index partition `n`.
pub fn due_shard_name(n: u32) -> String {
    format!("due#{n}")
}
pub use crate::domain::intent::RETENTION_AFTER_DEADLINE;
/// How many times a transaction cancelled only by `TransactionConflict` (another transaction on
/// the same item at the same moment: AWS answers this, the emulator never does) is tried again
/// before the conflict is reported as a transient failure.
const CONFLICT_RETRIES: u32 = 3;

type Item = HashMap<String, AttributeValue>;

pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn intent_pk(key: &IdempotencyKey) -> String {
    format!("INTENT#{key}")
}

fn escalation_pk(key: &IdempotencyKey) -> String {
    format!("ESC#{key}")
}

/// The key and time of one list-index entry (its projected keys).
fn list_entry(item: &Item, prefix: &str) -> PortResult<(DateTime<Utc>, IdempotencyKey)> {
    let corrupt = |m: &str| PortError::Corrupt { what: format!("{LIST_INDEX} entry"), message: m.to_owned() };
    let pk = get_s(item, "pk").ok_or_else(|| corrupt("no pk"))?;
    let key = pk.strip_prefix(prefix).ok_or_else(|| corrupt("pk of another kind"))?;
    let key = IdempotencyKey::parse(key).map_err(|e| corrupt(&e.to_string()))?;
    let at = get_time(item, "list_sk").ok_or_else(|| corrupt("no list_sk time"))?;
    Ok((at, key))
}

fn unavailable<E: std::error::Error>(operation: &'static str, e: &E) -> PortError {
    PortError::Unavailable { operation, message: describe(e) }
}

fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn get_time(item: &Item, name: &str) -> Option<DateTime<Utc>> {
    get_s(item, name).and_then(|v| DateTime::parse_from_rfc3339(v).ok()).map(|d| d.with_timezone(&Utc))
}

fn get_u32(item: &Item, name: &str) -> u32 {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Reads an intent item back into a record.
pub fn record_from_item(item: &Item) -> PortResult<IntentRecord> {
    let what = get_s(item, "pk").unwrap_or("<no pk>").to_owned();
    let corrupt = |message: String| PortError::Corrupt { what: what.clone(), message };
    let intent: Intent =
        serde_json::from_str(get_s(item, "intent").ok_or_else(|| corrupt("no intent attribute".into()))?)
            .map_err(|e| corrupt(format!("intent JSON: {e}")))?;
    let state: State = get_s(item, "state")
        .ok_or_else(|| corrupt("no state".into()))?
        .parse()
        .map_err(|e: crate::domain::state::UnknownState| corrupt(e.to_string()))?;
    let escalation = match (get_time(item, "escalated_at"), get_s(item, "escalation_reason")) {
        (Some(at), reason) => Some(Escalation { at, reason: reason.unwrap_or_default().to_owned() }),
        _ => None,
    };
    Ok(IntentRecord {
        intent,
        status: Status {
            state,
            attempts: get_u32(item, "attempts"),
            attempt_id: get_s(item, "attempt_id").map(str::to_owned),
            claimed_at: get_time(item, "claimed_at"),
            lease_until: get_time(item, "lease_until"),
            sns_message_id: get_s(item, "sns_message_id").map(str::to_owned),
            accepted_at: get_time(item, "accepted_at"),
            final_at: get_time(item, "final_at"),
            escalation,
            conflicts: get_u32(item, "conflicts"),
            last_error: get_s(item, "last_error").map(str::to_owned),
            reconcile_attempts: get_u32(item, "reconcile_attempts"),
            reconcile_next_at: get_time(item, "reconcile_next_at"),
            enqueued_at: get_time(item, "enqueued_at"),
            next_check: item
                .get("due_at")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(DateTime::from_timestamp_millis),
            reconcile_state: match get_s(item, "reconcile_state") {
                Some("ambiguous") => ReconcileState::Ambiguous,
                _ => ReconcileState::Pending,
            },
            late_expected: get_time(item, "late_expected"),
            digest_id: match get_s(item, "digest_id") {
                Some(raw) => Some(DigestId::parse(raw).ok_or_else(|| corrupt("bad digest_id".into()))?),
                None => None,
            },
        },
    })
}

fn record_to_item(r: &IntentRecord, next_check: DateTime<Utc>, shard: u32) -> PortResult<Item> {
    let due_shard = due_shard_name(shard);
    let due_shard = due_shard.as_str();
    let i = &r.intent;
    let intent_json =
        serde_json::to_string(i).map_err(|e| PortError::Corrupt { what: i.key.to_string(), message: e.to_string() })?;
    // Every byte counts: each write of an item over 1 KB costs 2 write units, and the intent item
    // is written at intake, at the claim, at the SNS answer and at the delivery record. So no
    // attribute repeats what the key or the intent JSON holds (creation time and deadline are in
    // it; `list_sk` is the creation time too), counters start absent (read as 0), and the last
    // change's time is its observation's.
    let mut item = Item::from([
        ("pk".into(), s(intent_pk(&i.key))),
        ("sk".into(), s("INTENT")),
        ("intent".into(), s(intent_json)),
        ("state".into(), s(r.status.state.as_str())),
        ("due_shard".into(), s(due_shard)),
        ("due_home".into(), s(due_shard)),
        ("due_at".into(), n(next_check.timestamp_millis())),
        ("expires_at".into(), n(i.expires_at().timestamp())),
        // The list-index entry: written once here, never changed (so never written again).
        ("list_pk".into(), s(created_partition(i.created_at.date_naive(), shard))),
        ("list_sk".into(), s(ts(i.created_at))),
        // The pending-index entry (recipient, deadline), from here until an SMS for the intent is
        // known to be with SNS (or the intent is settled otherwise): `pending_by` is removed then.
        ("pending_to".into(), s(i.recipient.expose())),
    ]);
    if r.status.state.is_pending() {
        item.insert("pending_by".into(), s(ts(i.deadline)));
    }
    if let Some(expected) = r.status.late_expected {
        item.insert("late_expected".into(), s(ts(expected)));
    }
    Ok(item)
}

fn observation_item(key: &IdempotencyKey, o: &Observation, expires_at: DateTime<Utc>) -> PortResult<Item> {
    let json =
        serde_json::to_string(o).map_err(|e| PortError::Corrupt { what: o.id.clone(), message: e.to_string() })?;
    Ok(Item::from([
        ("pk".into(), s(intent_pk(key))),
        ("sk".into(), s(format!("OBS#{}", o.id))),
        ("at".into(), s(ts(o.at))),
        ("obs".into(), s(json)),
        ("expires_at".into(), n(expires_at.timestamp())),
    ]))
}

/// When the items a transition writes expire: with the intent, or — for a change decided without
/// reading the intent — the retention counted from the observation itself (never longer than the
/// intent's by more than the receipt window, since such observations are delivery records).
fn retain_until(t: &Transition) -> DateTime<Utc> {
    t.retain_until
        .unwrap_or_else(|| t.observation.at.checked_add_signed(RETENTION_AFTER_DEADLINE).unwrap_or(t.observation.at))
}

/// `attribute_not_exists(pk)`, or the item there is past its TTL and only waiting for DynamoDB's
/// lazy deletion (which AWS says can take days): an expired item counts as absent, so a key's
/// second life never runs into its first life's leftovers.
const ABSENT_OR_EXPIRED: &str = "attribute_not_exists(pk) OR expires_at < :expired_before";

/// Builds the update expression for a transition.
struct Expr {
    set: Vec<String>,
    remove: Vec<String>,
    names: HashMap<String, String>,
    values: Item,
}

impl Expr {
    fn new() -> Self {
        Expr { set: Vec::new(), remove: Vec::new(), names: HashMap::new(), values: Item::new() }
    }
    fn set(&mut self, attr: &str, v: AttributeValue) {
        let name = format!("#{attr}");
        let val = format!(":{attr}");
        self.set.push(format!("{name} = {val}"));
        self.names.insert(name, attr.to_owned());
        self.values.insert(val, v);
    }
    fn add(&mut self, attr: &str) {
        let name = format!("#{attr}");
        self.set.push(format!("{name} = if_not_exists({name}, :zero) + :one"));
        self.names.insert(name, attr.to_owned());
        self.values.insert(":zero".into(), n(0));
        self.values.insert(":one".into(), n(1));
    }
    fn remove(&mut self, attr: &str) {
        let name = format!("#{attr}");
        self.remove.push(name.clone());
        self.names.insert(name, attr.to_owned());
    }
    fn next_check(&mut self, next: NextCheck) {
        match next {
            NextCheck::Keep => {}
            NextCheck::At(t) => {
                // The intent's own partition (an item written before sharding has none: the old one).
                self.set.push("#due_shard = if_not_exists(#due_home, :legacy_shard)".into());
                self.names.insert("#due_shard".into(), "due_shard".into());
                self.names.insert("#due_home".into(), "due_home".into());
                self.values.insert(":legacy_shard".into(), s(DUE_SHARD));
                self.set("due_at", n(t.timestamp_millis()));
            }
            NextCheck::Remove => {
                self.remove("due_shard");
                self.remove("due_at");
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
    fn expression(&self) -> String {
        let mut e = String::new();
        if !self.set.is_empty() {
            e.push_str("SET ");
            e.push_str(&self.set.join(", "));
        }
        if !self.remove.is_empty() {
            e.push_str(" REMOVE ");
            e.push_str(&self.remove.join(", "));
        }
        e
    }
    /// `attribute_exists(pk)`, plus `#state IN (...)` and `attempt_id = ...` when asked.
    fn condition(&mut self, from: &[State], attempt_id: Option<&str>) -> String {
        let mut c = vec!["attribute_exists(pk)".to_owned()];
        if !from.is_empty() {
            self.names.insert("#cstate".into(), "state".into());
            let mut placeholders = Vec::new();
            for (i, st) in from.iter().enumerate() {
                let p = format!(":from{i}");
                self.values.insert(p.clone(), s(st.as_str()));
                placeholders.push(p);
            }
            c.push(format!("#cstate IN ({})", placeholders.join(", ")));
        }
        if let Some(a) = attempt_id {
            self.names.insert("#cattempt".into(), "attempt_id".into());
            self.values.insert(":cattempt".into(), s(a));
            c.push("#cattempt = :cattempt".into());
        }
        c.join(" AND ")
    }
}

#[derive(Clone, Debug)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    due_shards: u32,
    /// The next new intent's partition (round robin; shared by clones).
    next_shard: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl DynamoLedger {
    /// The client and table, for the ledger's other adapters ([`super::carriers`]).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }
    pub(crate) fn table(&self) -> &str {
        &self.table
    }
    /// A ledger whose new intents all go to one due-index partition (set the deployment's count
    /// with [`Self::with_due_shards`] where intents are created or the index is swept).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let start = rand::random::<u32>();
        DynamoLedger {
            client,
            table: table.into(),
            due_shards: 1,
            next_shard: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(start)),
        }
    }

    /// The due-index partitions new intents are spread over.
    pub fn due_shard_count(&self) -> u32 {
        self.due_shards
    }

    /// Spreads new intents over `shards` due-index partitions, and sweeps them all.
    pub fn with_due_shards(mut self, shards: u32) -> Self {
        self.due_shards = shards.max(1);
        self
    }

    /// The intent item as a refused conditional write found it: the one DynamoDB returned with the
    /// refusal (`ReturnValuesOnConditionCheckFailure`), else read strongly consistent.
    async fn refused_intent(&self, returned: Option<Item>, key: &IdempotencyKey) -> PortResult<Option<Item>> {
        match returned {
            Some(item) => Ok(Some(item)),
            None => self.get_item(intent_pk(key), "INTENT").await,
        }
    }

    async fn get_item(&self, pk: String, sk: &str) -> PortResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB GetItem", &e))?;
        Ok(out.item)
    }

    /// Intents created on `day` (UTC), newest first, from the list-index (keys only): each of the
    /// day's [`LIST_SHARDS`] partitions read newest first, at most `each` entries from each, merged.
    /// With `key_prefix`, only keys that start with it (the partitions are read through, the
    /// prefix filtering what comes back). Eventually consistent: an intent created a moment ago
    /// may be missing.
    pub async fn created_on(
        &self,
        day: NaiveDate,
        each: usize,
        key_prefix: Option<&str>,
    ) -> PortResult<Vec<(DateTime<Utc>, IdempotencyKey)>> {
        let queries = (0..LIST_SHARDS).map(|n| self.list_partition(created_partition(day, n), false, each, key_prefix));
        let mut out: Vec<(DateTime<Utc>, IdempotencyKey)> =
            futures::future::try_join_all(queries).await?.into_iter().flatten().collect();
        out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
        Ok(out)
    }

    /// Escalations nobody acknowledged yet, oldest first, at most `limit`, from the list-index.
    pub async fn open_escalations(&self, limit: usize) -> PortResult<Vec<(DateTime<Utc>, IdempotencyKey)>> {
        self.list_partition(OPEN_ESCALATIONS.to_owned(), true, limit, None).await
    }

    async fn list_partition(
        &self,
        partition: String,
        oldest_first: bool,
        limit: usize,
        key_prefix: Option<&str>,
    ) -> PortResult<Vec<(DateTime<Utc>, IdempotencyKey)>> {
        let kind = if partition == OPEN_ESCALATIONS { "ESC#" } else { "INTENT#" };
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let mut req = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(LIST_INDEX)
                .key_condition_expression("list_pk = :p")
                .expression_attribute_values(":p", s(partition.as_str()))
                .scan_index_forward(oldest_first)
                .set_exclusive_start_key(start.take());
            match key_prefix {
                Some(prefix) => {
                    req = req
                        .filter_expression("begins_with(pk, :kp)")
                        .expression_attribute_values(":kp", s(format!("{kind}{prefix}")));
                }
                None => req = req.limit(i32::try_from(limit - out.len()).unwrap_or(i32::MAX)),
            }
            let page = req.send().await.map_err(|e| unavailable("DynamoDB Query (list-index)", &e))?;
            for item in page.items() {
                out.push(list_entry(item, kind)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        out.truncate(limit);
        Ok(out)
    }
}

impl crate::ports::EscalationBacklog for DynamoLedger {
    async fn oldest_open_escalation(&self) -> PortResult<Option<DateTime<Utc>>> {
        Ok(self.open_escalations(1).await?.into_iter().next().map(|(at, _)| at))
    }

    async fn close_escalation(&self, key: &IdempotencyKey) -> PortResult<()> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(escalation_pk(key)))
            .key("sk", s("ESC"))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB DeleteItem (open escalation)", &e))?;
        Ok(())
    }
}

impl IntentStore for DynamoLedger {
    async fn put_new(&self, record: &IntentRecord, next_check: DateTime<Utc>) -> PortResult<PutOutcome> {
        let shard = self.next_shard.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.due_shards;
        let item = record_to_item(record, next_check, shard)?;
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(ABSENT_OR_EXPIRED)
            .expression_attribute_values(":expired_before", n(record.intent.created_at.timestamp()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match res {
            Ok(_) => Ok(PutOutcome::Created),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let old = match e.err() {
                    aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c) => {
                        c.item.clone()
                    }
                    _ => None,
                };
                let item = self.refused_intent(old, &record.intent.key).await?.ok_or_else(|| PortError::Corrupt {
                    what: record.intent.key.to_string(),
                    message: "exists yet unreadable".into(),
                })?;
                Ok(PutOutcome::Exists(Box::new(record_from_item(&item)?)))
            }
            Err(e) => Err(unavailable("DynamoDB PutItem", &e)),
        }
    }

    async fn get(&self, key: &IdempotencyKey) -> PortResult<Option<IntentRecord>> {
        self.get_item(intent_pk(key), "INTENT").await?.as_ref().map(record_from_item).transpose()
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
        let mut x = Expr::new();
        x.set("state", s(State::Sending.as_str()));
        x.set("attempt_id", s(attempt_id));
        x.set("claimed_at", s(ts(now)));
        x.set("lease_until", s(ts(lease_until)));
        // Still pending (in the pending-index since intake): no index entry changes.
        // The due-index entry is left as it is: intake's first check (its re-enqueue grace) is
        // nearly always earlier than the lease's end, and an earlier check is allowed (it costs
        // the sweep one read). The sender moves it only when it is later (`Sender::process`).
        let condition = x.condition(&State::CLAIMABLE, None);
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(key)))
            .key("sk", s("INTENT"))
            .update_expression(x.expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(x.names))
            .set_expression_attribute_values(Some(x.values))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match res {
            Ok(out) => match out.attributes {
                Some(item) => Ok(ClaimOutcome::Claimed(Box::new(record_from_item(&item)?))),
                None => {
                    Err(PortError::Corrupt { what: key.to_string(), message: "claim returned no attributes".into() })
                }
            },
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let old = match e.err() {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                        c.item.clone()
                    }
                    _ => None,
                };
                let Some(item) = self.refused_intent(old, key).await? else { return Ok(ClaimOutcome::Missing) };
                let record = record_from_item(&item)?;
                // Our own claim whose answer was lost and retried by the SDK: it is ours.
                if record.status.state == State::Sending && record.status.attempt_id.as_deref() == Some(attempt_id) {
                    return Ok(ClaimOutcome::Claimed(Box::new(record)));
                }
                Ok(ClaimOutcome::NotClaimable(Box::new(record)))
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (claim)", &e)),
        }
    }

    /// The observations of the intent's current life. The partition is read whole (the intent item
    /// sorts after the observations): an observation left from an earlier life of the key, expired
    /// but not yet deleted by DynamoDB's lazy TTL, expires before the current intent was created
    /// and is left out.
    async fn observations(&self, key: &IdempotencyKey) -> PortResult<Vec<Observation>> {
        let mut out = Vec::new();
        let mut created_at: Option<i64> = None;
        let mut moved: Option<(String, String)> = None;
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(intent_pk(key)))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB Query (observations)", &e))?;
            for item in page.items() {
                if get_s(item, "sk") == Some("INTENT") {
                    // `list_sk` is the creation time (`created_at` in items written before it).
                    created_at =
                        get_time(item, "list_sk").or_else(|| get_time(item, "created_at")).map(|c| c.timestamp());
                    moved = get_s(item, "moved_by")
                        .zip(get_s(item, "moved_obs"))
                        .map(|(id, o)| (id.to_owned(), o.to_owned()));
                    continue;
                }
                if !get_s(item, "sk").is_some_and(|sk| sk.starts_with("OBS#")) {
                    continue;
                }
                let expires = item.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
                out.push((expires, get_s(item, "obs").unwrap_or_default().to_owned()));
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        let mut observations = Vec::with_capacity(out.len());
        for (expires, raw) in out {
            if let (Some(e), Some(c)) = (expires, created_at)
                && e < c
            {
                continue;
            }
            let o: Observation = serde_json::from_str(&raw)
                .map_err(|e| PortError::Corrupt { what: format!("observation of {key}"), message: e.to_string() })?;
            observations.push(o);
        }
        // A state change whose observation item was not written yet (its function ended between
        // the two writes): the copy it carries.
        if let Some((id, raw)) = moved
            && !observations.iter().any(|o| o.id == id)
        {
            let o: Observation = serde_json::from_str(&raw)
                .map_err(|e| PortError::Corrupt { what: format!("moved_obs of {key}"), message: e.to_string() })?;
            observations.push(o);
        }
        observations.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        Ok(observations)
    }
}

impl MessageIndex for DynamoLedger {
    async fn lookup(&self, sns_message_id: &str) -> PortResult<Option<IndexEntry>> {
        match self.get_item(format!("MSG#{sns_message_id}"), "MSG").await? {
            Some(item) => index_entry(sns_message_id, &item).map(Some),
            None => Ok(None),
        }
    }

    /// BatchWriteItem, 25 orphans per call (DynamoDB's limit), the calls side by side: a foreign
    /// record (other applications' SMS arrive by the thousand) costs a 25th of a call instead of a
    /// call. BatchWriteItem takes no condition: a redelivered record's item is written again with
    /// the same key and message (only `received_at` moves), which is still one item. Items DynamoDB
    /// leaves unprocessed (it does under throttling) are sent again with backoff.
    async fn keep_orphans(&self, orphans: &[OrphanRecord]) -> PortResult<()> {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        let requests = orphans
            .iter()
            .map(|o| {
                let put = PutRequest::builder()
                    .item("pk", s(format!("ORPHAN#{}", o.sns_message_id)))
                    .item("sk", s(format!("LOG#{}", o.log_event_id)))
                    .item("log_group", s(o.log_group.as_str()))
                    .item("message", s(o.message.as_str()))
                    .item("received_at", s(ts(o.received_at)))
                    .item("expires_at", n(o.expires_at.timestamp()))
                    .build()
                    .map_err(|e| unavailable("DynamoDB PutRequest builder", &e))?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<PortResult<Vec<_>>>()?;
        // One log event can appear twice in a batch; BatchWriteItem refuses duplicate keys.
        let mut seen = std::collections::HashSet::new();
        let requests: Vec<WriteRequest> = requests
            .into_iter()
            .filter(|r| {
                let item = r.put_request().map(|p| p.item());
                seen.insert(item.map(|i| (get_s(i, "pk").map(str::to_owned), get_s(i, "sk").map(str::to_owned))))
            })
            .collect();
        let calls = requests.chunks(BATCH_WRITE_ITEMS).map(|chunk| self.batch_write(chunk.to_vec()));
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    async fn lookup_many(&self, sns_message_ids: &[String]) -> PortResult<crate::ports::IndexEntries> {
        self.batch_lookup(sns_message_ids).await
    }
}

impl DueIndex for DynamoLedger {
    fn due_shards(&self) -> Vec<String> {
        let mut shards: Vec<String> = (0..self.due_shards).map(due_shard_name).collect();
        shards.push(DUE_SHARD.to_owned());
        shards
    }

    async fn due(
        &self,
        shard: &str,
        now: DateTime<Utc>,
        limit: i32,
        after: Option<String>,
    ) -> PortResult<(Vec<IdempotencyKey>, Option<String>)> {
        let start: Option<Item> = match after {
            Some(token) => {
                let m: HashMap<String, String> = serde_json::from_str(&token)
                    .map_err(|e| PortError::Corrupt { what: "due-index page token".into(), message: e.to_string() })?;
                Some(
                    m.into_iter()
                        .map(|(k, v)| {
                            let av = if k == "due_at" { n(v) } else { s(v) };
                            (k, av)
                        })
                        .collect(),
                )
            }
            None => None,
        };
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(DUE_INDEX)
            .key_condition_expression("due_shard = :shard AND due_at <= :now")
            .expression_attribute_values(":shard", s(shard))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB Query (due-index)", &e))?;
        // The index projects keys only (an index write costs what the keys weigh, not the
        // intent): the sweep reads each due intent from the table itself.
        let keys = page
            .items()
            .iter()
            .map(|item| {
                let pk = get_s(item, "pk").unwrap_or_default();
                IdempotencyKey::parse(pk.trim_start_matches("INTENT#")).map_err(|_| PortError::Corrupt {
                    what: format!("due-index entry {pk}"),
                    message: "not an intent key".into(),
                })
            })
            .collect::<PortResult<Vec<_>>>()?;
        let next = match page.last_evaluated_key {
            Some(k) if !k.is_empty() => {
                let m: HashMap<String, String> = k
                    .iter()
                    .filter_map(|(name, v)| match v {
                        AttributeValue::S(x) | AttributeValue::N(x) => Some((name.clone(), x.clone())),
                        _ => None,
                    })
                    .collect();
                Some(
                    serde_json::to_string(&m)
                        .map_err(|e| PortError::Corrupt { what: "page token".into(), message: e.to_string() })?,
                )
            }
            _ => None,
        };
        Ok((keys, next))
    }

    async fn lease_escalation(
        &self,
        key: &IdempotencyKey,
        run_id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> PortResult<Option<IntentRecord>> {
        // The due-index is a GSI, updated eventually: the record the sweep read there may be older
        // than the intent. The lease is taken on the base item, on its current state, and returns
        // the item as it is now, so the caller decides on the truth.
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(key)))
            .key("sk", s("INTENT"))
            .update_expression("SET esc_lease = :until, esc_run = :run")
            .condition_expression(
                "attribute_exists(pk) AND attribute_not_exists(escalated_at) AND #state <> :delivered \
                 AND (attribute_not_exists(esc_lease) OR esc_lease < :now)",
            )
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":delivered", s(State::Delivered.as_str()))
            .expression_attribute_values(":until", s(ts(until)))
            .expression_attribute_values(":run", s(run_id))
            .expression_attribute_values(":now", s(ts(now)))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match res {
            Ok(out) => out.attributes.as_ref().map(record_from_item).transpose(),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(None),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (escalation lease)", &e)),
        }
    }

    async fn set_next_check(&self, key: &IdempotencyKey, next: NextCheck, in_state: Option<State>) -> PortResult<()> {
        let mut x = Expr::new();
        x.next_check(next);
        if x.set.is_empty() && x.remove.is_empty() {
            return Ok(());
        }
        let condition = x.condition(in_state.as_slice(), None);
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(key)))
            .key("sk", s("INTENT"))
            .update_expression(x.expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(x.names))
            .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (next check)", &e)),
        }
    }
}

impl DynamoLedger {
    /// A recipient's entries in the pending-index (keys only: `pk`, `sk`, `pending_to`,
    /// `pending_by`), earliest deadline first, whose deadline is after `from` (or at it, with
    /// `inclusive`), at most `limit`, page after page.
    async fn pending_entries(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        inclusive: bool,
        limit: usize,
    ) -> PortResult<Vec<Item>> {
        let condition = if inclusive {
            "pending_to = :r AND pending_by >= :from"
        } else {
            "pending_to = :r AND pending_by > :from"
        };
        let mut entries: Vec<Item> = Vec::new();
        let mut start: Option<Item> = None;
        while entries.len() < limit {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(PENDING_INDEX)
                .key_condition_expression(condition)
                .expression_attribute_values(":r", s(recipient.expose()))
                .expression_attribute_values(":from", s(ts(from)))
                .limit(i32::try_from(limit - entries.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB Query (pending-index)", &e))?;
            entries.extend(page.items().iter().cloned());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(entries)
    }
}

impl SendBudget for DynamoLedger {
    async fn send_log(&self, recipient: &PhoneNumber) -> PortResult<SendLog> {
        let Some(item) = self.get_item(format!("BUDGET#{}", recipient.expose()), "BUDGET").await? else {
            return Ok(SendLog::default());
        };
        let sent = item
            .get("sent")
            .and_then(|v| v.as_l().ok())
            .map(|l| {
                l.iter()
                    .filter_map(|v| v.as_s().ok())
                    .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|d| d.with_timezone(&Utc))
                    .collect()
            })
            .unwrap_or_default();
        let version = item.get("version").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok());
        Ok(SendLog { sent, version })
    }

    /// One conditional PutItem: the whole (small) log, on the version read.
    async fn record_send(
        &self,
        recipient: &PhoneNumber,
        read: &SendLog,
        at: DateTime<Utc>,
        keep: usize,
        expires_at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let mut sent = read.sent.clone();
        sent.push(at);
        sent.sort();
        let drop = sent.len().saturating_sub(keep.max(1));
        sent.drain(..drop);
        let version = read.version.map_or(1, |v| v + 1);
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("BUDGET#{}", recipient.expose())))
            .item("sk", s("BUDGET"))
            .item("sent", AttributeValue::L(sent.iter().map(|t| s(ts(*t))).collect()))
            .item("version", n(version))
            .item("expires_at", n(expires_at.timestamp()));
        put = match read.version {
            Some(v) => put.condition_expression("version = :v").expression_attribute_values(":v", n(v)),
            None => put.condition_expression("attribute_not_exists(pk)"),
        };
        match put.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(unavailable("DynamoDB PutItem (send log)", &e)),
        }
    }
}

impl Backlog for DynamoLedger {
    /// The pending-index (keys only), earliest deadline first.
    async fn pending_for(
        &self,
        recipient: &PhoneNumber,
        due_after: DateTime<Utc>,
        limit: usize,
    ) -> PortResult<Vec<(IdempotencyKey, DateTime<Utc>)>> {
        self.pending_entries(recipient, due_after, false, limit.max(1))
            .await?
            .iter()
            .map(|item| {
                let pk = get_s(item, "pk").unwrap_or_default();
                let corrupt = |m: &str| PortError::Corrupt { what: pk.to_owned(), message: m.to_owned() };
                let key = IdempotencyKey::parse(pk.strip_prefix("INTENT#").unwrap_or(pk))
                    .map_err(|_| corrupt("bad key in pending-index"))?;
                let deadline = get_time(item, "pending_by").ok_or_else(|| corrupt("no pending_by in pending-index"))?;
                Ok((key, deadline))
            })
            .collect()
    }
}

impl OpenAttempts for DynamoLedger {
    /// From the pending-index (keys only): the recipient's pending intents whose deadline is not
    /// before `claimed_from` (a claim is never later than its intent's deadline: a stale intent is
    /// escalated, not sent), earliest deadline first, at most [`ORPHAN_CANDIDATES`]; read from the
    /// table, strongly consistent, and kept if they are open attempts claimed in the window.
    async fn open_attempts_to(
        &self,
        recipient: &PhoneNumber,
        claimed_from: DateTime<Utc>,
        claimed_to: DateTime<Utc>,
    ) -> PortResult<Vec<IntentRecord>> {
        let keys: Vec<Item> = self
            .pending_entries(recipient, claimed_from, true, ORPHAN_CANDIDATES)
            .await?
            .into_iter()
            .filter_map(|item| {
                Some(HashMap::from([
                    ("pk".to_owned(), item.get("pk")?.clone()),
                    ("sk".to_owned(), item.get("sk")?.clone()),
                ]))
            })
            .collect();
        let mut open = Vec::new();
        for item in self.batch_get(keys).await? {
            let r = record_from_item(&item)?;
            let in_window = r.status.claimed_at.is_some_and(|c| c >= claimed_from && c <= claimed_to);
            if matches!(r.status.state, State::Sending | State::SendUnknown) && in_window {
                open.push(r);
            }
        }
        Ok(open)
    }
}

// ---- The message index, many ids at a time (status looks a whole batch of records up at once) ----

/// Keys per BatchGetItem call: DynamoDB's limit.
const BATCH_GET_KEYS: usize = 100;
/// Items per BatchWriteItem call: DynamoDB's limit.
const BATCH_WRITE_ITEMS: usize = 25;
/// Rounds for keys DynamoDB leaves unprocessed (it does under throttling) before giving up.
const UNPROCESSED_ROUNDS: u32 = 6;

impl DynamoLedger {
    /// `MSG#<id>` entries by BatchGetItem, 100 keys per call, strongly consistent (the sender's
    /// write is read as soon as it lands). Keys left in `UnprocessedKeys` are asked again with
    /// exponential backoff (25 ms, doubling), as DynamoDB asks; still unprocessed after
    /// [`UNPROCESSED_ROUNDS`], the lookup fails (the status invocation is then retried whole).
    async fn batch_lookup(&self, ids: &[String]) -> PortResult<crate::ports::IndexEntries> {
        let mut unique: Vec<&str> = ids.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        let keys = unique
            .iter()
            .map(|id| HashMap::from([("pk".to_owned(), s(format!("MSG#{id}"))), ("sk".to_owned(), s("MSG"))]))
            .collect();
        let mut found = crate::ports::IndexEntries::new();
        for item in self.batch_get(keys).await? {
            if let Some(id) = get_s(&item, "pk").and_then(|pk| pk.strip_prefix("MSG#")) {
                found.insert(id.to_owned(), index_entry(id, &item));
            }
        }
        Ok(found)
    }

    /// One BatchWriteItem of at most [`BATCH_WRITE_ITEMS`] requests, with the unprocessed ones
    /// sent again (25 ms, doubling) for [`UNPROCESSED_ROUNDS`] rounds before the write fails.
    async fn batch_write(&self, mut pending: Vec<aws_sdk_dynamodb::types::WriteRequest>) -> PortResult<()> {
        for round in 0.. {
            let out = self
                .client
                .batch_write_item()
                .request_items(&self.table, pending)
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB BatchWriteItem", &e))?;
            match out.unprocessed_items.and_then(|mut u| u.remove(&self.table)).filter(|left| !left.is_empty()) {
                None => return Ok(()),
                Some(left) if round + 1 < UNPROCESSED_ROUNDS => {
                    tokio::time::sleep(std::time::Duration::from_millis(25u64 << round)).await;
                    pending = left;
                }
                Some(left) => {
                    return Err(PortError::Unavailable {
                        operation: "DynamoDB BatchWriteItem",
                        message: format!(
                            "{} items still unprocessed after {UNPROCESSED_ROUNDS} rounds (throttled)",
                            left.len()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Items by key with BatchGetItem, [`BATCH_GET_KEYS`] keys per call, strongly consistent. Keys
    /// left in `UnprocessedKeys` are asked again with exponential backoff (25 ms, doubling), as
    /// DynamoDB asks; still unprocessed after [`UNPROCESSED_ROUNDS`], the read fails.
    async fn batch_get(&self, keys: Vec<Item>) -> PortResult<Vec<Item>> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut pending = KeysAndAttributes::builder()
                .set_keys(Some(chunk.to_vec()))
                .consistent_read(true)
                .build()
                .map_err(|e| unavailable("DynamoDB BatchGetItem (request)", &e))?;
            for round in 0.. {
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(|e| unavailable("DynamoDB BatchGetItem", &e))?;
                items.extend(out.responses.and_then(|mut r| r.remove(&self.table)).unwrap_or_default());
                match out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)).filter(|k| !k.keys.is_empty()) {
                    None => break,
                    Some(left) if round + 1 < UNPROCESSED_ROUNDS => {
                        tokio::time::sleep(std::time::Duration::from_millis(25u64 << round)).await;
                        pending = left;
                    }
                    Some(left) => {
                        return Err(PortError::Unavailable {
                            operation: "DynamoDB BatchGetItem",
                            message: format!(
                                "{} keys still unprocessed after {UNPROCESSED_ROUNDS} rounds (throttled)",
                                left.keys.len()
                            ),
                        });
                    }
                }
            }
        }
        Ok(items)
    }
}

/// One message-index item read back: the intent's key and recipient, and for a digest its id and
/// members.
fn index_entry(id: &str, item: &Item) -> PortResult<IndexEntry> {
    let corrupt = |m: &str| PortError::Corrupt { what: format!("MSG#{id}"), message: m.to_owned() };
    let key = IdempotencyKey::parse(get_s(item, "key").unwrap_or_default()).map_err(|_| corrupt("bad key"))?;
    let recipient =
        PhoneNumber::parse(get_s(item, "recipient").unwrap_or_default()).map_err(|_| corrupt("bad recipient"))?;
    let digest = match get_s(item, "digest_id") {
        None => None,
        Some(raw) => {
            let digest_id = DigestId::parse(raw).ok_or_else(|| corrupt("bad digest_id"))?;
            Some((digest_id, members_of(item).map_err(|m| corrupt(&m))?))
        }
    };
    Ok(IndexEntry { key, recipient, digest })
}

/// A digest's `members` attribute (a list of keys, earliest deadline first).
fn members_of(item: &Item) -> Result<Vec<IdempotencyKey>, String> {
    let list = item.get("members").and_then(|v| v.as_l().ok()).ok_or("no members list")?;
    let members = list
        .iter()
        .map(|v| v.as_s().ok().and_then(|k| IdempotencyKey::parse(k).ok()).ok_or("bad member key"))
        .collect::<Result<Vec<_>, _>>()?;
    if members.is_empty() { Err("empty members list".into()) } else { Ok(members) }
}

fn members_value(members: &[IdempotencyKey]) -> AttributeValue {
    AttributeValue::L(members.iter().map(|k| s(k.as_str())).collect())
}

impl DigestStore for DynamoLedger {
    async fn put_digest(&self, d: &DigestRecord) -> PortResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("DIGEST#{}", d.id)))
            .item("sk", s("DIGEST"))
            .item("recipient", s(d.recipient.expose()))
            .item("members", members_value(&d.members))
            .item("segments", n(d.segments))
            .item("created_at", s(ts(d.created_at)))
            .item("expires_at", n(d.expires_at.timestamp()))
            // Findable by recipient and time (the list-index), for a member that never learnt it.
            .item("list_pk", s(digests_partition(&d.recipient)))
            .item("list_sk", s(ts(d.created_at)))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| unavailable("DynamoDB PutItem (digest)", &e))
    }

    async fn index_digest_message(&self, sns_message_id: &str, d: &DigestRecord) -> PortResult<()> {
        let Some(first) = d.members.first() else {
            return Err(PortError::Corrupt { what: format!("DIGEST#{}", d.id), message: "no members".into() });
        };
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("MSG#{sns_message_id}")))
            .item("sk", s("MSG"))
            .item("key", s(first.as_str()))
            .item("recipient", s(d.recipient.expose()))
            .item("digest_id", s(d.id.as_str()))
            .item("members", members_value(&d.members))
            .item("at", s(ts(d.created_at)))
            .item("expires_at", n(d.expires_at.timestamp()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| unavailable("DynamoDB PutItem (digest message index)", &e))
    }

    async fn digests_to(
        &self,
        recipient: &PhoneNumber,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> PortResult<Vec<DigestRecord>> {
        let mut ids = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(LIST_INDEX)
                .key_condition_expression("list_pk = :p AND list_sk BETWEEN :from AND :to")
                .expression_attribute_values(":p", s(digests_partition(recipient)))
                .expression_attribute_values(":from", s(ts(from)))
                .expression_attribute_values(":to", s(ts(to)))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB Query (list-index, digests)", &e))?;
            for item in page.items() {
                if let Some(id) = get_s(item, "pk").and_then(|pk| pk.strip_prefix("DIGEST#")).and_then(DigestId::parse)
                {
                    ids.push(id);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        let mut digests = Vec::with_capacity(ids.len());
        for id in ids {
            digests.extend(self.get_digest(&id).await?);
        }
        Ok(digests)
    }

    async fn record_digest_outcome(&self, id: &DigestId, outcome: &crate::ports::LoggedRecord) -> PortResult<()> {
        let json = serde_json::to_string(outcome)
            .map_err(|e| PortError::Corrupt { what: format!("DIGEST#{id}"), message: e.to_string() })?;
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(format!("DIGEST#{id}")))
            .key("sk", s("DIGEST"))
            .update_expression("SET outcome = :o")
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(outcome)")
            .expression_attribute_values(":o", s(json))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            // The first record is kept; or the digest is gone (expired): nothing to add to.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (digest outcome)", &e)),
        }
    }

    async fn get_digest(&self, id: &DigestId) -> PortResult<Option<DigestRecord>> {
        let Some(item) = self.get_item(format!("DIGEST#{id}"), "DIGEST").await? else { return Ok(None) };
        let corrupt = |m: String| PortError::Corrupt { what: format!("DIGEST#{id}"), message: m };
        Ok(Some(DigestRecord {
            id: id.clone(),
            recipient: PhoneNumber::parse(get_s(&item, "recipient").unwrap_or_default())
                .map_err(|_| corrupt("bad recipient".into()))?,
            members: members_of(&item).map_err(corrupt)?,
            segments: get_u32(&item, "segments"),
            created_at: get_time(&item, "created_at").ok_or_else(|| corrupt("no created_at".into()))?,
            expires_at: item
                .get("expires_at")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(|t| DateTime::from_timestamp(t, 0))
                .ok_or_else(|| corrupt("no expires_at".into()))?,
            outcome: match get_s(&item, "outcome") {
                Some(raw) => Some(serde_json::from_str(raw).map_err(|e| corrupt(format!("outcome: {e}")))?),
                None => None,
            },
        }))
    }
}

/// The intent's update and its condition for a transition.
fn transition_update(t: &Transition) -> (Expr, String) {
    let mut x = Expr::new();
    let p = &t.patch;
    if let Some(st) = p.state {
        x.set("state", s(st.as_str()));
    }
    if p.increment_attempts {
        x.add("attempts");
    }
    if let Some((aid, at, until)) = &p.claim {
        x.set("attempt_id", s(aid.as_str()));
        x.set("claimed_at", s(ts(*at)));
        x.set("lease_until", s(ts(*until)));
    } else if p.clear_claim {
        x.remove("attempt_id");
        x.remove("lease_until");
    }
    if let Some(m) = &p.sns_message_id {
        x.set("sns_message_id", s(m.as_str()));
    }
    if let Some(a) = p.accepted_at {
        x.set("accepted_at", s(ts(a)));
    }
    if let Some(f) = p.final_at {
        x.set("final_at", s(ts(f)));
    }
    if let Some(e) = &p.escalation {
        x.set("escalated_at", s(ts(e.at)));
        x.set("escalation_reason", s(e.reason.as_str()));
        x.remove("esc_lease");
    }
    if p.add_conflict {
        x.add("conflicts");
    }
    if let Some(err) = &p.last_error {
        x.set("last_error", s(err.as_str()));
    }
    if let Some(t) = p.enqueued_at {
        x.set("enqueued_at", s(ts(t)));
    }
    if let Some(d) = &p.digest_id {
        x.set("digest_id", s(d.as_str()));
    }
    if let Some(late) = p.late_expected {
        x.set("late_expected", s(ts(late)));
    }
    if let Some((attempts, next, state)) = &p.reconcile {
        x.set("reconcile_attempts", n(attempts));
        match next {
            Some(t) => x.set("reconcile_next_at", s(ts(*t))),
            None => x.remove("reconcile_next_at"),
        }
        x.set("reconcile_state", s(if *state == ReconcileState::Ambiguous { "ambiguous" } else { "pending" }));
    }
    // The in-flight index holds every SMS from SNS's acceptance on (super::carriers).
    if let Some(at) = p.accepted_at {
        x.set("inflight_pk", s(super::carriers::IN_FLIGHT_PARTITION));
        x.set("inflight_at", s(ts(at)));
    }
    // The pending-index holds an intent while no SMS for it is known to be with SNS.
    match p.state {
        Some(st) if !st.is_pending() => {
            x.remove("pending_by");
            // Items claimed by the release before the pending-index leave the retired open-index.
            x.remove("open_recipient");
        }
        Some(_) => {
            if let Some((recipient, deadline)) = &p.pending_again {
                x.set("pending_to", s(recipient.expose()));
                x.set("pending_by", s(ts(*deadline)));
            }
        }
        None => {}
    }
    x.next_check(t.next_check);
    let mut condition = x.condition(&t.from, t.attempt_id.as_deref());
    if let Some(mid) = &t.expect.sns_message_id {
        x.names.insert("#cmid".into(), "sns_message_id".into());
        x.values.insert(":cmid".into(), s(mid.as_str()));
        condition.push_str(" AND #cmid = :cmid");
    }
    if t.expect.not_escalated {
        x.names.insert("#cesc".into(), "escalated_at".into());
        condition.push_str(" AND attribute_not_exists(#cesc)");
    }
    (x, condition)
}

impl TransitionWrites for DynamoLedger {
    async fn put_observation(&self, t: &Transition) -> PortResult<bool> {
        self.put_observation(t).await
    }

    async fn put_message_index(&self, t: &Transition) -> PortResult<()> {
        self.put_message_index(t).await
    }

    async fn update_intent(&self, t: &Transition, mark: bool) -> PortResult<Option<(IntentRecord, Option<String>)>> {
        let (mut update, condition) = transition_update(t);
        if mark {
            // The observation travels with the change it describes: stored on the intent in the
            // same write, it is never lost if the function ends before its own item is written
            // (and `observations` shows it until then).
            let json = serde_json::to_string(&t.observation)
                .map_err(|e| PortError::Corrupt { what: t.observation.id.clone(), message: e.to_string() })?;
            update.set("moved_by", s(t.observation.id.as_str()));
            update.set("moved_obs", s(json));
        }
        self.update_intent(&t.key, update, condition).await
    }

    async fn transact(&self, t: &Transition) -> PortResult<TransitionOutcome> {
        let (update, condition) = transition_update(t);
        self.transact(t, update, condition).await
    }
}

impl DynamoLedger {
    fn observation_put(&self, t: &Transition) -> PortResult<Put> {
        Put::builder()
            .table_name(&self.table)
            .set_item(Some(observation_item(&t.key, &t.observation, retain_until(t))?))
            .condition_expression(ABSENT_OR_EXPIRED)
            .expression_attribute_values(":expired_before", n(t.observation.at.timestamp()))
            .build()
            .map_err(|e| unavailable("DynamoDB Put builder", &e))
    }

    fn message_index_put(&self, t: &Transition) -> PortResult<Option<Put>> {
        let Some((mid, recipient)) = &t.index_message else { return Ok(None) };
        Put::builder()
            .table_name(&self.table)
            .item("pk", s(format!("MSG#{mid}")))
            .item("sk", s("MSG"))
            .item("key", s(t.key.as_str()))
            .item("recipient", s(recipient.expose()))
            .item("at", s(ts(t.observation.at)))
            .item("expires_at", n(retain_until(t).timestamp()))
            .build()
            .map(Some)
            .map_err(|e| unavailable("DynamoDB Put builder", &e))
    }

    /// Stores the transition's observation unless it is there already. True: stored now.
    async fn put_observation(&self, t: &Transition) -> PortResult<bool> {
        let put = self.observation_put(t)?;
        let res = self
            .client
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .set_expression_attribute_values(put.expression_attribute_values().cloned())
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(unavailable("DynamoDB PutItem (observation)", &e)),
        }
    }

    /// Writes the SNS message id → intent entry, if the transition has one. Idempotent: the same
    /// message id always names the same intent.
    async fn put_message_index(&self, t: &Transition) -> PortResult<()> {
        let Some(put) = self.message_index_put(t)? else { return Ok(()) };
        self.client
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB PutItem (message index)", &e))?;
        Ok(())
    }

    /// The conditional update of the intent item alone. `None`: applied. `Some`: refused, with the
    /// intent as it is and its `moved_by` mark.
    async fn update_intent(
        &self,
        key: &IdempotencyKey,
        x: Expr,
        condition: String,
    ) -> PortResult<Option<(IntentRecord, Option<String>)>> {
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(key)))
            .key("sk", s("INTENT"))
            .update_expression(x.expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(x.names))
            .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match res {
            Ok(_) => Ok(None),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let old = match e.err() {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                        c.item.clone()
                    }
                    _ => None,
                };
                let item = self
                    .refused_intent(old, key)
                    .await?
                    .ok_or_else(|| PortError::Corrupt { what: key.to_string(), message: "intent missing".into() })?;
                let moved_by = get_s(&item, "moved_by").map(str::to_owned);
                Ok(Some((record_from_item(&item)?, moved_by)))
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (transition)", &e)),
        }
    }

    /// The transition as one transaction: the intent's update, its observation, and the message
    /// index and open-escalation entries when it has them; all or nothing.
    async fn transact(&self, t: &Transition, x: Expr, condition: String) -> PortResult<TransitionOutcome> {
        // Nothing to change on the intent: its condition alone is checked.
        let intent = if x.is_empty() {
            let check = ConditionCheck::builder()
                .table_name(&self.table)
                .key("pk", s(intent_pk(&t.key)))
                .key("sk", s("INTENT"))
                .condition_expression(condition)
                .set_expression_attribute_names((!x.names.is_empty()).then_some(x.names))
                .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
                .build()
                .map_err(|e| unavailable("DynamoDB ConditionCheck builder", &e))?;
            TransactWriteItem::builder().condition_check(check).build()
        } else {
            let update = Update::builder()
                .table_name(&self.table)
                .key("pk", s(intent_pk(&t.key)))
                .key("sk", s("INTENT"))
                .update_expression(x.expression())
                .condition_expression(condition)
                .set_expression_attribute_names(Some(x.names))
                .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
                .build()
                .map_err(|e| unavailable("DynamoDB Update builder", &e))?;
            TransactWriteItem::builder().update(update).build()
        };
        let mut items = vec![intent, TransactWriteItem::builder().put(self.observation_put(t)?).build()];
        if let Some(put) = self.message_index_put(t)? {
            items.push(TransactWriteItem::builder().put(put).build());
        }
        if let Some(e) = &t.patch.escalation {
            // On the open-escalations list until an operator acknowledges it.
            let put = Put::builder()
                .table_name(&self.table)
                .item("pk", s(escalation_pk(&t.key)))
                .item("sk", s("ESC"))
                .item("key", s(t.key.as_str()))
                .item("list_pk", s(OPEN_ESCALATIONS))
                .item("list_sk", s(ts(e.at)))
                .item("expires_at", n(retain_until(t).timestamp()))
                .build()
                .map_err(|e| unavailable("DynamoDB Put builder", &e))?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let mut conflicts = 0;
        let codes = loop {
            let res = self.client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
            let codes = match res {
                Ok(_) => return Ok(TransitionOutcome::Applied),
                Err(SdkError::ServiceError(e)) if e.err().is_transaction_canceled_exception() => match e.err() {
                    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None").to_owned())
                        .collect::<Vec<String>>(),
                    _ => Vec::new(),
                },
                Err(e) => return Err(unavailable("DynamoDB TransactWriteItems", &e)),
            };
            // Another transaction touched one of these items at the same moment: nothing was
            // written, and the same transaction is safe to try again after a short, jittered wait.
            let conflict = codes.iter().any(|c| c == "TransactionConflict")
                && !codes.iter().any(|c| c == "ConditionalCheckFailed");
            if conflict && conflicts < CONFLICT_RETRIES {
                conflicts += 1;
                let wait = rand::random_range(10..=25u64 << conflicts);
                tracing::debug!(
                    key = t.key.short(),
                    attempt = conflicts,
                    wait_ms = wait,
                    "transaction conflict; trying again"
                );
                tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                continue;
            }
            break codes;
        };
        let failed = |i: usize| codes.get(i).is_some_and(|c| c == "ConditionalCheckFailed");
        if failed(1) {
            return Ok(TransitionOutcome::AlreadyApplied);
        }
        if failed(0) || codes.is_empty() {
            return match self.get(&t.key).await? {
                Some(r) => Ok(TransitionOutcome::Refused(Box::new(r))),
                None => Err(PortError::Corrupt { what: t.key.to_string(), message: "intent missing".into() }),
            };
        }
        Err(PortError::Unavailable {
            operation: "DynamoDB TransactWriteItems",
            message: format!("cancelled: {codes:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::intent::Escalation;
    use crate::domain::observation::ObservationKind;
    use crate::ports::{Commit, Expect, StatusPatch};

    fn transition(patch: StatusPatch, next_check: NextCheck) -> Transition {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        Transition {
            key: IdempotencyKey::derive("evt", &crate::domain::template::TemplateRef { name: "t".into(), version: 1 }),
            from: vec![State::Accepted],
            attempt_id: None,
            patch,
            observation: Observation::new("o", at, ObservationKind::DelaySuspected),
            next_check,
            index_message: None,
            expect: Expect::default(),
            retain_until: None,
            commit: Commit::StateFirst,
        }
    }

    #[test]
    fn a_transition_changes_the_intent_exactly_when_its_update_expression_writes_something() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let patches = [
            StatusPatch::default(),
            StatusPatch { state: Some(State::Delivered), ..Default::default() },
            StatusPatch { increment_attempts: true, ..Default::default() },
            StatusPatch { clear_claim: true, ..Default::default() },
            StatusPatch { claim: Some(("a".into(), at, at)), ..Default::default() },
            StatusPatch { sns_message_id: Some("m".into()), ..Default::default() },
            StatusPatch { accepted_at: Some(at), ..Default::default() },
            StatusPatch { final_at: Some(at), ..Default::default() },
            StatusPatch { escalation: Some(Escalation { at, reason: "r".into() }), ..Default::default() },
            StatusPatch { add_conflict: true, ..Default::default() },
            StatusPatch { last_error: Some("e".into()), ..Default::default() },
            StatusPatch { enqueued_at: Some(at), ..Default::default() },
            StatusPatch { late_expected: Some(at), ..Default::default() },
            StatusPatch { reconcile: Some((1, None, ReconcileState::Pending)), ..Default::default() },
        ];
        for patch in patches {
            for next in [NextCheck::Keep, NextCheck::Remove, NextCheck::At(at)] {
                let t = transition(patch.clone(), next);
                let (update, _) = transition_update(&t);
                assert_eq!(t.changes_intent(), !update.is_empty(), "{patch:?} {next:?}");
            }
        }
    }
}
