//! Acknowledging what a reply reaches (`domain::reply::code::resolve`): each alert once, in the
//! ledger (`services::acknowledging`, its observation named after the reply's
//! `inboundMessageId`, so a redelivered reply is recognised), then its code closed; and what the
//! confirmation will say.
//!
//! A bare "ack" or "ack all" reaches only what is known to have reached the phone before the
//! reply arrived: each open alert sent before it is looked up ([`Replies::arrived`]) — delivered,
//! by the carrier's time, at least `READ_AND_REPLY` before the reply's arrival (a digest: its
//! members' delivery). If the latest is not known to have arrived, the person is asked for the
//! code: no guess.
//!
//! A digest's code reaches every member the digest record names, and only if the digest was sent
//! to this phone. An alert the ledger no longer holds (its retention ended) is skipped. The code
//! is closed last: a reply retried after a failure finds it still open and acknowledges again —
//! harmlessly, each alert recognising the same reply.

use chrono::{DateTime, Utc};

use crate::{Answer, Outcome, Replies, RepliesStore};
use tocsin::domain::IdempotencyKey;
use tocsin::domain::State;
use tocsin::domain::acknowledgement::{AckVia, Acknowledgement};
use tocsin::domain::delivery::{DeliveryStatus, parse_record};
use tocsin::domain::reply::confirmation::Confirmation;
use tocsin::domain::reply::{
    AckSubject, AckTarget, HeldCode, InboundReply, Resolution, awaiting_arrival, read_before, resolve,
};
use tocsin::ports::{Clock, PortError, RecipientRegistry, RecipientRoster, SmsGateway};
use tocsin::services::acknowledging::{AlertAck, AlertAckError, acknowledge_intent};

/// One alert a reply reached: its template name, and whether this reply acknowledged it (else
/// whose acknowledgement stands).
enum Reached {
    Now(String),
    Before(String, Acknowledgement),
}

impl<S: RepliesStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, C: Clock> Replies<S, R, G, C> {
    pub(crate) async fn acknowledge(
        &self,
        reply: &InboundReply,
        target: AckTarget,
        held: &[HeldCode],
        received_at: DateTime<Utc>,
    ) -> Result<Answer, PortError> {
        let arrived = match target {
            AckTarget::Code(_) => Vec::new(),
            AckTarget::Latest | AckTarget::All => {
                self.arrived(awaiting_arrival(held, received_at), reply, received_at).await?
            }
        };
        let subjects = match resolve(target, held, received_at, |s| arrived.contains(s)) {
            Resolution::Acknowledge(subjects) => subjects,
            Resolution::AlreadyClosed(_) => {
                let confirm = match target {
                    AckTarget::Code(code) => Some(Confirmation::Closed { code }),
                    AckTarget::Latest | AckTarget::All => Some(Confirmation::NothingOpen),
                };
                return Ok(Answer { outcome: Outcome::AlreadyClosed, confirm });
            }
            Resolution::UnknownCode(code) => {
                return Ok(Answer { outcome: Outcome::UnknownCode, confirm: Some(Confirmation::UnknownCode { code }) });
            }
            Resolution::NothingOpen => {
                return Ok(Answer { outcome: Outcome::NothingOpen, confirm: Some(Confirmation::NothingOpen) });
            }
            Resolution::AskForCode(codes) => {
                return Ok(Answer {
                    outcome: Outcome::AskedForCode,
                    confirm: Some(Confirmation::AskForCode { codes }),
                });
            }
        };
        let now = self.clock.now();
        let mut reached = Vec::new();
        for subject in &subjects {
            for key in self.alerts_of(subject, reply).await? {
                reached.extend(self.acknowledge_one(&key, reply, now).await?);
            }
            let codes = held.iter().filter(|h| &h.subject == subject && h.is_open());
            for h in codes {
                self.store.close_code(&reply.from, h.code, subject, now).await?;
            }
        }
        let names: Vec<String> = reached
            .iter()
            .filter_map(|r| match r {
                Reached::Now(name) => Some(name.clone()),
                Reached::Before(..) => None,
            })
            .collect();
        if !names.is_empty() {
            let outcome = Outcome::Acknowledged { alerts: names.len() };
            return Ok(Answer { outcome, confirm: Some(Confirmation::Acked { names }) });
        }
        let confirm = reached.into_iter().find_map(|r| match r {
            Reached::Before(name, a) => Some(Confirmation::AlreadyAcked { name, by: a.by, at: a.at }),
            Reached::Now(_) => None,
        });
        Ok(Answer { outcome: Outcome::AlreadyAcknowledged, confirm })
    }

    /// Which of `subjects` are known to have reached this phone, readable, before a reply that
    /// arrived at `received_at` was written: an alert delivered by then (the carrier's time, with
    /// `READ_AND_REPLY` to spare); a digest whose own SMS's delivery record says so (recorded on
    /// the digest by the status function) — never a member's state, which another SMS may have
    /// set (a member handed back from the digest and sent since).
    async fn arrived(
        &self,
        subjects: Vec<&AckSubject>,
        reply: &InboundReply,
        received_at: DateTime<Utc>,
    ) -> Result<Vec<AckSubject>, PortError> {
        let mut arrived = Vec::new();
        for subject in subjects {
            let delivered_at = match subject {
                AckSubject::Alert(key) => self
                    .store
                    .get(key)
                    .await?
                    .filter(|r| r.status.state == State::Delivered)
                    .and_then(|r| r.status.final_at),
                AckSubject::Digest(id) => {
                    self.store.get_digest(id).await?.filter(|d| d.recipient == reply.from).and_then(|d| {
                        let outcome = d.outcome?;
                        let record = parse_record(&outcome.message).ok()?;
                        (record.status == DeliveryStatus::Success).then(|| {
                            record.reported_at.or_else(|| DateTime::from_timestamp_millis(outcome.timestamp_ms))
                        })?
                    })
                }
            };
            if delivered_at.is_some_and(|at| read_before(at, received_at)) {
                arrived.push(subject.clone());
            }
        }
        Ok(arrived)
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

    /// Acknowledges `key` for this reply; `None` when the ledger no longer holds it.
    async fn acknowledge_one(
        &self,
        key: &IdempotencyKey,
        reply: &InboundReply,
        now: DateTime<Utc>,
    ) -> Result<Option<Reached>, PortError> {
        let by = reply.from.masked();
        match acknowledge_intent(&self.store, key, &by, AckVia::Reply, &reply.inbound_id, now).await {
            Ok((AlertAck::Now(_), record)) => {
                tracing::info!(key = key.short(), by = %by, "alert acknowledged by reply");
                Ok(Some(Reached::Now(record.intent.template.name)))
            }
            Ok((AlertAck::Before(a), record)) => {
                tracing::info!(key = key.short(), by = %a.by, via = a.via.as_str(), "alert was acknowledged before");
                Ok(Some(Reached::Before(record.intent.template.name, a)))
            }
            Err(AlertAckError::Missing(_)) => {
                tracing::warn!(key = key.short(), "a reply reached an alert the ledger no longer holds");
                Ok(None)
            }
            Err(AlertAckError::Port { error, .. }) => Err(error),
        }
    }
}
