//! SQS: the send queue (intake → sender) and the escalation queue (→ on-call).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageAttributeValue;
use serde::{Deserialize, Serialize};

use super::describe;
use crate::domain::IdempotencyKey;
use crate::domain::storm::Lane;
use crate::ports::{
    EscalationMessage, EscalationQueue, LaneMessage, PortError, PortResult, RejectSink, RejectedEvent, SendQueue,
    UrgentLane,
};

/// The body of a send-queue message: only the key. The sender reads everything else from the
/// ledger, so no phone number or message text sits in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    pub key: IdempotencyKey,
}

pub const KEY_ATTRIBUTE: &str = "idempotency_key";

fn key_attribute(key: &str) -> PortResult<MessageAttributeValue> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(key)
        .build()
        .map_err(|e| PortError::Unavailable { operation: "SQS attribute builder", message: describe(&e) })
}

#[derive(Clone, Debug)]
pub struct SqsSendQueue {
    client: Client,
    url: String,
    /// The urgent lane's queue, when this process uses it.
    urgent_url: Option<String>,
    /// The last message count read per lane, and when: [`SendQueue::backlog`] asks SQS at most
    /// once per [`BACKLOG_FRESH_FOR`] per lane and process.
    backlog: Arc<Mutex<[Option<Counted>; 2]>>,
}

/// A queue's message count, and when it was read.
type Counted = (Instant, u64);

/// How long a read of the send queue's message count is reused. SQS's count is approximate and
/// lags by itself; asking per request would add a call to every alert.
pub const BACKLOG_FRESH_FOR: Duration = Duration::from_secs(5);

impl SqsSendQueue {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        SqsSendQueue { client, url: url.into(), urgent_url: None, backlog: Arc::new(Mutex::new([None, None])) }
    }

    /// With the urgent lane's queue: urgent alerts go there too, and the sender drains it.
    pub fn with_urgent(mut self, url: impl Into<String>) -> Self {
        self.urgent_url = Some(url.into());
        self
    }

    fn url_of(&self, lane: Lane) -> &str {
        match (lane, &self.urgent_url) {
            (Lane::Urgent, Some(u)) => u,
            _ => &self.url,
        }
    }

    async fn send(&self, url: &str, key: &IdempotencyKey, body: &str, delay: Duration) -> PortResult<()> {
        // SQS delays a message by at most 15 minutes.
        let delay = i32::try_from(delay.as_secs().min(900)).unwrap_or(900);
        self.client
            .send_message()
            .queue_url(url)
            .message_body(body)
            .set_delay_seconds((delay > 0).then_some(delay))
            .message_attributes(KEY_ATTRIBUTE, key_attribute(key.as_str())?)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "SQS SendMessage", message: describe(&e) })?;
        Ok(())
    }
}

impl UrgentLane for SqsSendQueue {
    async fn take_urgent(&self, max: i32) -> PortResult<Vec<LaneMessage>> {
        let Some(url) = &self.urgent_url else { return Ok(Vec::new()) };
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max.clamp(1, 10))
            .wait_time_seconds(0)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "SQS ReceiveMessage (urgent)", message: describe(&e) })?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                Some(LaneMessage { message_id: m.message_id?, receipt_handle: m.receipt_handle?, body: m.body? })
            })
            .collect())
    }

    async fn urgent_done(&self, receipt_handles: &[String]) -> PortResult<()> {
        use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
        let Some(url) = &self.urgent_url else { return Ok(()) };
        for chunk in receipt_handles.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(h).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| PortError::Unavailable {
                    operation: "SQS DeleteMessageBatch builder",
                    message: describe(&e),
                })?;
            let out =
                self.client.delete_message_batch().queue_url(url).set_entries(Some(entries)).send().await.map_err(
                    |e| PortError::Unavailable { operation: "SQS DeleteMessageBatch (urgent)", message: describe(&e) },
                )?;
            if let Some(failed) = out.failed.first() {
                // Left on the lane: it comes back after its visibility timeout and finds its
                // intent sent, which costs a claim attempt and nothing more.
                tracing::warn!(code = %failed.code, "urgent message not deleted");
            }
        }
        Ok(())
    }
}

impl SendQueue for SqsSendQueue {
    async fn enqueue(&self, key: &IdempotencyKey, lane: Lane, delay: Duration) -> PortResult<()> {
        let body = serde_json::to_string(&SendRequest { key: key.clone() })
            .map_err(|e| PortError::Corrupt { what: key.to_string(), message: e.to_string() })?;
        match (lane, &self.urgent_url) {
            // Both at once: the urgent copy is taken first by any running sender; the normal one
            // wakes a sender when none runs. The claim makes the second harmless.
            (Lane::Urgent, Some(urgent)) => {
                futures::try_join!(self.send(urgent, key, &body, delay), self.send(&self.url, key, &body, delay))?;
                Ok(())
            }
            _ => self.send(&self.url, key, &body, delay).await,
        }
    }

    async fn backlog(&self, lane: Lane) -> PortResult<u64> {
        use aws_sdk_sqs::types::QueueAttributeName;
        let slot = usize::from(lane == Lane::Urgent && self.urgent_url.is_some());
        let cached = self.backlog.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[slot];
        if let Some((at, count)) = cached
            && at.elapsed() < BACKLOG_FRESH_FOR
        {
            return Ok(count);
        }
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(self.url_of(lane))
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "SQS GetQueueAttributes", message: describe(&e) })?;
        let raw = out
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .ok_or_else(|| PortError::Corrupt { what: "send queue".into(), message: "no message count".into() })?;
        let count: u64 = raw
            .parse()
            .map_err(|_| PortError::Corrupt { what: "send queue".into(), message: format!("message count {raw:?}") })?;
        self.backlog.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[slot] = Some((Instant::now(), count));
        Ok(count)
    }

    async fn delay_retry(&self, receipt_handle: &str, seconds: i32, lane: Lane) -> PortResult<()> {
        self.client
            .change_message_visibility()
            .queue_url(self.url_of(lane))
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds.clamp(0, 43_200))
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "SQS ChangeMessageVisibility", message: describe(&e) })?;
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct SqsEscalationQueue {
    client: Client,
    url: String,
}

impl SqsEscalationQueue {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        SqsEscalationQueue { client, url: url.into() }
    }
}

impl EscalationQueue for SqsEscalationQueue {
    async fn escalate(&self, m: &EscalationMessage) -> PortResult<()> {
        let body = serde_json::to_string(m)
            .map_err(|e| PortError::Corrupt { what: m.idempotency_key.clone(), message: e.to_string() })?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .message_attributes(KEY_ATTRIBUTE, key_attribute(&m.idempotency_key)?)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "SQS SendMessage (escalation)", message: describe(&e) })?;
        Ok(())
    }
}

/// The intake rejects queue: EventBridge events that failed validation, with the reasons.
#[derive(Clone, Debug)]
pub struct SqsRejectSink {
    client: Client,
    url: String,
}

impl SqsRejectSink {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        SqsRejectSink { client, url: url.into() }
    }
}

impl RejectSink for SqsRejectSink {
    async fn reject(&self, event: &RejectedEvent) -> PortResult<()> {
        let body = serde_json::to_string(event)
            .map_err(|e| PortError::Corrupt { what: "rejected event".into(), message: e.to_string() })?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| PortError::Unavailable { operation: "SQS SendMessage (rejects)", message: describe(&e) })?;
        Ok(())
    }
}
