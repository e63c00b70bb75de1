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
//! | producer minute counter | `PRODUCER#<name>` | `MINUTE#<start>` |
//! | producer escalation counter | `PRODUCER#<name>` | `ESCALATIONS#<hour>` |
//! | SMS spend meter (the breaker) and its resumes | `METER#sms-parts` | `STATE`, `EVENT#<at>` |
//! | a phone's reply codes (issue 37) | `CODES#<e164>` | `CODES` |
//! | a phone's confirmations of replies, per hour | `CONFIRMS#<e164>` | `HOUR#<yyyy-mm-ddThh>` |
//!
//! A level of an escalation chain is an intent item like any other, with `chain_root`; the root's
//! item carries `chain_level`, the highest level started ([`chains`]).
//!
//! Intents that need the sweep carry `due_shard`/`due_at`, the keys of the sparse `due-index`.
//! `due_shard` is `due#<n>`, n < `TOCSIN_DUE_SHARDS`, chosen once at intake — round robin from a
//! random start per instance, which spreads intents more evenly than a hash (a hash leaves some
//! partitions ~25 % above the mean at 1,000 intents over 16) — and kept in `due_home`: every later
//! write copies it, so the writers after intake need not know the shard count, and one intent's
//! index entries always share one partition.
//!
//! One file per port this adapter implements ([`crate::ports`]): [`intents`] (`IntentStore`),
//! [`transitions`] (the writes of `commit::transition`), [`message_index`], [`due_index`],
//! [`backlog`], [`send_budget`], [`digests`], [`escalations`], [`reply_codes`], [`confirmations`], [`chains`]; and the operator
//! listings ([`listings`]). Shared once: item ↔ attribute mapping ([`items`]), update and
//! condition expressions ([`expr`]), query pagination and batched reads and writes ([`pages`]).

mod backlog;
mod chains;
mod confirmations;
mod digests;
mod due_index;
mod escalation_quota;
mod escalations;
mod expr;
mod intents;
mod items;
mod listings;
mod message_index;
mod pages;
mod producer_quota;
mod reply_codes;
mod send_budget;
mod spend_meter;
mod transitions;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use chrono::NaiveDate;

use crate::domain::{IdempotencyKey, PhoneNumber};
use crate::ports::PortResult;
use expr::Expr;
use items::{Item, intent_pk, s, unavailable};
pub use items::{record_from_item, ts};

pub const DUE_INDEX: &str = "due-index";
/// Sparse index of pending intents (keys only: `pending_to` = the recipient, `pending_by` = the
/// deadline): an intent is in it from intake until an SMS for it is known to be with SNS or it is
/// settled otherwise: a person's backlog in deadline order (storm mode). It replaced `open-index` (by number and claim time, projecting
/// whole items), which is no longer written and leaves the template in the next release
/// (CloudFormation changes one GSI per stack update).
pub const PENDING_INDEX: &str = "pending-index";
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

#[derive(Clone, Debug)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    due_shards: u32,
    /// The next new intent's partition (round robin; shared by clones).
    next_shard: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl DynamoLedger {
    /// The client and table, for the ledger's other adapters ([`crate::adapters::carriers`]).
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
    pub(super) async fn refused_intent(
        &self,
        returned: Option<Item>,
        key: &IdempotencyKey,
    ) -> PortResult<Option<Item>> {
        match returned {
            Some(item) => Ok(Some(item)),
            None => self.get_item(intent_pk(key), "INTENT").await,
        }
    }

    pub(super) async fn get_item(&self, pk: String, sk: &str) -> PortResult<Option<Item>> {
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

    /// An UpdateItem of the intent item, `x` under `condition`: the request every conditional write
    /// of the intent alone starts from (the caller asks for what it wants back, and sends it).
    fn update_intent_item(&self, key: &IdempotencyKey, x: Expr, condition: String) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(intent_pk(key)))
            .key("sk", s("INTENT"))
            .update_expression(x.expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(x.names))
            .set_expression_attribute_values((!x.values.is_empty()).then_some(x.values))
    }
}
