//! Cost per million delivered alerts, one row per billed item, from what one delivered alert was
//! measured to do ([`crate::wru`]: calls, write and read units from real item sizes, log bytes,
//! stored bytes) and the template's settings. Prices: AWS's public pricing pages, region
//! us-east-1, on-demand, first tier, no free tier, as read on [`PRICES_READ`] — no network here,
//! so they are constants with their source named; change them here when AWS changes them.

use crate::wru::Wru;

pub const REGION: &str = "us-east-1";
/// When the prices below were read from AWS's pricing pages.
pub const PRICES_READ: &str = "2026-11-30";

/// "Amazon API Gateway pricing", HTTP APIs: USD per request (first 300 million; 512 KB units).
pub const HTTP_API_REQUEST: f64 = 1.00 / 1e6;
/// "Amazon EventBridge pricing", custom events published: USD per 64 KB event (the other entry).
pub const EVENTBRIDGE_EVENT: f64 = 1.00 / 1e6;
/// "AWS Lambda pricing", Arm: USD per GB-second (first 7.5 billion) and per request.
pub const LAMBDA_ARM_GB_S: f64 = 0.000_013_333_4;
pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// "Amazon DynamoDB pricing", on-demand: USD per write and read request unit.
pub const DDB_WRU: f64 = 0.625 / 1e6;
pub const DDB_RRU: f64 = 0.125 / 1e6;
/// "Amazon DynamoDB pricing": table storage and continuous backups (PITR), USD per GB-month.
pub const DDB_STORAGE_GB_MONTH: f64 = 0.25;
pub const DDB_PITR_GB_MONTH: f64 = 0.20;
/// AWS: each stored item carries 100 bytes of overhead (storage is billed with it).
pub const DDB_ITEM_STORAGE_OVERHEAD: usize = 100;
/// "Amazon SQS pricing", standard queue: USD per request (64 KB chunk).
pub const SQS_REQUEST: f64 = 0.40 / 1e6;
/// "AWS Key Management Service pricing": USD per 10,000 requests, and per key-month.
pub const KMS_REQUEST: f64 = 0.03 / 10_000.0;
pub const KMS_KEY_MONTH: f64 = 1.00;
/// "Amazon CloudWatch pricing", Logs (Standard): ingestion per GB, archival per GB-month.
pub const LOGS_INGEST_GB: f64 = 0.50;
pub const LOGS_STORE_GB_MONTH: f64 = 0.03;
/// CloudWatch Logs counts 26 bytes per log event besides its message (PutLogEvents batch size).
pub const LOGS_EVENT_OVERHEAD: u64 = 26;
/// Lambda's own platform lines per invocation in JSON log format (platform.start and
/// platform.report; sizes from AWS's documented examples, rounded up): an assumption.
pub const PLATFORM_LOG_BYTES_PER_INVOCATION: u64 = 700;
/// The HTTP API's access-log line (template's `AccessLogSettings.Format`, filled in): an
/// assumption, the format's length with typical values.
pub const ACCESS_LOG_BYTES: u64 = 220;
/// A real delivery-status record with carrier name, provider response and dwell times runs to
/// about this many bytes (AWS's published sample is shorter): an assumption, the larger is used.
pub const REAL_DELIVERY_RECORD_BYTES: u64 = 600;
/// SMS to a US number: `priceInUSD` of SNS's delivery record for one part.
pub const SMS_US_PART: f64 = 0.006_45;

/// Realistic batching at sustained load (assumptions, stated in BENCHMARKS.md): the sender's
/// event source mapping delivers full batches of `BatchSize` (template: 10), and one status
/// invocation carries this many delivery records (a subscription delivers log events in batches).
pub const SENDER_BATCH: f64 = 10.0;
pub const STATUS_RECORDS_PER_INVOCATION: f64 = 10.0;
/// Days a ledger item stays past its deadline (template: TTL `expires_at` = deadline + 30 days).
pub const LEDGER_RETENTION_DAYS: f64 = 30.0;
/// The template's `LogRetentionDays` default.
pub const LOG_RETENTION_DAYS: f64 = 30.0;
pub const DAYS_PER_MONTH: f64 = 30.0;

