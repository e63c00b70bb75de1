//! Status throughput per instance. The ~1 MB subscription event (about 20,000 delivery records)
//! never completes against the emulator (every record is one or more serialized moto calls), so
//! the handler's own cost is measured without it: the real `status::StatusHandler` (generic over
//! its ports) with benchmark-only ports that answer at once and count the calls the DynamoDB
//! adapters would make, on a current-thread runtime as in the function, the event handed over as
//! the JSON text the runtime receives. Two workloads on the same event: every record another
//! application's SMS (no index entry: kept as an orphan), and every record tocsin's own (indexed,
//! applied to its intent). CPU time is the process's, all threads (the decoder runs on a blocking
//! thread), from its CPU clock.
//!
//! What the in-memory ports leave out is the adapters' own work per call: building and signing
//! the request, its HTTP exchange and TLS, parsing the answer. That is measured apart, with the
//! real status binary on a 500-record event against the emulator (CPU of its process, all
//! threads; plain HTTP, so no TLS).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tocsin::config::StatusConfig;
use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::Observation;
use tocsin::domain::{IdempotencyKey, PhoneNumber};
use tocsin::ports::{
    ClaimOutcome, IndexEntries, IndexEntry, IntentStore, MessageIndex, OrphanRecord, PortResult, PutOutcome,
    RecipientRegistry, Standing, Suppression, SuppressionEvidence, System, Transition, TransitionOutcome,
};
use tocsin_harness::events::LogLine;

use crate::workload::{delivery_lines, envelope};
use crate::{BenchError, Result};

/// The event's target size, as in section 2.
pub const EVENT_BYTES: usize = 1_000_000;
/// Measured runs per workload (after one warm-up run).
pub const RUNS: usize = 5;
/// Records in the event the real binary handles against the emulator.
pub const EMULATOR_RECORDS: usize = 500;

/// The calls the DynamoDB adapters would have made, by operation.
#[derive(Default, Clone)]
pub struct Tally(Arc<Mutex<BTreeMap<&'static str, usize>>>);

impl Tally {
    fn count(&self, call: &'static str) {
        if let Ok(mut c) = self.0.lock() {
            *c.entry(call).or_insert(0) += 1;
        }
    }

    fn take(&self) -> BTreeMap<&'static str, usize> {
        self.0.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default()
    }
}

/// The ledger's ports: count the calls the DynamoDB adapter would make, and answer at once.
#[derive(Default)]
pub struct CountingPorts {
    /// Message id → the intent it belongs to (tocsin's own records).
    index: HashMap<String, (IdempotencyKey, PhoneNumber)>,
    tally: Tally,
}

impl CountingPorts {
    fn count(&self, call: &'static str) {
        self.tally.count(call);
    }
}

impl IntentStore for CountingPorts {
    async fn put_new(&self, _: &IntentRecord, _: DateTime<Utc>) -> PortResult<PutOutcome> {
        self.count("PutItem (intent)");
        Ok(PutOutcome::Created)
    }
    async fn get(&self, _: &IdempotencyKey) -> PortResult<Option<IntentRecord>> {
        self.count("GetItem (intent)");
        Ok(None)
    }
    async fn transition(&self, _: Transition) -> PortResult<TransitionOutcome> {
        self.count("UpdateItem (state, carrying its observation)");
        Ok(TransitionOutcome::Applied)
    }
    async fn claim(&self, _: &IdempotencyKey, _: &str, _: DateTime<Utc>, _: DateTime<Utc>) -> PortResult<ClaimOutcome> {
        self.count("UpdateItem (claim)");
        Ok(ClaimOutcome::Missing)
    }
    async fn observations(&self, _: &IdempotencyKey) -> PortResult<Vec<Observation>> {
        self.count("Query (observations)");
        Ok(Vec::new())
    }
}

