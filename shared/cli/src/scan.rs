//! The CLI's own reads of the ledger table: intent items only, page by page, with the counts
//! shown in the progress line (items read so far, matches so far).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tocsin::adapters::dynamodb::record_from_item;
use tocsin::domain::IntentRecord;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::progress::Spinner;

/// Reads every intent item that satisfies `filter` (a DynamoDB filter expression over intent
/// items, with its values), showing `what` and the counts on `spinner`.
pub async fn intents_where(
    ctx: &Context,
    filter: Option<(&str, HashMap<String, AttributeValue>)>,
    what: &str,
    spinner: &Spinner,
) -> CliResult<Vec<IntentRecord>> {
    let table = &ctx.names.ledger_table;
    let (expression, mut values) = match filter {
        Some((f, v)) => (format!("sk = :intent AND ({f})"), v),
        None => ("sk = :intent".to_owned(), HashMap::new()),
    };
    values.insert(":intent".into(), AttributeValue::S("INTENT".into()));
    // `state` is a reserved word in expressions.
    let names = expression.contains("#state").then(|| HashMap::from([("#state".to_owned(), "state".to_owned())]));
    let mut out = Vec::new();
    let mut read: i64 = 0;
    let mut start = None;
    loop {
        let page = ctx
            .dynamodb
            .scan()
            .table_name(table)
            .filter_expression(&expression)
            .set_expression_attribute_names(names.clone())
            .set_expression_attribute_values(Some(values.clone()))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(CliError::aws("DynamoDB Scan"))?;
        read += i64::from(page.scanned_count);
        for item in page.items() {
            out.push(record_from_item(item).map_err(CliError::port(format!("reading {table}")))?);
        }
        spinner.set_message(format!("{what}: {read} items of {table} read, {} found…", out.len()));
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => break,
        }
    }
    Ok(out)
}
