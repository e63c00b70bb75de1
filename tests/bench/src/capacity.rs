//! The capacity model of one stack: per function, the AWS calls and write units one delivered
//! alert costs (measured, [`crate::wru`]); the ceilings each shared resource puts on alerts per
//! second (AWS's documented limits and the template's settings, read from template.yaml as it is);
//! the smallest ceiling is the stack's maximum sustained rate, and its limit the one that binds.

use serde_json::Value;

use crate::wru::Wru;
use crate::{BenchError, Result};

/// AWS: one DynamoDB partition (a GSI's too) absorbs about this many write units per second.
pub const PARTITION_WCU_PER_S: f64 = 1_000.0;
/// AWS: … and this many read units per second.
pub const PARTITION_RCU_PER_S: f64 = 3_000.0;
/// AWS default quota: write request units per second of one on-demand table (and of each GSI).
pub const TABLE_WRU_PER_S: f64 = 40_000.0;
/// AWS: a new on-demand table serves about this many write units per second at once (more after
/// it has grown, or with warm throughput).
pub const NEW_TABLE_WRU_PER_S: f64 = 4_000.0;
/// AWS default quota: concurrent Lambda executions per account and region.
pub const LAMBDA_ACCOUNT_CONCURRENCY: f64 = 1_000.0;

/// The template settings the model needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub due_shards: f64,
    pub sms_rate: f64,
    pub api_rate: f64,
    pub api_burst: f64,
    pub sender_concurrency: f64,
    pub sender_batch: f64,
    pub warm_writes: f64,
}

fn param(t: &Value, name: &str) -> Result<f64> {
    t.get("Parameters")
        .and_then(|p| p.get(name))
        .and_then(|p| p.get("Default"))
        .and_then(|d| d.as_f64().or_else(|| d.as_str().and_then(|s| s.parse().ok())))
        .ok_or_else(|| BenchError::Missing(format!("template.yaml: Parameters.{name}.Default")))
}

impl Settings {
    pub fn from_template(t: &Value) -> Result<Self> {
        let due_shards = t
            .get("Globals")
            .and_then(|g| g.get("Function"))
            .and_then(|f| f.get("Environment"))
            .and_then(|e| e.get("Variables"))
            .and_then(|v| v.get("TOCSIN_DUE_SHARDS"))
            .and_then(|s| s.as_str().and_then(|s| s.parse().ok()).or_else(|| s.as_f64()))
            .ok_or_else(|| BenchError::Missing("template.yaml: TOCSIN_DUE_SHARDS".into()))?;
        let sender_batch = t
            .get("Resources")
            .and_then(|r| r.get("SenderFunction"))
            .and_then(|f| f.get("Properties"))
            .and_then(|p| p.get("Events"))
            .and_then(|e| e.get("SendQueue"))
            .and_then(|q| q.get("Properties"))
            .and_then(|p| p.get("BatchSize"))
            .and_then(Value::as_f64)
            .unwrap_or(10.0);
        Ok(Settings {
            due_shards,
            sms_rate: param(t, "SmsRatePerSecond")?,
            api_rate: param(t, "AlertApiRateLimit")?,
            api_burst: param(t, "AlertApiBurstLimit")?,
            sender_concurrency: param(t, "SenderMaxConcurrency")?,
            sender_batch,
            warm_writes: param(t, "LedgerWarmWritesPerSecond")?,
        })
    }
}

/// One limit on alerts per second.
#[derive(Debug, Clone)]
pub struct Ceiling {
    pub limit: String,
    /// Can the operator raise it (a quota or a template parameter)?
    pub adjustable: bool,
    pub alerts_per_s: f64,
    pub how: String,
}

#[derive(Debug, Clone)]
pub struct Capacity {
    pub settings: Settings,
    pub ceilings: Vec<Ceiling>,
    /// Per function: (function, calls, WRU, handler ms) per alert.
    pub per_function: Vec<(String, usize, u64, f64)>,
}

