//! Intake: turns an alert request (HTTP API v2, REST API v1 or EventBridge) into exactly one
//! intent per business event, and answers every caller precisely.
//!
//! The order of work is what makes it safe: validate (nothing written on failure) → conditional
//! put of the intent (`received`) → enqueue. Two calls, nothing more: the intent stays `received`
//! until a sender claims it (the claim accepts `received`). A crash or SQS error after the put
//! loses nothing either: the caller is answered 503 and its retry (a replay) enqueues again, and
//! the sweep re-enqueues a `received` intent nobody claimed within `TOCSIN_REENQUEUE_GRACE`; the
//! sender's claim makes any extra message harmless. A replay that finds the intent `received`
//! enqueues it and marks it `queued`, so later replays do not enqueue again.

pub mod chain_policy;
pub mod http;
pub mod roster;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::time::Duration;
use tocsin::config::IntakeConfig;
use tocsin::domain::intent::{Intent, IntentRecord, Status};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::producer::{CANARY_TEMPLATE, Caller, ProducerName, ProducerRate, UnknownProducer};
use tocsin::domain::request::{FieldError, validate};
use tocsin::domain::roster::RecipientPolicy;

use tocsin::domain::storm::{Lane, SendRate, late_verdict};
use tocsin::domain::sweep::next_check;
use tocsin::domain::template::Catalog;
use tocsin::domain::{Origin, State};
use tocsin::ports::ChainPolicySource;
use tocsin::ports::{
    Clock, Commit, IntentStore, NextCheck, PortError, ProducerQuota, PutOutcome, RecipientRoster, RejectSink,
    RejectedEvent, SendQueue, StatusPatch, Transition, TransitionOutcome,
};
use tocsin::telemetry::Metrics;

use crate::chain_policy::PolicyCache;
use crate::roster::RosterCache;

/// Messages waiting on the send queue from which an urgent alert also goes on the urgent lane:
/// one sender batch. Fewer are no backlog to overtake.
pub const URGENT_MIN_BACKLOG: u64 = 10;

/// The EventBridge `detail-type` intake accepts (the rule matches it too).
pub const DETAIL_TYPE: &str = "Alert Requested";

/// What intake made of one request.
#[derive(Debug)]
pub enum Submitted {
    Created(Box<IntentRecord>),
    Replayed(Box<IntentRecord>),
    Conflict {
        key: String,
        fields: Vec<&'static str>,
    },
    Invalid(Vec<FieldError>),
    /// The caller is none of the deployment's producers: nothing written.
    UnknownProducer(UnknownProducer),
    /// The producer has used its requests for this minute: nothing written; retry after this
    /// many seconds.
    RateLimited {
        producer: ProducerName,
        retry_after: u32,
    },
    Unavailable(PortError),
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("event is neither an API Gateway request nor an EventBridge event: {0}")]
    UnsupportedEvent(String),
    #[error("a dependency failed; the event will be retried: {0}")]
    Dependency(#[from] PortError),
    #[error("producer {producer} is over its rate (TOCSIN_PRODUCER_RATE_PER_MINUTE); the event will be retried")]
    RateLimited { producer: String },
}

