//! Acknowledging what a reply reaches (`domain::reply::code::resolve`): each alert once, in the
//! ledger (`services::acknowledging`, its observation named after the reply's
//! `inboundMessageId`, so a redelivered reply is recognised), then its code closed.
//!
//! A digest's code reaches every member the digest record names, and only if the digest was sent
//! to this phone. An alert the ledger no longer holds (its retention ended) is skipped. The code
//! is closed last: a reply retried after a failure finds it still open and acknowledges again —
//! harmlessly, each alert recognising the same reply.

use chrono::{DateTime, Utc};

use crate::{Outcome, Replies, RepliesStore};
use tocsin::domain::IdempotencyKey;
use tocsin::domain::acknowledgement::AckVia;
use tocsin::domain::reply::{AckSubject, AckTarget, HeldCode, InboundReply, Resolution, resolve};
use tocsin::ports::{Clock, PortError, RecipientRegistry, RecipientRoster};
use tocsin::services::acknowledging::{AlertAck, AlertAckError, acknowledge_alert};

impl<S: RepliesStore, R: RecipientRegistry + RecipientRoster, C: Clock> Replies<S, R, C> {
    pub(crate) async fn acknowledge(
        &self,
        reply: &InboundReply,
        target: AckTarget,
        held: &[HeldCode],
        received_at: DateTime<Utc>,
    ) -> Result<Outcome, PortError> {
        let subjects = match resolve(target, held, received_at) {
            Resolution::Acknowledge(subjects) => subjects,
            Resolution::AlreadyClosed(_) => return Ok(Outcome::AlreadyClosed),
            Resolution::UnknownCode(_) => return Ok(Outcome::UnknownCode),
            Resolution::NothingOpen => return Ok(Outcome::NothingOpen),
        };
        let now = self.clock.now();
        let mut acknowledged = 0;
        for subject in &subjects {
            for key in self.alerts_of(subject, reply).await? {
                acknowledged += usize::from(self.acknowledge_one(&key, reply, now).await?);
            }
            let codes = held.iter().filter(|h| &h.subject == subject && h.is_open());
            for h in codes {
                self.store.close_code(&reply.from, h.code, subject, now).await?;
            }
        }
        Ok(if acknowledged == 0 {
            Outcome::AlreadyAcknowledged
        } else {
            Outcome::Acknowledged { alerts: acknowledged }
        })
    }

    /// The alerts `subject` stands for on this phone.
    async fn alerts_of(&self, subject: &AckSubject, reply: &InboundReply) -> Result<Vec<IdempotencyKey>, PortError> {
        match subject {
            AckSubject::Alert(key) => Ok(vec![key.clone()]),
            AckSubject::Digest(id) => match self.store.get_digest(id).await? {
                Some(d) if d.recipient == reply.from => Ok(d.members),
                Some(_) => {
                    tracing::warn!(
                        digest = id.short(),
                        "a reply code named a digest sent to another phone; nothing acknowledged"
                    );
                    Ok(Vec::new())
                }
                None => {
                    tracing::warn!(digest = id.short(), "a reply code named a digest the ledger no longer holds");
                    Ok(Vec::new())
                }
            },
        }
    }

    /// True when this reply acknowledged `key` (now, or on an earlier delivery of the same reply).
    async fn acknowledge_one(
        &self,
        key: &IdempotencyKey,
        reply: &InboundReply,
        now: DateTime<Utc>,
    ) -> Result<bool, PortError> {
        let by = reply.from.masked();
        match acknowledge_alert(&self.store, key, &by, AckVia::Reply, &reply.inbound_id, now).await {
            Ok(AlertAck::Now(_)) => {
                tracing::info!(key = key.short(), by = %by, "alert acknowledged by reply");
                Ok(true)
            }
            Ok(AlertAck::Before(a)) => {
                tracing::info!(key = key.short(), by = %a.by, via = a.via.as_str(), "alert was acknowledged before");
                Ok(false)
            }
            Err(AlertAckError::Missing(_)) => {
                tracing::warn!(key = key.short(), "a reply reached an alert the ledger no longer holds");
                Ok(false)
            }
            Err(AlertAckError::Port { error, .. }) => Err(error),
        }
    }
}
