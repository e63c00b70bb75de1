//! A digest: recorded (`DIGEST#`) before it is published once, its message id indexed for all its
//! members, then every member's outcome recorded as if sent alone. Plans nothing (`storm` does).

use chrono::{DateTime, Utc};

use crate::claiming::Claimed;
use crate::retries::retry_until;
use crate::spending::Withheld;
use crate::storm::Slot;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::PhoneNumber;
use tocsin::domain::reply::AckSubject;
use tocsin::domain::reply::prompt::digest_prompt;
use tocsin::domain::send_context::SendContext;
use tocsin::domain::storm::Digest;
use tocsin::ports::{DigestRecord, PublishOutcome, RecipientRegistry, RecipientRoster, SmsGateway, SmsMessage};
use tocsin::telemetry::Metrics;

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Records the digest, publishes it once, and records the outcome on every member.
    pub(crate) async fn send_digest(
        &self,
        recipient: &PhoneNumber,
        members: &[&(Slot, Claimed<'_>)],
        digest: Digest,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Vec<(Slot, Outcome)> {
        let stored = DigestRecord {
            id: digest.id.clone(),
            recipient: recipient.clone(),
            members: digest.members.clone(),
            segments: digest.segments.segments,
            created_at: now,
            expires_at: members.iter().map(|(_, c)| c.record.intent.expires_at()).max().unwrap_or(now),
            outcome: None,
        };
        if let Err(e) = self.store.put_digest(&stored).await {
            tracing::warn!(digest = digest.id.short(), error = %e, "digest not recorded; releasing the claims unsent");
            return self.release_each(members.iter().copied(), &e.to_string(), now).await;
        }
        let parts = digest.segments.segments;
        if !self.wait_for_rate(parts, self.rate_budget(deadline)).await {
            let mut out = Vec::with_capacity(members.len());
            for (i, c) in members.iter().copied() {
                out.push((*i, self.defer(&c.record, &c.attempt_id, parts, c.msg).await));
            }
            return out;
        }
        let now = self.clock.now();
        let subject = AckSubject::Digest(digest.id.clone());
        let count = members.len();
        let with_prompt = |code| digest_prompt(code, count);
        let text = match Box::pin(self.prompted(recipient, &subject, digest.text.expose(), with_prompt, parts, now))
            .await
        {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(digest = digest.id.short(), error = %e, "reply codes unavailable; releasing the claims unsent");
                return self.release_each(members.iter().copied(), &e.to_string(), now).await;
            }
        };
        match self.spend(parts, members.len(), now).await {
            Ok(()) => {}
            Err(Withheld::Breaker(s)) => {
                let mut out = Vec::with_capacity(members.len());
                for (i, c) in members.iter().copied() {
                    out.push((*i, self.suppressed(c, s.clone(), now).await));
                }
                return out;
            }
            Err(Withheld::Unavailable(e)) => {
                tracing::warn!(digest = digest.id.short(), error = %e, "SMS spend meter unavailable; releasing the claims unsent");
                return self.release_each(members.iter().copied(), &e.to_string(), now).await;
            }
        }
        // The earliest-deadline member's SMS options (sender id, origination number, price cap).
        let Some(lead) =
            members.iter().find(|(_, c)| digest.members.first() == Some(&c.record.intent.key)).or(members.first())
        else {
            return Vec::new();
        };
        let options = self.within_policy(&lead.1.record.intent.key, &lead.1.record.intent.sms);
        let context = SendContext::digest(&self.config.stack, digest.id.clone());
        // Worth delivering while any member's deadline is still ahead.
        let worth_until = members.iter().map(|(_, c)| c.record.intent.deadline).max().unwrap_or(now);
        let outcome = self
            .gateway
            .publish(SmsMessage { to: recipient, body: &text.text, options: &options, context: &context, worth_until })
            .await;
        Box::pin(self.code_went_out(recipient, &subject, text.code, &outcome)).await;
        // A provider whose events name the digest (its context) needs no index to find them.
        if let PublishOutcome::Accepted { message_id } = &outcome
            && !self.gateway.records_name_their_alert()
        {
            // The message id → members entry first: a delivery record that arrives before the
            // members' writes still finds them all.
            let indexed =
                retry_until(&self.clock, Some(deadline), digest.id.short(), "indexing the digest's message id", || {
                    self.store.index_digest_message(message_id, &stored)
                })
                .await;
            if let Err(e) = indexed {
                tracing::error!(digest = digest.id.short(), sns_message_id = %message_id, error = %e, "digest published but its message id not indexed");
            }
        }
        let outcomes = futures::future::join_all(
            members.iter().map(|(_, c)| self.record_publish(c, &outcome, Some(&digest.id), deadline)),
        )
        .await;
        let published = match &outcome {
            PublishOutcome::Accepted { .. } => "accepted",
            PublishOutcome::Rejected { .. } => "rejected",
            PublishOutcome::Unknown { .. } => "unknown",
            PublishOutcome::Retryable { .. } => "retryable",
        };
        let mut m = Metrics::new("sender");
        m.count("digest_sms", 1);
        m.count("digest_members", members.len() as u64);
        m.flush();
        tracing::info!(
            digest = digest.id.short(),
            recipient = %recipient.masked(),
            members = members.len(),
            listed = digest.listed,
            parts,
            publish = published,
            "digest attempt finished for the recipient's claimed alerts"
        );
        members
            .iter()
            .zip(outcomes)
            .map(|((i, c), outcome)| {
                self.log_attempt(c, &outcome, Some(&digest.id));
                (*i, outcome)
            })
            .collect()
    }
}