impl From<IntakeError> for lambda_runtime::Diagnostic {
    fn from(e: IntakeError) -> Self {
        let error_type = match e {
            IntakeError::UnsupportedEvent(_) => "tocsin.intake.UnsupportedEvent",
            IntakeError::Dependency(_) => "tocsin.intake.Dependency",
            IntakeError::RateLimited { .. } => "tocsin.intake.RateLimited",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}

pub struct Intake<S, Q, R, C, W, P> {
    pub store: S,
    pub queue: Q,
    pub rejects: R,
    pub clock: C,
    /// Whom the deployment may text (read only under `RecipientPolicy=roster`).
    pub roster: RosterCache<W>,
    /// The chain an alert of each template gets when its request names none.
    pub policies: PolicyCache<P>,
    pub config: IntakeConfig,
    pub catalog: &'static Catalog,
}

impl<S, Q, R, C, W, P> Intake<S, Q, R, C, W, P>
where
    S: IntentStore + ProducerQuota,
    Q: SendQueue,
    R: RejectSink,
    C: Clock,
    W: RecipientRoster,
    P: ChainPolicySource,
{
    /// The Lambda entry point: dispatches on the event's shape.
    pub async fn handle(&self, event: Value) -> Result<Value, IntakeError> {
        if event.get("detail-type").is_some() && event.get("source").is_some() {
            return self.handle_eventbridge(event).await.map(|()| Value::Null);
        }
        match http::HttpRequest::from_event(&event) {
            Some(req) => Ok(self.handle_http(&req).await.render(req.version)),
            None => Err(IntakeError::UnsupportedEvent(
                "expected an API Gateway v1/v2 proxy request or an EventBridge event".into(),
            )),
        }
    }

    async fn handle_http(&self, req: &http::HttpRequest) -> http::HttpResponse {
        let mut metrics = Metrics::new("intake").dimension("origin", "api");
        let resp = match req.body_json(self.config.max_body_bytes) {
            Err(resp) => resp,
            Ok(body) => {
                let caller = Caller::Signed { arn: req.caller_arn.as_deref() };
                let outcome = match self.config.producers.identify(caller) {
                    Ok(producer) => self.submit(&body, Origin::Api, producer).await,
                    Err(why) => Submitted::UnknownProducer(why),
                };
                count(&mut metrics, &outcome);
                http::HttpResponse::from_submitted(&outcome)
            }
        };
        if resp.status >= 400 && resp.status < 500 && metrics.is_empty() {
            metrics.count("rejected", 1);
        }
        tracing::info!(status = resp.status, code = resp.code(), "intake answered");
        metrics.flush();
        resp
    }

    async fn handle_eventbridge(&self, event: Value) -> Result<(), IntakeError> {
        let mut metrics = Metrics::new("intake").dimension("origin", "eventbridge");
        let field = |name: &str| event.get(name).and_then(Value::as_str).unwrap_or_default();
        let caller = Caller::Event { source: field("source"), account: field("account") };
        let outcome = if field("detail-type") != DETAIL_TYPE {
            Submitted::Invalid(vec![FieldError {
                field: "detail-type".into(),
                code: tocsin::domain::request::ErrorCode::InvalidFormat,
                message: format!("detail-type must be '{DETAIL_TYPE}'"),
            }])
        } else {
            match self.config.producers.identify(caller) {
                Ok(producer) => {
                    self.submit(event.get("detail").unwrap_or(&Value::Null), Origin::EventBridge, producer).await
                }
                Err(why) => Submitted::UnknownProducer(why),
            }
        };
        count(&mut metrics, &outcome);
        let result = match &outcome {
            Submitted::Created(r) | Submitted::Replayed(r) => {
                tracing::info!(key = r.intent.key.short(), recipient = %r.intent.recipient, "eventbridge alert accepted");
                Ok(())
            }
            Submitted::Invalid(errors) => self.reject(&event, "validation_failed", json!(errors)).await,
            Submitted::UnknownProducer(why) => {
                self.reject(&event, "producer_unknown", json!({"message": why.to_string()})).await
            }
            Submitted::Conflict { key, fields } => {
                let errors = json!({"idempotency_key": key, "differing_fields": fields});
                self.reject(&event, "conflict", errors).await
            }
            Submitted::Unavailable(e) => {
                Err(IntakeError::Dependency(PortError::Unavailable { operation: "intake", message: e.to_string() }))
            }
            // Failed, so Lambda retries it in the next minutes (asynchronous invocation) and
            // finally keeps it on the rejects queue: shed, not lost.
            Submitted::RateLimited { producer, .. } => {
                tracing::warn!(%producer, "producer over its rate; the event will be retried");
                Err(IntakeError::RateLimited { producer: producer.to_string() })
            }
        };
        metrics.flush();
        result
    }

    async fn reject(&self, event: &Value, reason: &str, errors: Value) -> Result<(), IntakeError> {
        tracing::warn!(reason, errors = %errors, "eventbridge event rejected; kept on the rejects queue");
        let rejected = RejectedEvent { reason: reason.into(), errors, event: event.clone(), at: self.clock.now() };
        self.rejects.reject(&rejected).await?;
        Ok(())
    }

    /// The core, the same for every trigger: `producer` is who the door says sent it.
    pub async fn submit(&self, body: &Value, origin: Origin, producer: ProducerName) -> Submitted {
        let now = self.clock.now();
        let mut req = match validate(body, self.catalog, &self.config.limits, now) {
            Ok(r) => r,
            Err(errors) => return Submitted::Invalid(errors),
        };
        if producer.is_canary() && req.template.name != CANARY_TEMPLATE {
            return Submitted::Invalid(vec![FieldError {
                field: "template.name".into(),
                code: tocsin::domain::request::ErrorCode::NotAllowed,
                message: format!("the canary's source may only send template '{CANARY_TEMPLATE}'"),
            }]);
        }
        if self.config.recipient_policy == RecipientPolicy::Roster {
            match self.roster.roster(now).await {
                Ok(roster) => {
                    // The recipient, and every person its escalation chain would text.
                    let refused: Vec<FieldError> = chain_people(&req)
                        .into_iter()
                        .filter(|(_, number)| roster.entry_for(number).is_none())
                        .map(|(field, _)| FieldError {
                            message: format!("'{field}' is not on the deployment's roster (tocsin recipients allow)"),
                            field,
                            code: tocsin::domain::request::ErrorCode::NotAllowed,
                        })
                        .collect();
                    if !refused.is_empty() {
                        return Submitted::Invalid(refused);
                    }
                }
                Err(e) => return Submitted::Unavailable(e),
            }
        }
        // No chain in the request: its template's policy, if one is set (the people of a policy
        // were checked against the roster when it was set, and the sender checks each level's
        // person again before its SMS, as for any alert).
        if req.chain.is_none() {
            match self.policies.policies(now).await {
                Ok(policies) => req.chain = policies.chain_for(&req.template, &req.recipient),
                Err(e) => return Submitted::Unavailable(e),
            }
        }
        let window = ProducerRate::window(now);
        match self.store.admit(&producer, &window, self.config.producer_rate.limit_for(&producer)).await {
            Ok(true) => {}
            Ok(false) => return Submitted::RateLimited { producer, retry_after: window.retry_after(now) },
            Err(e) => return Submitted::Unavailable(e),
        }
        let mut record =
            IntentRecord { intent: Intent::from_request(req, origin, producer, now), status: Status::new() };
        let ahead = self.messages_ahead(Lane::Normal).await;
        let wait = self.wait_ahead(ahead);
        // Behind a backlog, less than URGENT_SLACK left after the wait: the urgent lane too, which
        // running senders take before their own batch (earliest deadline first). Without a
        // backlog there is nothing to overtake.
        let lane = match ahead {
            Some(n) if n >= URGENT_MIN_BACKLOG => Lane::of(now, record.intent.deadline, wait.unwrap_or_default()),
            _ => Lane::Normal,
        };
        // Late is said early on the wait of the lane the alert goes by: an urgent alert overtakes
        // the send queue, so only the urgent lane's own backlog is ahead of it.
        let late_wait = match lane {
            Lane::Urgent if wait.is_some() => self.wait_ahead(self.messages_ahead(Lane::Urgent).await),
            _ => wait,
        };
        record.status.late_expected = late_wait.and_then(|w| self.late(now, w, record.intent.deadline));
        let first_check = next_check(&record, now, &self.config.sweep).unwrap_or(record.intent.deadline);
        match self.store.put_new(&record, first_check).await {
            Err(e) => Submitted::Unavailable(e),
            // No write confirms the enqueue: on the happy path it would be a third call per alert
            // that only moves the sweep's re-enqueue from the grace period to TOCSIN_REQUEUE_AFTER.
            Ok(PutOutcome::Created) => match self.queue.enqueue(&record.intent.key, lane, Duration::ZERO).await {
                Ok(()) => Submitted::Created(Box::new(record)),
                Err(e) => Submitted::Unavailable(e),
            },
            Ok(PutOutcome::Exists(stored)) => {
                let fields = stored.intent.differing_fields(&record.intent);
                if !fields.is_empty() {
                    return Submitted::Conflict { key: stored.intent.key.to_string(), fields };
                }
                if stored.status.state == State::Received {
                    // Not claimed yet: the first enqueue may have failed. Enqueue again (harmless if
                    // it did not) and mark it, so further replays do not.
                    return match self.enqueue(&stored, "replay").await {
                        Ok(r) => Submitted::Replayed(Box::new(r)),
                        Err(e) => Submitted::Unavailable(e),
                    };
                }
                Submitted::Replayed(stored)
            }
        }
    }

    /// The visible messages on `lane`'s queue (read at most every 5 s per instance and lane);
    /// `None` when it cannot be read, which is never a reason to refuse an alert.
    async fn messages_ahead(&self, lane: Lane) -> Option<u64> {
        match self.queue.backlog(lane).await {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(error = %e, "send queue backlog unknown; no lateness estimate");
                None
            }
        }
    }

    /// The wait ahead of a new alert, as a lower bound: `ahead` messages at one SMS part each, at
    /// the account's whole rate. `None` in storm mode (digests collapse a person's backlog, so the
    /// queue's length overstates the wait) or when the length is unknown.
    fn wait_ahead(&self, ahead: Option<u64>) -> Option<Duration> {
        if self.config.storm_mode {
            return None;
        }
        let rate = SendRate::per_second(f64::from(self.config.sms_rate_per_second.max(1))).ok()?;
        rate.time_for(ahead?).to_std().ok()
    }

    /// Late is said early: when even the lower-bound wait puts the send after the deadline, the
    /// expected time (the sweep then escalates at once, and the alert stays eligible to be sent).
    /// A lower bound, so it never pages for an alert that could make it.
    fn late(&self, now: DateTime<Utc>, wait: Duration, deadline: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let expected = chrono::Duration::from_std(wait)
            .ok()
            .and_then(|w| now.checked_add_signed(w))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let late = late_verdict(now, expected, deadline)?;
        tracing::warn!(wait_s = wait.as_secs(), expected = %late.expected, deadline = %late.deadline, "alert expected after its deadline: escalating early");
        Some(late.expected)
    }

    async fn enqueue(&self, record: &IntentRecord, by: &str) -> Result<IntentRecord, PortError> {
        let now = self.clock.now();
        let lane = Lane::of(now, record.intent.deadline, Duration::ZERO);
        self.queue.enqueue(&record.intent.key, lane, Duration::ZERO).await?;
        let mut queued = record.clone();
        queued.status.state = State::Queued;
        let next = next_check(&queued, now, &self.config.sweep).map_or(NextCheck::Remove, NextCheck::At);
        let t = Transition {
            key: record.intent.key.clone(),
            from: vec![State::Received],
            attempt_id: None,
            patch: StatusPatch { state: Some(State::Queued), enqueued_at: Some(now), ..Default::default() },
            observation: Observation::new(
                format!("enqueue:{by}:{}", now.timestamp_millis()),
                now,
                ObservationKind::Enqueued { by: by.into() },
            )
            .with_state(State::Queued),
            next_check: next,
            index_message: None,
            expect: Default::default(),
            retain_until: Some(record.intent.expires_at()),
            commit: Commit::Atomic,
            carried_along: Vec::new(),
        };
        match self.store.transition(t).await {
            Ok(TransitionOutcome::Applied | TransitionOutcome::AlreadyApplied) => Ok(queued),
            // A sender was faster than this write: the intent is beyond queued already.
            Ok(TransitionOutcome::Refused(current)) => Ok(*current),
            // On the queue but not marked: the sweep will re-enqueue (harmless) — do not fail.
            Err(e) => {
                tracing::warn!(key = record.intent.key.short(), error = %e, "enqueued but not marked queued");
                Ok(record.clone())
            }
        }
    }
}

fn count(m: &mut Metrics, outcome: &Submitted) {
    let name = match outcome {
        Submitted::Created(_) => "created",
        Submitted::Replayed(_) => "replayed",
        Submitted::Conflict { .. } => "conflict",
        Submitted::Invalid(_) => "rejected",
        Submitted::UnknownProducer(_) => "producer_unknown",
        Submitted::RateLimited { .. } => "producer_rate_limited",
        Submitted::Unavailable(_) => "dependency_error",
    };
    m.count(name, 1);
}

/// Everyone a request would text, each with the field that names them: the recipient, then each
/// person of its escalation chain (`chain.then[i].to`).
fn chain_people(req: &tocsin::domain::request::ValidatedRequest) -> Vec<(String, tocsin::domain::PhoneNumber)> {
    let mut people = vec![("recipient".to_owned(), req.recipient.clone())];
    let then = req.chain.as_ref().and_then(|c| c.spec.get("then")).and_then(|t| t.as_array());
    for (i, level) in then.into_iter().flatten().enumerate() {
        if let Some(number) =
            level.get("to").and_then(|t| t.as_str()).and_then(|t| tocsin::domain::PhoneNumber::parse(t).ok())
        {
            people.push((format!("chain.then[{i}].to"), number));
        }
    }
    people
}
