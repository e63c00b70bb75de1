//! SNS SMS publishing, with the error classification that keeps "at most once" honest.
//!
//! The SDK's own retries are switched off for this client: a retried Publish after a timeout is
//! exactly the duplicate SMS tocsin exists to prevent. Each publish has a bounded timeout; past
//! it the outcome is *unknown*, never retried. Only answers that prove SNS did not accept the
//! request (throttling, 5xx, a refused connection) are retryable, and the sender retries them
//! through the queue with backoff.

use std::time::Duration;

use aws_sdk_sns::Client;
use aws_sdk_sns::config::retry::RetryConfig;
use aws_sdk_sns::config::timeout::TimeoutConfig;
use aws_sdk_sns::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sns::operation::publish::PublishError;
use aws_sdk_sns::types::MessageAttributeValue;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use super::describe;
use crate::ports::{PublishOutcome, SmsGateway, SmsMessage};

#[derive(Clone, Debug)]
pub struct SnsGateway {
    client: Client,
}

const RETRYABLE_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "KMSThrottling",
    "KMSThrottlingException",
    "InternalError",
    "InternalErrorException",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestLimitExceeded",
];

impl SnsGateway {
    /// Builds the SNS client with retries off and `publish_timeout` per call.
    pub fn new(sdk: &aws_config::SdkConfig, publish_timeout: Duration) -> Self {
        let conf = aws_sdk_sns::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(publish_timeout.min(Duration::from_secs(3)))
                    .operation_timeout(publish_timeout)
                    .build(),
            )
            .build();
        SnsGateway { client: Client::from_conf(conf) }
    }
}

fn attr(v: &str) -> Option<MessageAttributeValue> {
    MessageAttributeValue::builder().data_type("String").string_value(v).build().ok()
}

/// True when the error chain shows the connection was never made, so nothing was sent.
fn never_connected(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable)
        {
            return true;
        }
        let text = err.to_string().to_ascii_lowercase();
        if text.contains("connection refused") || text.contains("dns error") {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Sorts an SDK error into the three classes that matter.
pub fn classify_error(err: &SdkError<PublishError, HttpResponse>) -> PublishOutcome {
    let text = describe(err);
    match err {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let is_5xx = se.raw().status().is_server_error();
            if RETRYABLE_CODES.contains(&code) || is_5xx {
                PublishOutcome::Retryable { error: format!("{code}: {}", se.err().message().unwrap_or("")) }
            } else {
                PublishOutcome::Rejected { error: format!("{code}: {}", se.err().message().unwrap_or("")) }
            }
        }
        SdkError::ConstructionFailure(_) => PublishOutcome::Rejected { error: text },
        SdkError::DispatchFailure(d) => {
            if d.is_user() {
                PublishOutcome::Rejected { error: text }
            } else if !d.is_timeout() && never_connected(err) {
                PublishOutcome::Retryable { error: text }
            } else {
                PublishOutcome::Unknown { error: text }
            }
        }
        // Timed out, or an answer came back that could not be read: SNS may have accepted it.
        _ => PublishOutcome::Unknown { error: text },
    }
}

impl SmsGateway for SnsGateway {
    async fn publish(&self, m: SmsMessage<'_>) -> PublishOutcome {
        let mut req = self.client.publish().phone_number(m.to.expose()).message(m.body).set_message_attributes(None);
        if let Some(a) = attr("Transactional") {
            req = req.message_attributes("AWS.SNS.SMS.SMSType", a);
        }
        if let Some(a) = m.options.sender_id.as_deref().and_then(attr) {
            req = req.message_attributes("AWS.SNS.SMS.SenderID", a);
        }
        if let Some(a) = m.options.origination_number.as_ref().and_then(|n| attr(n.expose())) {
            req = req.message_attributes("AWS.MM.SMS.OriginationNumber", a);
        }
        if let Some(a) = m.options.max_price_usd.as_deref().and_then(attr) {
            req = req.message_attributes("AWS.SNS.SMS.MaxPrice", a);
        }
        match req.send().await {
            Ok(out) => match out.message_id {
                Some(id) => PublishOutcome::Accepted { message_id: id },
                // Accepted but no id: it may be sent, and we cannot match its receipt.
                None => PublishOutcome::Unknown { error: "SNS answered without a MessageId".into() },
            },
            Err(e) => classify_error(&e),
        }
    }
}
