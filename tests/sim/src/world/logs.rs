//! The delivery log groups, simulated: SNS's two account-wide delivery-status groups, where records
//! land from tocsin and other applications alike, and the stack's own End User Messaging event
//! group. The subscription hands them to the status function in batches — at least once — and
//! reconciliation searches them (`FilterLogEvents`, rate-limited): SNS's groups by number
//! ([`SimLogs`]), the event group by the alert's key ([`SimEventSearch`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::cloudwatch_logs::LogEntry;
use tocsin::domain::delivery::{DeliveryRecord, parse_record};
use tocsin::domain::provider::{FailureClass, classify};
use tocsin::domain::reconcile::{Found, Window};
use tocsin::ports::{DeliveryLogSearch, PortError, SearchError, SearchFor};

use crate::exec::{Millis, OpKind, Sim, to_ms};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    Success,
    Failure,
    /// The stack's End User Messaging event group (its configuration set's destination).
    Events,
    /// A second tocsin stack's event group (its own configuration set's): this stack never
    /// reads it.
    SecondStackEvents,
}

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Success => "sns/us-east-1/123456789012/DirectPublishToPhoneNumber",
            Group::Failure => "sns/us-east-1/123456789012/DirectPublishToPhoneNumber/Failure",
            Group::Events => "/tocsin/sim/sms-events",
            Group::SecondStackEvents => "/tocsin/second/sms-events",
        }
    }

    /// Whether this stack's status function is subscribed to the group.
    pub fn subscribed(self) -> bool {
        self != Group::SecondStackEvents
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub timestamp: Millis,
    pub message: String,
    /// When `FilterLogEvents` finds it: CloudWatch Logs ingests with a delay (the subscription
    /// is not held back by it).
    pub searchable_at: Millis,
    /// The record read as the judges read it, when it is a permanent failure of its recipient:
    /// read once, when written.
    pub permanent_failure: Option<Arc<DeliveryRecord>>,
    /// The record as a search reads it (none: not a delivery record), read the first time a
    /// search finds the event: reconciliation finds an event again and again, and the group's
    /// copy keeps what the first reading made of it.
    parsed: std::sync::OnceLock<Option<Arc<DeliveryRecord>>>,
}

impl Event {
    /// The event's record, read once.
    fn record(&self) -> Option<Arc<DeliveryRecord>> {
        self.parsed.get_or_init(|| parse_record(&self.message).ok().map(Arc::new)).clone()
    }
}

/// A batch the subscription handed to the status function, kept for Lambda's retries.
#[derive(Debug, Clone)]
pub struct Batch {
    pub group: Group,
    pub events: Vec<LogEntry>,
    /// The batch's permanent failures, for the judge of suppression.
    pub permanent_failures: Vec<Arc<DeliveryRecord>>,
    /// Invocations so far.
    pub attempts: u32,
    /// Times Lambda throttled its invocation (retried apart from `attempts`).
    pub throttles: u32,
}

#[derive(Default)]
pub struct Logs {
    pub groups: BTreeMap<Group, Vec<Event>>,
    /// Events not yet handed to the subscription, per group.
    pub undelivered: BTreeMap<Group, Vec<Event>>,
    /// Whether a delivery is scheduled for the group.
    pub delivery_due: BTreeMap<Group, bool>,
    pub batches: BTreeMap<u64, Batch>,
    /// Per group and search term, the events found to contain it so far (a search reads each
    /// event once per term, not once per search).
    found: HashMap<(Group, String), TermHits>,
    next_event: u64,
    next_batch: u64,
}

impl Logs {
    /// Writes `message` to `group` at `now`, searchable from `searchable_at`; true when the
    /// group's subscription needs a delivery scheduled.
    pub fn write(&mut self, group: Group, message: String, now: Millis, searchable_at: Millis) -> bool {
        self.next_event += 1;
        // CloudWatch Logs event ids are long decimal strings.
        let id = format!("3{:017}{:020}", now, self.next_event);
        // SNS writes only successful deliveries to its success group: none there is a failure
        // (and nine in ten records are there, most of them other applications'), so those are
        // read only when a search finds them.
        let parsed = std::sync::OnceLock::new();
        if group != Group::Success {
            let _ = parsed.set(parse_record(&message).ok().map(Arc::new));
        }
        let permanent_failure = parsed.get().cloned().flatten().filter(|r| is_permanent_failure(r));
        let event = Event { id, timestamp: now, message, searchable_at, permanent_failure, parsed };
        let group_events = self.groups.entry(group).or_default();
        assert!(group_events.last().is_none_or(|e| e.timestamp <= now), "a group's events are written in time order");
        if !group.subscribed() {
            group_events.push(event);
            return false;
        }
        group_events.push(event.clone());
        self.undelivered.entry(group).or_default().push(event);
        let due = self.delivery_due.entry(group).or_default();
        let schedule = !*due;
        *due = true;
        schedule
    }

    /// The group's pending events as one batch (at most `max`), or none.
    pub fn take_batch(&mut self, group: Group, max: usize) -> Option<u64> {
        self.delivery_due.insert(group, false);
        let pending = self.undelivered.entry(group).or_default();
        if pending.is_empty() {
            return None;
        }
        let n = pending.len().min(max);
        let permanent_failures = pending[..n].iter().filter_map(|e| e.permanent_failure.clone()).collect();
        let events: Vec<LogEntry> = pending
            .drain(..n)
            .map(|e| {
                let mut entry = LogEntry::default();
                entry.id = e.id;
                entry.timestamp = e.timestamp;
                entry.message = e.message;
                entry
            })
            .collect();
        self.next_batch += 1;
        self.batches.insert(self.next_batch, Batch { group, events, permanent_failures, attempts: 0, throttles: 0 });
        Some(self.next_batch)
    }

