//! Replies: End User Messaging's two-way topic → the replies queue → this function. Each inbound
//! SMS is read ([`reading`]), understood (`domain::reply::command`), and then, by what it says:
//! acknowledges what its phone was sent ([`acknowledging`]), suppresses the number and pages
//! on-call on STOP ([`opting_out`]), or changes nothing and is counted ([`outcome`]).
//!
//! Tolerant of what SQS and people do: a reply delivered twice acknowledges once (the ledger
//! recognises its `inboundMessageId`), replies out of order or hours late reach only what their
//! phone was sent before they arrived, and a number that holds no code of this stack is not a
//! recipient: nothing changes. A record that is not a two-way payload fails alone (kept for the
//! dead-letter queue); a store that is unavailable fails its record alone, retried.

mod acknowledging;
mod opting_out;
mod outcome;
mod reading;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};

use tocsin::config::RepliesConfig;
use tocsin::domain::reply::Command;
use tocsin::domain::reply::command::parse_command;
use tocsin::ports::{Clock, DigestStore, IntentStore, RecipientRegistry, RecipientRoster, ReplyCodes};
use tocsin::telemetry::Metrics;

pub use opting_out::OPTED_OUT_BY_REPLY;
pub use outcome::Outcome;

/// The ledger's ports the replies function uses: the phones' reply codes, the alerts it
/// acknowledges and the digests whose code it reads (one `DynamoLedger` in Lambda).
pub trait RepliesStore: ReplyCodes + IntentStore + DigestStore {}
impl<T: ReplyCodes + IntentStore + DigestStore> RepliesStore for T {}

pub struct Replies<S, R, C> {
    pub store: S,
    pub registry: R,
    pub clock: C,
    pub config: RepliesConfig,
}

impl<S: RepliesStore, R: RecipientRegistry + RecipientRoster, C: Clock> Replies<S, R, C> {
    /// Handles a batch; the records that did not finish are reported alone.
    pub async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        let outcomes = futures::future::join_all(event.records.iter().map(|m| self.process(m))).await;
        let mut metrics = Metrics::new("replies");
        let mut response = SqsBatchResponse::default();
        for (msg, outcome) in event.records.iter().zip(outcomes) {
            metrics.count(outcome.name(), 1);
            match outcome {
                Outcome::Acknowledged { alerts } => metrics.count("alerts_acknowledged", alerts as u64),
                // What the RecipientOptedOutAlarm pages on: an on-call person no SMS reaches now.
                Outcome::OptedOut { paged: true } => metrics.count("recipient_opted_out", 1),
                _ => {}
            }
            if outcome.unfinished()
                && let Some(id) = &msg.message_id
            {
                let mut f = BatchItemFailure::default();
                f.item_identifier = id.clone();
                response.batch_item_failures.push(f);
            }
        }
        metrics.flush();
        response
    }

    /// One inbound reply.
    pub async fn process(&self, msg: &SqsMessage) -> Outcome {
        let now = self.clock.now();
        let (reply, received_at) = match reading::read(msg, now) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(message_id = msg.message_id.as_deref().unwrap_or(""), error = %e, "not a two-way reply; left for the dead-letter queue");
                return Outcome::Malformed(e.to_string());
            }
        };
        let command = parse_command(reply.body.as_ref().map(|b| b.expose()), reply.keyword.as_deref());
        let outcome = match self.answer(&reply, command, received_at).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(inbound = %reply.inbound_id, error = %e, "reply not handled; retried");
                Outcome::Retry(e.to_string())
            }
        };
        tracing::info!(
            inbound = %reply.inbound_id,
            recipient = %reply.from.masked(),
            stack = %self.config.stack,
            outcome = outcome.name(),
            delay_ms = (now - received_at).num_milliseconds().max(0),
            "reply handled"
        );
        outcome
    }

    async fn answer(
        &self,
        reply: &tocsin::domain::reply::InboundReply,
        command: Command,
        received_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Outcome, tocsin::ports::PortError> {
        let held = self.store.held_codes(&reply.from).await?;
        // AWS has opted the number out already, whoever it is: the registry says so too.
        if command == Command::OptOut {
            return self.opt_out(reply, &held, received_at).await;
        }
        if held.is_empty() {
            return Ok(Outcome::NotARecipient);
        }
        match command {
            Command::Ack(target) => self.acknowledge(reply, target, &held, received_at).await,
            Command::OptIn => {
                tracing::warn!(recipient = %reply.from.masked(), "recipient opted back in by reply; tocsin re-enable makes it send again (audited)");
                Ok(Outcome::OptedIn)
            }
            Command::Help => Ok(Outcome::Help),
            Command::Unrecognized | Command::OptOut => Ok(Outcome::Unrecognized),
        }
    }
}
