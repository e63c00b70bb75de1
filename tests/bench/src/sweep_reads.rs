//! Measurement 5: what the escalation sweep reads as the ledger grows: 20 due intents (accepted,
//! never delivered, past their deadline) next to 1k, 10k and 50k delivered intents, the approach of
//! `tests/tests/escalation.rs` (delivered intents written straight into the ledger with
//! BatchWriteItem; DynamoDB reads counted with the emulator's recorder during one sweep).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use tocsin_tests::{Pipeline, alert, key_of};

use crate::{BenchError, Result};

pub const DUE: usize = 20;

#[derive(Debug, Clone)]
pub struct SweepReads {
    pub delivered: usize,
    /// Intents the sweep read (its own count).
    pub items_read: usize,
    pub escalated: usize,
    /// DynamoDB read operations (Query/Scan/GetItem/BatchGetItem) → calls during the sweep.
    pub read_calls: BTreeMap<String, usize>,
    /// Of the Queries: those on the `due-index` (one or more per due partition), and the others
    /// (one observations Query per due intent).
    pub index_queries: usize,
    pub other_queries: usize,
    pub seeding: Duration,
    pub sweep: Duration,
}

async fn due_intents(p: &Pipeline, n: usize) -> Result<()> {
    for i in 0..n {
        let (code, body) = p.submit(&alert(&format!("sweep-{i}"), &format!("+1415555{:04}", 4000 + i))).await;
        if code != 201 {
            return Err(BenchError::Process(format!("intake answered {code}: {body}")));
        }
        let _ = key_of(&body);
    }
    p.run_sender().await;
    Ok(())
}

/// `n` delivered intents written straight into the ledger (they never enter the due index).
async fn seed_delivered(p: &Pipeline, n: usize) -> Result<()> {
    let ddb = aws_sdk_dynamodb::Client::new(&p.emulator.sdk_config().await);
    let table = p.stack.table("LedgerTable").to_owned();
    let filler = "x".repeat(400);
    let mut batch = Vec::with_capacity(25);
    for i in 0..n {
        let item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S(format!("INTENT#{i:064}"))),
            ("sk".to_owned(), AttributeValue::S("INTENT".into())),
            ("state".to_owned(), AttributeValue::S("delivered".into())),
            ("intent".to_owned(), AttributeValue::S(filler.clone())),
        ]);
        let put = PutRequest::builder()
            .set_item(Some(item))
            .build()
            .map_err(|e| BenchError::Aws("PutRequest", e.to_string()))?;
        batch.push(WriteRequest::builder().put_request(put).build());
        if batch.len() == 25 || i + 1 == n {
            ddb.batch_write_item()
                .request_items(&table, std::mem::take(&mut batch))
                .send()
                .await
                .map_err(|e| BenchError::Aws("BatchWriteItem", e.to_string()))?;
        }
    }
    Ok(())
}

fn is_read(op: &str) -> bool {
    op.starts_with("DynamoDB_20120810.") && (op.ends_with("Query") || op.ends_with("Scan") || op.ends_with("GetItem"))
}

/// One table size: a fresh pipeline, 20 due intents, `delivered` delivered ones, one sweep.
pub async fn measure_one(delivered: usize) -> Result<SweepReads> {
    let p = Pipeline::start().await;
    due_intents(&p, DUE).await?;
    let seeding_started = Instant::now();
    seed_delivered(&p, delivered).await?;
    let seeding = seeding_started.elapsed();
    p.clock.advance(chrono::Duration::minutes(16));
    p.emulator.start_recording().await?;
    let sweep_started = Instant::now();
    // The emulator answers an index Query by filtering the whole table (DynamoDB reads only what
    // the Query returns): at 50k items one Query takes seconds here, so the run gets a budget
    // long enough to finish, instead of the Lambda's.
    let run = p.run_escalation_within(Duration::from_secs(900)).await;
    let sweep = sweep_started.elapsed();
    let recorded = p.emulator.stop_recording_requests().await?;
    let queries: Vec<bool> = recorded
        .iter()
        .filter(|r| r.operation.ends_with(".Query"))
        .map(|r| r.body.get("IndexName").and_then(serde_json::Value::as_str) == Some("due-index"))
        .collect();
    let index_queries = queries.iter().filter(|q| **q).count();
    let other_queries = queries.len() - index_queries;
    let read_calls =
        recorded.into_iter().map(|r| r.operation).filter(|o| is_read(o)).fold(BTreeMap::new(), |mut m, o| {
            *m.entry(o).or_insert(0) += 1;
            m
        });
    Ok(SweepReads {
        delivered,
        items_read: run.read,
        escalated: run.escalated,
        read_calls,
        index_queries,
        other_queries,
        seeding,
        sweep,
    })
}

/// 1k, 10k, 50k delivered intents; a size whose seeding fails is reported as its error.
pub async fn measure(sizes: &[usize]) -> Vec<(usize, Result<SweepReads>)> {
    let mut out = Vec::new();
    for &n in sizes {
        out.push((n, measure_one(n).await));
    }
    out
}