/// The template's memory size (Globals).
pub const MEMORY_GB: f64 = 128.0 / 1024.0;
/// The status function's own memory size in the template (a full subscription batch must fit
/// its timeout: section 8).
pub const STATUS_MEMORY_GB: f64 = 512.0 / 1024.0;

#[derive(Debug, Clone)]
pub struct CostLine {
    pub item: String,
    pub per_alert: f64,
    pub unit: String,
    pub unit_price: f64,
    /// Where the quantity comes from (measured / template / assumption).
    pub source: String,
}

impl CostLine {
    pub fn per_million(&self) -> f64 {
        self.per_alert * self.unit_price * 1e6
    }
}

fn line(item: impl Into<String>, per_alert: f64, unit: &str, unit_price: f64, source: impl Into<String>) -> CostLine {
    CostLine { item: item.into(), per_alert, unit: unit.into(), unit_price, source: source.into() }
}

/// Sum of the lines, per million alerts.
pub fn total(lines: &[CostLine]) -> f64 {
    lines.iter().map(CostLine::per_million).sum()
}

/// The lines of the estimate (SMS excluded: see [`SMS_US_PART`]).
pub fn estimate(w: &Wru) -> Vec<CostLine> {
    let phase = |f: &str| w.phases.iter().find(|p| p.function == f);
    let ms = |f: &str| phase(f).map(|p| (p.handler.as_secs_f64() * 1000.0).ceil()).unwrap_or(0.0);
    let invocations = |f: &str| match f {
        "sender" => 1.0 / SENDER_BATCH,
        "status" => 1.0 / STATUS_RECORDS_PER_INVOCATION,
        _ => 1.0,
    };
    let requests: f64 = ["intake", "sender", "status"].iter().map(|f| invocations(f)).sum();
    // Billed duration per alert: the measured handler time for this alert (an invocation of a
    // batch takes about the batch's records times one record's time), 1 ms granularity.
    let billed_ms: f64 = ["intake", "sender", "status"].iter().map(|f| ms(f)).sum();
    let gb_s = (MEMORY_GB * (ms("intake") + ms("sender")) + STATUS_MEMORY_GB * ms("status")) / 1000.0;
    let ops = |pred: &dyn Fn(&str) -> bool| -> f64 {
        w.phases.iter().flat_map(|p| p.ops.iter()).filter(|(o, _)| pred(o)).map(|(_, n)| *n as f64).sum()
    };
    let sqs_calls = ops(&|o| o.starts_with("AmazonSQS."));
    let own_logs: u64 = w.phases.iter().map(|p| p.log_bytes + p.emf_bytes).sum();
    let own_events: u64 = w.phases.iter().map(|p| p.log_lines).sum();
    let platform = PLATFORM_LOG_BYTES_PER_INVOCATION as f64 * requests;
    let own_log_gb = (own_logs + own_events * LOGS_EVENT_OVERHEAD) as f64 / 1e9 + platform / 1e9;
    let record_bytes = (w.delivery_record_bytes as u64).max(REAL_DELIVERY_RECORD_BYTES);
    let records = w.delivery_records.max(1) as u64;
    let record_gb = (records * (record_bytes + LOGS_EVENT_OVERHEAD)) as f64 / 1e9;
    let access_gb = (ACCESS_LOG_BYTES + LOGS_EVENT_OVERHEAD) as f64 / 1e9;
    let stored_items = w.stored_items;
    let stored_gb = (w.stored_bytes + stored_items * DDB_ITEM_STORAGE_OVERHEAD) as f64 / 1e9;
    let ledger_months = LEDGER_RETENTION_DAYS / DAYS_PER_MONTH;
    let log_months = LOG_RETENTION_DAYS / DAYS_PER_MONTH;
    let mut lines = vec![
        line(
            "API Gateway HTTP API request (intake; an EventBridge custom event costs the same)",
            1.0,
            "request",
            HTTP_API_REQUEST,
            "1 per alert",
        ),
        line(
            format!(
                "Lambda requests: intake 1, sender 1/{SENDER_BATCH:.0} (BatchSize 10, full batches), status 1/{STATUS_RECORDS_PER_INVOCATION:.0} (records per invocation)"
            ),
            requests,
            "request",
            LAMBDA_REQUEST,
            "template + assumption (status batching)",
        ),
        line(
            format!(
                "Lambda arm64 compute, {billed_ms:.0} ms handler time per alert at the template's memory (128 MB; status 512 MB) (emulator-bound: an upper bound)"
            ),
            gb_s,
            "GB-s",
            LAMBDA_ARM_GB_S,
            "measured",
        ),
        line(
            format!("DynamoDB writes, base tables ({} writes, real item sizes, ×2 in transactions)", w.writes.len()),
            w.table_wru() as f64,
            "WRU",
            DDB_WRU,
            "measured (section WRU)",
        ),
    ];
    for ix in &w.indexes {
        lines.push(line(
            format!("DynamoDB writes, GSI `{}` (projection {})", ix.name, ix.projection.describe()),
            w.of_index(&ix.name) as f64,
            "WRU",
            DDB_WRU,
            "measured (section WRU)",
        ));
    }
    lines.extend([
        line(
            format!(
                "DynamoDB reads ({} requests: GetItem per 4 KB of the item read, consistent; a Query counted as 1)",
                w.reads.len()
            ),
            w.rru(),
            "RRU",
            DDB_RRU,
            "measured",
        ),
        line(
            format!(
                "SQS requests: the functions' {sqs_calls:.0} + the event source mapping's ReceiveMessage and DeleteMessageBatch per batch of {SENDER_BATCH:.0}"
            ),
            sqs_calls + 2.0 / SENDER_BATCH,
            "request",
            SQS_REQUEST,
            "measured + template",
        ),
        line(
            "KMS requests (customer key on ledger, queues, logs): data keys are cached per period (SQS 5 min, DynamoDB table key), not per alert",
            0.0,
            "request",
            KMS_REQUEST,
            "AWS docs; fixed ~$1/key-month + per-period requests",
        ),
        line(
            format!(
                "CloudWatch Logs ingestion, the provider's delivery records ({records} × up to {record_bytes} B + 26 B per event; the largest the emulator wrote is {} B)",
                w.delivery_record_bytes
            ),
            record_gb,
            "GB",
            LOGS_INGEST_GB,
            "assumption (real records), measured sample",
        ),
        line(
            format!(
                "CloudWatch Logs ingestion, the functions' own logs ({} B of JSON lines + EMF at RUST_LOG=info, + {} B platform lines per invocation)",
                own_logs, PLATFORM_LOG_BYTES_PER_INVOCATION
            ),
            own_log_gb,
            "GB",
            LOGS_INGEST_GB,
            "measured + assumption (platform lines)",
        ),
        line(
            format!("CloudWatch Logs ingestion, HTTP API access log (~{ACCESS_LOG_BYTES} B)"),
            access_gb,
            "GB",
            LOGS_INGEST_GB,
            "assumption (template's format)",
        ),
        line(
            format!(
                "CloudWatch Logs storage, all of the above for {LOG_RETENTION_DAYS:.0} days (LogRetentionDays; uncompressed: an upper bound)"
            ),
            (record_gb + own_log_gb + access_gb) * log_months,
            "GB-month",
            LOGS_STORE_GB_MONTH,
            "measured + template",
        ),
        line(
            format!(
                "DynamoDB storage: the alert's {} ledger items ({} B + 100 B each) for deadline + {LEDGER_RETENTION_DAYS:.0} days",
                stored_items, w.stored_bytes
            ),
            stored_gb * ledger_months,
            "GB-month",
            DDB_STORAGE_GB_MONTH,
            "measured + template (TTL)",
        ),
        line(
            "DynamoDB point-in-time recovery (PointInTimeRecoveryEnabled) on the same bytes",
            stored_gb * ledger_months,
            "GB-month",
            DDB_PITR_GB_MONTH,
            "measured + template",
        ),
    ]);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_alerts_at_one_unit_each_cost_the_unit_price_times_a_million() {
        let l = line("x", 1.0, "WRU", DDB_WRU, "t");
        assert!((l.per_million() - 0.625).abs() < 1e-9);
        assert!((total(&[l.clone(), l]) - 1.25).abs() < 1e-9);
    }
}
