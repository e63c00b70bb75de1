//! Recording an attempt: the transition out of `sending` with its observation and next check, what
//! SNS answered for a publish, and the attempt's log line. Publishes nothing; claims nothing.

use chrono::{DateTime, Utc};

use crate::claiming::Claimed;
use crate::retries::retry_until;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::State;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::storm::DigestId;
use tocsin::domain::sweep::next_check;
use tocsin::ports::{
    Commit, NextCheck, PortError, PublishOutcome, RecipientRegistry, RecipientRoster, Refusal, SmsGateway, StatusPatch,
    SuppressionEvidence, Transition, TransitionOutcome,
};
use tocsin::telemetry::Metrics;

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    pub(crate) fn log_attempt(&self, c: &Claimed<'_>, outcome: &Outcome, digest: Option<&DigestId>) {
        let sns_id = match outcome {
            Outcome::Published { sns_message_id } => sns_message_id.as_str(),
            _ => "",
        };
        tracing::info!(
            key = c.record.intent.key.short(),
            recipient = %c.record.intent.recipient.masked(),
            sns_message_id = sns_id,
            outcome = outcome.name(),
            attempt = c.record.status.attempts + 1,
            digest = digest.map_or("", DigestId::short),
            duration_ms = self.clock.now().signed_duration_since(c.started).num_milliseconds().max(0) as u64,
            "send attempt finished"
        );
    }

    /// A transition out of `sending` held by `attempt_id`, with its observation.
    pub(crate) fn settle(
        &self,
        record: &IntentRecord,
        attempt_id: &str,
        to: State,
        kind: ObservationKind,
        mut patch: StatusPatch,
        now: DateTime<Utc>,
    ) -> Transition {
        patch.state = Some(to);
        if to.is_final() {
            patch.final_at = Some(now);
        }
        let mut after = record.clone();
        after.status.state = to;
        if let Some(a) = patch.accepted_at {
            after.status.accepted_at = Some(a);
        }
        if let Some(late) = patch.late_expected {
            after.status.late_expected = Some(late);
        }
        // Written only when it must move earlier or out: an indexed check earlier than needed
        // stays (the sweep reads the intent then and moves it on), which saves the due-index a
        // delete and a put on the happy path.
        let next = match next_check(&after, now, &self.config.sweep) {
            None => NextCheck::Remove,
            Some(t) if record.status.next_check.is_some_and(|current| current <= t) => NextCheck::Keep,
            Some(t) => NextCheck::At(t),
        };
        let tag = match &kind {
            ObservationKind::Accepted { .. } => "accepted",
            ObservationKind::PublishRetryable { .. } => "retryable",
            ObservationKind::PublishRejected { .. } => "rejected",
            ObservationKind::SendUnknown { .. } => "unknown",
            ObservationKind::Deferred { .. } => "deferred",
            ObservationKind::Suppressed { .. } => "suppressed",
            ObservationKind::Stale { .. } => "stale",
            _ => "other",
        };
        Transition {
            key: record.intent.key.clone(),
            from: vec![State::Sending],
            attempt_id: Some(attempt_id.to_owned()),
            patch,
            observation: Observation::new(format!("attempt:{attempt_id}:{tag}"), now, kind).with_state(to),
            next_check: next,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            // What SNS answered is a fact whatever the intent's state now is: it is stored (with
            // the message index) before the state changes, so a crash between them never loses
            // the MessageId, and a delivery record can find the intent while it is still `sending`.
            commit: Commit::FactsFirst,
            carried_along: Vec::new(),
        }
    }

    pub(crate) async fn record(&self, t: Transition) -> Result<(), PortError> {
        self.record_until(t, None).await
    }

    /// Writes an attempt's outcome; with a deadline, a failed write (throttled beyond the SDK's own
    /// retries, a 5xx, a transaction conflict) is tried again with backoff while time is left.
    pub(crate) async fn record_until(&self, t: Transition, deadline: Option<DateTime<Utc>>) -> Result<(), PortError> {
        match self.transition_until(t, deadline).await? {
            TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied => Ok(()),
            TransitionOutcome::Refused(current) => {
                tracing::warn!(key = current.intent.key.short(), state = %current.status.state, "claim lost before the outcome was recorded");
                Ok(())
            }
        }
    }

    /// `store.transition`, tried again on failure with backoff until `deadline` (if any).
    pub(crate) async fn transition_until(
        &self,
        t: Transition,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<TransitionOutcome, PortError> {
        let key = t.key.short().to_owned();
        retry_until(&self.clock, deadline, &key, "recording the attempt's outcome", || self.store.transition(t.clone()))
            .await
    }

    /// Records what SNS answered for the SMS that covered `c` (alone, or as a member of `digest`).
    pub(crate) async fn record_publish(
        &self,
        c: &Claimed<'_>,
        outcome: &PublishOutcome,
        digest: Option<&DigestId>,
        deadline: DateTime<Utc>,
    ) -> Outcome {
        let (record, attempt_id, msg) = (&c.record, c.attempt_id.as_str(), c.msg);
        let intent = &record.intent;
        let now = self.clock.now();
        match outcome {
            PublishOutcome::Accepted { message_id } => {
                let mut t = self.settle(
                    record,
                    attempt_id,
                    State::Accepted,
                    ObservationKind::Accepted { attempt_id: attempt_id.into(), sns_message_id: message_id.clone() },
                    StatusPatch {
                        clear_claim: true,
                        increment_attempts: true,
                        sns_message_id: Some(message_id.clone()),
                        accepted_at: Some(now),
                        digest_id: digest.cloned(),
                        ..Default::default()
                    },
                    now,
                );
                // A digest's message id is indexed once, for all its members, before this. A
                // provider whose records name their alert needs no index at all.
                if digest.is_none() && !self.gateway.records_name_their_alert() {
                    t.index_message = Some((message_id.clone(), intent.recipient.clone()));
                }
                match self.transition_until(t.clone(), Some(deadline)).await {
                    Ok(TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied) => {}
                    Ok(TransitionOutcome::Refused(current)) if current.status.state == State::SendUnknown => {
                        // The sweep gave up on our lease while we waited; we know better now.
                        t.from = vec![State::SendUnknown];
                        t.attempt_id = None;
                        let _ = self.transition_until(t, Some(deadline)).await;
                    }
                    Ok(TransitionOutcome::Refused(_)) => {}
                    Err(e) => {
                        // Published but not recorded, after retrying until the invocation's end:
                        // keep the claim; its lease expiry makes the intent send_unknown, and its
                        // delivery record still settles it — found by the message index, or, if
                        // that write never landed either, tied by this attempt's stored answer
                        // when the sweep searches for it.
                        tracing::error!(key = intent.key.short(), sns_message_id = %message_id, error = %e, "published but could not record the MessageId");
                    }
                }
                Outcome::Published { sns_message_id: message_id.clone() }
            }
            PublishOutcome::Rejected { error, refusal } => {
                // An opted-out number is suppressed first, as a permanent failure record would
                // have it: no later alert goes to it, whatever becomes of this alert's write.
                if *refusal == Refusal::Recipient {
                    let evidence = SuppressionEvidence {
                        log_event_id: format!("refusal:{attempt_id}"),
                        provider_response: Some(error.clone()),
                        at: now,
                        intent_key: intent.key.to_string(),
                        table_version: "refusal".into(),
                    };
                    if let Err(e) = self.registry.suppress(&intent.recipient, &evidence).await {
                        // Not recorded either: the claim's lease lapses and the sweep finds the
                        // intent `send_unknown`; the next send to the number is refused again.
                        tracing::warn!(key = intent.key.short(), error = %e, "opted-out number not suppressed yet");
                        return Outcome::Retry;
                    }
                    tracing::warn!(recipient = %intent.recipient, key = intent.key.short(), "recipient suppressed: opted out at the provider");
                }
                if *refusal == Refusal::SpendLimit {
                    // The account's limit: on-call is paged by the spend-exhausted alarm (not SMS).
                    let mut m = Metrics::new("sender");
                    m.count("spend_exhausted", 1);
                    m.flush();
                }
                let reason = refusal.reason(error);
                let kind = match refusal {
                    Refusal::Recipient => ObservationKind::Suppressed { registry_reason: reason.clone() },
                    _ => ObservationKind::PublishRejected { attempt_id: attempt_id.into(), error: error.clone() },
                };
                let t = self.settle(
                    record,
                    attempt_id,
                    refusal.state(),
                    kind,
                    StatusPatch {
                        clear_claim: true,
                        increment_attempts: true,
                        last_error: Some(reason),
                        digest_id: digest.cloned(),
                        ..Default::default()
                    },
                    now,
                );
                let done = if *refusal == Refusal::Recipient { Outcome::Suppressed } else { Outcome::Rejected };
                self.record_until(t, Some(deadline)).await.map_or(Outcome::Retry, |()| done)
            }
            PublishOutcome::Unknown { error } => {
                let t = self.settle(
                    record,
                    attempt_id,
                    State::SendUnknown,
                    ObservationKind::SendUnknown { attempt_id: attempt_id.into(), cause: error.clone() },
                    StatusPatch {
                        clear_claim: true,
                        increment_attempts: true,
                        last_error: Some(error.clone()),
                        digest_id: digest.cloned(),
                        ..Default::default()
                    },
                    now,
                );
                // Whether or not this write lands, the message is acknowledged: never re-send.
                let _ = self.record_until(t, Some(deadline)).await;
                Outcome::Unknown
            }
            PublishOutcome::Retryable { error } => self.release(record, attempt_id, error, msg, now, true).await,
        }
    }
}