impl MessageIndex for CountingPorts {
    async fn lookup(&self, id: &str) -> PortResult<Option<IndexEntry>> {
        self.count("GetItem (MSG# index)");
        Ok(self.index.get(id).map(|(k, r)| IndexEntry::single(k.clone(), r.clone())))
    }
    async fn keep_orphans(&self, orphans: &[OrphanRecord]) -> PortResult<()> {
        // The adapter writes up to 25 per BatchWriteItem.
        for _ in orphans.chunks(25) {
            self.count("BatchWriteItem (orphans, ≤ 25 items)");
        }
        Ok(())
    }
    async fn lookup_many(&self, ids: &[String]) -> PortResult<IndexEntries> {
        // The adapter asks for up to 100 keys per BatchGetItem.
        for _ in ids.chunks(status::LOOKUP_CHUNK) {
            self.count("BatchGetItem (MSG# index, ≤ 100 keys)");
        }
        Ok(ids
            .iter()
            .filter_map(|id| {
                self.index.get(id).map(|(k, r)| (id.clone(), Ok(IndexEntry::single(k.clone(), r.clone()))))
            })
            .collect())
    }
    async fn orphans_of(&self, _: &str) -> PortResult<Vec<OrphanRecord>> {
        self.count("Query (orphans)");
        Ok(Vec::new())
    }
}

