//! Cost per million alerts from the measured calls and durations, at list prices
//! (us-east-1, as published by AWS in 2025; on-demand, no free tier).

use crate::api_calls::ApiCalls;

pub const REGION: &str = "us-east-1";
/// Lambda, arm64: USD per GB-second (first pricing tier) and per request.
pub const LAMBDA_ARM_GB_S: f64 = 0.000_013_333_4;
pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// DynamoDB on-demand: USD per write and per read request unit.
pub const DDB_WRU: f64 = 0.625 / 1e6;
pub const DDB_RRU: f64 = 0.125 / 1e6;
/// SQS standard queue: USD per request (64 KB chunk).
pub const SQS_REQUEST: f64 = 0.40 / 1e6;
/// CloudWatch Logs ingestion: USD per GB (the SNS delivery-status log line, ~0.5 KB).
pub const LOGS_PER_GB: f64 = 0.50;
pub const DELIVERY_LOG_BYTES: f64 = 500.0;
/// SMS to a US number: `priceInUSD` of SNS's own delivery record for one part (varies by
/// country, origination identity and carrier fees).
pub const SMS_US_PART: f64 = 0.006_45;
/// The template's memory size.
pub const MEMORY_GB: f64 = 128.0 / 1024.0;

#[derive(Debug, Clone)]
pub struct CostLine {
    pub item: String,
    pub per_alert: f64,
    pub unit: String,
    pub unit_price: f64,
}

impl CostLine {
    pub fn per_million(&self) -> f64 {
        self.per_alert * self.unit_price * 1e6
    }
}

/// The lines of the estimate (SMS excluded: see [`SMS_US_PART`]).
pub fn estimate(calls: &ApiCalls) -> Vec<CostLine> {
    let ddb = |suffix: &str| calls.count(|o| o.starts_with("DynamoDB_") && o.ends_with(suffix)) as f64;
    let transact_items: usize = calls.phases.iter().map(|p| p.transact_items).sum();
    let writes = ddb(".PutItem") + ddb(".UpdateItem") + ddb(".DeleteItem") + 2.0 * transact_items as f64;
    let reads = ddb(".GetItem") + ddb(".Query") + ddb(".BatchGetItem");
    let sqs = calls.count(|o| o.starts_with("AmazonSQS.")) as f64 + 2.0;
    let billed_ms: f64 = calls.phases.iter().map(|p| (p.handler.as_secs_f64() * 1000.0).ceil()).sum();
    let functions = calls.phases.len() as f64;
    vec![
        CostLine {
            item: format!("Lambda requests ({} invocations, batch of 1: an upper bound)", calls.phases.len()),
            per_alert: functions,
            unit: "request".into(),
            unit_price: LAMBDA_REQUEST,
        },
        CostLine {
            item: format!("Lambda arm64 compute, 128 MB × {billed_ms:.0} ms measured handler time"),
            per_alert: MEMORY_GB * billed_ms / 1000.0,
            unit: "GB-s".into(),
            unit_price: LAMBDA_ARM_GB_S,
        },
        CostLine {
            item: format!(
                "DynamoDB writes: 1 WRU per Put/Update/Delete, 2 per item of TransactWriteItems ({transact_items} items); items ≤ 1 KB; GSI propagation not included"
            ),
            per_alert: writes,
            unit: "WRU".into(),
            unit_price: DDB_WRU,
        },
        CostLine {
            item: "DynamoDB reads: 1 RRU per GetItem/Query (strongly consistent, ≤ 4 KB: an upper bound)".into(),
            per_alert: reads,
            unit: "RRU".into(),
            unit_price: DDB_RRU,
        },
        CostLine {
            item: "SQS requests: the functions' calls + the event source mapping's ReceiveMessage and DeleteMessage (batch of 1)"
                .into(),
            per_alert: sqs,
            unit: "request".into(),
            unit_price: SQS_REQUEST,
        },
        CostLine {
            item: "CloudWatch Logs ingestion of the delivery-status record (~0.5 KB)".into(),
            per_alert: DELIVERY_LOG_BYTES / 1e9,
            unit: "GB".into(),
            unit_price: LOGS_PER_GB,
        },
    ]
}
