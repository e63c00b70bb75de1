//! The open-escalations list (`ESC#<key>` items under `esc#open` in the list-index): read oldest
//! first and closed by an operator's acknowledgement. Written only by a transition that escalates.

use chrono::{DateTime, Utc};

use super::items::{escalation_pk, s, unavailable};
use super::{DynamoLedger, OPEN_ESCALATIONS};
use crate::domain::IdempotencyKey;
use crate::ports::PortResult;

impl DynamoLedger {
    /// Escalations nobody acknowledged yet, oldest first, at most `limit`, from the list-index.
    pub async fn open_escalations(&self, limit: usize) -> PortResult<Vec<(DateTime<Utc>, IdempotencyKey)>> {
        self.list_partition(OPEN_ESCALATIONS.to_owned(), true, limit, None).await
    }
}

impl crate::ports::EscalationBacklog for DynamoLedger {
    async fn oldest_open_escalation(&self) -> PortResult<Option<DateTime<Utc>>> {
        Ok(self.open_escalations(1).await?.into_iter().next().map(|(at, _)| at))
    }

    async fn close_escalation(&self, key: &IdempotencyKey) -> PortResult<()> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(escalation_pk(key)))
            .key("sk", s("ESC"))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB DeleteItem (open escalation)", &e))?;
        Ok(())
    }
}
