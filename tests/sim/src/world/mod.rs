//! The simulated AWS the handlers run in: the ledger and recipients tables (DynamoDB), the queues
//! (SQS), SMS publishing and the carriers behind it (SNS), the delivery-status log groups and
//! their subscription (CloudWatch Logs) — each with the semantics AWS gives and the adapters rely
//! on, and the faults AWS produces. The [`Oracle`] watches it all from outside the handlers.

pub mod carriers;
pub mod eum;
pub mod gsi;
pub mod ledger;
pub mod logs;
pub mod networks;
pub mod people;
pub mod registry;
pub mod second_stack;
pub mod sms;
pub mod sqs;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tocsin::ports::{Clock, Entropy};

use crate::exec::{CrashAt, Fault, Millis, OpKind, Sim, Verdict, to_ms, to_time};
use crate::oracle::Oracle;
use ledger::Ledger;
use logs::Logs;
use registry::Registry;
use sms::Sms;
use sqs::Queues;

/// How often each fault happens, per op (a run draws its plan from its seed and workload).
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// A request fails before it took effect (throttled, 5xx).
    pub error_before: f64,
    /// A write took effect and its answer was lost (beyond the SDK's retries).
    pub error_after: f64,
    /// A write took effect, its answer was lost, and the SDK sent it again.
    pub retried: f64,
    /// An invocation ends somewhere in its first ops (a crash): how often.
    pub crash: f64,
    /// A crash that persists: the same function's next invocations crash at the same point, for
    /// up to `crash_streak_ms` (from 30 s) — a bad deploy, a poison input, a dependency that
    /// hangs — not one independent draw per invocation. How often a crash starts a streak.
    pub crash_streak: f64,
    pub crash_streak_ms: Millis,
    /// A request is slow (a tail latency of up to `slow_ms`).
    pub slow: f64,
    pub slow_ms: Millis,
    /// How far a GSI may lag behind the table.
    pub gsi_lag_ms: Millis,
    /// An index write that lags by minutes — longer than a claim lease (2 minutes) — not
    /// seconds: AWS promises no bound on GSI propagation, and an index whose writes are throttled
    /// falls behind. How often, per item write, and how far at most (from 2 minutes).
    pub gsi_lag_long: f64,
    pub gsi_lag_long_ms: Millis,
    /// A publish times out: the outcome is unknown (the SMS went out or not, half each).
    pub publish_timeout: f64,
    /// A publish is refused with a 5xx (nothing sent).
    pub publish_5xx: f64,
    /// A delivery record is never written (the carrier sent no receipt).
    pub record_lost: f64,
    /// A delivery record is written twice (two log events).
    pub record_twice: f64,
    /// The subscription hands a batch to the status function twice.
    pub batch_twice: f64,
    /// A log search is throttled.
    pub search_throttled: f64,
    /// An operation (a table, an index, the partition behind one call) that fails every attempt
    /// for a while — a hot key, a throttled index — not one draw at a time: how often one starts,
    /// per op, and how long it lasts at most (from 10 s).
    pub outage: f64,
    pub outage_ms: Millis,
    /// A log event takes minutes (up to `ingestion_slow_ms`), not seconds, to become searchable.
    /// CloudWatch Logs ingests every event with some delay (1–10 s here, always); it promises no
    /// bound, and on a bad day it is minutes.
    pub ingestion_slow: f64,
    pub ingestion_slow_ms: Millis,
    /// The schedule fires twice for one minute.
    pub sweep_twice: f64,
    /// SQS hands a message a sender is still working on to a second sender: a standard queue
    /// delivers at least once, and a visibility timeout can lapse while the first still works.
    /// The second receive's handle is the latest, so the first sender's delete does not remove it.
    pub sqs_duplicate: f64,
    /// Lambda throttles tocsin's functions for a while (from 30 s to `lambda_throttled_ms`): none
    /// reserves concurrency by default, and another stack's burst can take the account's
    /// unreserved concurrency. Each invoker does what AWS does: the sender's event source mapping
    /// keeps the batch in flight and retries with backoff, and gives the batch back to the queue
    /// once the messages' visibility timeout lapses (each receive counted toward the dead-letter
    /// queue); Lambda's asynchronous queue retries the status function's and the sweep's events
    /// with backoff, a sweep's only within its maximum event age; the producer's HTTP call fails
    /// and is sent again with backoff. How often an episode starts, per minute.
    pub lambda_throttled: f64,
    pub lambda_throttled_ms: Millis,
}

