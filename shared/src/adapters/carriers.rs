//! The carrier view in DynamoDB: each number's last-seen carrier and the operators' carrier
//! holds (recipients table), and the SMS accepted recently (the ledger's `inflight-index`).
//!
//! | item (recipients table) | pk | sk |
//! |---|---|---|
//! | last-seen carrier | `RCPT#<e164>` | `CARRIER` (expires [`CARRIER_RETENTION`] after the record) |
//! | carrier hold | `CARRIERS` | `HOLD#<carrier>` (expires a day after its end) |
//! | hold audit event | `CARRIERS` | `EVENT#<time>#<hold\|release>#<carrier>` |
//! | traffic tally (every application's records, counts only) | `TRAFFIC#<yyyy-mm-ddThh>` | `<yyyy-mm-ddThh:mm>#<carrier>#<country>` (expires [`TALLY_RETENTION`] after its minute) |
//! | traffic baseline | `CARRIERS` | `TRAFFIC_BASELINE` (`through`: the last minute folded; expires [`BASELINE_RETENTION`] after it) |
//!
//! The ledger's intent item carries `inflight_pk`/`inflight_at` (the keys of the sparse
//! `inflight-index`, which projects `state`, `pending_to` and `escalated_at`) from the moment SNS
//! accepts its SMS: written with that state change ([`crate::adapters::dynamodb`]), never
//! removed, so the index holds every SMS accepted, delivered or not, until the intent expires —
//! the sweep reads only the last few hours of it. One partition: its writes follow SNS's SMS rate
//! (20 per second by default), far below what one index partition takes (about 1,000).

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, ReturnValue};
use chrono::{DateTime, Utc};

use super::describe;
use super::ledger::{DynamoLedger, ts};
use super::registry::{DynamoRegistry, HISTORY_RETENTION};
use crate::domain::carrier::{CarrierHold, CarrierSeen, SentSms, release_line};
use crate::domain::carrier_traffic::{Baseline, CountryTallies, Minute, Tally, start_of};
use crate::domain::{IdempotencyKey, PhoneNumber, State};
use crate::ports::carriers::{BaselineSaved, CarrierBook, CarrierHolds, CarrierTraffic, RecentSends, Released};
use crate::ports::{PortError, PortResult};

pub const IN_FLIGHT_INDEX: &str = "inflight-index";
/// The one partition of the in-flight index.
pub const IN_FLIGHT_PARTITION: &str = "inflight";
/// How long a number's last-seen carrier is kept after the record that named it (a number
/// nobody alerts for three months is no longer worth slicing; nothing holds a number forever).
pub const CARRIER_RETENTION: chrono::Duration = chrono::Duration::days(90);
const HOLDS_PK: &str = "CARRIERS";
/// BatchGetItem's limit.
const BATCH_GET: usize = 100;
/// Rounds of BatchGetItem for keys DynamoDB left unprocessed (throttling) before giving up.
const UNPROCESSED_ROUNDS: usize = 5;

type Item = HashMap<String, AttributeValue>;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn get_time(item: &Item, name: &str) -> Option<DateTime<Utc>> {
    get_s(item, name).and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc))
}

fn unavailable<E: std::error::Error>(operation: &'static str, e: &E) -> PortError {
    PortError::Unavailable { operation, message: describe(e) }
}

fn epoch(at: DateTime<Utc>) -> AttributeValue {
    AttributeValue::N(at.timestamp().to_string())
}

fn rcpt_pk(p: &str) -> String {
    format!("RCPT#{p}")
}