    pub fn has_undelivered(&self, group: Group) -> bool {
        self.undelivered.get(&group).is_some_and(|v| !v.is_empty())
    }

    /// The events of `group` that contain `term`, logged within `from..=to` and ingested by
    /// `now`, in time order, each with its record (none: not a delivery record).
    pub fn search(
        &mut self,
        group: Group,
        term: &str,
        from: Millis,
        to: Millis,
        now: Millis,
    ) -> Vec<(Event, Option<Arc<DeliveryRecord>>)> {
        let events = self.groups.get(&group).map(Vec::as_slice).unwrap_or_default();
        let found = self.found.entry((group, term.to_owned())).or_default();
        let unread = found.read..events.len();
        let finder = memchr::memmem::Finder::new(term);
        found.at.extend(unread.filter(|&i| finder.find(events[i].message.as_bytes()).is_some()));
        found.read = events.len();
        // A group's events are written in time order (each at the moment it is written), so the
        // window starts where bisection puts it.
        let first = found.at.partition_point(|&i| events[i].timestamp < from);
        found.at[first..]
            .iter()
            .map(|&i| &events[i])
            .take_while(|e| e.timestamp <= to)
            .filter(|e| e.searchable_at <= now)
            .map(|e| (e.clone(), e.record()))
            .collect()
    }
}

/// What the searches for one term have read of a group: how far, and where the term was.
#[derive(Default)]
struct TermHits {
    read: usize,
    at: Vec<usize>,
}

/// Whether a delivery record (SNS's, or an End User Messaging event) is a permanent failure of its
/// recipient (the kind that suppresses the number): the record, if so.
pub fn permanent_failure(message: &str) -> Option<DeliveryRecord> {
    parse_record(message).ok().filter(is_permanent_failure)
}

/// Whether the record is a permanent failure of its recipient.
fn is_permanent_failure(r: &DeliveryRecord) -> bool {
    if r.status.receipt() != Some(tocsin::domain::state::Receipt::Failed) {
        return false;
    }
    let class = r.failure.as_ref().map_or_else(|| classify(r.provider_response.as_deref()).class, |c| c.class);
    class == FailureClass::PermanentRecipient
}

/// `FilterLogEvents` on `group` for events containing `term` within `from..=to` (quoted terms
/// match exact text), throttled as faults have it; an event not yet ingested is not found.
async fn filter(sim: &Sim, group: Group, term: String, from: Millis, to: Millis) -> Result<Vec<Found>, SearchError> {
    let now = sim.now();
    let page = sim
        .call("CloudWatch Logs FilterLogEvents", OpKind::Read, move |w| {
            if w.chance(w.faults.search_throttled) {
                return None;
            }
            Some(w.logs.search(group, &term, from, to, now))
        })
        .await;
    let events = match page {
        Ok(Some(events)) => events,
        Ok(None) => return Err(SearchError::Throttled),
        Err((_, label)) => {
            return Err(SearchError::Failed(PortError::Unavailable {
                operation: label,
                message: "simulated failure".into(),
            }));
        }
    };
    Ok(events
        .into_iter()
        .filter_map(|(e, record)| {
            Some(Found {
                log_group: group.name().to_owned(),
                log_event_id: e.id,
                timestamp_ms: e.timestamp,
                record: DeliveryRecord::clone(&*record?),
                message: e.message,
            })
        })
        .collect())
}

/// `FilterLogEvents` over SNS's two groups, by the recipient's number, as reconciliation uses it.
#[derive(Clone)]
pub struct SimLogs {
    pub sim: Sim,
}

impl DeliveryLogSearch for SimLogs {
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        let (from, to) = (to_ms(window.from), to_ms(window.to));
        let mut out = Vec::new();
        for group in [Group::Success, Group::Failure] {
            out.extend(filter(&self.sim, group, what.recipient.expose().to_owned(), from, to).await?);
            if out.len() >= max {
                break;
            }
        }
        out.truncate(max);
        Ok(out)
    }
}

/// `FilterLogEvents` over the stack's End User Messaging event group, by the alert's key (or its
/// digest's id): exact, never another SMS to the same phone.
#[derive(Clone)]
pub struct SimEventSearch {
    pub sim: Sim,
    /// The stack searching (named in its SMS's context).
    pub stack: String,
}

impl DeliveryLogSearch for SimEventSearch {
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        let (from, to) = (to_ms(window.from), to_ms(window.to));
        let mut out = filter(&self.sim, Group::Events, format!("\"{}\"", what.key.as_str()), from, to).await?;
        if let Some(digest) = what.digest {
            out.extend(filter(&self.sim, Group::Events, format!("\"{}\"", digest.as_str()), from, to).await?);
        }
        // As the adapter: only events whose context names this stack and the alert or its digest.
        out.retain(|f| what.named_by(&self.stack, f.record.context.as_ref()));
        out.truncate(max);
        Ok(out)
    }
}

/// The search reconciliation uses, by the provider the run sends through.
#[derive(Clone)]
pub enum SimSearch {
    Sns(SimLogs),
    EndUserMessaging(SimEventSearch),
}

impl SimSearch {
    pub fn of(provider: super::sms::Provider, sim: Sim, stack: &str) -> Self {
        match provider {
            super::sms::Provider::Sns => SimSearch::Sns(SimLogs { sim }),
            super::sms::Provider::EndUserMessaging => {
                SimSearch::EndUserMessaging(SimEventSearch { sim, stack: stack.to_owned() })
            }
        }
    }
}

impl DeliveryLogSearch for SimSearch {
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        match self {
            SimSearch::Sns(s) => s.records_for(what, window, max).await,
            SimSearch::EndUserMessaging(s) => s.records_for(what, window, max).await,
        }
    }
}