/// Storm-mode digests: this benchmark's records are single alerts, so these are never asked.
impl tocsin::ports::DueIndex for CountingPorts {
    fn due_shards(&self) -> Vec<String> {
        Vec::new()
    }
    async fn due(
        &self,
        _: &str,
        _: DateTime<Utc>,
        _: i32,
        _: Option<String>,
    ) -> PortResult<(Vec<IdempotencyKey>, Option<String>)> {
        self.count("Query (due-index)");
        Ok((Vec::new(), None))
    }
    async fn lease_escalation(
        &self,
        _: &IdempotencyKey,
        _: &str,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> PortResult<Option<IntentRecord>> {
        self.count("UpdateItem (escalation lease)");
        Ok(None)
    }
    async fn set_next_check(
        &self,
        _: &IdempotencyKey,
        _: tocsin::ports::NextCheck,
        _: Option<tocsin::domain::State>,
    ) -> PortResult<()> {
        self.count("UpdateItem (next check)");
        Ok(())
    }
    async fn bring_check_forward(
        &self,
        _: &IdempotencyKey,
        _: DateTime<Utc>,
        _: &[tocsin::domain::State],
    ) -> PortResult<()> {
        self.count("UpdateItem (next check forward)");
        Ok(())
    }
}

impl tocsin::ports::DigestStore for CountingPorts {
    async fn put_digest(&self, _: &tocsin::ports::DigestRecord) -> PortResult<()> {
        self.count("PutItem (digest)");
        Ok(())
    }
    async fn index_digest_message(&self, _: &str, _: &tocsin::ports::DigestRecord) -> PortResult<()> {
        self.count("PutItem (digest message index)");
        Ok(())
    }
    async fn get_digest(&self, _: &tocsin::domain::storm::DigestId) -> PortResult<Option<tocsin::ports::DigestRecord>> {
        self.count("GetItem (digest)");
        Ok(None)
    }
    async fn record_digest_outcome(
        &self,
        _: &tocsin::domain::storm::DigestId,
        _: &tocsin::ports::LoggedRecord,
    ) -> PortResult<()> {
        self.count("UpdateItem (digest outcome)");
        Ok(())
    }
    async fn digests_to(
        &self,
        _: &PhoneNumber,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> PortResult<Vec<tocsin::ports::DigestRecord>> {
        self.count("Query (list-index, digests)");
        Ok(Vec::new())
    }
}

/// The recipient registry's calls, counted on the same tally.
pub struct CountingRegistry(Tally);

impl RecipientRegistry for CountingRegistry {
    async fn suppression(&self, _: &PhoneNumber) -> PortResult<Option<Suppression>> {
        self.0.count("GetItem (recipient)");
        Ok(None)
    }
    async fn standing(&self, _: &PhoneNumber) -> PortResult<Standing> {
        self.0.count("GetItem (recipient)");
        Ok(Standing::Clear)
    }
    async fn opt_out_checked(&self, _: &PhoneNumber) -> PortResult<()> {
        self.0.count("UpdateItem (recipient)");
        Ok(())
    }
    async fn suppress(&self, _: &PhoneNumber, _: &SuppressionEvidence) -> PortResult<()> {
        self.0.count("TransactWriteItems (suppression + audit)");
        Ok(())
    }
    async fn re_enable(&self, _: &PhoneNumber, _: &str, _: &str, _: DateTime<Utc>) -> PortResult<bool> {
        self.0.count("TransactWriteItems (re-enable)");
        Ok(false)
    }
}

impl tocsin::ports::carriers::CarrierBook for CountingRegistry {
    async fn record_carrier(&self, _: &PhoneNumber, _: &tocsin::domain::carrier::CarrierSeen) -> PortResult<()> {
        self.0.count("UpdateItem (recipient carrier)");
        Ok(())
    }
    async fn carriers_of(
        &self,
        _: &[PhoneNumber],
    ) -> PortResult<std::collections::HashMap<String, tocsin::domain::carrier::CarrierSeen>> {
        self.0.count("BatchGetItem (recipient carriers)");
        Ok(Default::default())
    }
}

impl tocsin::ports::carriers::CarrierTraffic for CountingRegistry {
    async fn add_tallies(&self, tallies: &tocsin::domain::carrier_traffic::CountryTallies) -> PortResult<()> {
        for _ in tallies {
            self.0.count("UpdateItem (carrier traffic tally)");
        }
        Ok(())
    }
    async fn tallies(
        &self,
        _: tocsin::domain::carrier_traffic::Minute,
        _: tocsin::domain::carrier_traffic::Minute,
    ) -> PortResult<tocsin::domain::carrier_traffic::CountryTallies> {
        self.0.count("Query (carrier traffic)");
        Ok(Default::default())
    }
    async fn baseline(&self) -> PortResult<tocsin::domain::carrier_traffic::Baseline> {
        self.0.count("GetItem (carrier traffic baseline)");
        Ok(Default::default())
    }
    async fn save_baseline(
        &self,
        _: &tocsin::domain::carrier_traffic::Baseline,
        _: Option<tocsin::domain::carrier_traffic::Minute>,
    ) -> PortResult<tocsin::ports::carriers::BaselineSaved> {
        self.0.count("PutItem (carrier traffic baseline)");
        Ok(tocsin::ports::carriers::BaselineSaved::Saved)
    }
}

/// One workload's result.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: &'static str,
    pub records: usize,
    pub event_bytes: usize,
    /// Median CPU time (all threads) per invocation, and median wall time.
    pub cpu: Duration,
    pub wall: Duration,
    /// Calls per invocation, by operation (the same on every run).
    pub calls: BTreeMap<&'static str, usize>,
    /// The handler's summary of the last run.
    pub summary: String,
}

impl Workload {
    pub fn cpu_per_record(&self) -> Duration {
        self.cpu / self.records.max(1) as u32
    }
    pub fn calls_per_record(&self) -> f64 {
        self.calls.values().sum::<usize>() as f64 / self.records.max(1) as f64
    }
}

/// The real binary against the emulator.
#[derive(Debug, Clone)]
pub struct Emulated {
    pub records: usize,
    pub cpu: Duration,
    pub wall: Duration,
    pub calls: BTreeMap<String, usize>,
    pub answer: String,
}

#[derive(Debug, Clone)]
pub struct StatusRate {
    pub workloads: Vec<Workload>,
    pub emulated: std::result::Result<Emulated, String>,
    pub memory_mb: Option<u64>,
    /// The status function's timeout in template.yaml, seconds.
    pub timeout_s: Option<u64>,
}

/// The status function's timeout: its own, else the template's global one.
fn status_timeout_s() -> Option<u64> {
    let t = crate::wru::template_json().ok()?;
    t.pointer("/Resources/StatusFunction/Properties/Timeout")
        .or_else(|| t.pointer("/Globals/Function/Timeout"))
        .and_then(serde_json::Value::as_u64)
}

fn message_id(line: &LogLine) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&line.message).ok()?;
    v.pointer("/notification/messageId")?.as_str().map(str::to_owned)
}

