//! The account's SMS delivery-status log groups, simulated: records land there (tocsin's and
//! other applications'), the subscription hands them to the status function in batches — at least
//! once — and reconciliation searches them (`FilterLogEvents`, rate-limited).

use std::collections::BTreeMap;

use aws_lambda_events::cloudwatch_logs::LogEntry;
use tocsin::domain::delivery::parse_record;
use tocsin::domain::reconcile::{Found, Window};
use tocsin::ports::{DeliveryLogSearch, PortError, SearchError, SearchFor};

use crate::exec::{Millis, OpKind, Sim, to_ms};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Success,
    Failure,
}

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Success => "sns/us-east-1/123456789012/DirectPublishToPhoneNumber",
            Group::Failure => "sns/us-east-1/123456789012/DirectPublishToPhoneNumber/Failure",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub timestamp: Millis,
    pub message: String,
}

/// A batch the subscription handed to the status function, kept for Lambda's retries.
#[derive(Debug, Clone)]
pub struct Batch {
    pub group: Group,
    pub events: Vec<LogEntry>,
    /// Invocations so far.
    pub attempts: u32,
}

#[derive(Default)]
pub struct Logs {
    pub groups: BTreeMap<Group, Vec<Event>>,
    /// Events not yet handed to the subscription, per group.
    pub undelivered: BTreeMap<Group, Vec<Event>>,
    /// Whether a delivery is scheduled for the group.
    pub delivery_due: BTreeMap<Group, bool>,
    pub batches: BTreeMap<u64, Batch>,
    next_event: u64,
    next_batch: u64,
}

impl Logs {
    /// Writes `message` to `group` at `now`; true when the group's subscription needs a delivery
    /// scheduled.
    pub fn write(&mut self, group: Group, message: String, now: Millis) -> bool {
        self.next_event += 1;
        // CloudWatch Logs event ids are long decimal strings.
        let id = format!("3{:017}{:020}", now, self.next_event);
        let event = Event { id, timestamp: now, message };
        self.groups.entry(group).or_default().push(event.clone());
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
        self.batches.insert(self.next_batch, Batch { group, events, attempts: 0 });
        Some(self.next_batch)
    }

    pub fn has_undelivered(&self, group: Group) -> bool {
        self.undelivered.get(&group).is_some_and(|v| !v.is_empty())
    }
}

/// `FilterLogEvents` over both groups, as reconciliation uses it.
#[derive(Clone)]
pub struct SimLogs {
    pub sim: Sim,
}

impl DeliveryLogSearch for SimLogs {
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        let destination = what.recipient;
        let mut out = Vec::new();
        for group in [Group::Success, Group::Failure] {
            let number = destination.expose().to_owned();
            let (from, to) = (to_ms(window.from), to_ms(window.to));
            let page = self
                .sim
                .call("CloudWatch Logs FilterLogEvents", OpKind::Read, move |w| {
                    if w.chance(w.faults.search_throttled) {
                        return None;
                    }
                    let events = w.logs.groups.get(&group).map(Vec::as_slice).unwrap_or_default();
                    Some(
                        events
                            .iter()
                            .filter(|e| e.timestamp >= from && e.timestamp <= to && e.message.contains(&number))
                            .cloned()
                            .collect::<Vec<_>>(),
                    )
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
            for e in events {
                if let Ok(record) = parse_record(&e.message) {
                    out.push(Found {
                        log_group: group.name().to_owned(),
                        log_event_id: e.id,
                        timestamp_ms: e.timestamp,
                        record,
                        message: e.message,
                    });
                }
            }
            if out.len() >= max {
                break;
            }
        }
        out.truncate(max);
        Ok(out)
    }
}
