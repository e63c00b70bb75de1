//! `tocsin suppressed [--reveal]`: who must not be sent to, since when and why.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::progress::Spinner;

#[derive(Debug, Serialize)]
struct SuppressedView {
    /// Masked unless `--reveal`.
    recipient: String,
    since: DateTime<Utc>,
    reason: String,
}

pub async fn run(ctx: &Context, reveal: bool) -> CliResult<()> {
    let spinner = Spinner::start(format!("scanning {} for suppressed numbers…", ctx.names.recipients_table));
    let mut all = ctx.registry.suppressed().await.map_err(CliError::port("listing suppressed recipients"))?;
    spinner.done();
    all.sort_by(|a, b| b.1.since.cmp(&a.1.since).then_with(|| a.0.cmp(&b.0)));
    let views: Vec<SuppressedView> = all
        .into_iter()
        .map(|(number, s)| SuppressedView {
            recipient: if reveal { number.expose().to_owned() } else { number.masked() },
            since: s.since,
            reason: s.reason,
        })
        .collect();
    if ctx.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line("no suppressed recipients");
    }
    let mut t = output::table(["recipient", "suppressed since", "reason"]);
    for v in &views {
        t.add_row([v.recipient.clone(), output::time(v.since), v.reason.clone()]);
    }
    output::line(t)?;
    let hint = if reveal { "" } else { " (masked; --reveal shows the numbers)" };
    output::line(format!("{}, most recent first{hint}", output::count(views.len(), "suppressed recipient")))
}
