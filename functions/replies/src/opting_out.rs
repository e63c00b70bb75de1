//! STOP is never silent (docs/acknowledgement.md). End User Messaging (or, on US toll-free
//! numbers, the carrier) has already opted the number out: no SMS from the account reaches it any
//! more. For an on-call person that is an outage, so the number is suppressed at once through the
//! registry's audited path (the sender stops trying; `tocsin suppressed` says why; `tocsin
//! re-enable` is the way back) and on-call is paged: the `recipient_opted_out` metric drives the
//! `RecipientOptedOutAlarm`, and the log line names the masked number. Nothing is acknowledged.
//!
//! Paged only for someone tocsin pages — the number holds a reply code (tocsin texted it within
//! the last two days) or a roster entry names it exactly — so a stranger texting STOP to the
//! stack's number is suppressed (harmless: tocsin never texts it) without waking anyone.
//!
//! Idempotent: a redelivered STOP suppresses again with the same evidence (the registry's event
//! is named after the reply), and the alarm is a state, not a count.

use chrono::{DateTime, Utc};

use crate::{Outcome, Replies, RepliesStore};
use tocsin::domain::reply::{AckSubject, HeldCode, InboundReply};
use tocsin::ports::{Clock, PortError, RecipientRegistry, RecipientRoster, SmsGateway, SuppressionEvidence};

/// The registry's reason for a number that replied with an opt-out word.
pub const OPTED_OUT_BY_REPLY: &str = "opted_out_by_reply";

impl<S: RepliesStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, C: Clock> Replies<S, R, G, C> {
    pub(crate) async fn opt_out(
        &self,
        reply: &InboundReply,
        held: &[HeldCode],
        received_at: DateTime<Utc>,
    ) -> Result<Outcome, PortError> {
        // The alert the person was most recently sent, for the audit trail.
        let latest = held.iter().max_by_key(|h| (h.sent_at, h.given_at)).map(|h| match &h.subject {
            AckSubject::Alert(key) => key.to_string(),
            AckSubject::Digest(id) => format!("digest:{}", id.as_str()),
        });
        let evidence = SuppressionEvidence {
            log_event_id: format!("reply:{}", reply.inbound_id),
            provider_response: Some(OPTED_OUT_BY_REPLY.to_owned()),
            at: received_at,
            intent_key: latest.unwrap_or_default(),
            table_version: "reply".to_owned(),
        };
        self.registry.suppress(&reply.from, &evidence).await?;
        let named = !held.is_empty() || {
            let roster = self.registry.roster().await?;
            roster.entry_for(&reply.from).is_some_and(|e| e.as_str() == reply.from.expose())
        };
        if named {
            tracing::error!(
                recipient = %reply.from.masked(),
                keyword = reply.keyword.as_deref().unwrap_or(""),
                "recipient opted out by reply: no SMS reaches them any more; number suppressed, on-call must reach them another way"
            );
        } else {
            tracing::warn!(recipient = %reply.from.masked(), "a number tocsin does not page opted out by reply; suppressed");
        }
        Ok(Outcome::OptedOut { paged: named })
    }
}
