//! `SpendMeter`: the stack's SMS spend breaker ([`crate::domain::spend`]) as one ledger item,
//! `METER#sms-parts` / `STATE` — `hour_start` (its UTC hour, epoch seconds), `parts` (counted in it),
//! and, while the breaker is open, `opened_at`, `opened_hour_parts`, `opened_refused_parts`.
//! An operator's resume is kept beside it as `EVENT#<at>` (who, why, what it closed; 400 days).
//!
//! A send costs one conditional `UpdateItem` (1 WRU) in the common case: breaker closed, the
//! hour's item, room left. Only the first send of an hour and the one that opens the breaker read
//! the item (consistent) and write again. The item has no TTL: an open breaker must stay open
//! however long nobody looks (it holds no personal data, and there is one).

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use chrono::{DateTime, TimeZone, Utc};

use super::DynamoLedger;
use super::items::{Item, get_s, get_time, get_u32, n, s, ts, unavailable};
use crate::domain::spend::{BreakerEvent, MeterReading, OpenBreaker, Spend, SpendCeiling, hour_of};
use crate::ports::{PortError, PortResult, SpendMeter};

const PK: &str = "METER#sms-parts";
const SK: &str = "STATE";
/// How long a resume's audit event is kept.
const HISTORY_RETENTION: chrono::Duration = chrono::Duration::days(400);
/// Writers racing on the hour's first send or on the opening, then the answer is "unavailable"
/// (the claim is released, the alert tried again): each round one of them wins.
const ROUNDS: usize = 4;

enum Written {
    Done,
    Condition,
}

fn reading(item: Option<&Item>) -> MeterReading {
    let Some(item) = item else { return MeterReading { hour: None, parts: 0, open: None } };
    let hour = item
        .get("hour_start")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .and_then(|secs| Utc.timestamp_opt(secs, 0).single());
    let open = get_time(item, "opened_at").map(|opened_at| OpenBreaker {
        opened_at,
        hour_parts: get_u32(item, "opened_hour_parts"),
        refused_parts: get_u32(item, "opened_refused_parts"),
    });
    MeterReading { hour, parts: get_u32(item, "parts"), open }
}

impl DynamoLedger {
    async fn meter_update(
        &self,
        update: &str,
        condition: &str,
        values: &[(&str, aws_sdk_dynamodb::types::AttributeValue)],
    ) -> PortResult<Written> {
        let mut call = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(PK))
            .key("sk", s(SK))
            .update_expression(update)
            .condition_expression(condition);
        for (name, value) in values {
            call = call.expression_attribute_values(*name, value.clone());
        }
        match call.send().await {
            Ok(_) => Ok(Written::Done),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(Written::Condition)
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (SMS spend meter)", &e)),
        }
    }

    /// The meter as it is now (a consistent read).
    pub async fn spend_meter(&self) -> PortResult<MeterReading> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(PK))
            .key("sk", s(SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB GetItem (SMS spend meter)", &e))?;
        Ok(reading(out.item()))
    }

    /// Closes the open breaker and starts the hour's count again, with its audit event (who, why,
    /// what it closed) in the same transaction. `None`: the breaker was not open (nothing written).
    pub async fn resume_sending(
        &self,
        operator: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> PortResult<Option<BreakerEvent>> {
        let Some(open) = self.spend_meter().await?.open else { return Ok(None) };
        let event = BreakerEvent { at, operator: operator.to_owned(), reason: reason.to_owned(), closed: open };
        let update = Update::builder()
            .table_name(&self.table)
            .key("pk", s(PK))
            .key("sk", s(SK))
            .update_expression(
                "SET hour_start = :hour, parts = :zero REMOVE opened_at, opened_hour_parts, opened_refused_parts",
            )
            .condition_expression("opened_at = :opened")
            .expression_attribute_values(":hour", n(hour_of(at).timestamp()))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":opened", s(ts(event.closed.opened_at)))
            .build()
            .map_err(|e| unavailable("DynamoDB Update builder", &e))?;
        let expires = at.checked_add_signed(HISTORY_RETENTION).unwrap_or(at).timestamp();
        let audit = Put::builder()
            .table_name(&self.table)
            .item("pk", s(PK))
            .item("sk", s(format!("EVENT#{}", ts(at))))
            .item("at", s(ts(at)))
            .item("change", s("resumed"))
            .item("operator", s(operator))
            .item("reason", s(reason))
            .item("opened_at", s(ts(event.closed.opened_at)))
            .item("opened_hour_parts", n(event.closed.hour_parts))
            .item("opened_refused_parts", n(event.closed.refused_parts))
            .item("expires_at", n(expires))
            .build()
            .map_err(|e| unavailable("DynamoDB Put builder", &e))?;
        let res = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(TransactWriteItem::builder().put(audit).build())
            .send()
            .await;
        match res {
            Ok(_) => Ok(Some(event)),
            // Resumed by someone else first (or opened again since the read): nothing written.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(c)
                    if c.cancellation_reasons().first().and_then(|r| r.code()) == Some("ConditionalCheckFailed")) =>
            {
                Ok(None)
            }
            Err(e) => Err(unavailable("DynamoDB TransactWriteItems (resume sending)", &e)),
        }
    }

    /// The operators' resumes, oldest first.
    pub async fn breaker_history(&self) -> PortResult<Vec<BreakerEvent>> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :ev)")
            .expression_attribute_values(":pk", s(PK))
            .expression_attribute_values(":ev", s("EVENT#"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("DynamoDB Query (breaker history)", &e))?;
        out.items()
            .iter()
            .map(|i| {
                let corrupt = |m: &str| PortError::Corrupt { what: format!("{PK} EVENT"), message: m.to_owned() };
                Ok(BreakerEvent {
                    at: get_time(i, "at").ok_or_else(|| corrupt("no `at`"))?,
                    operator: get_s(i, "operator").unwrap_or_default().to_owned(),
                    reason: get_s(i, "reason").unwrap_or_default().to_owned(),
                    closed: OpenBreaker {
                        opened_at: get_time(i, "opened_at").ok_or_else(|| corrupt("no `opened_at`"))?,
                        hour_parts: get_u32(i, "opened_hour_parts"),
                        refused_parts: get_u32(i, "opened_refused_parts"),
                    },
                })
            })
            .collect()
    }
}

