//! The queues, simulated as SQS standard queues behave: at-least-once delivery (a write retried
//! after a lost answer is a second message), a visibility timeout after each receive, receive
//! counts and redrive to the dead-letter queue, receipt handles that only work for the latest
//! receive, and approximate counts.

use std::collections::BTreeMap;

use tocsin::adapters::sqs::SendRequest;
use tocsin::domain::IdempotencyKey;
use tocsin::domain::storm::Lane;
use tocsin::ports::{
    EscalationMessage, EscalationQueue, LaneMessage, PortError, PortResult, RejectSink, RejectedEvent, SendQueue,
    UrgentLane,
};

use super::ledger::port;
use crate::exec::{Millis, OpKind, Sim};
use crate::world::World;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueName {
    Send,
    Urgent,
    SendDlq,
    Escalations,
    Rejects,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub body: String,
    pub sent_at: Millis,
    pub visible_at: Millis,
    pub receives: u32,
    /// The receipt handle of the latest receive.
    pub receipt: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Queue {
    pub messages: BTreeMap<u64, Message>,
    pub visibility_ms: Millis,
    /// Received this many times, the next receive moves the message to the dead-letter queue.
    pub max_receives: Option<u32>,
    pub sent: u64,
}

#[derive(Default)]
pub struct Queues {
    pub queues: BTreeMap<QueueName, Queue>,
    seq: u64,
    /// A message arrived on the send queue since the event source mapping last looked.
    pub poll_wanted: bool,
}

impl Queues {
    pub fn configure(&mut self, name: QueueName, visibility_ms: Millis, max_receives: Option<u32>) {
        let q = self.queues.entry(name).or_default();
        q.visibility_ms = visibility_ms;
        q.max_receives = max_receives;
    }

    pub fn queue(&mut self, name: QueueName) -> &mut Queue {
        self.queues.entry(name).or_default()
    }

    pub fn send(&mut self, name: QueueName, body: String, now: Millis, delay_ms: Millis) -> String {
        self.seq += 1;
        let seq = self.seq;
        let id = format!("m-{seq}");
        let q = self.queue(name);
        q.sent += 1;
        q.messages.insert(
            seq,
            Message { id: id.clone(), body, sent_at: now, visible_at: now + delay_ms, receives: 0, receipt: None },
        );
        id
    }

    /// Visible messages, how SQS counts them (approximately: the count is exact here).
    pub fn visible(&self, name: QueueName, now: Millis) -> usize {
        self.queues.get(&name).map_or(0, |q| q.messages.values().filter(|m| m.visible_at <= now).count())
    }

    /// Receives up to `max` visible messages: each becomes invisible for the visibility timeout;
    /// one received too often moves to the dead-letter queue instead.
    pub fn receive(&mut self, name: QueueName, max: usize, now: Millis) -> Vec<Message> {
        let dlq = match name {
            QueueName::Send | QueueName::Urgent => Some(QueueName::SendDlq),
            _ => None,
        };
        let mut out = Vec::new();
        let mut to_dlq = Vec::new();
        self.seq += 1;
        let stamp = self.seq;
        let q = self.queue(name);
        let visibility = q.visibility_ms;
        let max_receives = q.max_receives;
        for (seq, m) in q.messages.iter_mut() {
            if out.len() >= max {
                break;
            }
            if m.visible_at > now {
                continue;
            }
            if max_receives.is_some_and(|mx| m.receives >= mx) {
                to_dlq.push(*seq);
                continue;
            }
            m.receives += 1;
            m.visible_at = now + visibility;
            m.receipt = Some(format!("{}#{stamp}", m.id));
            out.push(m.clone());
        }
        let moved: Vec<Message> = to_dlq.iter().filter_map(|seq| q.messages.remove(seq)).collect();
        if let Some(d) = dlq {
            for m in moved {
                self.seq += 1;
                let s = self.seq;
                self.queue(d).messages.insert(s, Message { visible_at: now, receipt: None, ..m });
            }
        }
        out
    }

    /// A second receive of a message still in flight (not one of `batch`): SQS's at-least-once
    /// delivery, or a visibility timeout that lapsed while its first receiver still works. The
    /// oldest such message gets a new receipt handle — the only one that now deletes it — and a
    /// new visibility timeout.
    pub fn receive_again(&mut self, name: QueueName, batch: &[Message], now: Millis) -> Option<Message> {
        self.seq += 1;
        let stamp = self.seq;
        let q = self.queue(name);
        let visibility = q.visibility_ms;
        let m = q
            .messages
            .values_mut()
            .find(|m| m.visible_at > now && m.receives > 0 && batch.iter().all(|b| b.id != m.id))?;
        m.receives += 1;
        m.visible_at = now + visibility;
        m.receipt = Some(format!("{}#{stamp}", m.id));
        Some(m.clone())
    }

    /// Deletes the message this receipt handle was given for, if it is still the latest receive.
    pub fn delete(&mut self, name: QueueName, receipt: &str) -> bool {
        let q = self.queue(name);
        let found = q.messages.iter().find(|(_, m)| m.receipt.as_deref() == Some(receipt)).map(|(s, _)| *s);
        found.is_some_and(|s| q.messages.remove(&s).is_some())
    }

    /// ChangeMessageVisibility: only for a message in flight under this (latest) receipt handle.
    pub fn change_visibility(&mut self, name: QueueName, receipt: &str, seconds: i32, now: Millis) -> bool {
        let q = self.queue(name);
        match q.messages.values_mut().find(|m| m.receipt.as_deref() == Some(receipt)) {
            Some(m) if m.visible_at > now => {
                m.visible_at = now + Millis::from(seconds.clamp(0, 43_200)) * 1000;
                self.poll_wanted = true;
                true
            }
            _ => false,
        }
    }
}

fn lane_queue(lane: Lane) -> QueueName {
    match lane {
        Lane::Urgent => QueueName::Urgent,
        Lane::Normal => QueueName::Send,
    }
}

/// The queues as the functions use them: send queue and urgent lane (intake, sender, sweep), the
/// escalation queue (sweep), the rejects queue (intake).
#[derive(Clone)]
pub struct SimSqs {
    pub sim: Sim,
    /// The adapter's per-process cache of the queues' lengths (it asks SQS at most every
    /// `BACKLOG_FRESH_FOR`): one per simulated process.
    backlog: std::sync::Arc<std::sync::Mutex<[Option<Counted>; 2]>>,
}

/// A queue's length, and when it was read.
type Counted = (Millis, u64);

impl SimSqs {
    /// The queues as one process (one Lambda instance) sees them.
    pub fn new(sim: Sim) -> Self {
        SimSqs { sim, backlog: Default::default() }
    }

    async fn send(&self, label: &'static str, name: QueueName, body: String, delay_ms: Millis) -> PortResult<()> {
        port(
            self.sim
                .call(label, OpKind::Write, move |w: &mut World| {
                    let now = w.now;
                    w.sqs.send(name, body.clone(), now, delay_ms);
                    if name == QueueName::Send {
                        w.sqs.poll_wanted = true;
                    }
                })
                .await,
        )
    }
}

impl SendQueue for SimSqs {
    async fn enqueue(&self, key: &IdempotencyKey, lane: Lane, delay: std::time::Duration) -> PortResult<()> {
        let body = serde_json::to_string(&SendRequest { key: key.clone() })
            .map_err(|e| PortError::Corrupt { what: key.to_string(), message: e.to_string() })?;
        // SQS delays a message by whole seconds, at most 15 minutes.
        let delay_ms = Millis::try_from(delay.as_secs().min(900)).unwrap_or(900) * 1000;
        match lane {
            Lane::Urgent => {
                futures::try_join!(
                    self.send("SQS SendMessage (urgent)", QueueName::Urgent, body.clone(), delay_ms),
                    self.send("SQS SendMessage", QueueName::Send, body.clone(), delay_ms)
                )?;
                Ok(())
            }
            Lane::Normal => self.send("SQS SendMessage", QueueName::Send, body, delay_ms).await,
        }
    }

    async fn delay_retry(&self, receipt_handle: &str, seconds: i32, lane: Lane) -> PortResult<()> {
        let handle = receipt_handle.to_owned();
        let changed = port(
            self.sim
                .call("SQS ChangeMessageVisibility", OpKind::Write, move |w| {
                    let now = w.now;
                    w.sqs.change_visibility(lane_queue(lane), &handle, seconds, now)
                })
                .await,
        )?;
        if changed {
            Ok(())
        } else {
            Err(PortError::Unavailable {
                operation: "SQS ChangeMessageVisibility",
                message: "MessageNotInflight / ReceiptHandleIsInvalid".into(),
            })
        }
    }

    async fn backlog(&self, lane: Lane) -> PortResult<u64> {
        let slot = usize::from(lane == Lane::Urgent);
        let fresh = tocsin::adapters::sqs::BACKLOG_FRESH_FOR.as_millis() as Millis;
        let cached = self.backlog.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[slot];
        let now = self.sim.now();
        if let Some((at, count)) = cached
            && now - at < fresh
        {
            return Ok(count);
        }
        let count = port(
            self.sim
                .call("SQS GetQueueAttributes", OpKind::Read, move |w| {
                    let now = w.now;
                    w.sqs.visible(lane_queue(lane), now) as u64
                })
                .await,
        )?;
        self.backlog.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[slot] = Some((self.sim.now(), count));
        Ok(count)
    }
}

impl UrgentLane for SimSqs {
    async fn take_urgent(&self, max: i32) -> PortResult<Vec<LaneMessage>> {
        let max = usize::try_from(max.clamp(1, 10)).unwrap_or(10);
        port(
            self.sim
                .call("SQS ReceiveMessage (urgent)", OpKind::Write, move |w| {
                    let now = w.now;
                    w.sqs
                        .receive(QueueName::Urgent, max, now)
                        .into_iter()
                        .filter_map(|m| {
                            Some(LaneMessage { message_id: m.id, receipt_handle: m.receipt?, body: m.body })
                        })
                        .collect()
                })
                .await,
        )
    }

    async fn urgent_done(&self, receipt_handles: &[String]) -> PortResult<()> {
        for chunk in receipt_handles.chunks(10) {
            let chunk = chunk.to_vec();
            port(
                self.sim
                    .call("SQS DeleteMessageBatch (urgent)", OpKind::Write, move |w| {
                        for h in &chunk {
                            w.sqs.delete(QueueName::Urgent, h);
                        }
                    })
                    .await,
            )?;
        }
        Ok(())
    }
}

impl EscalationQueue for SimSqs {
    async fn escalate(&self, message: &EscalationMessage) -> PortResult<()> {
        let m = message.clone();
        port(
            self.sim
                .call("SQS SendMessage (escalation)", OpKind::Write, move |w| {
                    let now = w.now;
                    w.oracle.escalation_sent(now, &m);
                    let body = serde_json::to_string(&m).unwrap_or_default();
                    w.sqs.send(QueueName::Escalations, body, now, 0);
                })
                .await,
        )
    }
}

impl RejectSink for SimSqs {
    async fn reject(&self, event: &RejectedEvent) -> PortResult<()> {
        let body = serde_json::to_string(event)
            .map_err(|e| PortError::Corrupt { what: "rejected event".into(), message: e.to_string() })?;
        self.send("SQS SendMessage (rejects)", QueueName::Rejects, body, 0).await
    }
}
