//! The urgent lane: behind a backlog, up to ten urgent messages taken before the batch. Only reads
//! the lane; deleting what is finished is `handle`'s, sending them is the same as any record.

use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;

use crate::{Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::ports::{RecipientRegistry, RecipientRoster, SmsGateway};

/// Urgent messages taken before a batch: SQS's most per call.
const URGENT_TAKE: i32 = 10;
/// A batch whose oldest message waited this long on the queue shows a backlog: the sender takes
/// the urgent lane first. A batch without a wait leaves it alone (no call): urgent alerts also sit
/// on the send queue, and come through it at once when there is no backlog.
pub const URGENT_POLL_AFTER: Duration = Duration::from_secs(5);

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Up to [`URGENT_TAKE`] messages of the urgent lane, when this batch shows a backlog (its
    /// oldest message waited [`URGENT_POLL_AFTER`] or more); none otherwise, and none when the
    /// lane cannot be read (its alerts also sit on the send queue).
    pub(crate) async fn take_urgent(&self, batch: &[SqsMessage]) -> Vec<SqsMessage> {
        let now_ms = self.clock.now().timestamp_millis();
        let waited_ms = batch
            .iter()
            .filter_map(|m| m.attributes.get("SentTimestamp").and_then(|t| t.parse::<i64>().ok()))
            .map(|sent| now_ms.saturating_sub(sent))
            .max();
        if waited_ms.is_none_or(|w| w < URGENT_POLL_AFTER.as_millis() as i64) {
            return Vec::new();
        }
        match self.queue.take_urgent(URGENT_TAKE).await {
            Ok(taken) => taken
                .into_iter()
                .map(|m| {
                    let mut msg = SqsMessage::default();
                    msg.message_id = Some(m.message_id);
                    msg.receipt_handle = Some(m.receipt_handle);
                    msg.body = Some(m.body);
                    msg
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "urgent lane not read; its alerts also wait on the send queue");
                Vec::new()
            }
        }
    }
}