impl SpendMeter for DynamoLedger {
    async fn spend(&self, parts: u32, now: DateTime<Utc>, ceiling: SpendCeiling) -> PortResult<Spend> {
        let mut hour = hour_of(now).timestamp();
        for _ in 0..ROUNDS {
            // The common case: breaker closed, this hour's item, room for the parts.
            if let Some(room) = ceiling.parts_per_hour.checked_sub(parts) {
                let counted = self
                    .meter_update(
                        "SET parts = parts + :parts",
                        "attribute_not_exists(opened_at) AND hour_start = :hour AND parts <= :room",
                        &[(":parts", n(parts)), (":hour", n(hour)), (":room", n(room))],
                    )
                    .await;
                if matches!(counted?, Written::Done) {
                    return Ok(Spend::Counted);
                }
            }
            let now_reading = self.spend_meter().await?;
            if let Some(breaker) = now_reading.open {
                return Ok(Spend::Withheld { breaker, opened_here: false });
            }
            let item_hour = now_reading.hour.map(|h| h.timestamp());
            match item_hour {
                // Another instance's clock is ahead: its hour is the meter's.
                Some(h) if h > hour => hour = h,
                // The hour's count would pass the ceiling (or one send is larger than the whole
                // ceiling, which the sender's configuration refuses): open the breaker, count nothing.
                _ if item_hour == Some(hour) || parts > ceiling.parts_per_hour => {
                    let over = now_reading.parts.saturating_add(parts) > ceiling.parts_per_hour;
                    if !over {
                        // Room after all (an operator resumed since the write above): count again.
                        continue;
                    }
                    let breaker = OpenBreaker { opened_at: now, hour_parts: now_reading.parts, refused_parts: parts };
                    let opened = self
                        .meter_update(
                            "SET opened_at = :at, opened_hour_parts = :counted, opened_refused_parts = :parts",
                            "attribute_not_exists(opened_at)",
                            &[(":at", s(ts(now))), (":counted", n(breaker.hour_parts)), (":parts", n(parts))],
                        )
                        .await?;
                    if matches!(opened, Written::Done) {
                        tracing::error!(
                            hour_parts = breaker.hour_parts,
                            refused_parts = parts,
                            ceiling = ceiling.parts_per_hour,
                            "SMS breaker opened: the hour's parts would pass SmsPartsPerHour; nothing is sent until an operator resumes"
                        );
                        return Ok(Spend::Withheld { breaker, opened_here: true });
                    }
                }
                // No count yet, or an earlier hour's: this send starts the hour.
                _ => {
                    let started = self
                        .meter_update(
                            "SET hour_start = :hour, parts = :parts",
                            "attribute_not_exists(opened_at) AND (attribute_not_exists(hour_start) OR hour_start < :hour)",
                            &[(":parts", n(parts)), (":hour", n(hour))],
                        )
                        .await?;
                    if matches!(started, Written::Done) {
                        return Ok(Spend::Counted);
                    }
                }
            }
        }
        Err(PortError::Unavailable {
            operation: "DynamoDB UpdateItem (SMS spend meter)",
            message: format!("still contended after {ROUNDS} rounds"),
        })
    }
}