impl FaultPlan {
    pub fn none() -> Self {
        FaultPlan {
            error_before: 0.0,
            error_after: 0.0,
            retried: 0.0,
            crash: 0.0,
            crash_streak: 0.0,
            crash_streak_ms: 0,
            slow: 0.0,
            slow_ms: 0,
            gsi_lag_ms: 0,
            gsi_lag_long: 0.0,
            gsi_lag_long_ms: 0,
            publish_timeout: 0.0,
            publish_5xx: 0.0,
            record_lost: 0.0,
            record_twice: 0.0,
            batch_twice: 0.0,
            search_throttled: 0.0,
            ingestion_slow: 0.0,
            ingestion_slow_ms: 0,
            outage: 0.0,
            outage_ms: 0,
            sweep_twice: 0.0,
            sqs_duplicate: 0.0,
            lambda_throttled: 0.0,
            lambda_throttled_ms: 0,
        }
    }

    /// A harsh account: every kind of fault, often.
    pub fn harsh() -> Self {
        FaultPlan {
            error_before: 0.01,
            error_after: 0.005,
            retried: 0.005,
            crash: 0.05,
            crash_streak: 0.05,
            crash_streak_ms: 120_000,
            slow: 0.01,
            slow_ms: 3_000,
            gsi_lag_ms: 2_000,
            gsi_lag_long: 0.002,
            gsi_lag_long_ms: 600_000,
            publish_timeout: 0.02,
            publish_5xx: 0.02,
            record_lost: 0.02,
            record_twice: 0.02,
            batch_twice: 0.05,
            search_throttled: 0.1,
            ingestion_slow: 0.05,
            ingestion_slow_ms: 300_000,
            outage: 0.0005,
            outage_ms: 120_000,
            sweep_twice: 0.1,
            sqs_duplicate: 0.02,
            lambda_throttled: 0.003,
            lambda_throttled_ms: 600_000,
        }
    }

    /// Swarm testing: each kind of fault on or off, and how often, drawn independently (a run
    /// with few kinds of fault, each frequent, reaches corners a run with all of them rarely
    /// does not).
    pub fn swarm(rng: &mut SmallRng) -> Self {
        let mut knob = |max: f64| if rng.random::<bool>() { 0.0 } else { rng.random_range(0.0..max) };
        let mut plan = FaultPlan {
            error_before: knob(0.05),
            error_after: knob(0.03),
            retried: knob(0.03),
            crash: knob(0.4),
            crash_streak: knob(0.3),
            crash_streak_ms: 300_000,
            slow: knob(0.05),
            slow_ms: 3_000,
            gsi_lag_ms: knob(5_000.0) as Millis,
            gsi_lag_long: 0.0,
            gsi_lag_long_ms: 900_000,
            publish_timeout: knob(0.2),
            publish_5xx: knob(0.1),
            record_lost: knob(0.05),
            record_twice: knob(0.1),
            batch_twice: knob(0.2),
            search_throttled: knob(0.5),
            ingestion_slow: knob(0.3),
            ingestion_slow_ms: 300_000,
            outage: knob(0.002),
            outage_ms: 300_000,
            sweep_twice: knob(0.3),
            // Drawn last: every earlier knob, and so every earlier plan, is as before.
            sqs_duplicate: knob(0.3),
            lambda_throttled: 0.0,
            // Long enough for a batch to be given back eight times: the dead-letter queue.
            lambda_throttled_ms: 1_800_000,
        };
        plan.gsi_lag_long = knob(0.02);
        plan.lambda_throttled = knob(0.02);
        plan
    }

