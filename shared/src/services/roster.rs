//! The recipients roster as a function reads it (intake before it accepts an alert, the sender
//! before it sends one): the whole roster, read again at most once a minute per instance (one
//! `Query`), so an entry added or removed takes effect within [`ROSTER_REFRESH`]. A refresh that
//! fails keeps the last roster read for up to [`ROSTER_STALE_LIMIT`]; past it, or with none read
//! yet, the caller gets the error (and retries): nothing is texted because the roster could not
//! be read.

use chrono::{DateTime, Utc};

use super::refreshed::{REFRESH, Refreshed, STALE_LIMIT};
use crate::domain::roster::Roster;
use crate::ports::{PortResult, RecipientRoster};

/// How long an instance uses the roster it read before reading it again.
pub const ROSTER_REFRESH: chrono::Duration = REFRESH;
/// How long the last roster read still serves while it cannot be read again.
pub const ROSTER_STALE_LIMIT: chrono::Duration = STALE_LIMIT;

/// The last roster read, and when.
#[derive(Debug)]
pub struct RosterMemo(Refreshed<Roster>);

impl Default for RosterMemo {
    fn default() -> Self {
        RosterMemo(Refreshed::new("roster"))
    }
}

impl RosterMemo {
    /// The roster as of at most [`ROSTER_REFRESH`] before `now`, read from `source` when older.
    pub async fn roster<W: RecipientRoster>(&self, source: &W, now: DateTime<Utc>) -> PortResult<Roster> {
        self.0.get(now, || source.roster()).await
    }
}
