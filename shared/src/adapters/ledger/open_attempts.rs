//! `OpenAttempts`: a recipient's attempts that may have published, for matching an orphaned
//! delivery record — the pending-index's candidates read back from the table. Reads only.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::items::{Item, record_from_item};
use super::{DynamoLedger, ORPHAN_CANDIDATES};
use crate::domain::intent::IntentRecord;
use crate::domain::{PhoneNumber, State};
use crate::ports::{OpenAttempts, PortResult};

impl OpenAttempts for DynamoLedger {
    /// From the pending-index (keys only): the recipient's pending intents whose deadline is not
    /// before `claimed_from` (a claim is never later than its intent's deadline: a stale intent is
    /// escalated, not sent), earliest deadline first, at most [`ORPHAN_CANDIDATES`]; read from the
    /// table, strongly consistent, and kept if they are open attempts claimed in the window.
    async fn open_attempts_to(
        &self,
        recipient: &PhoneNumber,
        claimed_from: DateTime<Utc>,
        claimed_to: DateTime<Utc>,
    ) -> PortResult<Vec<IntentRecord>> {
        let keys: Vec<Item> = self
            .pending_entries(recipient, claimed_from, true, ORPHAN_CANDIDATES)
            .await?
            .into_iter()
            .filter_map(|item| {
                Some(HashMap::from([
                    ("pk".to_owned(), item.get("pk")?.clone()),
                    ("sk".to_owned(), item.get("sk")?.clone()),
                ]))
            })
            .collect();
        let mut open = Vec::new();
        for item in self.batch_get(keys).await? {
            let r = record_from_item(&item)?;
            let in_window = r.status.claimed_at.is_some_and(|c| c >= claimed_from && c <= claimed_to);
            if matches!(r.status.state, State::Sending | State::SendUnknown) && in_window {
                open.push(r);
            }
        }
        Ok(open)
    }
}