impl CarrierBook for DynamoRegistry {
    async fn record_carrier(&self, recipient: &PhoneNumber, seen: &CarrierSeen) -> PortResult<()> {
        let mut req = self
            .client()
            .update_item()
            .table_name(self.table())
            .key("pk", s(rcpt_pk(recipient.expose())))
            .key("sk", s("CARRIER"))
            .condition_expression("attribute_not_exists(seen_at) OR seen_at < :at")
            .expression_attribute_values(":c", s(seen.carrier.as_str()))
            .expression_attribute_values(":at", s(ts(seen.at)))
            .expression_attribute_values(":x", epoch(seen.at.checked_add_signed(CARRIER_RETENTION).unwrap_or(seen.at)));
        // mcc/mnc set when present (an expression cannot both SET and REMOVE one attribute).
        let mut sets = vec!["carrier = :c", "seen_at = :at", "expires_at = :x"];
        let mut removes = Vec::new();
        for (name, value, placeholder) in [("mcc", &seen.mcc, ":mcc"), ("mnc", &seen.mnc, ":mnc")] {
            match value {
                Some(v) => {
                    req = req.expression_attribute_values(placeholder, s(v.as_str()));
                    sets.push(if name == "mcc" { "mcc = :mcc" } else { "mnc = :mnc" });
                }
                None => removes.push(name),
            }
        }
        let mut expr = format!("SET {}", sets.join(", "));
        if !removes.is_empty() {
            expr.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        match req.update_expression(expr).send().await {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(unavailable("DynamoDB UpdateItem (recipient carrier)", &e)),
        }
    }

    async fn carriers_of(&self, recipients: &[PhoneNumber]) -> PortResult<HashMap<String, CarrierSeen>> {
        let mut numbers: Vec<&str> = recipients.iter().map(PhoneNumber::expose).collect();
        numbers.sort_unstable();
        numbers.dedup();
        let mut out = HashMap::new();
        for chunk in numbers.chunks(BATCH_GET) {
            let mut keys: Vec<Item> =
                chunk.iter().map(|n| Item::from([("pk".into(), s(rcpt_pk(n))), ("sk".into(), s("CARRIER"))])).collect();
            for _ in 0..UNPROCESSED_ROUNDS {
                if keys.is_empty() {
                    break;
                }
                let ka = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut keys)))
                    .projection_expression("pk, carrier, mcc, mnc, seen_at")
                    .consistent_read(true)
                    .build()
                    .map_err(|e| unavailable("DynamoDB BatchGetItem (recipient carriers)", &e))?;
                let resp = self
                    .client()
                    .batch_get_item()
                    .request_items(self.table(), ka)
                    .send()
                    .await
                    .map_err(|e| unavailable("DynamoDB BatchGetItem (recipient carriers)", &e))?;
                for item in resp.responses().and_then(|r| r.get(self.table())).into_iter().flatten() {
                    let (Some(pk), Some(carrier), Some(at)) =
                        (get_s(item, "pk"), get_s(item, "carrier"), get_time(item, "seen_at"))
                    else {
                        continue;
                    };
                    let Some(number) = pk.strip_prefix("RCPT#") else { continue };
                    out.insert(
                        number.to_owned(),
                        CarrierSeen {
                            carrier: carrier.to_owned(),
                            mcc: get_s(item, "mcc").map(str::to_owned),
                            mnc: get_s(item, "mnc").map(str::to_owned),
                            at,
                        },
                    );
                }
                keys = resp
                    .unprocessed_keys()
                    .and_then(|u| u.get(self.table()))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
            }
            if !keys.is_empty() {
                return Err(PortError::Unavailable {
                    operation: "DynamoDB BatchGetItem (recipient carriers)",
                    message: format!("{} keys still unprocessed after {UNPROCESSED_ROUNDS} rounds", keys.len()),
                });
            }
        }
        Ok(out)
    }
}

fn hold_of(item: &Item) -> PortResult<CarrierHold> {
    let raw = get_s(item, "hold")
        .ok_or_else(|| PortError::Corrupt { what: "carrier hold".into(), message: "no `hold` attribute".into() })?;
    serde_json::from_str(raw).map_err(|e| PortError::Corrupt { what: "carrier hold".into(), message: e.to_string() })
}

impl DynamoRegistry {
    async fn holds_query(&self, prefix: &str) -> PortResult<Vec<Item>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let resp = self
                .client()
                .query()
                .table_name(self.table())
                .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
                .consistent_read(true)
                .expression_attribute_values(":pk", s(HOLDS_PK))
                .expression_attribute_values(":p", s(prefix))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB Query (carrier holds)", &e))?;
            out.extend(resp.items().iter().cloned());
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(out),
            }
        }
    }

    async fn audit(&self, at: DateTime<Utc>, action: &str, carrier: &str, line: String) -> PortResult<()> {
        self.client()
            .put_item()
            .table_name(self.table())
            .item("pk", s(HOLDS_PK))
            .item("sk", s(format!("EVENT#{}#{action}#{carrier}", ts(at))))
            .item("carrier", s(carrier))
            .item("event", s(line))
            .item("expires_at", epoch(at.checked_add_signed(HISTORY_RETENTION).unwrap_or(at)))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB PutItem (carrier hold audit)", &e))?;
        Ok(())
    }
}

