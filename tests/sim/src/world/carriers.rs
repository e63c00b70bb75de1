//! The carrier view's stores, simulated: each number's last-seen carrier and the operators'
//! carrier holds (recipients table), and the ledger's in-flight index, as
//! `shared/src/adapters/carriers.rs` keeps them, and every application's delivery records
//! tallied per carrier with their baseline.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tocsin::domain::PhoneNumber;
use tocsin::domain::carrier::{CarrierHold, CarrierSeen, SentSms, release_line};
use tocsin::domain::carrier_traffic::{Baseline, CountryTallies, Minute};
use tocsin::ports::PortResult;
use tocsin::ports::carriers::{BaselineSaved, CarrierBook, CarrierHolds, CarrierTraffic, RecentSends, Released};

use super::ledger::{SimLedger, ms, port};
use super::registry::SimRegistry;
use crate::exec::OpKind;

/// The carrier items of the recipients table.
#[derive(Debug, Default)]
pub struct Carriers {
    /// Last-seen carrier by E.164 number.
    pub seen: std::collections::BTreeMap<String, CarrierSeen>,
    /// Holds by carrier (an ended one stays until it is released or expires).
    pub holds: std::collections::BTreeMap<String, CarrierHold>,
    /// The audit trail: (time, carrier, line), in the table's key order.
    pub events: std::collections::BTreeMap<(DateTime<Utc>, String, String), String>,
    /// Every application's delivery records tallied by (minute, carrier): the `TRAFFIC#<hour>`
    /// items.
    pub traffic: CountryTallies,
    /// The traffic baseline item (`CARRIERS`/`TRAFFIC_BASELINE`).
    pub baseline: Option<Baseline>,
}

impl CarrierBook for SimRegistry {
    async fn record_carrier(&self, recipient: &PhoneNumber, seen: &CarrierSeen) -> PortResult<()> {
        let (p, mut seen) = (recipient.expose().to_owned(), seen.clone());
        seen.at = ms(seen.at);
        port(
            self.sim
                .call("DynamoDB UpdateItem (recipient carrier)", OpKind::Write, move |w| {
                    let kept = w.carriers.seen.get(&p);
                    if kept.is_none_or(|k| k.at < seen.at) {
                        w.carriers.seen.insert(p.clone(), seen.clone());
                    }
                })
                .await,
        )
    }

    async fn carriers_of(&self, recipients: &[PhoneNumber]) -> PortResult<HashMap<String, CarrierSeen>> {
        let numbers: Vec<String> = recipients.iter().map(|r| r.expose().to_owned()).collect();
        port(
            self.sim
                .call("DynamoDB BatchGetItem (recipient carriers)", OpKind::Read, move |w| {
                    numbers.iter().filter_map(|n| w.carriers.seen.get(n).map(|c| (n.clone(), c.clone()))).collect()
                })
                .await,
        )
    }
}

impl CarrierHolds for SimRegistry {
    async fn active_holds(&self, at: DateTime<Utc>) -> PortResult<Vec<CarrierHold>> {
        port(
            self.sim
                .call("DynamoDB Query (carrier holds)", OpKind::Read, move |w| {
                    w.carriers.holds.values().filter(|h| h.active_at(at)).cloned().collect()
                })
                .await,
        )
    }

    async fn hold(&self, hold: &CarrierHold) -> PortResult<()> {
        let mut hold = hold.clone();
        hold.since = ms(hold.since);
        hold.until = ms(hold.until);
        port(
            self.sim
                .call("DynamoDB PutItem (carrier hold)", OpKind::Write, move |w| {
                    let line = hold.audit_line();
                    w.carriers.events.insert((hold.since, "hold".into(), hold.carrier.clone()), line);
                    w.carriers.holds.insert(hold.carrier.clone(), hold.clone());
                })
                .await,
        )
    }

