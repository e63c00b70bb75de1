//! Sender: publishes each intent at most once under at-least-once delivery, and records an honest
//! "unknown" when it cannot know.
//!
//! Per SQS record: claim (conditional write, with a lease) → stale? → suppressed? → rate limit →
//! the stack's SMS breaker (parts per hour) → publish → record the outcome with a write conditioned on still holding the claim. Redeliveries
//! and concurrent copies find the intent claimed, accepted or final, and do nothing.
//!
//! Storm mode (`TOCSIN_STORM_MODE=on`): the batch's records are claimed first, then grouped by
//! recipient; a recipient with two or more claimed intents gets one digest SMS covering them all
//! (`tocsin::domain::storm`), recorded (`DIGEST#`) before it is published and indexed under its
//! SNS message id after, and every member records the outcome as if it had been sent alone. The
//! claims are what make it safe: a digest holds only intents whose claim this invocation holds,
//! so an intent is never in two digests, nor sent both alone and in a digest.
//!
//! Every wait is bounded by the invocation's deadline: a claim is never held across a wait that
//! could outlast the invocation (the intent goes back to `queued` unsent instead), and the write
//! after a successful publish is retried with backoff until shortly before the deadline, because
//! giving up on it turns an SMS that went out into an "outcome unknown" page.
//!
//! The story of a batch, one module a chapter: [`urgent_lane`] (take the urgent lane first behind a
//! backlog), [`claiming`] (claim each record's intent, and in storm mode a recipient's backlog),
//! then either [`alone`] (screened by [`screening`], paced by [`pacing`], published and recorded by
//! [`recording`]; the reply code it shows by [`prompting`]) or [`storm`] (per recipient: the plan, the budget, and a [`digests`] SMS); what
//! is not sent goes back through [`handing_back`]; the writes after a publish retry as
//! [`retries`] says. [`outcome`] is how each record ended.

mod alone;
mod claiming;
mod digests;
mod handing_back;
mod outcome;
mod pacing;
mod prompting;
mod recording;
mod retries;
mod screening;
mod sms_policy;
mod spending;
mod storm;
mod urgent_lane;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use governor::{Quota, RateLimiter};

use tocsin::config::SenderConfig;
use tocsin::domain::storm::Lane;
use tocsin::ports::{
    Backlog, Clock, DigestStore, DueIndex, Entropy, IntentStore, RecipientRegistry, RecipientRoster, ReplyCodes,
    SendBudget, SendQueue, SmsGateway, SpendMeter, UrgentLane,
};
use tocsin::services::roster::RosterMemo;
use tocsin::telemetry::Metrics;

use claiming::{Claim, Via};
pub use outcome::Outcome;
pub use pacing::RateClock;
use pacing::{NON_ZERO_ONE, PartLimiter};
pub use retries::backoff;
pub use urgent_lane::URGENT_POLL_AFTER;

/// The ledger's ports the sender uses: the intent, its due check, digests, the backlog, the
/// send budget, the stack's SMS spend meter and the phones' reply codes (one `DynamoLedger` in
/// Lambda).
pub trait SenderStore: IntentStore + DueIndex + DigestStore + Backlog + SendBudget + SpendMeter + ReplyCodes {}
impl<T: IntentStore + DueIndex + DigestStore + Backlog + SendBudget + SpendMeter + ReplyCodes> SenderStore for T {}

/// The queues the sender uses: the send queue (hand-backs, retries) and the urgent lane.
pub trait SenderQueue: SendQueue + UrgentLane {}
impl<T: SendQueue + UrgentLane> SenderQueue for T {}

/// The sender's time and randomness (the wall clock in Lambda, simulated time in the simulation).
pub trait SenderClock: Clock + Entropy + Clone {}
impl<T: Clock + Entropy + Clone> SenderClock for T {}

pub struct Sender<S, R, G, Q, C: Clock> {
    pub store: S,
    pub registry: R,
    pub gateway: G,
    pub queue: Q,
    pub clock: C,
    pub config: SenderConfig,
    limiter: PartLimiter<C>,
    /// The recipients roster, read at most once a minute (under `RecipientPolicy=roster`).
    roster: RosterMemo,
}

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    pub fn new(store: S, registry: R, gateway: G, queue: Q, clock: C, config: SenderConfig) -> Self {
        // One part at a time at this instance's share of the account rate (burst 1).
        let quota = Quota::with_period(config.instance_part_interval()).unwrap_or(Quota::per_second(NON_ZERO_ONE));
        let limiter = RateLimiter::direct_with_clock(quota, RateClock(clock.clone()));
        Sender { store, registry, gateway, queue, clock, config, limiter, roster: RosterMemo::default() }
    }

    /// Processes a batch concurrently; failed records are reported alone. `deadline` is when Lambda
    /// ends the invocation (its context deadline).
    pub async fn handle(&self, event: SqsEvent, deadline: DateTime<Utc>) -> SqsBatchResponse {
        // Earliest deadline first: behind a backlog, the urgent lane goes before the batch (and
        // first to the rate limiter).
        let urgent = self.take_urgent(&event.records).await;
        let records: Vec<Via<'_>> =
            urgent.iter().map(|m| (m, Lane::Urgent)).chain(event.records.iter().map(|m| (m, Lane::Normal))).collect();
        let outcomes = if self.config.storm.enabled {
            self.handle_storm(&records, deadline).await
        } else {
            futures::future::join_all(records.iter().map(|(m, lane)| self.process_from(m, *lane, deadline))).await
        };
        let mut metrics = Metrics::new("sender");
        let mut response = SqsBatchResponse::default();
        let mut urgent_done = Vec::new();
        for ((msg, lane), outcome) in records.iter().zip(outcomes) {
            metrics.count(outcome.name(), 1);
            let unfinished =
                matches!(outcome, Outcome::Retry | Outcome::Malformed | Outcome::Deferred | Outcome::HeldElsewhere);
            match lane {
                Lane::Normal if unfinished => {
                    if let Some(id) = &msg.message_id {
                        let mut f = BatchItemFailure::default();
                        f.item_identifier = id.clone();
                        response.batch_item_failures.push(f);
                    }
                }
                // The urgent lane has no event source mapping: what is finished is deleted here;
                // the rest comes back after its delay or visibility timeout.
                Lane::Urgent if !unfinished => urgent_done.extend(msg.receipt_handle.clone()),
                _ => {}
            }
        }
        if !urgent.is_empty() {
            metrics.count("urgent_taken", urgent.len() as u64);
        }
        metrics.flush();
        if !urgent_done.is_empty()
            && let Err(e) = self.queue.urgent_done(&urgent_done).await
        {
            tracing::warn!(error = %e, "urgent messages not deleted; they come back and find their intents sent");
        }
        response
    }

    /// One record of the send queue on its own: claim, then send.
    pub async fn process(&self, msg: &SqsMessage, deadline: DateTime<Utc>) -> Outcome {
        self.process_from(msg, Lane::Normal, deadline).await
    }

    async fn process_from(&self, msg: &SqsMessage, lane: Lane, deadline: DateTime<Utc>) -> Outcome {
        match self.claim_message(msg, lane).await {
            Claim::Done(outcome) => outcome,
            Claim::Held(c) => {
                let outcome = self.send_claimed(&c, deadline).await;
                self.log_attempt(&c, &outcome, None);
                outcome
            }
        }
    }
}