impl Capacity {
    fn min_of(&self, adjustable_too: bool) -> Option<&Ceiling> {
        self.ceilings
            .iter()
            .filter(|c| adjustable_too || !c.adjustable)
            .min_by(|a, b| a.alerts_per_s.total_cmp(&b.alerts_per_s))
    }
    /// The binding limit with the template's defaults and AWS's default quotas.
    pub fn at_defaults(&self) -> Option<&Ceiling> {
        self.min_of(true)
    }
    /// The binding limit once every adjustable quota and parameter is raised far enough.
    pub fn structural(&self) -> Option<&Ceiling> {
        self.min_of(false)
    }
}

/// The model from one delivered alert's measured figures and template.yaml.
pub fn model(w: &Wru, t: &Value) -> Result<Capacity> {
    let s = Settings::from_template(t)?;
    let due = w.of_index("due-index") as f64;
    let open = w.of_index("pending-index") as f64;
    let table = w.table_wru() as f64;
    // A batch invocation lasts about its records' times: per alert, one record's time.
    let busy_s: f64 = w.phases.iter().map(|p| p.handler.as_secs_f64()).sum();
    let mut ceilings = vec![
        Ceiling {
            limit: format!(
                "SNS SMS rate (SmsRatePerSecond = {}, SNS's default quota 20 parts/s; the sender's {} instances each publish at {} ÷ {})",
                s.sms_rate, s.sender_concurrency, s.sms_rate, s.sender_concurrency
            ),
            adjustable: true,
            alerts_per_s: s.sms_rate,
            how: "1 part per single-part alert".into(),
        },
        Ceiling {
            limit: format!("HTTP API throttling (AlertApiRateLimit = {}, burst {})", s.api_rate, s.api_burst),
            adjustable: true,
            alerts_per_s: s.api_rate,
            how: "1 request per alert".into(),
        },
        Ceiling {
            limit: format!(
                "DynamoDB table, new on-demand (≈{NEW_TABLE_WRU_PER_S:.0} WRU/s; LedgerWarmWritesPerSecond = {})",
                s.warm_writes
            ),
            adjustable: true,
            alerts_per_s: NEW_TABLE_WRU_PER_S.max(s.warm_writes) / table.max(1.0),
            how: format!("{table:.0} base-table WRU per alert"),
        },
    ];
    if due > 0.0 {
        ceilings.push(Ceiling {
            limit: format!("due-index partitions (S = {} × {PARTITION_WCU_PER_S:.0} WCU/s)", s.due_shards),
            adjustable: false,
            alerts_per_s: s.due_shards * PARTITION_WCU_PER_S / due,
            how: format!("{due:.0} due-index WRU per alert, spread round robin over S partitions"),
        });
    }
    ceilings.extend([
        Ceiling {
            limit: format!("DynamoDB table quota ({TABLE_WRU_PER_S:.0} WRU/s per on-demand table, default)"),
            adjustable: true,
            alerts_per_s: TABLE_WRU_PER_S / table.max(1.0),
            how: format!("{table:.0} base-table WRU per alert (keys spread: one partition key per alert)"),
        },
        Ceiling {
            limit: format!("Lambda account concurrency ({LAMBDA_ACCOUNT_CONCURRENCY:.0}, default quota)"),
            adjustable: true,
            alerts_per_s: LAMBDA_ACCOUNT_CONCURRENCY / busy_s.max(1e-6),
            how: format!(
                "{:.1} ms of function time per alert (emulator-bound handler times: a lower bound on the ceiling)",
                busy_s * 1000.0
            ),
        },
    ]);
    if open > 0.0 {
        ceilings.push(Ceiling {
            limit: format!("pending-index, one recipient number ({PARTITION_WCU_PER_S:.0} WCU/s per partition)"),
            adjustable: false,
            alerts_per_s: f64::INFINITY,
            how: format!(
                "{open:.0} pending-index WRU per alert, partitioned by recipient: {:.0} alerts/s to one number; spread over numbers, not a stack limit",
                PARTITION_WCU_PER_S / open
            ),
        });
    }
    let per_function = w
        .phases
        .iter()
        .map(|p| {
            (
                p.function.to_owned(),
                p.ops.values().sum::<usize>(),
                w.of_function(p.function),
                p.handler.as_secs_f64() * 1000.0,
            )
        })
        .collect();
    Ok(Capacity { settings: s, ceilings, per_function })
}
