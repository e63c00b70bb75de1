//! Storm mode: claims grouped by recipient, each group planned against the budget (stale settled,
//! held handed back, one send alone or as a digest). Publishes only through `alone` and `digests`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::claiming::{Claim, Claimed, Via};
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::IdempotencyKey;
use tocsin::domain::storm::{self, PendingAlert};
use tocsin::ports::{RecipientRegistry, RecipientRoster, SmsGateway, Standing};
use tocsin::telemetry::Metrics;

/// Where a storm-mode send's outcome goes: a record of the batch, or a pulled intent (whose own
/// queue message, delivered later, finds it sent and does nothing).
pub(crate) type Slot = Option<usize>;

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Storm mode: every record claimed first, then one send per recipient — the intent alone, or
    /// one digest of all the recipient's intents claimed here. Outcomes in the records' order.
    pub(crate) async fn handle_storm(&self, records: &[Via<'_>], deadline: DateTime<Utc>) -> Vec<Outcome> {
        let claims = futures::future::join_all(records.iter().map(|(m, lane)| self.claim_message(m, *lane))).await;
        let mut outcomes: Vec<Option<Outcome>> = vec![None; records.len()];
        let mut by_recipient: BTreeMap<String, Vec<(Slot, Claimed<'_>)>> = BTreeMap::new();
        for (i, claim) in claims.into_iter().enumerate() {
            match claim {
                Claim::Done(outcome) => outcomes[i] = Some(outcome),
                Claim::Held(c) => {
                    by_recipient.entry(c.record.intent.recipient.expose().to_owned()).or_default().push((Some(i), *c))
                }
            }
        }
        // Earliest deadline first: the group with the earliest deadline is started first (and so
        // reaches the rate limiter first).
        let mut groups: Vec<_> = by_recipient.into_values().collect();
        groups.sort_by_key(|g| g.iter().map(|(_, c)| c.record.intent.deadline).min());
        // Each group's future boxed: side by side they would otherwise sit in one frame together.
        let sent =
            futures::future::join_all(groups.into_iter().map(|group| Box::pin(self.send_group(group, deadline))));
        let mut pulled = Metrics::new("sender");
        for (slot, outcome) in sent.await.into_iter().flatten() {
            match slot {
                Some(i) => outcomes[i] = Some(outcome),
                // A pulled intent has no record in this batch: counted apart, by how it ended.
                None => pulled.count(
                    if matches!(outcome, Outcome::Published { .. }) { "pulled_sent" } else { "pulled_other" },
                    1,
                ),
            }
        }
        pulled.flush();
        outcomes.into_iter().map(|o| o.unwrap_or(Outcome::Retry)).collect()
    }

    /// Storm mode: one recipient's claimed intents (the batch's and those pulled from the backlog).
    /// Stale ones are settled as stale and a suppressed number settles them all; the rest are
    /// planned against the recipient's send log (`storm::plan`): one SMS — the alert alone, or a
    /// digest of all of them — or, with the budget used up and no deadline at stake, none (each
    /// handed back until the budget frees). Appending the send to the log, conditioned on the log
    /// read, comes before the publish: of two senders for the same person, one sends.
    pub(crate) async fn send_group(
        &self,
        group: Vec<(Slot, Claimed<'_>)>,
        deadline: DateTime<Utc>,
    ) -> Vec<(Slot, Outcome)> {
        let now = self.clock.now();
        let Some(recipient) = group.first().map(|(_, c)| c.record.intent.recipient.clone()) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(group.len());
        let (stale, mut live): (Vec<_>, Vec<_>) = group.into_iter().partition(|(_, c)| now >= c.record.intent.deadline);
        for (i, c) in &stale {
            out.push((*i, self.stale(c, now).await));
        }
        if live.is_empty() {
            return out;
        }
        match self.standing(&recipient, now).await {
            Ok(Standing::Suppressed(s)) => {
                for (i, c) in &live {
                    out.push((*i, self.suppressed(c, s.clone(), now).await));
                }
                return out;
            }
            Ok(Standing::Clear | Standing::ReEnabledUnchecked { .. }) => {}
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "registry or opt-out check unavailable; releasing the claims");
                out.extend(self.release_each(&live, &e.to_string(), now).await);
                return out;
            }
        }
        let log = match self.store.send_log(&recipient).await {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "send log unavailable; releasing the claims");
                out.extend(self.release_each(&live, &e.to_string(), now).await);
                return out;
            }
        };
        // The rest of the person's backlog joins the plan — unless the budget would only hand it
        // back (used up, no deadline at stake, as the index's deadlines already tell): then it is
        // not claimed at all, and only what this batch holds is handed back.
        let backlog = self.backlog_of(&recipient, &live, now).await;
        let deadlines = live.iter().map(|(_, c)| c.record.intent.deadline).chain(backlog.iter().map(|(_, d)| *d));
        if storm::holds_all_until(now, &log.sent, deadlines, &self.config.storm).is_none() {
            self.claim_backlog(&mut live, backlog, now).await;
        }
        let alerts: Vec<PendingAlert> = live.iter().map(|(_, c)| PendingAlert::from_intent(&c.record.intent)).collect();
        let plan = match storm::plan(now, &log.sent, &alerts, &self.config.storm) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(recipient = %recipient.masked(), error = %e, "storm plan refused; releasing the claims");
                out.extend(self.release_each(&live, &e.to_string(), now).await);
                return out;
            }
        };
        let claimed = |key: &IdempotencyKey| live.iter().find(|(_, c)| &c.record.intent.key == key);
        for key in &plan.stale {
            if let Some((i, c)) = claimed(key) {
                out.push((*i, self.stale(c, now).await));
            }
        }
        for held in &plan.held {
            if let Some((i, c)) = claimed(&held.key) {
                let until = match held.reason {
                    storm::HoldReason::BudgetExhausted { until } => until,
                    storm::HoldReason::DigestFull => now,
                };
                let wait = until.signed_duration_since(now).to_std().unwrap_or_default();
                out.push((*i, self.hand_back(&c.record, &c.attempt_id, held.reason.to_string(), wait, c.msg).await));
            }
        }
        let Some(send) = plan.sends.into_iter().next() else { return out };
        let keys = send.keys().into_iter().cloned().collect::<Vec<_>>();
        let members: Vec<&(Slot, Claimed<'_>)> = keys.iter().filter_map(claimed).collect();
        if let Err(back) = self.spend_budget(&recipient, &log, &members, now).await {
            out.extend(back);
            return out;
        }
        if plan.over_budget {
            tracing::info!(recipient = %recipient.masked(), members = members.len(), "sent over the recipient's budget: holding would miss a deadline");
            let mut m = Metrics::new("sender");
            m.count("over_budget", 1);
            m.flush();
        }
        match send {
            storm::Send::Alone { .. } => {
                for (i, c) in members {
                    let outcome = self.publish_alone(c, deadline).await;
                    self.log_attempt(c, &outcome, None);
                    out.push((*i, outcome));
                }
            }
            storm::Send::Digest(digest) => {
                out.extend(self.send_digest(&recipient, &members, digest, now, deadline).await)
            }
        }
        out
    }
}
