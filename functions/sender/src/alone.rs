//! Sending one claimed intent alone: screen it, wait for the rate, publish its own text, record
//! what the provider answered. Storm mode's per-recipient sends are in `storm` and `digests`.

use chrono::{DateTime, Utc};

use crate::claiming::Claimed;
use crate::spending::Withheld;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::reply::AckSubject;
use tocsin::domain::reply::prompt::prompt;
use tocsin::domain::send_context::SendContext;
use tocsin::ports::{RecipientRegistry, RecipientRoster, SmsGateway, SmsMessage, Standing};

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Sends one claimed intent alone.
    pub(crate) async fn send_claimed(&self, c: &Claimed<'_>, deadline: DateTime<Utc>) -> Outcome {
        let (record, attempt_id, msg) = (&c.record, c.attempt_id.as_str(), c.msg);
        let intent = &record.intent;
        let now = self.clock.now();
        // Stale: a late SMS about something already handled is worse than none.
        if now >= intent.deadline {
            return self.stale(c, now).await;
        }
        match self.standing(&intent.recipient, now).await {
            Ok(Standing::Suppressed(s)) => return self.suppressed(c, s, now).await,
            Ok(Standing::Clear | Standing::ReEnabledUnchecked { .. }) => {}
            Err(e) => {
                tracing::warn!(key = intent.key.short(), error = %e, "registry or opt-out check unavailable; releasing the claim");
                return self.release(record, attempt_id, &e.to_string(), msg, now, false).await;
            }
        }
        self.publish_alone(c, deadline).await
    }

    /// Publishes a claimed intent's own text (its recipient already checked) and records it.
    pub(crate) async fn publish_alone(&self, c: &Claimed<'_>, deadline: DateTime<Utc>) -> Outcome {
        let intent = &c.record.intent;
        // The rate wait must leave time to publish and to record the outcome before the
        // invocation ends; otherwise the claim goes back unsent, never held past the deadline.
        let parts = intent.segments.segments;
        if !self.wait_for_rate(parts, self.rate_budget(deadline)).await {
            return self.defer(&c.record, &c.attempt_id, parts, c.msg).await;
        }
        let now = self.clock.now();
        let subject = AckSubject::Alert(intent.key.clone());
        // Boxed: its ledger calls would make every send's future deeper (a test thread has 2 MiB).
        let text = match Box::pin(self.prompted(&intent.recipient, &subject, intent.body.expose(), prompt, parts, now))
            .await
        {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(key = intent.key.short(), error = %e, "reply codes unavailable; releasing the claim");
                return self.release(&c.record, &c.attempt_id, &e.to_string(), c.msg, now, false).await;
            }
        };
        // Counted against the stack's hourly ceiling last, just before the publish: a send the
        // rate deferred never counts.
        match self.spend(parts, 1, now).await {
            Ok(()) => {}
            Err(Withheld::Breaker(s)) => return self.suppressed(c, s, now).await,
            Err(Withheld::Unavailable(e)) => {
                tracing::warn!(key = intent.key.short(), error = %e, "SMS spend meter unavailable; releasing the claim");
                return self.release(&c.record, &c.attempt_id, &e.to_string(), c.msg, now, false).await;
            }
        }
        let options = self.within_policy(&intent.key, &intent.sms);
        let context = SendContext::alert(&self.config.stack, intent.key.clone(), &c.attempt_id);
        let outcome = self
            .gateway
            .publish(SmsMessage {
                to: &intent.recipient,
                body: &text.text,
                options: &options,
                context: &context,
                // Past its deadline the alert is on-call's anyway: a later SMS is noise.
                worth_until: intent.deadline,
            })
            .await;
        Box::pin(self.code_went_out(&intent.recipient, &subject, text.code, &outcome)).await;
        self.record_publish(c, &outcome, None, deadline).await
    }
}
