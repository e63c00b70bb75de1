//! Searching the SNS SMS delivery-status log groups (`DirectPublishToPhoneNumber` and its
//! `/Failure` sibling) for records to one destination inside a time window — the evidence
//! reconciliation needs. `FilterLogEvents` is rate-limited per account: the SDK's standard retries
//! back off first, and a throttle that survives them is reported as such so the caller stops
//! searching for this run.

use aws_sdk_cloudwatchlogs::Client;
use aws_sdk_cloudwatchlogs::error::{ProvideErrorMetadata, SdkError};

use crate::adapters::describe;
use crate::domain::delivery::parse_record;
use crate::domain::reconcile::{Found, Window};
use crate::ports::{DeliveryLogSearch, PortError, SearchError, SearchFor};

#[derive(Clone, Debug)]
pub struct CloudWatchLogsSearch {
    client: Client,
    groups: [String; 2],
}

impl CloudWatchLogsSearch {
    pub fn new(client: Client, success_group: impl Into<String>, failure_group: impl Into<String>) -> Self {
        CloudWatchLogsSearch { client, groups: [success_group.into(), failure_group.into()] }
    }
}

impl DeliveryLogSearch for CloudWatchLogsSearch {
    /// An SNS record shows nothing of the alert: the search is for records to its recipient.
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        let destination = what.recipient;
        let mut out = Vec::new();
        for group in &self.groups {
            let mut token: Option<String> = None;
            loop {
                // A quoted term matches the exact text: only events naming this number are read.
                let res = self
                    .client
                    .filter_log_events()
                    .log_group_name(group)
                    .filter_pattern(format!("\"{}\"", destination.expose()))
                    .start_time(window.from.timestamp_millis())
                    .end_time(window.to.timestamp_millis())
                    .limit(50)
                    .set_next_token(token.take())
                    .send()
                    .await;
                let page = match res {
                    Ok(p) => p,
                    Err(SdkError::ServiceError(e)) if e.err().code() == Some("ThrottlingException") => {
                        return Err(SearchError::Throttled);
                    }
                    Err(SdkError::ServiceError(e)) if e.err().is_resource_not_found_exception() => break,
                    Err(e) => {
                        return Err(SearchError::Failed(PortError::Unavailable {
                            operation: "CloudWatch Logs FilterLogEvents",
                            message: describe(&e),
                        }));
                    }
                };
                for ev in page.events() {
                    // Filter patterns are a pre-filter; the parsed record decides.
                    let message = ev.message().unwrap_or_default();
                    if let Ok(record) = parse_record(message) {
                        out.push(Found {
                            log_group: group.clone(),
                            log_event_id: ev.event_id().unwrap_or_default().to_owned(),
                            timestamp_ms: ev.timestamp().unwrap_or_default(),
                            record,
                            message: message.to_owned(),
                        });
                    }
                }
                match page.next_token {
                    Some(t) if !t.is_empty() && out.len() < max => token = Some(t),
                    _ => break,
                }
            }
        }
        out.truncate(max);
        Ok(out)
    }
}
