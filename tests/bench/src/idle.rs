//! Section 4e: what a deployed stack costs a month when no alert arrives. One line per billed
//! item: the fixed ones counted in template.yaml (the KMS key, every alarm's metrics, the
//! dashboard) and priced from [`crate::cost`]'s constants, and the escalation sweep — the one thing
//! that runs when nothing happens — measured: one sweep over an empty ledger on the emulator, its
//! AWS calls (the recorder), handler time, log and EMF bytes, and the custom metrics it writes,
//! times the runs of a month (its schedule: one a minute).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use tocsin_tests::Pipeline;

use crate::cost::{
    DAYS_PER_MONTH, DDB_RRU, KMS_KEY_MONTH, LAMBDA_ARM_GB_S, LAMBDA_REQUEST, LOG_RETENTION_DAYS, LOGS_EVENT_OVERHEAD,
    LOGS_INGEST_GB, LOGS_STORE_GB_MONTH, MEMORY_GB, PLATFORM_LOG_BYTES_PER_INVOCATION, SMS_US_PART, SQS_REQUEST,
};
use crate::{BenchError, Result};

/// "Amazon CloudWatch pricing": a standard-resolution alarm, per metric it reads, per month.
pub const ALARM_METRIC_MONTH: f64 = 0.10;
/// "Amazon CloudWatch pricing": a dashboard per month (beyond the first three of the account).
pub const DASHBOARD_MONTH: f64 = 3.00;
/// "Amazon CloudWatch pricing": a custom metric (EMF included) per month, first 10,000.
pub const CUSTOM_METRIC_MONTH: f64 = 0.30;
/// "Amazon EventBridge pricing", Scheduler: USD per invocation (beyond 14 million a month free).
pub const SCHEDULER_INVOCATION: f64 = 1.00 / 1e6;
/// The escalation schedule (template.yaml: `rate(1 minute)`): runs in a 30-day month.
pub const SWEEPS_PER_MONTH: f64 = 60.0 * 24.0 * DAYS_PER_MONTH;
/// An assumption, not measured: the send queue's event source mapping keeps this many long polls
/// (20 s each) open on the idle queue, and SQS bills each ReceiveMessage.
pub const IDLE_POLLERS: f64 = 5.0;
pub const LONG_POLL_SECONDS: f64 = 20.0;
/// The canary at its default schedule (CanarySchedule = 1h): SMS a month.
pub const CANARY_RUNS_PER_MONTH: f64 = 24.0 * DAYS_PER_MONTH;

/// What one idle sweep did.
#[derive(Debug, Clone)]
pub struct IdleSweep {
    /// AWS operations → calls, during the run.
    pub ops: BTreeMap<String, usize>,
    /// DynamoDB read units of the run: a consistent GetItem 1, an index Query 0.5 (eventually
    /// consistent, under 4 KB returned), a table Query 1.
    pub rru: f64,
    pub handler: Duration,
    pub log_bytes: u64,
    pub log_lines: u64,
    pub emf_bytes: u64,
    /// The custom metrics the run wrote: (namespace, metric, dimensions).
    pub metrics: BTreeSet<String>,
}

/// An alarm of template.yaml: its logical id, how many metrics it reads, and its Condition.
#[derive(Debug, Clone)]
pub struct AlarmShape {
    pub id: String,
    pub metrics: usize,
    pub condition: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Idle {
    pub sweep: IdleSweep,
    pub alarms: Vec<AlarmShape>,
    pub dashboards: usize,
    pub keys: usize,
}

/// The stack's alarms and how many metrics each is billed for (a metric-math alarm: each metric
/// it queries).
pub fn alarm_shapes(template: &Value) -> Vec<AlarmShape> {
    template["Resources"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|(id, r)| AlarmShape {
            id: id.clone(),
            metrics: r["Properties"]["Metrics"]
                .as_array()
                .map_or(1, |m| m.iter().filter(|q| q.get("MetricStat").is_some()).count()),
            condition: r["Condition"].as_str().map(str::to_owned),
        })
        .collect()
}

fn count_of(template: &Value, ty: &str) -> usize {
    template["Resources"].as_object().into_iter().flatten().filter(|(_, r)| r["Type"] == ty).count()
}

/// The metrics of EMF lines: `namespace/metric {dimension=value,…}`.
fn emf_metrics(lines: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for doc in lines.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        for m in doc["_aws"]["CloudWatchMetrics"].as_array().into_iter().flatten() {
            let ns = m["Namespace"].as_str().unwrap_or_default();
            let dims: Vec<String> = m["Dimensions"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|set| set.as_array().cloned().unwrap_or_default())
                .filter_map(|d| d.as_str().map(|d| format!("{d}={}", doc[d].as_str().unwrap_or_default())))
                .collect();
            for metric in m["Metrics"].as_array().into_iter().flatten() {
                out.insert(format!("{ns}/{} {{{}}}", metric["Name"].as_str().unwrap_or_default(), dims.join(",")));
            }
        }
    }
    out
}