fn settled_cpu() -> Duration {
    crate::cpu_clock::own().unwrap_or_default()
}

/// `RUNS` measured runs (after a warm-up) of the handler on `text`, on its own thread and
/// current-thread runtime.
fn run_workload(name: &'static str, text: &str, records: usize, ports: CountingPorts) -> Result<Workload> {
    let tally = ports.tally.clone();
    let mut handler = status::StatusHandler {
        store: ports,
        registry: CountingRegistry(tally.clone()),
        clock: System,
        config: StatusConfig {
            stack: "tocsin-bench".into(),
            ledger_table: "ledger".into(),
            recipients_table: "recipients".into(),
            // As deployed (template.yaml's 2 s); the records are an hour old, so no record waits.
            orphan_wait: Duration::from_secs(2),
            canary_number: None,
            delay_suspected_after: Duration::from_secs(600),
        },
        carriers_written: status::CarriersWritten::default(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut cpu = Vec::new();
    let mut wall = Vec::new();
    let mut calls = BTreeMap::new();
    let mut summary = String::new();
    for run in 0..=RUNS {
        // Each run as a new instance's first: every record's number is new to it, so each
        // delivery record writes its number's carrier (an on-call phone's next records would not).
        handler.carriers_written = status::CarriersWritten::default();
        tally.take();
        let (c0, t0) = (settled_cpu(), Instant::now());
        let outcome = rt.block_on(async {
            // As the runtime hands the event over: parsed from the request body's JSON text.
            let event: serde_json::Value = serde_json::from_str(text)?;
            Ok::<_, BenchError>(
                handler.handle(event, tocsin::ports::after(chrono::Utc::now(), Duration::from_secs(900))).await,
            )
        })?;
        let (t1, c1) = (Instant::now(), settled_cpu());
        let s = outcome.map_err(|e| BenchError::Process(format!("status handler: {e}")))?;
        if run > 0 {
            cpu.push(c1.saturating_sub(c0));
            wall.push(t1.duration_since(t0));
        }
        calls = tally.take();
        summary = serde_json::to_string(&s)?;
    }
    let median = |v: &[Duration]| crate::stats::summarise(v).map(|s| s.median).unwrap_or_default();
    Ok(Workload { name, records, event_bytes: text.len(), cpu: median(&cpu), wall: median(&wall), calls, summary })
}

/// Both in-memory workloads on one ~1 MB event.
pub fn measure_in_memory() -> Result<Vec<Workload>> {
    let at = Utc::now() - chrono::Duration::hours(1);
    let group = "sns/us-east-1/123456789012/DirectPublishToPhoneNumber";
    let probe = 2_000;
    let size = envelope(group, &delivery_lines(probe, at)).to_string().len().max(1);
    let n = (probe * EVENT_BYTES).div_ceil(size) + 1;
    let lines = delivery_lines(n, at);
    let text = envelope(group, &lines).to_string();
    // The handler writes one EMF line per record: discarded here (on Lambda, a line to stdout).
    tocsin::telemetry::set_metrics_sink(Box::new(std::io::sink()));
    let foreign = CountingPorts::default();
    let key = IdempotencyKey::parse(&"ab".repeat(32)).map_err(|e| BenchError::Process(e.to_string()))?;
    let mut own = CountingPorts::default();
    for line in &lines {
        let id = message_id(line).ok_or_else(|| BenchError::Process("a generated record has no message id".into()))?;
        let v: serde_json::Value = serde_json::from_str(&line.message)?;
        let to = v.pointer("/delivery/destination").and_then(|d| d.as_str()).unwrap_or("+14155550100");
        let phone = PhoneNumber::parse(to).map_err(|e| BenchError::Process(e.to_string()))?;
        own.index.insert(id, (key.clone(), phone));
    }
    Ok(vec![
        run_workload("another application's SMS (no index entry: kept as an orphan)", &text, n, foreign)?,
        run_workload(
            "tocsin's own (indexed: applied to its intent; 9 in 10 delivered, 1 in 10 failed)",
            &text,
            n,
            own,
        )?,
    ])
}

/// The real status binary on a 500-record event of other applications' SMS against the emulator:
/// its CPU time (all threads) and the calls it made.
pub async fn measure_emulated() -> Result<Emulated> {
    use tocsin_tests::Pipeline;
    let p = Pipeline::start().await;
    let group = p.stack.log_group("SmsSuccessLogGroup").to_owned();
    let lines = delivery_lines(EMULATOR_RECORDS, Utc::now() - chrono::Duration::hours(1));
    let event = envelope(&group, &lines);
    let mut env: Vec<(String, String)> = p.stack.function_env("StatusFunction")?.into_iter().collect();
    env.extend(p.emulator.aws_env(&tocsin_harness::Principal::function("StatusFunction")));
    let binary = crate::binaries::release_binary("status")?;
    p.emulator.start_recording().await?;
    let run = crate::function::run_once(&binary, &env, "status", event, Duration::from_secs(240)).await?;
    let ops = p.emulator.stop_recording().await?;
    let calls = ops.into_iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o).or_insert(0) += 1;
        m
    });
    let (Some(init), Some(at_answer)) = (run.init_cpu, run.cpu_at_answer) else {
        return Err(BenchError::Process("the status binary's CPU time could not be read".into()));
    };
    let answer = match &run.answer {
        Some(tocsin_harness::runtime_api::Invocation::Response(v)) => format!("response {v}"),
        Some(tocsin_harness::runtime_api::Invocation::Error(v)) => format!("error {v}"),
        None => "no answer within 240 s".into(),
    };
    Ok(Emulated {
        records: EMULATOR_RECORDS,
        cpu: at_answer.saturating_sub(init),
        wall: run.to_first_response.saturating_sub(run.to_first_next),
        calls,
        answer,
    })
}

