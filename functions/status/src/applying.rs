//! Applying a record to the intent it belongs to — found by the message index, or named by the
//! record's own context (End User Messaging) — or, for a digest's SMS, to every member, the
//! digest's fate recorded first — with its carrier, metrics and the canary. Suppression is `receipts`'.

use futures::StreamExt;
use tocsin::domain::carrier::CarrierSeen;
use tocsin::domain::delivery::{DeliveryRecord, DeliveryStatus};
use tocsin::domain::provider::FailureClass;
use tocsin::domain::send_context::{SendContext, Subject};
use tocsin::domain::state::ReceiptEffect;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{Clock, IndexEntry, LoggedRecord, PortError};
use tocsin::services::receipts::{self, Applied, Link, LogEvent};
use tocsin::telemetry::{Metrics, Unit};

use crate::{CONCURRENCY, EventOutcome, Parsed, Processed, StatusHandler, StatusRegistry, StatusStore};

/// How long a digest's fan-out has before the sweep checks the members it did not reach: long
/// enough that the sweep does not race a fan-out in progress, short next to any deadline.
const FANOUT_GRACE: chrono::Duration = chrono::Duration::minutes(2);

impl<S: StatusStore, R: StatusRegistry, C: Clock> StatusHandler<S, R, C> {
    /// Applies a record found in the message index: to its intent, or, for a storm-mode digest, to
    /// every member (each member's write is conditioned and idempotent on the log event id, as for
    /// a single intent, so a redelivery after a crash half way finishes the rest). The record's
    /// outcome is the first member's; any member's failure fails the record (retried whole).
    pub(crate) async fn apply_indexed(&self, p: &Parsed, entry: IndexEntry) -> Processed {
        let Some((digest_id, members)) = &entry.digest else {
            return self.apply(p, entry.key, entry.recipient, Link::Indexed).await;
        };
        // The digest's fate first, once, on the digest itself: a member this invocation does not
        // reach (it ends half way, and Lambda gives up on the batch) still learns it from the
        // sweep — at once, because every member still waiting is brought forward in the sweep's
        // index before the fate is recorded (otherwise its next check may be days away).
        if p.record.status.receipt().is_some() {
            let by = self.clock.now() + FANOUT_GRACE;
            let brought = futures::stream::iter(members.iter())
                .map(|key| self.store.bring_check_forward(key, by, &State::AWAITING_RECEIPT))
                .buffered(CONCURRENCY)
                .collect::<Vec<_>>()
                .await;
            if let Some(Err(e)) = brought.into_iter().find(Result::is_err) {
                return (Err(e), false);
            }
            let outcome = LoggedRecord {
                log_event_id: p.entry.id.clone(),
                timestamp_ms: p.entry.timestamp,
                message: p.entry.message.clone(),
            };
            if let Err(e) = self.store.record_digest_outcome(digest_id, &outcome).await {
                return (Err(e), false);
            }
        }
        let results = futures::stream::iter(members.iter().cloned())
            .map(|key| self.apply(p, key, entry.recipient.clone(), Link::Indexed))
            .buffered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let suppressed = results.iter().any(|(_, s)| *s);
        let mut first = None;
        for (result, _) in results {
            match result {
                Err(e) => return (Err(e), suppressed),
                Ok(outcome) => {
                    first.get_or_insert(outcome);
                }
            }
        }
        (
            first.ok_or_else(|| PortError::Corrupt { what: "digest index entry".into(), message: "no members".into() }),
            suppressed,
        )
    }

    /// Applies a record whose own context names its alert (or digest) and the attempt that sent
    /// it — End User Messaging echoes the context in every event: no index, no guess. An event
    /// naming another stack is never applied here.
    pub(crate) async fn apply_keyed(&self, p: &Parsed, context: &SendContext) -> Processed {
        if context.stack != self.config.stack {
            return (Ok(EventOutcome::OtherStack), false);
        }
        match &context.subject {
            Subject::Alert { key, .. } => {
                // The number the SMS went to, as the provider reports it; `receipts` checks it is
                // the intent's before it suppresses anything on the event's word.
                let Some(recipient) = p.record.destination.as_deref().and_then(|d| PhoneNumber::parse(d).ok()) else {
                    tracing::warn!(log_event_id = %p.entry.id, key = key.short(), "keyed event without a destination number skipped");
                    return (Ok(EventOutcome::Unparseable), false);
                };
                self.apply(p, key.clone(), recipient, Link::Keyed).await
            }
            // A digest's members are on the digest item, written before its SMS was sent.
            Subject::Digest { id } => match self.store.get_digest(id).await {
                Ok(Some(digest)) => match digest.members.first() {
                    Some(first) => {
                        let entry = IndexEntry {
                            key: first.clone(),
                            recipient: digest.recipient.clone(),
                            digest: Some((id.clone(), digest.members.clone())),
                        };
                        self.apply_indexed(p, entry).await
                    }
                    None => (Ok(EventOutcome::NoSuchIntent), false),
                },
                Ok(None) => (Ok(EventOutcome::NoSuchIntent), false),
                Err(e) => (Err(e), false),
            },
            // A confirmation answering a reply carries no alert: counted, nothing applied.
            Subject::Reply { .. } => (Ok(EventOutcome::Confirmation), false),
        }
    }