impl CarrierHolds for DynamoRegistry {
    async fn active_holds(&self, at: DateTime<Utc>) -> PortResult<Vec<CarrierHold>> {
        let mut holds = Vec::new();
        for item in self.holds_query("HOLD#").await? {
            let hold = hold_of(&item)?;
            if hold.active_at(at) {
                holds.push(hold);
            }
        }
        Ok(holds)
    }

    async fn hold(&self, hold: &CarrierHold) -> PortResult<()> {
        let json = serde_json::to_string(hold)
            .map_err(|e| PortError::Corrupt { what: "carrier hold".into(), message: e.to_string() })?;
        // The audit line first: a hold in force always has its "who and why" recorded.
        self.audit(hold.since, "hold", &hold.carrier, hold.audit_line()).await?;
        self.client()
            .put_item()
            .table_name(self.table())
            .item("pk", s(HOLDS_PK))
            .item("sk", s(format!("HOLD#{}", hold.carrier)))
            .item("hold", s(json))
            .item("expires_at", epoch(hold.until + chrono::Duration::days(1)))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB PutItem (carrier hold)", &e))?;
        Ok(())
    }

    async fn release(&self, carrier: &str, operator: &str, reason: &str, at: DateTime<Utc>) -> PortResult<Released> {
        let current = self
            .client()
            .get_item()
            .table_name(self.table())
            .key("pk", s(HOLDS_PK))
            .key("sk", s(format!("HOLD#{carrier}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB GetItem (carrier hold)", &e))?;
        let Some(hold) = current.item().map(hold_of).transpose()?.filter(|h| h.active_at(at)) else {
            return Ok(Released::NotHeld);
        };
        self.audit(at, "release", carrier, release_line(operator, reason, at)).await?;
        self.client()
            .delete_item()
            .table_name(self.table())
            .key("pk", s(HOLDS_PK))
            .key("sk", s(format!("HOLD#{carrier}")))
            .return_values(ReturnValue::None)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB DeleteItem (carrier hold)", &e))?;
        Ok(Released::Released(hold))
    }

    async fn hold_history(&self, carrier: &str) -> PortResult<Vec<String>> {
        Ok(self
            .holds_query("EVENT#")
            .await?
            .iter()
            .filter(|i| get_s(i, "carrier") == Some(carrier))
            .filter_map(|i| get_s(i, "event").map(str::to_owned))
            .collect())
    }
}

impl RecentSends for DynamoLedger {
    async fn accepted_since(&self, since: DateTime<Utc>, limit: usize) -> PortResult<Vec<SentSms>> {
        let corrupt = |m: String| PortError::Corrupt { what: format!("{IN_FLIGHT_INDEX} entry"), message: m };
        let mut out = Vec::new();
        let mut start = None;
        while out.len() < limit {
            let resp = self
                .client()
                .query()
                .table_name(self.table())
                .index_name(IN_FLIGHT_INDEX)
                .key_condition_expression("inflight_pk = :p AND inflight_at >= :since")
                .expression_attribute_values(":p", s(IN_FLIGHT_PARTITION))
                .expression_attribute_values(":since", s(ts(since)))
                .scan_index_forward(false)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| unavailable("DynamoDB Query (inflight-index)", &e))?;
            for item in resp.items() {
                let pk = get_s(item, "pk").ok_or_else(|| corrupt("no pk".into()))?;
                let key = pk
                    .strip_prefix("INTENT#")
                    .and_then(|k| IdempotencyKey::parse(k).ok())
                    .ok_or_else(|| corrupt(format!("pk {pk}")))?;
                let recipient = get_s(item, "pending_to")
                    .and_then(|r| PhoneNumber::parse(r).ok())
                    .ok_or_else(|| corrupt(format!("{}: no recipient", key.short())))?;
                let state: State = get_s(item, "state")
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| corrupt(format!("{}: no state", key.short())))?;
                let accepted_at =
                    get_time(item, "inflight_at").ok_or_else(|| corrupt(format!("{}: no time", key.short())))?;
                out.push(SentSms { key, recipient, accepted_at, state, escalated: item.contains_key("escalated_at") });
            }
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        out.truncate(limit);
        Ok(out)
    }
}

