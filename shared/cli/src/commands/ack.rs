//! `tocsin ack KEY`: "I have this alert." Records who (your AWS identity), how (`operator`) and
//! when on the intent, once: from then on the sweep never escalates it. For alerts that have not
//! been escalated yet — under SNS, or from a sender ID, the only way to acknowledge (neither can
//! receive a reply). An escalation already sent stays sent: `tocsin escalations ack` is what
//! acknowledges an escalation (it closes the open escalation the age alarm reads).
//!
//! An alert acknowledged before (by a reply, or another operator) keeps that acknowledgement; the
//! command says whose it is and records nothing.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::domain::acknowledgement::AckVia;
use tocsin::services::acknowledging::{AlertAck, AlertAckError, acknowledge_alert};

use super::resolve_key;
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct AckDocument<'a> {
    key: String,
    by: &'a str,
    via: &'static str,
    at: DateTime<Utc>,
    /// Whether this command recorded it (false: an earlier acknowledgement stands).
    recorded: bool,
}

pub async fn run(ctx: &Context, raw_key: &str) -> CliResult<()> {
    let key = resolve_key(ctx, raw_key).await?;
    let operator = ctx.operator().await?;
    let request = uuid::Uuid::new_v4().to_string();
    let got =
        acknowledge_alert(&ctx.ledger, &key, &operator, AckVia::Operator, &request, Utc::now()).await.map_err(|e| {
            match e {
                AlertAckError::Missing(k) => CliError::NotFound(k.to_string()),
                AlertAckError::Port { what, error } => CliError::port(what.to_owned())(error),
            }
        })?;
    let (ack, recorded) = match &got {
        AlertAck::Now(a) => (a, true),
        AlertAck::Before(a) => (a, false),
    };
    if ctx.json {
        return output::json(&AckDocument {
            key: key.to_string(),
            by: &ack.by,
            via: ack.via.as_str(),
            at: ack.at,
            recorded,
        });
    }
    if recorded {
        output::line(format!("{key} acknowledged by {} at {}: it will not be escalated.", ack.by, output::time(ack.at)))
    } else {
        output::line(format!(
            "{key} was already acknowledged by {} ({}) at {}; nothing new recorded.",
            ack.by,
            ack.via.as_str(),
            output::time(ack.at)
        ))
    }
}
