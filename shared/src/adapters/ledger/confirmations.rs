//! `ReplyConfirmations`: one item per phone and UTC hour (`CONFIRMS#<e164>`, `HOUR#<…>`): `n`
//! the confirmations claimed, `ids` the replies they answer. A claim is one conditional
//! `UpdateItem` — the reply not among `ids` and `n` below the cap — so of two copies of one reply
//! one claims, and a phone's hour never passes the cap. When the condition fails, one consistent
//! read tells a copy already claimed from a cap reached.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use super::DynamoLedger;
use super::items::{n, s, unavailable};
use crate::domain::PhoneNumber;
use crate::ports::{ConfirmationClaim, PortResult, ReplyConfirmations};

fn confirms_pk(phone: &PhoneNumber) -> String {
    format!("CONFIRMS#{}", phone.expose())
}

fn hour_sk(arrived: DateTime<Utc>) -> String {
    format!("HOUR#{}", arrived.format("%Y-%m-%dT%H"))
}

impl ReplyConfirmations for DynamoLedger {
    async fn claim_confirmation(
        &self,
        phone: &PhoneNumber,
        inbound: &str,
        arrived: DateTime<Utc>,
        cap: u32,
        expires_at: DateTime<Utc>,
    ) -> PortResult<ConfirmationClaim> {
        let (pk, sk) = (confirms_pk(phone), hour_sk(arrived));
        let claimed = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(pk.clone()))
            .key("sk", s(sk.clone()))
            .update_expression("ADD n :one, ids :ids SET expires_at = :expires")
            .condition_expression("NOT contains(ids, :id) AND (attribute_not_exists(n) OR n < :cap)")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ids", AttributeValue::Ss(vec![inbound.to_owned()]))
            .expression_attribute_values(":id", s(inbound))
            .expression_attribute_values(":cap", n(i64::from(cap)))
            .expression_attribute_values(":expires", n(expires_at.timestamp()))
            .send()
            .await;
        match claimed {
            Ok(_) => Ok(ConfirmationClaim::Claimed),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let item = self.get_item(pk, &sk).await?;
                let copy = item
                    .as_ref()
                    .and_then(|i| i.get("ids"))
                    .and_then(|v| v.as_ss().ok())
                    .is_some_and(|ids| ids.iter().any(|id| id == inbound));
                Ok(if copy { ConfirmationClaim::AlreadyClaimed } else { ConfirmationClaim::Capped })
            }
            Err(e) => Err(unavailable("DynamoDB UpdateItem (claim a reply's confirmation)", &e)),
        }
    }
}