    async fn release(&self, carrier: &str, operator: &str, reason: &str, at: DateTime<Utc>) -> PortResult<Released> {
        let (carrier, line, at) = (carrier.to_owned(), release_line(operator, reason, ms(at)), ms(at));
        port(
            self.sim
                .call("DynamoDB DeleteItem (carrier hold)", OpKind::Write, move |w| {
                    match w.carriers.holds.get(&carrier).filter(|h| h.active_at(at)).cloned() {
                        None => Released::NotHeld,
                        Some(hold) => {
                            w.carriers.events.insert((at, "release".into(), carrier.clone()), line.clone());
                            w.carriers.holds.remove(&carrier);
                            Released::Released(hold)
                        }
                    }
                })
                .await,
        )
    }

    async fn hold_history(&self, carrier: &str) -> PortResult<Vec<String>> {
        let carrier = carrier.to_owned();
        port(
            self.sim
                .call("DynamoDB Query (carrier holds)", OpKind::Read, move |w| {
                    w.carriers.events.iter().filter(|((_, _, c), _)| *c == carrier).map(|(_, l)| l.clone()).collect()
                })
                .await,
        )
    }
}

impl CarrierTraffic for SimRegistry {
    /// One write per (minute, carrier, country), as DynamoDB's UpdateItem ADD: each lands or fails on its
    /// own; what landed stays when a later one fails.
    async fn add_tallies(&self, tallies: &CountryTallies) -> PortResult<()> {
        let mut first_error = None;
        for (key, t) in tallies {
            let (key, t) = (key.clone(), *t);
            let r = port(
                self.sim
                    .call("DynamoDB UpdateItem (carrier traffic tally)", OpKind::Write, move |w| {
                        w.carriers.traffic.entry(key.clone()).or_default().add(&t);
                    })
                    .await,
            );
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn tallies(&self, from: Minute, to: Minute) -> PortResult<CountryTallies> {
        port(
            self.sim
                .call("DynamoDB Query (carrier traffic)", OpKind::Read, move |w| {
                    w.carriers
                        .traffic
                        .range(
                            (from, String::new(), String::new())..(to.saturating_add(1), String::new(), String::new()),
                        )
                        .map(|(k, t)| (k.clone(), *t))
                        .collect()
                })
                .await,
        )
    }

    async fn baseline(&self) -> PortResult<Baseline> {
        port(
            self.sim
                .call("DynamoDB GetItem (carrier traffic baseline)", OpKind::Read, move |w| {
                    w.carriers.baseline.clone().unwrap_or_default()
                })
                .await,
        )
    }

    async fn save_baseline(&self, next: &Baseline, read_through: Option<Minute>) -> PortResult<BaselineSaved> {
        let next = next.clone();
        port(
            self.sim
                .call("DynamoDB PutItem (carrier traffic baseline)", OpKind::Write, move |w| {
                    let stored = w.carriers.baseline.as_ref();
                    let matches = match (stored, read_through) {
                        (None, None) => true,
                        (Some(b), Some(t)) => b.through.unwrap_or(Minute::MIN) == t,
                        _ => false,
                    };
                    if matches {
                        w.carriers.baseline = Some(next.clone());
                        BaselineSaved::Saved
                    } else {
                        BaselineSaved::Stale
                    }
                })
                .await,
        )
    }
}

impl RecentSends for SimLedger {
    async fn accepted_since(&self, since: DateTime<Utc>, limit: usize) -> PortResult<Vec<SentSms>> {
        port(
            self.sim
                .call("DynamoDB Query (inflight-index)", OpKind::Read, move |w| {
                    let mut sent: Vec<SentSms> = w
                        .ledger
                        .intents
                        .values()
                        .filter_map(|i| {
                            let s = &i.record.status;
                            let accepted_at = s.accepted_at.filter(|a| *a >= since)?;
                            Some(SentSms {
                                key: i.record.intent.key.clone(),
                                recipient: i.pending_to.clone(),
                                accepted_at,
                                state: s.state,
                                escalated: s.escalation.is_some(),
                            })
                        })
                        .collect();
                    // Newest first, as the index's descending query gives them (ties by key).
                    sent.sort_by(|a, b| b.accepted_at.cmp(&a.accepted_at).then_with(|| a.key.cmp(&b.key)));
                    sent.truncate(limit);
                    sent
                })
                .await,
        )
    }
}
