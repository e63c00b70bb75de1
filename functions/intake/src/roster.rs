//! The recipients roster as intake reads it: [`tocsin::services::roster::RosterMemo`] over its
//! source (read at most once a minute per instance).

use chrono::{DateTime, Utc};
use tocsin::domain::roster::Roster;
use tocsin::ports::{PortResult, RecipientRoster};
use tocsin::services::roster::RosterMemo;

pub struct RosterCache<W> {
    source: W,
    memo: RosterMemo,
}

impl<W: RecipientRoster> RosterCache<W> {
    pub fn new(source: W) -> Self {
        RosterCache { source, memo: RosterMemo::default() }
    }

    /// Where the roster is read from.
    pub fn source(&self) -> &W {
        &self.source
    }

    /// The roster as of at most a minute before `now`.
    pub async fn roster(&self, now: DateTime<Utc>) -> PortResult<Roster> {
        self.memo.roster(&self.source, now).await
    }
}