    /// Applies a record to the intent it belongs to; returns the outcome and whether the
    /// recipient was suppressed.
    pub(crate) async fn apply(&self, p: &Parsed, key: IdempotencyKey, recipient: PhoneNumber, link: Link) -> Processed {
        let event = LogEvent { id: &p.entry.id, timestamp_ms: p.entry.timestamp };
        let now = self.clock.now();
        match receipts::apply(&self.store, &self.registry, &key, &recipient, event, &p.record, link, now).await {
            Ok(o) => {
                // The number's carrier, for the carrier view of its next SMS (kept on a retry too:
                // the write is idempotent and an older record never overwrites a newer one). From
                // an outcome only: End User Messaging's progress events name the same carrier.
                // Written only when it is news to what this instance wrote for the number.
                let outcome_of_ours = p.record.status.receipt().is_some() && o.applied != Applied::NoSuchIntent;
                if outcome_of_ours
                    && let Some(seen) = CarrierSeen::from_record(&p.record, p.written_at.unwrap_or(now))
                    && self.carriers_written.needs_writing(&recipient, &seen)
                {
                    if let Err(e) = self.registry.record_carrier(&recipient, &seen).await {
                        return (Err(e), o.suppressed);
                    }
                    self.carriers_written.written(&recipient, &seen);
                }
                emit_delivery_metrics(&p.record, o.class.map(|c| (c, o.recognised)));
                if matches!(o.applied, Applied::Effect(ReceiptEffect::Moved { to: State::Delivered, .. })) {
                    self.count_canary(&recipient);
                }
                let outcome = match o.applied {
                    Applied::Effect(ReceiptEffect::Unrecognised)
                        if matches!(p.record.status, DeliveryStatus::Pending(_)) =>
                    {
                        EventOutcome::Progress
                    }
                    Applied::Effect(effect) => EventOutcome::Applied(effect),
                    Applied::Duplicate => EventOutcome::Duplicate,
                    Applied::NoSuchIntent => EventOutcome::NoSuchIntent,
                };
                (Ok(outcome), o.suppressed)
            }
            Err(e) => (Err(e), false),
        }
    }

    /// A delivery to the canary's number (`TOCSIN_CANARY_NUMBER`): the whole loop worked, from the
    /// schedule through intake, the sender, SNS, the delivery-status logs and their subscription to
    /// here. The canary-not-delivered alarm pages when a window passes without one.
    pub(crate) fn count_canary(&self, recipient: &PhoneNumber) {
        if self.config.canary_number.as_ref() == Some(recipient) {
            let mut m = Metrics::new("status");
            m.count("canary_delivered", 1);
            m.flush();
            tracing::info!(recipient = %recipient, "canary delivered");
        }
    }
}

/// Latency and price by carrier and country, so p95/p99 per carrier can be graphed.
pub(crate) fn emit_delivery_metrics(r: &DeliveryRecord, class: Option<(FailureClass, bool)>) {
    let carrier = r.carrier.clone().unwrap_or_else(|| "unknown".into());
    let country = r.country().unwrap_or("unknown").to_owned();
    let mut m = Metrics::new("status").dimension("carrier", carrier).dimension("country", country);
    if let Some(d) = r.dwell_ms {
        m.add("dwell_ms", d as f64, Unit::Milliseconds);
    }
    if let Some(d) = r.dwell_until_ack_ms {
        m.add("dwell_until_device_ack_ms", d as f64, Unit::Milliseconds);
    }
    if let Some(p) = r.price_usd {
        m.add("price_usd", p, Unit::None);
    }
    match class {
        Some((c, recognised)) => {
            m.count(
                match c {
                    FailureClass::PermanentRecipient => "failure_permanent_recipient",
                    FailureClass::PermanentMessage => "failure_permanent_message",
                    FailureClass::AccountLimit => "failure_account_limit",
                    FailureClass::Transient => "failure_transient",
                    FailureClass::Unknown => "failure_unknown",
                },
                1,
            );
            if !recognised {
                m.count("unrecognised_provider_response", 1);
            }
        }
        None if r.status.receipt().is_some() => m.count("delivery_success", 1),
        None if matches!(r.status, DeliveryStatus::Pending(_)) => {}
        None => m.count("delivery_status_unrecognised", 1),
    }
    m.flush();
}
