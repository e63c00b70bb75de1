//! The recipients roster as a function reads it (intake before it accepts an alert, the sender
//! before it sends one): the whole roster, read again at most once a minute per instance (one
//! `Query`), so an entry added or removed takes effect within [`ROSTER_REFRESH`]. A refresh that
//! fails keeps the last roster read for up to [`ROSTER_STALE_LIMIT`]; past it, or with none read
//! yet, the caller gets the error (and retries): nothing is texted because the roster could not
//! be read.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

use crate::domain::roster::Roster;
use crate::ports::{PortResult, RecipientRoster};

/// How long an instance uses the roster it read before reading it again.
pub const ROSTER_REFRESH: chrono::Duration = chrono::Duration::seconds(60);
/// How long the last roster read still serves while it cannot be read again.
pub const ROSTER_STALE_LIMIT: chrono::Duration = chrono::Duration::minutes(10);

/// The last roster read, and when.
#[derive(Debug, Default)]
pub struct RosterMemo {
    last: Mutex<Option<(DateTime<Utc>, Roster)>>,
}

impl RosterMemo {
    fn cached(&self) -> Option<(DateTime<Utc>, Roster)> {
        self.last.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The roster as of at most [`ROSTER_REFRESH`] before `now`, read from `source` when older.
    pub async fn roster<W: RecipientRoster>(&self, source: &W, now: DateTime<Utc>) -> PortResult<Roster> {
        let cached = self.cached();
        if let Some((at, roster)) = &cached
            && now.signed_duration_since(*at) < ROSTER_REFRESH
        {
            return Ok(roster.clone());
        }
        match source.roster().await {
            Ok(roster) => {
                if let Ok(mut last) = self.last.lock() {
                    *last = Some((now, roster.clone()));
                }
                Ok(roster)
            }
            Err(e) => match cached {
                Some((at, roster)) if now.signed_duration_since(at) < ROSTER_STALE_LIMIT => {
                    tracing::warn!(error = %e, age_s = now.signed_duration_since(at).num_seconds(), "roster not read again; the last read serves");
                    Ok(roster)
                }
                _ => Err(e),
            },
        }
    }
}