/// The traffic baseline's item (in the holds' partition, its own sort key).
const BASELINE_SK: &str = "TRAFFIC_BASELINE";
/// How long a minute's tallies are kept: the sweep reads the last hour at most; a day leaves
/// room for an operator's look the same day. Counts only, no number: nothing personal expires.
pub const TALLY_RETENTION: chrono::Duration = chrono::Duration::days(1);
/// How long the baseline outlives its last save (a stack whose sweep stopped for a week starts
/// a fresh one).
pub const BASELINE_RETENTION: chrono::Duration = chrono::Duration::days(7);
/// Tally writes in flight at once.
const TALLY_CONCURRENCY: usize = 8;

/// The hour partition of a minute's tallies: `TRAFFIC#2026-09-23T12`.
fn tally_pk(minute: Minute) -> String {
    format!("TRAFFIC#{}", start_of(minute).format("%Y-%m-%dT%H"))
}

/// `2026-09-23T12:04`: sorts as time within its hour partition.
fn minute_stamp(minute: Minute) -> String {
    start_of(minute).format("%Y-%m-%dT%H:%M").to_string()
}

fn get_n(item: &Item, name: &str) -> Option<u64> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok())
}

impl DynamoRegistry {
    async fn add_tally(&self, minute: Minute, carrier: &str, country: &str, t: &Tally) -> PortResult<()> {
        let n = |v: u64| AttributeValue::N(v.to_string());
        self.client()
            .update_item()
            .table_name(self.table())
            .key("pk", s(tally_pk(minute)))
            // The country last: it never holds a `#` (ISO code, MCC or "unknown"), the carrier may.
            .key("sk", s(format!("{}#{carrier}#{country}", minute_stamp(minute))))
            // Names, not words: several are DynamoDB reserved words (`minute`, `records`).
            .update_expression(
                "ADD #r :r, #d :d, #f :f, #s :s, #w :w, #sw :sw, #o :o, #os :os SET #c = :c, #k = :k, #m = :m, #x = :x",
            )
            .expression_attribute_names("#r", "records")
            .expression_attribute_names("#d", "delivered")
            .expression_attribute_names("#f", "failed")
            .expression_attribute_names("#s", "slow")
            .expression_attribute_names("#w", "dwell_ms")
            .expression_attribute_names("#sw", "slow_dwell_ms")
            .expression_attribute_names("#o", "tocsin")
            .expression_attribute_names("#os", "tocsin_slow")
            .expression_attribute_names("#c", "carrier")
            .expression_attribute_names("#k", "country")
            .expression_attribute_names("#m", "minute")
            .expression_attribute_names("#x", "expires_at")
            .expression_attribute_values(":r", n(t.records))
            .expression_attribute_values(":d", n(t.delivered))
            .expression_attribute_values(":f", n(t.failed))
            .expression_attribute_values(":s", n(t.slow))
            .expression_attribute_values(":w", n(t.dwell_ms))
            .expression_attribute_values(":sw", n(t.slow_dwell_ms))
            .expression_attribute_values(":o", n(t.tocsin))
            .expression_attribute_values(":os", n(t.tocsin_slow))
            .expression_attribute_values(":c", s(carrier))
            .expression_attribute_values(":k", s(country))
            .expression_attribute_values(":m", AttributeValue::N(minute.to_string()))
            .expression_attribute_values(":x", epoch(start_of(minute) + TALLY_RETENTION))
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB UpdateItem (carrier traffic tally)", &e))?;
        Ok(())
    }
}

impl CarrierTraffic for DynamoRegistry {
    async fn add_tallies(&self, tallies: &CountryTallies) -> PortResult<()> {
        use futures::StreamExt;
        let writes: Vec<_> = tallies
            .iter()
            .map(|((minute, carrier, country), t)| {
                let (minute, t) = (*minute, *t);
                async move { self.add_tally(minute, carrier, country, &t).await }
            })
            .collect();
        let results: Vec<PortResult<()>> =
            futures::stream::iter(writes).buffer_unordered(TALLY_CONCURRENCY).collect().await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        match results.into_iter().find_map(Result::err) {
            None => Ok(()),
            Some(PortError::Unavailable { operation, message }) => Err(PortError::Unavailable {
                operation,
                message: format!("{failed} of {} tallies not added: {message}", tallies.len()),
            }),
            Some(e) => Err(e),
        }
    }

