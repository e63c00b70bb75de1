//! The recipients table, simulated: each number's standing (suppressed with its evidence, or
//! re-enabled and not yet checked against SNS's opt-out list) and its audit trail, written as
//! `shared/src/adapters/registry.rs` writes them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tocsin::domain::PhoneNumber;
use tocsin::domain::chain_policy::{ChainPolicies, ChainPolicy};
use tocsin::domain::roster::{Roster, RosterEntry};
use tocsin::ports::{
    ChainPolicySource, PortResult, RecipientRegistry, RecipientRoster, Standing, Suppression, SuppressionEvidence,
};

use super::ledger::{ms, port};
use crate::exec::{OpKind, Sim};

#[derive(Debug, Clone, Default)]
pub struct Recipient {
    pub suppressed: bool,
    pub since: Option<DateTime<Utc>>,
    pub reason: String,
    pub needs_opt_out_check: bool,
    /// The evidence of the last suppression (log event id).
    pub evidence: Option<String>,
    /// None: kept while suppressed (no TTL).
    pub expires_at: Option<i64>,
    pub history: Vec<(DateTime<Utc>, String)>,
}

#[derive(Default)]
pub struct Registry {
    pub numbers: BTreeMap<String, Recipient>,
    /// The recipients roster (`ROSTER` / `ENTRY#…`).
    pub roster: Vec<RosterEntry>,
    /// The templates' chain policies (`CHAIN_POLICY` / `TEMPLATE#…`).
    pub chain_policies: Vec<ChainPolicy>,
}

impl Registry {
    pub fn standing(&self, p: &PhoneNumber) -> Standing {
        match self.numbers.get(p.expose()) {
            None => Standing::Clear,
            Some(r) if r.suppressed => {
                Standing::Suppressed(Suppression { since: r.since.unwrap_or_default(), reason: r.reason.clone() })
            }
            Some(r) if r.needs_opt_out_check => Standing::ReEnabledUnchecked { opt_in: false },
            Some(_) => Standing::Clear,
        }
    }
}

impl RecipientRoster for SimRegistry {
    async fn roster(&self) -> PortResult<Roster> {
        port(
            self.sim
                .call("DynamoDB Query (roster)", OpKind::Read, |w| {
                    // In the sort key's order, as the query returns them.
                    let mut entries = w.registry.roster.clone();
                    entries.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                    Roster { entries }
                })
                .await,
        )
    }
}

impl ChainPolicySource for SimRegistry {
    async fn chain_policies(&self) -> PortResult<ChainPolicies> {
        port(
            self.sim
                .call("DynamoDB Query (chain policies)", OpKind::Read, |w| {
                    ChainPolicies::new(w.registry.chain_policies.iter().cloned())
                })
                .await,
        )
    }
}

/// The registry as the functions use it.
#[derive(Clone)]
pub struct SimRegistry {
    pub sim: Sim,
}

/// How long the audit trail is kept (the adapter's `HISTORY_RETENTION`).
const HISTORY_DAYS: i64 = 400;

impl RecipientRegistry for SimRegistry {
    async fn suppression(&self, recipient: &PhoneNumber) -> PortResult<Option<Suppression>> {
        Ok(match self.standing(recipient).await? {
            Standing::Suppressed(s) => Some(s),
            _ => None,
        })
    }

    async fn standing(&self, recipient: &PhoneNumber) -> PortResult<Standing> {
        let p = recipient.clone();
        port(self.sim.call("DynamoDB GetItem (registry)", OpKind::Read, move |w| w.registry.standing(&p)).await)
    }

    async fn opt_out_checked(&self, recipient: &PhoneNumber) -> PortResult<()> {
        let p = recipient.clone();
        port(
            self.sim
                .call("DynamoDB UpdateItem (registry)", OpKind::Write, move |w| {
                    if let Some(r) = w.registry.numbers.get_mut(p.expose())
                        && !r.suppressed
                    {
                        r.needs_opt_out_check = false;
                    }
                })
                .await,
        )
    }

    async fn suppress(&self, recipient: &PhoneNumber, evidence: &SuppressionEvidence) -> PortResult<()> {
        let (p, e) = (recipient.clone(), evidence.clone());
        port(
            self.sim
                .call("DynamoDB TransactWriteItems (suppress)", OpKind::TokenWrite, move |w| {
                    let now = w.now;
                    let r = w.registry.numbers.entry(p.expose().to_owned()).or_default();
                    r.suppressed = true;
                    r.since = Some(ms(e.at));
                    r.reason = e.provider_response.clone().unwrap_or_else(|| "permanent delivery failure".into());
                    r.evidence = Some(e.log_event_id.clone());
                    r.expires_at = None;
                    r.history.push((ms(e.at), format!("suppress:{}", e.log_event_id)));
                    w.oracle.suppressed(now, &p, &e);
                })
                .await,
        )
    }

    async fn re_enable(
        &self,
        recipient: &PhoneNumber,
        operator: &str,
        _reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<bool> {
        let (p, op) = (recipient.clone(), operator.to_owned());
        port(
            self.sim
                .call("DynamoDB TransactWriteItems (re-enable)", OpKind::TokenWrite, move |w| {
                    let now = w.now;
                    let Some(r) = w.registry.numbers.get_mut(p.expose()) else { return false };
                    if !r.suppressed {
                        return false;
                    }
                    r.suppressed = false;
                    r.needs_opt_out_check = true;
                    r.expires_at = Some((at + chrono::Duration::days(HISTORY_DAYS)).timestamp());
                    r.history.push((ms(at), format!("re-enable:{op}")));
                    w.oracle.re_enabled(now, &p);
                    true
                })
                .await,
        )
    }
}
