//! A short list a function reads whole and keeps for a minute (the recipients roster, the
//! templates' chain policies): read again at most once per [`REFRESH`] per instance, so a change
//! takes effect within it. A refresh that fails keeps the last list read for up to
//! [`STALE_LIMIT`]; past it, or with none read yet, the caller gets the error (and retries).

use std::future::Future;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use crate::ports::PortResult;

/// How long an instance uses what it read before reading it again.
pub const REFRESH: chrono::Duration = chrono::Duration::seconds(60);
/// How long the last read still serves while it cannot be read again.
pub const STALE_LIMIT: chrono::Duration = chrono::Duration::minutes(10);

/// The last read, and when.
#[derive(Debug)]
pub struct Refreshed<T> {
    what: &'static str,
    last: Mutex<Option<(DateTime<Utc>, T)>>,
}

impl<T: Clone> Refreshed<T> {
    /// `what` names the list in the log line a failed refresh writes.
    pub fn new(what: &'static str) -> Self {
        Refreshed { what, last: Mutex::new(None) }
    }

    fn cached(&self) -> Option<(DateTime<Utc>, T)> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    /// The list as of at most [`REFRESH`] before `now`, read with `read` when older.
    pub async fn get<F, Fut>(&self, now: DateTime<Utc>, read: F) -> PortResult<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = PortResult<T>>,
    {
        let cached = self.cached();
        if let Some((at, value)) = &cached
            && now.signed_duration_since(*at) < REFRESH
        {
            return Ok(value.clone());
        }
        match read().await {
            Ok(value) => {
                if let Ok(mut last) = self.last.lock() {
                    *last = Some((now, value.clone()));
                }
                Ok(value)
            }
            Err(e) => match cached {
                Some((at, value)) if now.signed_duration_since(at) < STALE_LIMIT => {
                    let age_s = now.signed_duration_since(at).num_seconds();
                    tracing::warn!(error = %e, age_s, what = self.what, "not read again; the last read serves");
                    Ok(value)
                }
                _ => Err(e),
            },
        }
    }
}
