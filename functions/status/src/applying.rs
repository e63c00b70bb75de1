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
use tocsin::services::receipts::{self, Along, Applied, Link, LogEvent};
use tocsin::telemetry::{Metrics, Unit};

use crate::chunk::copy_error;
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

    /// Applies one subject's keyed events (an alert's, or a digest's), one after another in the
    /// order they were logged. A provider's progress on an SMS (its carrier's acceptance) that an
    /// outcome of the same SMS follows in this batch rides in that outcome's one write
    /// ([`receipts::apply_carrying`]): one write for the SMS, not one an event.
    pub(crate) async fn apply_keyed_group(&self, events: Vec<Parsed>) -> Vec<Processed> {
        let mut out = Vec::with_capacity(events.len());
        let mut held: Vec<&Parsed> = Vec::new();
        for (i, p) in events.iter().enumerate() {
            let Some(context) = &p.record.context else {
                out.push((Ok(EventOutcome::Unparseable), false));
                continue;
            };
            if rides_with_a_later_outcome(p, &events[i + 1..]) {
                held.push(p);
                continue;
            }
            // This SMS's held events ride with it; another SMS's (the alert resent) wait for theirs.
            let along: Vec<&Parsed> = held.extract_if(.., |a| same_sms(a, p)).collect();
            let (own, along) = self.apply_keyed(p, context, &along).await;
            out.extend(along);
            out.push(own);
        }
        for a in held {
            out.extend(self.apply_keyed_alone(a).await);
        }
        out
    }

    async fn apply_keyed_alone(&self, p: &Parsed) -> Option<Processed> {
        let context = p.record.context.as_ref()?;
        Some(self.apply_keyed(p, context, &[]).await.0)
    }

    /// Applies a record whose own context names its alert (or digest) and the attempt that sent
    /// it — End User Messaging echoes the context in every event: no index, no guess. An event
    /// naming another stack is never applied here. `along`: earlier progress events of the same
    /// SMS, carried in its write ([`Self::apply_along`]); their outcomes come second.
    pub(crate) async fn apply_keyed(
        &self,
        p: &Parsed,
        context: &SendContext,
        along: &[&Parsed],
    ) -> (Processed, Vec<Processed>) {
        if context.stack != self.config.stack {
            let along = along.iter().map(|_| (Ok(EventOutcome::OtherStack), false)).collect();
            return ((Ok(EventOutcome::OtherStack), false), along);
        }
        match &context.subject {
            Subject::Alert { key, .. } => {
                // The number the SMS went to, as the provider reports it; `receipts` checks it is
                // the intent's before it suppresses anything on the event's word.
                let Some(recipient) = p.record.destination.as_deref().and_then(|d| PhoneNumber::parse(d).ok()) else {
                    tracing::warn!(log_event_id = %p.entry.id, key = key.short(), "keyed event without a destination number skipped");
                    let mut alone = Vec::with_capacity(along.len());
                    for a in along {
                        alone.extend(Box::pin(self.apply_keyed_alone(a)).await);
                    }
                    return ((Ok(EventOutcome::Unparseable), false), alone);
                };
                return self.apply_along(p, along, key.clone(), recipient, Link::Keyed).await;
            }
            Subject::Digest { .. } | Subject::Reply { .. } => {}
        }
        // Only an alert's SMS carries progress along (`rides_with_a_later_outcome`).
        let mut alone = Vec::with_capacity(along.len());
        for a in along {
            alone.extend(Box::pin(self.apply_keyed_alone(a)).await);
        }
        let own = match &context.subject {
            Subject::Alert { .. } => (Ok(EventOutcome::Unparseable), false),
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
        };
        (own, alone)
    }

    /// Applies a record to the intent it belongs to; returns the outcome and whether the
    /// recipient was suppressed.
    pub(crate) async fn apply(&self, p: &Parsed, key: IdempotencyKey, recipient: PhoneNumber, link: Link) -> Processed {
        self.apply_along(p, &[], key, recipient, link).await.0
    }

    /// Applies a record as [`Self::apply`] does, with `along` — earlier progress events of the same
    /// SMS in this batch — carried in its one write when it changes the state (else applied alone
    /// before it). Returns the record's outcome, then each of `along`'s.
    pub(crate) async fn apply_along(
        &self,
        p: &Parsed,
        along: &[&Parsed],
        key: IdempotencyKey,
        recipient: PhoneNumber,
        link: Link,
    ) -> (Processed, Vec<Processed>) {
        let event = LogEvent { id: &p.entry.id, timestamp_ms: p.entry.timestamp };
        let carried: Vec<Along<'_>> = along
            .iter()
            .map(|a| Along { event: LogEvent { id: &a.entry.id, timestamp_ms: a.entry.timestamp }, record: &a.record })
            .collect();
        let now = self.clock.now();
        let applied = receipts::apply_carrying(
            &self.store,
            &self.registry,
            &key,
            &recipient,
            event,
            &p.record,
            &carried,
            link,
            now,
        )
        .await;
        let (o, along_applied) = match applied {
            Ok(applied) => applied,
            Err(e) => {
                let along = along.iter().map(|_| (Err(copy_error(&e)), false)).collect();
                return ((Err(e), false), along);
            }
        };
        let along: Vec<Processed> = along
            .iter()
            .zip(along_applied)
            .map(|(a, applied)| {
                emit_delivery_metrics(&a.record, None);
                (Ok(event_outcome(applied, &a.record)), false)
            })
            .collect();
        // The number's carrier, for the carrier view of its next SMS (kept on a retry too: the
        // write is idempotent and an older record never overwrites a newer one). From an outcome
        // only: End User Messaging's progress events name the same carrier. Written only when it
        // is news to what this instance wrote for the number.
        let outcome_of_ours = p.record.status.receipt().is_some() && o.applied != Applied::NoSuchIntent;
        if outcome_of_ours
            && let Some(seen) = CarrierSeen::from_record(&p.record, p.written_at.unwrap_or(now))
            && self.carriers_written.needs_writing(&recipient, &seen)
        {
            if let Err(e) = self.registry.record_carrier(&recipient, &seen).await {
                return ((Err(e), o.suppressed), along);
            }
            self.carriers_written.written(&recipient, &seen);
        }
        emit_delivery_metrics(&p.record, o.class.map(|c| (c, o.recognised)));
        if matches!(o.applied, Applied::Effect(ReceiptEffect::Moved { to: State::Delivered, .. })) {
            self.count_canary(&recipient);
        }
        ((Ok(event_outcome(o.applied, &p.record)), o.suppressed), along)
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

/// Whether `p` is a provider's progress on an alert's SMS that an outcome of the same SMS follows
/// in `later` (the rest of its subject's events, in log order): then it rides with that outcome.
fn rides_with_a_later_outcome(p: &Parsed, later: &[Parsed]) -> bool {
    let alert = matches!(p.record.context.as_ref().map(|c| &c.subject), Some(Subject::Alert { .. }));
    alert
        && Along::can_carry(&p.record)
        && later
            .iter()
            .find(|q| same_sms(p, q) && !Along::can_carry(&q.record))
            .is_some_and(|q| q.record.status.receipt().is_some())
}

/// Whether two events are about the same SMS: one message, one context (stack, alert, attempt).
fn same_sms(a: &Parsed, b: &Parsed) -> bool {
    a.record.message_id == b.record.message_id && a.record.context == b.record.context
}

/// What a record's application counts as in the batch's summary.
fn event_outcome(applied: Applied, record: &DeliveryRecord) -> EventOutcome {
    match applied {
        Applied::Effect(ReceiptEffect::Unrecognised) if matches!(record.status, DeliveryStatus::Pending(_)) => {
            EventOutcome::Progress
        }
        Applied::Effect(effect) => EventOutcome::Applied(effect),
        Applied::Duplicate => EventOutcome::Duplicate,
        Applied::NoSuchIntent => EventOutcome::NoSuchIntent,
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
