//! `tocsin re-enable <E.164> --reason <text> [--opt-in]`: the audited way back from suppression.
//!
//! The registry is tocsin's; the opt-out list is the SMS provider's ([`OptOutList`]: SNS's, or the
//! stack's End User Messaging list). A number that replied STOP stays on that list whatever the
//! registry says: SNS accepts a publish to it only to fail it later, End User Messaging refuses
//! the send. So the list is asked first: an opted-out number is re-enabled only with `--opt-in`;
//! otherwise nothing changes and the person must reply START. The re-enabled number carries
//! `needs_opt_out_check`, for the sender to ask the provider again before its first send, and with
//! `--opt-in` the request to opt it back in, recorded in the same audited write: the **sender**
//! then calls OptInPhoneNumber or DeleteOptedOutNumber (each allowed once per 30 days per
//! number) before that send. No operator role may call either API: taking a person's STOP back
//! happens only through this audited path.

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
    /// Recorded with the re-enable: the sender opts the number back in (OptInPhoneNumber or
    /// DeleteOptedOutNumber) before its next SMS to it.
    opt_in_requested: bool,
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
    if opted_out && !opt_in {
        return Err(CliError::Refused(format!(
            "{masked} is opted out at {} (the person replied STOP): SMS to it are refused or dropped whatever \
             tocsin's registry says. The person must reply START to your sending number; or run this again \
             with --opt-in (the sender then calls {}, allowed once per 30 days per number). Nothing changed",
            list.describe(),
            list.opt_in_call()
        )));
    }
    // Asked for only where it is needed: a number not on the list keeps the once-in-30-days opt-in.
    let opt_in_requested = opted_out && opt_in;
    let operator = ctx.operator().await?;
    let at = Utc::now();
    let changed = if opt_in_requested {
        ctx.registry.re_enable_opting_in(&phone, &operator, reason, at).await
    } else {
        ctx.registry.re_enable(&phone, &operator, reason, at).await
    }
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
            opt_in_requested,
            history: &history,
        });
    }
    if opt_in_requested {
        output::line(format!(
            "{masked} is opted out at {}: the sender opts it back in ({}) before its next SMS to it. AWS allows \
             that once per 30 days per number; if the provider refuses, that alert is not sent and is escalated, \
             and the person must reply START.",
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
            RegistryEvent::ReEnabled { operator, reason, at, opt_in } => t.add_row([
                output::time(*at),
                if *opt_in { "re-enabled, opt-in asked" } else { "re-enabled" }.to_owned(),
                operator.clone(),
                reason.clone(),
            ]),
        };
    }
    t
}