/// Both measurements: the real binary against the emulator first (it starts the test pipeline,
/// which installs its own metrics sink), then the in-memory workloads.
pub async fn measure() -> Result<StatusRate> {
    let emulated = measure_emulated().await.map_err(|e| e.to_string());
    // Its own thread and runtime, outside the bench's.
    let thread = std::thread::spawn(measure_in_memory);
    let workloads = tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(|e| BenchError::Process(format!("status throughput task: {e}")))?
        .map_err(|_| BenchError::Process("the status throughput thread panicked".into()))??;
    Ok(StatusRate {
        workloads,
        emulated,
        memory_mb: crate::cold_start::deployed_memory_mb("StatusFunction").ok(),
        timeout_s: status_timeout_s(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counting_ports_count_one_batch_lookup_per_hundred_ids_and_answer_only_indexed_ids() {
        let key = IdempotencyKey::parse(&"ab".repeat(32)).expect("a valid key");
        let phone = PhoneNumber::parse("+14155550100").expect("a valid number");
        let mut ports = CountingPorts::default();
        ports.index.insert("ours".into(), (key, phone));
        let ids: Vec<String> =
            std::iter::once("ours".to_owned()).chain((0..150).map(|i| format!("foreign-{i}"))).collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let found = rt.block_on(ports.lookup_many(&ids)).expect("an answer");
        assert_eq!(found.len(), 1);
        assert!(found.contains_key("ours"));
        let calls = ports.tally.take();
        assert_eq!(calls.get("BatchGetItem (MSG# index, ≤ 100 keys)"), Some(&2));
        assert_eq!(calls.values().sum::<usize>(), 2);
    }
}