    /// Scaled by `x` (0: none, 1: as given).
    pub fn scaled(&self, x: f64) -> Self {
        FaultPlan {
            error_before: self.error_before * x,
            error_after: self.error_after * x,
            retried: self.retried * x,
            crash: self.crash * x,
            crash_streak: self.crash_streak * x,
            crash_streak_ms: self.crash_streak_ms,
            slow: self.slow * x,
            slow_ms: self.slow_ms,
            gsi_lag_ms: (self.gsi_lag_ms as f64 * x) as Millis,
            gsi_lag_long: self.gsi_lag_long * x,
            gsi_lag_long_ms: self.gsi_lag_long_ms,
            publish_timeout: self.publish_timeout * x,
            publish_5xx: self.publish_5xx * x,
            record_lost: self.record_lost * x,
            record_twice: self.record_twice * x,
            batch_twice: self.batch_twice * x,
            search_throttled: self.search_throttled * x,
            ingestion_slow: self.ingestion_slow * x,
            ingestion_slow_ms: self.ingestion_slow_ms,
            outage: self.outage * x,
            outage_ms: self.outage_ms,
            sweep_twice: self.sweep_twice * x,
            sqs_duplicate: self.sqs_duplicate * x,
            lambda_throttled: self.lambda_throttled * x,
            lambda_throttled_ms: self.lambda_throttled_ms,
        }
    }
}

/// Something the world does at a time of its own: a workload's request, a delivery record
/// written by a carrier, a subscription batch, a schedule.
#[derive(Debug, Clone)]
pub enum WorldEvent {
    /// Request `n` of the workload reaches intake (or its client retries it).
    Request(usize),
    /// The sender's event source mapping looks for messages.
    Poll,
    /// A carrier's delivery record `n` is written to its log group.
    Record(u64),
    /// The subscription hands the pending log events of a group to the status function.
    Deliver(logs::Group),
    /// Lambda retries a failed status invocation of batch `n`.
    StatusRetry(u64),
    /// The sweep's schedule fires.
    Sweep,
    /// Operator action `n` of the workload.
    Operator(usize),
    /// Acknowledgement `n` of the workload (`Workload::acks_at`).
    Acknowledge(usize),
    /// Other applications' SMS records appear in the log groups.
    Foreign,
    /// A second tocsin stack pages request `n`'s recipient for the same business event.
    SecondStack(usize),
    /// The event source mapping invokes the sender again with the batch poller `n` holds, after
    /// Lambda throttled it.
    EsmInvoke(usize),
    /// Lambda's asynchronous queue invokes the sweep again with the schedule's event of this
    /// time, after it was throttled.
    SweepRetry(Millis),
    /// Reply `n` (`People::replies`) is on the replies queue and the event source mapping hands
    /// it to the replies function; it was received `receives` times before.
    Reply { n: usize, receives: u32 },
}

/// The coverage table's section for Lambda throttling tocsin's functions, by invoker.
pub const THROTTLE_COVERAGE: &str = "Lambda throttling tocsin's functions";

/// The coverage table's section for acknowledgements (issue 37: someone takes an alert).
/// The coverage section of escalation chains: where each alert's chain came from.
pub const CHAIN_COVERAGE: &str = "escalation chain";
pub const ACK_COVERAGE: &str = "Acknowledgements";
/// The coverage section of operators' resends, by how each ended.
pub const RESEND_COVERAGE: &str = "Operator resends";

/// Per-op counts: every op label by how it ended (the coverage table's crash points).
#[derive(Debug, Default, Clone)]
pub struct Coverage {
    pub ops: std::collections::HashMap<(&'static str, &'static str), u64>,
    /// State changes of intents as the ledger applied them, by writer.
    pub transitions: BTreeMap<(String, String), u64>,
}

impl Coverage {
    /// Counts `n` more of `what` under `label`.
    pub fn count(&mut self, label: &'static str, what: &'static str, n: u64) {
        *self.ops.entry((label, what)).or_default() += n;
    }