/// One sweep over an empty ledger (after one unmeasured warm-up run), with the recorder on.
pub async fn measure() -> Result<Idle> {
    let p = Pipeline::start().await;
    let directive = p
        .stack
        .function_env("EscalationFunction")
        .ok()
        .and_then(|e| e.get("RUST_LOG").cloned())
        .unwrap_or_else(|| "info".to_owned());
    crate::wru::count_logs(&directive);
    p.run_escalation().await;
    let emf_before = tocsin_tests::emitted_metrics().len();
    crate::wru::take_log_counts();
    p.emulator.start_recording().await?;
    let started = Instant::now();
    p.run_escalation().await;
    let handler = started.elapsed();
    let recorded = p.emulator.stop_recording_requests().await?;
    let names: Vec<String> = recorded.iter().map(|r| r.operation.clone()).collect();
    let (log_bytes, log_lines) = crate::wru::take_log_counts();
    let emitted = tocsin_tests::emitted_metrics();
    let new = emitted.get(emf_before..).unwrap_or_default();
    let rru = recorded
        .iter()
        .map(|r| match r.operation.rsplit('.').next().unwrap_or_default() {
            "Query" if r.body.get("IndexName").is_some() => 0.5,
            "Query" | "GetItem" => 1.0,
            _ => 0.0,
        })
        .sum();
    let mut ops = BTreeMap::new();
    for n in names {
        *ops.entry(n).or_insert(0) += 1;
    }
    let template = crate::wru::template_json()?;
    let sweep =
        IdleSweep { ops, rru, handler, log_bytes, log_lines, emf_bytes: new.len() as u64, metrics: emf_metrics(new) };
    if sweep.metrics.is_empty() {
        return Err(BenchError::Process("the idle sweep wrote no EMF metrics: the capture is broken".into()));
    }
    Ok(Idle {
        sweep,
        alarms: alarm_shapes(&template),
        dashboards: count_of(&template, "AWS::CloudWatch::Dashboard"),
        keys: count_of(&template, "AWS::KMS::Key"),
    })
}

/// One billed item a month.
#[derive(Debug, Clone)]
pub struct MonthLine {
    pub item: String,
    pub quantity: f64,
    pub unit: String,
    pub unit_price: f64,
    pub source: String,
}

impl MonthLine {
    pub fn usd(&self) -> f64 {
        self.quantity * self.unit_price
    }
}

fn line(item: impl Into<String>, quantity: f64, unit: &str, unit_price: f64, source: &str) -> MonthLine {
    MonthLine { item: item.into(), quantity, unit: unit.into(), unit_price, source: source.into() }
}

