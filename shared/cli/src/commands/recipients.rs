//! `tocsin recipients [allow|remove ENTRY --reason …]`: the recipients roster — the numbers the
//! stack may text under `RecipientPolicy=roster` (the default). An entry is a whole number
//! (`+14155550100`) or a prefix (`+1206555`, a country's calling code such as `+44`). Every change
//! is written with its audit event (who: your AWS identity, why, when) in one transaction; intake
//! reads the roster again at most a minute later. Whole numbers are shown masked unless
//! `--reveal`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::adapters::roster::RosterChange;
use tocsin::domain::roster::RosterEntry;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct EntryView {
    entry: String,
    added_by: String,
    reason: String,
    added_at: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
struct Changed<'a> {
    change: RosterChange,
    entry: String,
    operator: &'a str,
    reason: &'a str,
    at: DateTime<Utc>,
}

fn shown(entry: &str, reveal: bool) -> String {
    match RosterEntry::parse(entry) {
        Ok(e) if !reveal => e.masked(),
        _ => entry.to_owned(),
    }
}

/// Lists the roster, longest entries (the most specific) first.
pub async fn list(ctx: &Context, reveal: bool) -> CliResult<()> {
    let mut all = ctx.registry.roster_entries().await.map_err(CliError::port("reading the recipients roster"))?;
    all.sort_by(|a, b| b.entry.len().cmp(&a.entry.len()).then_with(|| a.entry.cmp(&b.entry)));
    let views: Vec<EntryView> = all
        .into_iter()
        .map(|e| EntryView {
            entry: shown(&e.entry, reveal),
            added_by: e.added_by,
            reason: e.reason,
            added_at: e.added_at,
        })
        .collect();
    if ctx.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line(
            "the roster is empty: under RecipientPolicy=roster intake refuses every alert (tocsin recipients allow …)",
        );
    }
    let mut t = output::table(["entry", "added by", "when", "why"]);
    for v in &views {
        t.add_row([v.entry.clone(), v.added_by.clone(), output::time(v.added_at), v.reason.clone()]);
    }
    output::line(t)?;
    let hint = if reveal { "" } else { " (whole numbers masked; --reveal shows them)" };
    output::line(format!("{}{hint}", output::count(views.len(), "roster entry")))
}

/// Adds (`Allow`) or removes (`Remove`) one entry, audited.
pub async fn change(ctx: &Context, change: RosterChange, raw: &str, reason: &str) -> CliResult<()> {
    let entry = RosterEntry::parse(raw.trim()).map_err(|e| CliError::Usage(e.to_string()))?;
    let operator = ctx.operator().await?;
    let at = Utc::now();
    let shown = entry.masked();
    let changed = match change {
        RosterChange::Allow => ctx.registry.allow(&entry, &operator, reason, at).await,
        RosterChange::Remove => ctx.registry.remove(&entry, &operator, reason, at).await,
    }
    .map_err(CliError::port(format!("changing the roster entry {shown}")))?;
    if !changed {
        return Err(CliError::Refused(match change {
            RosterChange::Allow => format!("{shown} is on the roster already: nothing changed"),
            RosterChange::Remove => format!("{shown} is not on the roster: nothing changed"),
        }));
    }
    if ctx.json {
        return output::json(&Changed { change, entry: shown, operator: &operator, reason, at });
    }
    let what = match change {
        RosterChange::Allow => "allowed",
        RosterChange::Remove => "removed",
    };
    output::line(format!(
        "{shown} {what} by {operator} at {} ({reason}); intake sees it within a minute",
        output::time(at)
    ))
}
