//! The confirmation SMS that answers a reply (`domain::reply::confirmation`): "Acked: disk_full -
//! you have it", or why nothing was. Sent under the same rules as every SMS tocsin sends:
//!
//! - **At most once per reply.** The reply's confirmation is claimed in the ledger before it is
//!   sent (`ReplyConfirmations`, conditioned on the reply's id): a copy of the reply — SNS and SQS
//!   deliver at least once — finds it claimed and sends nothing. A claim whose SMS then failed is
//!   not sent again: a missing confirmation is a nuisance, a repeated one is noise.
//! - **Rate-limited per phone.** At most `TOCSIN_REPLY_CONFIRMATIONS_PER_HOUR` per phone per UTC
//!   hour (counted in the same conditional write): an auto-responder answering tocsin's answers
//!   stops there, and so does its cost.
//! - **Under the stack's spend ceiling.** One part, counted by the SMS breaker before it is sent,
//!   as an alert's are; with the breaker open nothing is sent.
//! - **From the number the person texted**, so the conversation stays in one thread, and only to
//!   someone tocsin texted (a number that holds a reply code): never to a stranger.
//!
//! Its events carry the reply's id in their context (`tocsin-reply`), never an alert's key: the
//! status function counts them and applies them to nothing. A confirmation never fails the reply:
//! the acknowledgement is what matters, and it is already written.

use chrono::{DateTime, Duration, Utc};

use crate::{Replies, RepliesStore};
use tocsin::domain::PhoneNumber;
use tocsin::domain::reply::InboundReply;
use tocsin::domain::reply::confirmation::{Confirmation, confirmation_text};
use tocsin::domain::segments::measure;
use tocsin::domain::send_context::SendContext;
use tocsin::domain::sms::SmsOptions;
use tocsin::domain::spend::Spend;
use tocsin::ports::{
    Clock, ConfirmationClaim, PublishOutcome, RecipientRegistry, RecipientRoster, SmsGateway, SmsMessage,
};

/// How long a confirmation is worth delivering: past it, the person has moved on.
pub const WORTH_FOR: Duration = Duration::minutes(10);

/// Sends of one confirmation the provider refused for now (throttled: the origination number's
/// parts per second — a toll-free number's are 3 — is what a burst of replies meets first). The
/// refusal proves it was not accepted, so sending again cannot make two; waits 1, 2, 4 s (plus a
/// spread per reply, so a batch's confirmations do not come back together): within the
/// function's 30 s with a batch of ten.
pub const CONFIRM_ATTEMPTS: u32 = 4;

/// What became of a confirmation (named for the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    Sent,
    /// A copy of the reply claimed it before.
    Duplicate,
    /// The phone's hour is full, or confirmations are off.
    RateLimited,
    /// The SMS breaker is open.
    Withheld,
    /// The provider did not take it, or a store was unavailable: not sent, and not tried again.
    NotSent,
}

impl Confirmed {
    pub fn name(self) -> &'static str {
        match self {
            Confirmed::Sent => "confirmation_sent",
            Confirmed::Duplicate => "confirmation_duplicate",
            Confirmed::RateLimited => "confirmation_rate_limited",
            Confirmed::Withheld => "confirmation_withheld",
            Confirmed::NotSent => "confirmation_not_sent",
        }
    }
}

impl<S: RepliesStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, C: Clock> Replies<S, R, G, C> {
    pub(crate) async fn confirm(
        &self,
        reply: &InboundReply,
        c: &Confirmation,
        received_at: DateTime<Utc>,
    ) -> Confirmed {
        let cap = self.config.confirmations_per_hour;
        if cap == 0 {
            return Confirmed::RateLimited;
        }
        let keep = received_at + Duration::days(2);
        match self.store.claim_confirmation(&reply.from, &reply.inbound_id, received_at, cap, keep).await {
            Ok(ConfirmationClaim::Claimed) => {}
            Ok(ConfirmationClaim::AlreadyClaimed) => return Confirmed::Duplicate,
            Ok(ConfirmationClaim::Capped) => {
                tracing::warn!(recipient = %reply.from.masked(), cap, "confirmations of this phone's replies capped this hour");
                return Confirmed::RateLimited;
            }
            Err(e) => {
                tracing::warn!(inbound = %reply.inbound_id, error = %e, "confirmation not claimed; not sent");
                return Confirmed::NotSent;
            }
        }
        let text = confirmation_text(c);
        let now = self.clock.now();
        match self.store.spend(measure(&text).segments, now, self.config.spend_ceiling).await {
            Ok(Spend::Counted) => {}
            Ok(Spend::Withheld { .. }) => return Confirmed::Withheld,
            Err(e) => {
                tracing::warn!(inbound = %reply.inbound_id, error = %e, "SMS spend meter unavailable; confirmation not sent");
                return Confirmed::NotSent;
            }
        }
        // From the number the person texted (a two-way number), else the stack's identity.
        let options = SmsOptions { origination_number: PhoneNumber::parse(&reply.to).ok(), ..SmsOptions::default() };
        let context = SendContext::reply(&self.config.stack, &reply.inbound_id);
        let spread = reply.inbound_id.bytes().fold(0i64, |h, b| (h * 31 + i64::from(b)) % 500);
        let mut attempt = 0;
        let published = loop {
            let published = self
                .gateway
                .publish(SmsMessage {
                    to: &reply.from,
                    body: &text,
                    options: &options,
                    context: &context,
                    worth_until: now + WORTH_FOR,
                })
                .await;
            attempt += 1;
            match published {
                PublishOutcome::Retryable { .. } if attempt < CONFIRM_ATTEMPTS => {
                    let wait = Duration::seconds(1 << (attempt - 1)) + Duration::milliseconds(spread);
                    self.clock.sleep_until(self.clock.now() + wait).await;
                }
                other => break other,
            }
        };
        match published {
            PublishOutcome::Accepted { .. } => Confirmed::Sent,
            other => {
                let outcome = match other {
                    PublishOutcome::Rejected { .. } => "rejected",
                    PublishOutcome::Retryable { .. } => "not accepted",
                    PublishOutcome::Unknown { .. } | PublishOutcome::Accepted { .. } => "unknown",
                };
                tracing::warn!(inbound = %reply.inbound_id, outcome, "confirmation not accepted; not sent again");
                Confirmed::NotSent
            }
        }
    }
}
