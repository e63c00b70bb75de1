//! Reading one queue record: End User Messaging's two-way payload (in SNS's envelope, or raw when
//! the subscription delivers raw) and when the reply arrived.
//!
//! The arrival time bounds what the reply can reach (a code given after it, an SMS sent after
//! it, are not its), so it is the earliest time known: SNS's `Timestamp` when the envelope is
//! there, else the queue's `SentTimestamp`, else now — and never later than now.

use aws_lambda_events::sqs::SqsMessage;
use chrono::{DateTime, Utc};
use tocsin::domain::reply::payload::parse_reply;
use tocsin::domain::reply::{InboundReply, PayloadError};

/// The reply and when it arrived.
pub fn read(msg: &SqsMessage, now: DateTime<Utc>) -> Result<(InboundReply, DateTime<Utc>), PayloadError> {
    let body = msg.body.as_deref().unwrap_or_default();
    let reply = parse_reply(body)?;
    let queued = msg
        .attributes
        .get("SentTimestamp")
        .and_then(|ms| ms.parse::<i64>().ok())
        .and_then(DateTime::from_timestamp_millis);
    let received_at = reply.published_at.or(queued).unwrap_or(now).min(now);
    Ok((reply, received_at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn message(body: &str, sent_ms: Option<i64>) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.body = Some(body.to_owned());
        if let Some(ms) = sent_ms {
            m.attributes.insert("SentTimestamp".into(), ms.to_string());
        }
        m
    }

    const RAW: &str = r#"{"originationNumber":"+14155550123","destinationNumber":"+18445550100","messageBody":"7","inboundMessageId":"in-1"}"#;

    #[test]
    fn the_arrival_is_snss_timestamp_then_the_queues_then_now_and_never_in_the_future() {
        let now = Utc.with_ymd_and_hms(2026, 12, 5, 3, 12, 0).single().expect("time");
        let queued = now - chrono::Duration::seconds(30);
        let (_, at) = read(&message(RAW, Some(queued.timestamp_millis())), now).expect("raw");
        assert_eq!(at, queued);
        let (_, at) = read(&message(RAW, None), now).expect("raw");
        assert_eq!(at, now);
        let envelope = serde_json::json!({
            "Type": "Notification",
            "Message": RAW,
            "Timestamp": "2026-12-05T03:11:00.000Z",
        })
        .to_string();
        let (reply, at) = read(&message(&envelope, Some(queued.timestamp_millis())), now).expect("envelope");
        assert_eq!(at, now - chrono::Duration::minutes(1));
        assert_eq!(reply.inbound_id, "in-1");
        let (_, at) =
            read(&message(RAW, Some((now + chrono::Duration::hours(1)).timestamp_millis())), now).expect("raw");
        assert_eq!(at, now, "a clock ahead of ours never makes a reply later than its handling");
    }

    #[test]
    fn a_record_that_is_not_a_two_way_payload_says_why() {
        let now = Utc::now();
        assert!(matches!(read(&message("not json", None), now), Err(PayloadError::NotJson(_))));
        assert!(matches!(read(&message("{}", None), now), Err(PayloadError::Missing("originationNumber"))));
    }
}