    /// Every count under `label` (a section of the coverage table), by what it counts.
    pub fn section(&self, label: &str) -> BTreeMap<&'static str, u64> {
        self.ops.iter().filter(|((l, _), _)| *l == label).map(|((_, what), n)| (*what, *n)).collect()
    }

    pub fn merge(&mut self, other: &Coverage) {
        for (k, v) in &other.ops {
            *self.ops.entry(*k).or_default() += v;
        }
        for (k, v) in &other.transitions {
            *self.transitions.entry(k.clone()).or_default() += v;
        }
    }
}

pub struct World {
    pub now: Millis,
    rng: SmallRng,
    pub faults: FaultPlan,
    pub ledger: Ledger,
    pub registry: Registry,
    pub carriers: carriers::Carriers,
    pub sqs: Queues,
    pub sms: Sms,
    pub logs: Logs,
    /// The people the SMS reach, and their replies.
    pub people: people::People,
    pub oracle: Oracle,
    pub coverage: Coverage,
    /// Events the world's own actions schedule (drained by the driver).
    pub outbox: Vec<(Millis, WorldEvent)>,
    /// Verdicts a test forces on the next op with a label (the contract tests' faults).
    forced: Vec<(&'static str, Verdict)>,
    /// Operations failing every attempt until a time (`FaultPlan::outage`), by label.
    pub outages: BTreeMap<&'static str, Millis>,
    /// Lambda throttles tocsin's functions until this time (`FaultPlan::lambda_throttled`).
    pub throttled_until: Millis,
}

impl World {
    pub fn new(seed: u64, faults: FaultPlan, sms: Sms) -> Self {
        World {
            now: 0,
            rng: SmallRng::seed_from_u64(seed ^ 0x5eed_0f70_c51a),
            faults,
            ledger: Ledger::default(),
            registry: Registry::default(),
            carriers: carriers::Carriers::default(),
            sqs: Queues::default(),
            sms,
            logs: Logs::default(),
            people: people::People::default(),
            oracle: Oracle::default(),
            coverage: Coverage::default(),
            outbox: Vec::new(),
            forced: Vec::new(),
            outages: BTreeMap::new(),
            throttled_until: 0,
        }
    }

    /// Whether Lambda throttles an invocation of one of tocsin's functions now.
    pub fn lambda_throttles(&self) -> bool {
        self.now < self.throttled_until
    }

    /// Another minute of the account's life: it may start an episode of throttling
    /// (`FaultPlan::lambda_throttled`).
    pub fn maybe_start_throttling(&mut self) {
        if self.lambda_throttles() || !self.chance(self.faults.lambda_throttled) {
            return;
        }
        let longest = self.faults.lambda_throttled_ms.max(30_000);
        self.throttled_until = self.now + self.between(30_000, longest);
        self.coverage.count(THROTTLE_COVERAGE, "throttling began", 1);
    }

    /// A number from the world's own stream (message ids, shards, carrier draws).
    pub fn draw(&mut self) -> u64 {
        self.rng.random()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random::<f64>() < p
    }

    pub fn between(&mut self, lo: Millis, hi: Millis) -> Millis {
        if hi <= lo { lo } else { self.rng.random_range(lo..=hi) }
    }

    /// How long a log event written now takes to become searchable (`FilterLogEvents`): seconds
    /// always, minutes when the fault plan says so. The subscription is not delayed by it.
    pub fn ingestion_delay(&mut self) -> Millis {
        if self.chance(self.faults.ingestion_slow) {
            let max = self.faults.ingestion_slow_ms.max(10_000);
            self.between(10_000, max)
        } else {
            self.between(1_000, 10_000)
        }
    }

    pub fn gsi_lag(&mut self) -> Millis {
        if self.chance(self.faults.gsi_lag_long) {
            let max = self.faults.gsi_lag_long_ms.max(120_000);
            return self.between(120_000, max);
        }
        let max = self.faults.gsi_lag_ms;
        self.between(0, max)
    }

