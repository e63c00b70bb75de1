//! `tocsin list [--state S] [--limit N]`: recent intents, newest first.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tocsin::domain::State;

use super::IntentView;
use crate::context::Context;
use crate::error::CliResult;
use crate::output;
use crate::progress::Spinner;

pub async fn run(ctx: &Context, state: Option<State>, limit: u32) -> CliResult<()> {
    let noun = state.map_or_else(|| "intent".to_owned(), |s| format!("{s} intent"));
    let what = format!("{noun}s");
    let spinner = Spinner::start(format!("scanning {} for {what}…", ctx.names.ledger_table));
    // Only the matching intents come back from the table (a filter on the scan); the progress
    // line counts items read and found.
    let filter = state
        .map(|s| ("#state = :state", HashMap::from([(":state".to_owned(), AttributeValue::S(s.as_str().to_owned()))])));
    let mut records = crate::scan::intents_where(ctx, filter, &what, &spinner).await?;
    spinner.done();
    records.sort_by_key(|r| std::cmp::Reverse(r.intent.created_at));
    records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let views: Vec<IntentView> = records.iter().map(IntentView::from).collect();
    if ctx.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line(format!("no {what} in {}", ctx.names.ledger_table));
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