/// The month of an idle stack at the template's defaults; the canary (off by default) apart.
pub fn month(i: &Idle) -> (Vec<MonthLine>, Vec<MonthLine>) {
    let s = &i.sweep;
    let always: Vec<&AlarmShape> = i.alarms.iter().filter(|a| a.condition.is_none()).collect();
    let alarm_metrics: usize = always.iter().map(|a| a.metrics).sum();
    let ms = (s.handler.as_secs_f64() * 1000.0).ceil();
    let log_bytes = s.log_bytes + s.emf_bytes + s.log_lines * LOGS_EVENT_OVERHEAD + PLATFORM_LOG_BYTES_PER_INVOCATION;
    let log_gb = log_bytes as f64 * SWEEPS_PER_MONTH / 1e9;
    let calls: usize = s.ops.values().sum();
    let polls = IDLE_POLLERS * 60.0 / LONG_POLL_SECONDS * 60.0 * 24.0 * DAYS_PER_MONTH;
    let lines = vec![
        line("KMS customer managed key (DataKey)", i.keys as f64, "key-month", KMS_KEY_MONTH, "template"),
        line(
            format!(
                "CloudWatch alarms: {} alarms reading {alarm_metrics} metrics (metric-math alarms: each metric they query)",
                always.len()
            ),
            alarm_metrics as f64,
            "alarm metric-month",
            ALARM_METRIC_MONTH,
            "template",
        ),
        line(
            "CloudWatch dashboard (`<stack>-tocsin`; an account's first three are free)",
            i.dashboards as f64,
            "dashboard-month",
            DASHBOARD_MONTH,
            "template",
        ),
        line(
            format!("Custom metrics the idle sweep writes every run (EMF, zeros included): {}", s.metrics.len()),
            s.metrics.len() as f64,
            "metric-month",
            CUSTOM_METRIC_MONTH,
            "measured",
        ),
        line(
            "EventBridge Scheduler: the escalation schedule, rate(1 minute) (14 million a month free)",
            SWEEPS_PER_MONTH,
            "invocation",
            SCHEDULER_INVOCATION,
            "template",
        ),
        line("Lambda requests: one sweep a minute", SWEEPS_PER_MONTH, "request", LAMBDA_REQUEST, "template"),
        line(
            format!("Lambda arm64 compute: {ms:.0} ms per idle sweep at 128 MB (emulator-bound: an upper bound)"),
            SWEEPS_PER_MONTH * ms / 1000.0 * MEMORY_GB,
            "GB-s",
            LAMBDA_ARM_GB_S,
            "measured",
        ),
        line(
            format!(
                "DynamoDB reads of the sweep's queries: {} calls per run ({}), {:.1} RRU per run",
                calls,
                s.ops
                    .iter()
                    .map(|(o, n)| format!("{} {n}", o.rsplit('.').next().unwrap_or(o)))
                    .collect::<Vec<_>>()
                    .join(", "),
                s.rru
            ),
            SWEEPS_PER_MONTH * s.rru,
            "RRU",
            DDB_RRU,
            "measured",
        ),
        line(
            format!(
                "CloudWatch Logs ingestion: the sweep's {} B of log lines + {} B of EMF per run, + 26 B per event, + {PLATFORM_LOG_BYTES_PER_INVOCATION} B platform lines",
                s.log_bytes, s.emf_bytes
            ),
            log_gb,
            "GB",
            LOGS_INGEST_GB,
            "measured + assumption (platform lines)",
        ),
        line(
            format!("CloudWatch Logs storage of the above for {LOG_RETENTION_DAYS:.0} days (LogRetentionDays)"),
            log_gb * LOG_RETENTION_DAYS / DAYS_PER_MONTH,
            "GB-month",
            LOGS_STORE_GB_MONTH,
            "measured + template",
        ),
        line(
            format!(
                "SQS ReceiveMessage by the send queue's event source mapping while idle ({IDLE_POLLERS:.0} long polls of {LONG_POLL_SECONDS:.0} s kept open)"
            ),
            polls,
            "request",
            SQS_REQUEST,
            "assumption",
        ),
    ];
    let canary_alarm: usize =
        i.alarms.iter().filter(|a| a.condition.as_deref() == Some("HasCanary")).map(|a| a.metrics).sum();
    let canary = vec![
        line(
            "Canary SMS (CanarySchedule = 1h) to a US number, one part each",
            CANARY_RUNS_PER_MONTH,
            "SMS",
            SMS_US_PART,
            "template + SNS's priceInUSD",
        ),
        line(
            "Canary alarm (canary-not-delivered)",
            canary_alarm as f64,
            "alarm metric-month",
            ALARM_METRIC_MONTH,
            "template",
        ),
    ];
    (lines, canary)
}

pub fn total(lines: &[MonthLine]) -> f64 {
    lines.iter().map(MonthLine::usd).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_math_alarm_is_billed_per_metric_it_queries() {
        let t = serde_json::json!({"Resources": {
            "A": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "x"}},
            "B": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Metrics": [
                {"Id": "a", "MetricStat": {}}, {"Id": "b", "MetricStat": {}}, {"Id": "c", "Expression": "a/b"}]}},
            "C": {"Type": "AWS::CloudWatch::Alarm", "Condition": "HasCanary", "Properties": {"MetricName": "y"}}}});
        let shapes = alarm_shapes(&t);
        let metrics: Vec<(&str, usize, bool)> =
            shapes.iter().map(|a| (a.id.as_str(), a.metrics, a.condition.is_some())).collect();
        assert_eq!(metrics, [("A", 1, false), ("B", 2, false), ("C", 1, true)]);
    }

    #[test]
    fn emf_lines_name_each_metric_with_its_dimensions() {
        let line = r#"{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"tocsin","Dimensions":[["function"]],"Metrics":[{"Name":"escalated"},{"Name":"read"}]}]},"function":"escalation","escalated":0,"read":0}"#;
        let m = emf_metrics(line);
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            ["tocsin/escalated {function=escalation}", "tocsin/read {function=escalation}"]
        );
    }
}