    pub fn schedule(&mut self, at: Millis, event: WorldEvent) {
        self.outbox.push((at, event));
    }

    /// Forces `verdict` on the next op labelled `label` (a fault a contract test injects on both
    /// sides).
    pub fn force(&mut self, label: &'static str, verdict: Verdict) {
        self.forced.push((label, verdict));
    }

    /// The verdict forced on this op, if any (taken).
    pub fn forced(&mut self, label: &'static str) -> Option<Verdict> {
        if self.forced.is_empty() {
            return None;
        }
        let i = self.forced.iter().position(|(l, _)| *l == label)?;
        Some(self.forced.remove(i).1)
    }

    /// How long a request takes to come back.
    pub fn latency(&mut self, kind: OpKind, label: &'static str, rng: &mut SmallRng) -> Millis {
        let (lo, hi) = match (kind, label.split(' ').next()) {
            (OpKind::Publish, _) => (30, 300),
            (_, Some("SQS")) => (4, 25),
            (_, Some("CloudWatch")) => (40, 400),
            (_, Some("SNS")) => (20, 120),
            _ => (2, 14),
        };
        let slow = self.faults.slow > 0.0 && rng.random::<f64>() < self.faults.slow;
        if slow { rng.random_range(hi..=hi.max(self.faults.slow_ms)) } else { rng.random_range(lo..=hi) }
    }

    /// What happens to an op at its due time.
    pub fn verdict(&mut self, kind: OpKind, label: &'static str, crash: bool, rng: &mut SmallRng) -> Verdict {
        if crash {
            let after = kind != OpKind::Read && rng.random::<bool>();
            return Verdict::Crash(if after { CrashAt::After } else { CrashAt::Before });
        }
        if kind == OpKind::Publish {
            return Verdict::Answer;
        }
        // An outage fails every attempt of its operation until it ends; one may start now.
        if self.outages.get(label).is_some_and(|until| self.now < *until) {
            return Verdict::Fault(Fault::Before);
        }
        if self.faults.outage > 0.0 && rng.random::<f64>() < self.faults.outage {
            let until = self.now + rng.random_range(10_000..=self.faults.outage_ms.max(10_000));
            self.outages.insert(label, until);
            self.coverage.count(label, "outage began", 1);
            return Verdict::Fault(Fault::Before);
        }
        let f = &self.faults;
        let y: f64 = rng.random();
        if y < f.error_before {
            return Verdict::Fault(Fault::Before);
        }
        if kind == OpKind::Read {
            return Verdict::Answer;
        }
        let y = y - f.error_before;
        if y < f.error_after {
            return Verdict::Fault(Fault::After);
        }
        if y - f.error_after < f.retried {
            return Verdict::Fault(Fault::Retried);
        }
        Verdict::Answer
    }

    pub fn note_op(&mut self, label: &'static str, _kind: OpKind, verdict: &Verdict) {
        let how = match verdict {
            Verdict::Answer => "answered",
            Verdict::Fault(Fault::Before) => "failed before",
            Verdict::Fault(Fault::After) => "answer lost",
            Verdict::Fault(Fault::Retried) => "retried after loss",
            Verdict::Crash(CrashAt::Before) => "crash before",
            Verdict::Crash(CrashAt::After) => "crash after",
        };
        self.coverage.count(label, how, 1);
    }

    pub fn time(&self) -> DateTime<Utc> {
        to_time(self.now)
    }
}

/// The handlers' clock and entropy in the simulation: simulated time, the seeded RNG.
#[derive(Clone)]
pub struct SimClock {
    pub sim: Sim,
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        to_time(self.sim.now())
    }

    fn sleep_until(&self, at: DateTime<Utc>) -> impl std::future::Future<Output = ()> + Send {
        self.sim.sleep_until(to_ms(at))
    }
}

impl Entropy for SimClock {
    fn next_u64(&self) -> u64 {
        self.sim.lock().world.draw()
    }
}
