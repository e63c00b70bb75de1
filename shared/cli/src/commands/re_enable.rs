//! `tocsin re-enable <E.164> --reason <text> [--opt-in]`: the audited way back from suppression.
//!
//! The registry is tocsin's; the opt-out list is the SMS provider's ([`OptOutList`]: SNS's, or the
//! stack's End User Messaging list). A number that replied STOP stays on that list whatever the
//! registry says: SNS accepts a publish to it only to fail it later, End User Messaging refuses
//! the send. So the list is asked first: an opted-out number is re-enabled only with `--opt-in`
//! (OptInPhoneNumber or DeleteOptedOutNumber, each allowed once per 30 days per number);
//! otherwise nothing changes and the person must reply START. The re-enabled number carries
//! `needs_opt_out_check`, for the sender to ask the provider again before its first send.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::adapters::registry::RegistryEvent;
use tocsin::domain::PhoneNumber;
use tocsin::ports::RecipientRegistry;

use super::opt_outs::OptOutList;
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct ReEnabled<'a> {
    recipient: String,
    operator: &'a str,
    reason: &'a str,
    at: DateTime<Utc>,
    /// The provider's opt-out list asked: "SNS", or "End User Messaging opt-out list NAME".
    opt_out_list: String,
    /// That list held the number before this command.
    opted_out: bool,
    /// This command took it off the list (OptInPhoneNumber or DeleteOptedOutNumber).
    opted_in: bool,
    history: &'a [RegistryEvent],
}

pub async fn run(ctx: &Context, number: &str, reason: &str, opt_in: bool) -> CliResult<()> {
    let phone = PhoneNumber::parse(number.trim()).map_err(|e| CliError::Usage(format!("the number {e}")))?;
    let masked = phone.masked();
    if ctx.registry.suppression(&phone).await.map_err(CliError::port(format!("reading {masked}")))?.is_none() {
        return Err(CliError::Refused(format!("{masked} is not suppressed: nothing changed")));
    }
    let list = OptOutList::of(ctx)?;
    let opted_out = list.holds(&phone).await?;
    let mut opted_in = false;
    if opted_out {
        if !opt_in {
            return Err(CliError::Refused(format!(
                "{masked} is opted out at {} (the person replied STOP): SMS to it are refused or dropped whatever \
                 tocsin's registry says. The person must reply START to your sending number; or run this again \
                 with --opt-in ({}, allowed once per 30 days per number). Nothing changed",
                list.describe(),
                list.opt_in_call()
            )));
        }
        list.opt_in(&phone).await?;
        opted_in = true;
    }
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
        return output::json(&ReEnabled {
            recipient: masked,
            operator: &operator,
            reason,
            at,
            opt_out_list: list.describe(),
            opted_out,
            opted_in,
            history: &history,
        });
    }
    if opted_in {
        output::line(format!(
            "{masked} was opted out at {} and is opted back in ({}).",
            list.describe(),
            list.opt_in_call()
        ))?;
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
