//! `tocsin list [--state S] [--limit N] [--days D]`: recent intents, newest first, from the
//! list-index (a Query per creation-day partition, never a table scan): day by day from today
//! back, each intent read from the table (its state is there), until `--limit` match.

use chrono::{Duration, Utc};
use tocsin::domain::State;
use tocsin::ports::IntentStore;

use super::IntentView;
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::progress::Spinner;

pub async fn run(ctx: &Context, state: Option<State>, limit: u32, days: u32) -> CliResult<()> {
    let noun = state.map_or_else(|| "intent".to_owned(), |s| format!("{s} intent"));
    let what = format!("{noun}s");
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let spinner = Spinner::start(format!("reading {}'s list-index for {what}…", ctx.names.ledger_table));
    // Tomorrow too: an intent stamped by a clock slightly ahead of this one.
    let today = (Utc::now() + Duration::days(1)).date_naive();
    let (mut read, mut records) = (0usize, Vec::new());
    'days: for back in 0..=i64::from(days) {
        let day = today - Duration::days(back);
        // Without a state filter the newest `limit` of each partition are enough; with one, the
        // whole day may be needed.
        let each = if state.is_some() { usize::MAX } else { limit };
        let keys = ctx.ledger.created_on(day, each, None).await.map_err(CliError::port("reading the list-index"))?;
        for (_, key) in keys {
            read += 1;
            let record = ctx.ledger.get(&key).await.map_err(CliError::port(format!("reading intent {key}")))?;
            if let Some(r) = record.filter(|r| state.is_none_or(|s| r.status.state == s)) {
                records.push(r);
                if records.len() >= limit {
                    break 'days;
                }
            }
            spinner.set_message(format!("{what}: {read} intents of {day} and after read, {} found…", records.len()));
        }
    }
    spinner.done();
    records.sort_by_key(|r| std::cmp::Reverse(r.intent.created_at));
    records.truncate(limit);
    let views: Vec<IntentView> = records.iter().map(IntentView::from).collect();
    if ctx.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line(format!("no {what} in {} created in the last {days} days", ctx.names.ledger_table));
    }
    let mut t =
        output::table(["created", "key", "event id", "template", "recipient", "state", "attempts", "escalated"]);
    for v in &views {
        t.add_row([
            output::time(v.created_at),
            v.key.clone(),
            v.event_id.clone(),
            v.template.clone(),
            v.recipient.clone(),
            v.state.to_string(),
            v.attempts.to_string(),
            v.escalation.as_ref().map_or_else(|| "—".to_owned(), |e| output::time(e.at)),
        ]);
    }
    output::line(t)?;
    output::line(format!("{}, newest first (at most {limit})", output::count(views.len(), &noun)))
}