    async fn tallies(&self, from: Minute, to: Minute) -> PortResult<CountryTallies> {
        let mut out = CountryTallies::new();
        let mut hour_first = from;
        while hour_first <= to {
            // The minutes of this hour partition within from..=to.
            let hour_last = (hour_first.div_euclid(60) * 60 + 59).min(to);
            let mut start = None;
            loop {
                let resp = self
                    .client()
                    .query()
                    .table_name(self.table())
                    .key_condition_expression("pk = :pk AND sk BETWEEN :a AND :b")
                    .consistent_read(true)
                    .expression_attribute_values(":pk", s(tally_pk(hour_first)))
                    .expression_attribute_values(":a", s(minute_stamp(hour_first)))
                    // '$' sorts right after '#': every carrier of the last minute.
                    .expression_attribute_values(":b", s(format!("{}$", minute_stamp(hour_last))))
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|e| unavailable("DynamoDB Query (carrier traffic)", &e))?;
                for item in resp.items() {
                    let (Some(carrier), Some(minute)) =
                        (get_s(item, "carrier"), get_s_or_n(item, "minute").and_then(|m| m.parse::<Minute>().ok()))
                    else {
                        return Err(PortError::Corrupt {
                            what: "carrier traffic tally".into(),
                            message: format!("no carrier or minute in {:?}", get_s(item, "sk")),
                        });
                    };
                    let t = Tally {
                        records: get_n(item, "records").unwrap_or(0),
                        delivered: get_n(item, "delivered").unwrap_or(0),
                        failed: get_n(item, "failed").unwrap_or(0),
                        slow: get_n(item, "slow").unwrap_or(0),
                        dwell_ms: get_n(item, "dwell_ms").unwrap_or(0),
                        slow_dwell_ms: get_n(item, "slow_dwell_ms").unwrap_or(0),
                        // Tallies written before tocsin's own were counted apart have none.
                        tocsin: get_n(item, "tocsin").unwrap_or(0),
                        tocsin_slow: get_n(item, "tocsin_slow").unwrap_or(0),
                    };
                    // Tallies written before countries were kept have none.
                    let country = get_s(item, "country").unwrap_or(crate::domain::carrier::UNKNOWN);
                    out.entry((minute, carrier.to_owned(), country.to_owned())).or_default().add(&t);
                }
                match resp.last_evaluated_key() {
                    Some(k) if !k.is_empty() => start = Some(k.clone()),
                    _ => break,
                }
            }
            hour_first = hour_last + 1;
        }
        Ok(out)
    }

    async fn baseline(&self) -> PortResult<Baseline> {
        let resp = self
            .client()
            .get_item()
            .table_name(self.table())
            .key("pk", s(HOLDS_PK))
            .key("sk", s(BASELINE_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB GetItem (carrier traffic baseline)", &e))?;
        let Some(item) = resp.item() else { return Ok(Baseline::default()) };
        let raw = get_s(item, "baseline").ok_or_else(|| PortError::Corrupt {
            what: "carrier traffic baseline".into(),
            message: "no `baseline` attribute".into(),
        })?;
        serde_json::from_str(raw)
            .map_err(|e| PortError::Corrupt { what: "carrier traffic baseline".into(), message: e.to_string() })
    }

    async fn save_baseline(&self, next: &Baseline, read_through: Option<Minute>) -> PortResult<BaselineSaved> {
        let json = serde_json::to_string(next)
            .map_err(|e| PortError::Corrupt { what: "carrier traffic baseline".into(), message: e.to_string() })?;
        let through = next.through.map_or(Minute::MIN, |t| t);
        let mut req = self
            .client()
            .put_item()
            .table_name(self.table())
            .item("pk", s(HOLDS_PK))
            .item("sk", s(BASELINE_SK))
            .item("baseline", s(json))
            .item("through", AttributeValue::N(through.to_string()))
            .item("expires_at", epoch(start_of(through) + BASELINE_RETENTION));
        req = match read_through {
            None => req.condition_expression("attribute_not_exists(pk)"),
            Some(t) => req
                .condition_expression("#t = :t")
                .expression_attribute_names("#t", "through")
                .expression_attribute_values(":t", AttributeValue::N(t.to_string())),
        };
        match req.send().await {
            Ok(_) => Ok(BaselineSaved::Saved),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(BaselineSaved::Stale)
            }
            Err(e) => Err(unavailable("DynamoDB PutItem (carrier traffic baseline)", &e)),
        }
    }
}

/// A string or number attribute as text.
fn get_s_or_n<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok().or_else(|| v.as_n().ok())).map(String::as_str)
}
