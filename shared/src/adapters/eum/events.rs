//! Searching the stack's own End User Messaging event log group (its configuration set's event
//! destination) for the events of one alert's SMS — by the key its context carries, never by
//! number and time. The group holds only this stack's messages; the search still keeps only
//! events whose context names this stack and the alert (or its digest): the filter pattern is a
//! pre-filter, and a second stack deriving the same key from the same business event (a staging
//! and a production stack paging one team) must never pass for this one, should its events ever
//! reach this group (a configuration set shared by hand).
//!
//! `FilterLogEvents` is rate-limited per account: the SDK's standard retries back off first, and a
//! throttle that survives them is reported as such so the caller stops searching for this run.
//! Pages may come back empty with a next token (CloudWatch Logs reads in slices): the search
//! follows the token until the window is read or `max` events are found.

use aws_sdk_cloudwatchlogs::Client;
use aws_sdk_cloudwatchlogs::error::{ProvideErrorMetadata, SdkError};

use crate::adapters::describe;
use crate::domain::delivery::parse_record;
use crate::domain::reconcile::{Found, Window};
use crate::ports::{DeliveryLogSearch, PortError, SearchError, SearchFor};

#[derive(Clone, Debug)]
pub struct EumEventSearch {
    client: Client,
    group: String,
    /// The stack whose events are searched for (`TOCSIN_STACK`, named in every SMS's context).
    stack: String,
}

impl EumEventSearch {
    pub fn new(client: Client, event_group: impl Into<String>, stack: impl Into<String>) -> Self {
        EumEventSearch { client, group: event_group.into(), stack: stack.into() }
    }
}

/// Pages read per search at most: a bounded cost per unknown outcome, whatever the group holds.
const MAX_PAGES: usize = 20;

/// The filter pattern for `what`: its key, or its digest's id (`?"a" ?"b"` matches either).
fn pattern(what: &SearchFor<'_>) -> String {
    match what.digest {
        Some(d) => format!("?\"{}\" ?\"{}\"", what.key.as_str(), d.as_str()),
        None => format!("\"{}\"", what.key.as_str()),
    }
}

impl DeliveryLogSearch for EumEventSearch {
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let res = self
                .client
                .filter_log_events()
                .log_group_name(&self.group)
                .filter_pattern(pattern(&what))
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
                Err(e) => {
                    return Err(SearchError::Failed(PortError::Unavailable {
                        operation: "CloudWatch Logs FilterLogEvents (End User Messaging events)",
                        message: describe(&e),
                    }));
                }
            };
            for ev in page.events() {
                let message = ev.message().unwrap_or_default();
                let Ok(record) = parse_record(message) else { continue };
                let found = Found {
                    log_group: self.group.clone(),
                    log_event_id: ev.event_id().unwrap_or_default().to_owned(),
                    timestamp_ms: ev.timestamp().unwrap_or_default(),
                    record,
                    message: message.to_owned(),
                };
                if what.named_by(&self.stack, found.record.context.as_ref()) {
                    out.push(found);
                }
            }
            match page.next_token {
                Some(t) if !t.is_empty() && out.len() < max => token = Some(t),
                _ => break,
            }
        }
        out.truncate(max);
        Ok(out)
    }
}
