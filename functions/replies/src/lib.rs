//! Replies: End User Messaging's two-way topic → the replies queue → this function. Each inbound
//! SMS is read ([`reading`]), understood (`domain::reply::command`), and then, by what it says:
//! acknowledges what its phone was sent ([`acknowledging`]), suppresses the number and pages
//! on-call on STOP ([`opting_out`]), or changes nothing; the person is answered by SMS once
//! ([`confirming`]); how it ended is counted ([`outcome`]).
//!
//! Tolerant of what SQS and people do: a reply delivered twice acknowledges once and is answered
//! once (the ledger recognises its `inboundMessageId`), replies out of order or hours late reach
//! only what their phone was sent before they arrived, and a number that holds no code of this
//! stack is not a recipient: nothing changes and nobody answers it. A record that is not a
//! two-way payload fails alone (kept for the dead-letter queue); a store that is unavailable
//! fails its record alone, retried.

mod acknowledging;
mod confirming;
mod opting_out;
mod outcome;
mod reading;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};

use tocsin::config::RepliesConfig;
use tocsin::domain::reply::command::parse_command;
use tocsin::domain::reply::confirmation::Confirmation;
use tocsin::domain::reply::{Command, InboundReply};
use tocsin::ports::{
    Clock, DigestStore, IntentStore, PortError, RecipientRegistry, RecipientRoster, ReplyCodes, ReplyConfirmations,
    SmsGateway, SpendMeter,
};
use tocsin::telemetry::Metrics;

pub use confirming::Confirmed;
pub use opting_out::OPTED_OUT_BY_REPLY;
pub use outcome::Outcome;

/// The ledger's ports the replies function uses: the phones' reply codes, the alerts it
/// acknowledges, the digests whose code it reads, the confirmations it claims and the stack's SMS
/// spend meter (one `DynamoLedger` in Lambda).
pub trait RepliesStore: ReplyCodes + IntentStore + DigestStore + ReplyConfirmations + SpendMeter {}
impl<T: ReplyCodes + IntentStore + DigestStore + ReplyConfirmations + SpendMeter> RepliesStore for T {}

pub struct Replies<S, R, G, C> {
    pub store: S,
    pub registry: R,
    /// End User Messaging, for the confirmations.
    pub gateway: G,
    pub clock: C,
    pub config: RepliesConfig,
}

/// How one reply ended, and what to answer (if anything).
pub(crate) struct Answer {
    outcome: Outcome,
    confirm: Option<Confirmation>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Answer { outcome, confirm: None }
    }
}

/// One reply handled: how it ended, and its confirmation's fate (when one was due).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    pub outcome: Outcome,
    pub confirmed: Option<Confirmed>,
}

impl<S: RepliesStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, C: Clock> Replies<S, R, G, C> {
    /// Handles a batch; the records that did not finish are reported alone.
    pub async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        let handled = futures::future::join_all(event.records.iter().map(|m| self.process(m))).await;
        let mut metrics = Metrics::new("replies");
        let mut response = SqsBatchResponse::default();
        for (msg, h) in event.records.iter().zip(handled) {
            metrics.count(h.outcome.name(), 1);
            if let Some(c) = h.confirmed {
                metrics.count(c.name(), 1);
            }
            match h.outcome {
                Outcome::Acknowledged { alerts } => metrics.count("alerts_acknowledged", alerts as u64),
                // What the RecipientOptedOutAlarm pages on: an on-call person no SMS reaches now.
                Outcome::OptedOut { paged: true } => metrics.count("recipient_opted_out", 1),
                _ => {}
            }
            if h.outcome.unfinished()
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
    pub async fn process(&self, msg: &SqsMessage) -> Handled {
        let now = self.clock.now();
        let (reply, received_at) = match reading::read(msg, now) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(message_id = msg.message_id.as_deref().unwrap_or(""), error = %e, "not a two-way reply; left for the dead-letter queue");
                return Handled { outcome: Outcome::Malformed(e.to_string()), confirmed: None };
            }
        };
        let command = parse_command(reply.body.as_ref().map(|b| b.expose()), reply.keyword.as_deref());
        // Boxed: the SDK calls behind them make deep futures, and a batch runs ten at once.
        let answer = match Box::pin(self.answer(&reply, command, received_at)).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(inbound = %reply.inbound_id, error = %e, "reply not handled; retried");
                Outcome::Retry(e.to_string()).into()
            }
        };
        let confirmed = match &answer.confirm {
            Some(c) => Some(Box::pin(self.confirm(&reply, c, received_at)).await),
            None => None,
        };
        tracing::info!(
            inbound = %reply.inbound_id,
            recipient = %reply.from.masked(),
            stack = %self.config.stack,
            outcome = answer.outcome.name(),
            confirmation = confirmed.map_or("", Confirmed::name),
            delay_ms = (now - received_at).num_milliseconds().max(0),
            "reply handled"
        );
        Handled { outcome: answer.outcome, confirmed }
    }

    async fn answer(
        &self,
        reply: &InboundReply,
        command: Command,
        received_at: DateTime<Utc>,
    ) -> Result<Answer, PortError> {
        let held = self.store.held_codes(&reply.from).await?;
        // AWS has opted the number out already, whoever it is: the registry says so too.
        if command == Command::OptOut {
            return self.opt_out(reply, &held, received_at).await.map(Answer::from);
        }
        // Only someone tocsin texted is answered, about anything.
        if held.is_empty() {
            return Ok(Outcome::NotARecipient.into());
        }
        match command {
            Command::Ack(target) => self.acknowledge(reply, target, &held, received_at).await,
            Command::OptIn => {
                tracing::warn!(recipient = %reply.from.masked(), "recipient opted back in by reply; tocsin re-enable makes it send again (audited)");
                Ok(Outcome::OptedIn.into())
            }
            // End User Messaging answers HELP with the number's own response.
            Command::Help => Ok(Outcome::Help.into()),
            Command::Unrecognized | Command::OptOut => {
                Ok(Answer { outcome: Outcome::Unrecognized, confirm: Some(Confirmation::NotUnderstood) })
            }
        }
    }
}
