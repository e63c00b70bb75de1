//! `tocsin re-enable <E.164> --reason <text>`: the audited way back from suppression.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::adapters::registry::RegistryEvent;
use tocsin::domain::PhoneNumber;
use tocsin::ports::RecipientRegistry;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct ReEnabled<'a> {
    recipient: String,
    operator: &'a str,
    reason: &'a str,
    at: DateTime<Utc>,
    history: &'a [RegistryEvent],
}

pub async fn run(ctx: &Context, number: &str, reason: &str) -> CliResult<()> {
    let phone = PhoneNumber::parse(number.trim()).map_err(|e| CliError::Usage(format!("the number {e}")))?;
    let masked = phone.masked();
    let operator = ctx.operator().await?;
    let at = Utc::now();
    let changed = ctx
        .registry
        .re_enable(&phone, &operator, reason, at)
        .await
        .map_err(CliError::port(format!("re-enabling {masked}")))?;
    if !changed {
        return Err(CliError::Refused(format!("{masked} is not suppressed: nothing changed")));
    }
    let history =
        ctx.registry.history(&phone).await.map_err(CliError::port(format!("reading the audit trail of {masked}")))?;
    if ctx.json {
        return output::json(&ReEnabled { recipient: masked, operator: &operator, reason, at, history: &history });
    }
    output::line(format!("{masked} re-enabled by {operator}: alerts to it will be sent again."))?;
    output::line(format!("Audit trail of {masked}, oldest first:"))?;
    output::line(history_table(&history))
}

pub fn history_table(history: &[RegistryEvent]) -> comfy_table::Table {
    let mut t = output::table(["time", "action", "by / evidence", "reason"]);
    for e in history {
        match e {
            RegistryEvent::Suppressed { evidence } => t.add_row([
                output::time(evidence.at),
                "suppressed".to_owned(),
                format!(
                    "delivery log event {} (intent {}…, table {})",
                    evidence.log_event_id,
                    evidence.intent_key.get(..12).unwrap_or(&evidence.intent_key),
                    evidence.table_version
                ),
                output::opt(evidence.provider_response.as_deref()),
            ]),
            RegistryEvent::ReEnabled { operator, reason, at } => {
                t.add_row([output::time(*at), "re-enabled".to_owned(), operator.clone(), reason.clone()])
            }
        };
    }
    t
}
