//! One simulation run: a scenario drawn from a seed (workload, storm mode, faults), the real
//! handlers wired to the simulated world as Lambda wires them (API Gateway → intake; the SQS event
//! source mapping → sender, its batches and concurrency; CloudWatch Logs subscription → status,
//! with Lambda's asynchronous retries; the schedule → escalation, overlapping and firing twice),
//! driven to quiescence, with every guarantee checked on the way and at the end.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use intake::Submitted;
use tocsin::domain::Origin;
use tocsin::domain::template::Catalog;

use crate::deployment::Deployment;
use crate::exec::{Event, Millis, Sim, TaskId, Tasks, fire_timer, resolve_op, to_time};
use crate::invariants;
use crate::oracle::Violation;
use crate::workload::{ALL_KINDS, Kind, Workload};
use crate::world::THROTTLE_COVERAGE as THROTTLED;
use crate::world::ledger::SimLedger;
use crate::world::logs::{Group, SimSearch};
use crate::world::registry::SimRegistry;
use crate::world::sms::{Provider, SimGateway, Sms, record_json};
use crate::world::sqs::{QueueName, SimSqs};
use crate::world::{Coverage, FaultPlan, SimClock, World, WorldEvent};
use tocsin::domain::roster::RosterEntry;

pub type SenderFn = sender::Sender<SimLedger, SimRegistry, SimGateway, SimSqs, SimClock>;
pub type IntakeFn = intake::Intake<SimLedger, SimSqs, SimSqs, SimClock, SimRegistry, SimRegistry>;
/// How long the schedule runs on without faults after the workload's horizon before the run is
/// judged at quiescence: the longest backoff of an unknown outcome's log search (an hour) and a
/// few sweeps more. The invariants checked at every step hold throughout the storm regardless.
const CALM_MS: Millis = 65 * 60_000;

/// The share of other senders' SMS that go to phones tocsin pages (the rest to numbers it never
/// alerts): enough that, over a CI slice of seeds, some land in the window of an alert whose own
/// publish never went out.
const FOREIGN_TO_RECIPIENTS: f64 = 0.25;

pub type StatusFn = status::StatusHandler<SimLedger, SimRegistry, SimClock>;
pub type EscalationFn = escalation::Escalator<SimLedger, SimSqs, SimSqs, SimSearch, SimRegistry, SimClock>;
pub type RepliesFn = replies::Replies<SimLedger, SimRegistry, SimGateway, SimClock>;

/// Where every run's clock starts: a fixed instant, so runs are the same whatever the day.
pub const EPOCH_MS: Millis = 1_795_000_000_000;

/// Everything a run is, from one number.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    /// The largest workload the seed could draw (part of what the seed stands for: replaying a
    /// seed needs the same bound).
    pub max_alerts: usize,
    pub kind: Kind,
    pub alerts: usize,
    pub storm: bool,
    pub faults: FaultPlan,
    /// The SMS provider the stack sends through.
    pub provider: Provider,
}

impl Scenario {
    /// Like [`Self::from_seed`], with the workload's kind, size, storm mode and faults given (the
    /// benchmark's scenarios).
    /// Sends through SNS; [`Self::through`] chooses the other provider.
    pub fn fixed(seed: u64, kind: Kind, alerts: usize, storm: bool, faults: FaultPlan) -> Self {
        Scenario { seed, max_alerts: alerts, kind, alerts, storm, faults, provider: Provider::Sns }
    }

    /// The same scenario sending through `provider`.
    pub fn through(mut self, provider: Provider) -> Self {
        self.provider = provider;
        self
    }

    /// The scenario seed `seed` stands for: workload kind, size, storm mode and how harsh the
    /// world is, all drawn from it.
    pub fn from_seed(seed: u64, max_alerts: usize) -> Self {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let kind = ALL_KINDS[rng.random_range(0..ALL_KINDS.len())];
        let alerts = rng.random_range(1..=max_alerts.max(1));
        let storm = rng.random::<bool>();
        let faults = match rng.random_range(0..4) {
            0 => FaultPlan::none(),
            1 => FaultPlan::harsh(),
            _ => FaultPlan::swarm(&mut rng),
        };
        // Drawn last: the draws before it, and so every seed's scenario under SNS, are unchanged.
        let provider = if rng.random::<bool>() { Provider::EndUserMessaging } else { Provider::Sns };
        Scenario { seed, max_alerts, kind, alerts, storm, faults, provider }
    }
}

/// What one run found and did.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: Scenario,
    pub violations: Vec<Violation>,
    /// Alert lifecycles simulated (distinct alerts driven to quiescence).
    pub lifecycles: usize,
    pub sms: u64,
    pub escalations: u64,
    pub duplicate_escalations: u64,
    pub parked_batches: u64,
    pub invocations: u64,
    pub ops: u64,
    pub simulated_ms: Millis,
    pub coverage: Coverage,
    /// Each chain level's start after the moment its level before stopped waiting (ms; negative
    /// when it moved on early, for a reason it says): the chain's timing error.
    pub chain_lateness: Vec<Millis>,
    /// The last steps before the end (or before the first violation), for the failure report.
    pub trace: Vec<String>,
    /// The story of the first violation's alert: its states, observations and record.
    pub story: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One step of a run, for the failure report's trace (formatted only when reported).
#[derive(Debug, Clone)]
enum Step {
    Start { task: TaskId, what: String },
    End { task: TaskId, returned: bool },
    Op { task: Option<TaskId>, label: &'static str, verdict: crate::exec::Verdict, abandoned: Option<bool> },
    Timeout { task: TaskId },
    World(WorldEvent),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Start { task, what } => write!(f, "start #{task} {what}"),
            Step::End { task, returned } => write!(f, "end #{task} {}", if *returned { "returned" } else { "KILLED" }),
            Step::Op { task, label, verdict, abandoned } => {
                let who = task.map_or("-".to_owned(), |t| format!("#{t}"));
                match abandoned {
                    Some(acted) => write!(f, "{who} {label} (caller gone; acted: {acted})"),
                    None => write!(f, "{who} {label} -> {verdict:?}"),
                }
            }
            Step::Timeout { task } => write!(f, "timeout #{task}"),
            Step::World(e) => write!(f, "{e:?}"),
        }
    }
}

enum Done {
    Intake(Submitted),
    Sender(SqsBatchResponse),
    Status(bool),
    /// Whether the run was clean (complete, with no intent's work failed), and the carriers its
    /// carrier view judged degraded by every application's traffic, if it ran.
    Escalation {
        clean: bool,
        verdict: Option<crate::oracle::CarrierVerdict>,
    },
    Operator,
    Replies(SqsBatchResponse),
}

/// A batch the event source mapping received and has not yet handed to an invocation.
struct HeldBatch {
    event: SqsEvent,
    receipts: Vec<String>,
    /// When the first of its messages turns visible again.
    lapses_at: Millis,
    /// Lambda throttled its invocation this many times.
    throttles: u32,
}

enum Meta {
    Intake { request: usize },
    Sender { slot: usize, receipts: Vec<String> },
    Status { batch: u64, started: Millis },
    Escalation { started: Millis },
    Operator,
    Replies { reply: usize, receives: u32 },
}

impl Meta {
    /// The function an invocation runs (a crash streak is one function's).
    fn function(&self) -> &'static str {
        match self {
            Meta::Intake { .. } => "intake",
            Meta::Sender { .. } => "sender",
            Meta::Status { .. } => "status",
            Meta::Escalation { .. } => "escalation",
            Meta::Operator => "operator",
            Meta::Replies { .. } => "replies",
        }
    }
}

/// A deployment's variations a workload chooses: storm mode, the SMS rate, `SmsPartsPerHour`,
/// whether it takes replies.
type Variant = (bool, u32, Option<u32>, bool);

fn deployment(storm: bool, sms_rate: u32, parts_per_hour: Option<u32>, replies: bool) -> Deployment {
    static CACHE: OnceLock<Mutex<BTreeMap<Variant, Deployment>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut cache = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry((storm, sms_rate, parts_per_hour, replies))
        .or_insert_with(|| {
            let rate = sms_rate.to_string();
            let parts = parts_per_hour.map(|p| p.to_string());
            let mut overrides =
                vec![("StormMode", if storm { "on" } else { "off" }), ("SmsRatePerSecond", rate.as_str())];
            if let Some(p) = &parts {
                overrides.push(("SmsPartsPerHour", p.as_str()));
            }
            if replies {
                overrides.push(("Replies", "on"));
            }
            Deployment::workspace(&overrides).unwrap_or_else(|e| panic!("the simulation needs template.yaml: {e}"))
        })
        .clone()
}

struct Driver {
    sim: Sim,
    tasks: Tasks<Done>,
    meta: BTreeMap<TaskId, Meta>,
    /// Functions crashing at the same point until a time (`FaultPlan::crash_streak`).
    crash_streaks: BTreeMap<&'static str, (Millis, u32)>,
    deployment: Deployment,
    workload: Workload,
    intake: Arc<IntakeFn>,
    senders: Vec<Arc<SenderFn>>,
    busy: Vec<bool>,
    /// The batch each poller holds while Lambda throttles its invocation.
    held: Vec<Option<HeldBatch>>,
    status: Arc<StatusFn>,
    escalation: Arc<EscalationFn>,
    replies: Arc<RepliesFn>,
    poll_at: Option<Millis>,
    tries: BTreeMap<usize, u32>,
    /// Times Lambda throttled each request's intake call.
    throttled_requests: BTreeMap<usize, u32>,
    horizon: Millis,
    invocations: u64,
    trace: VecDeque<(Millis, Step)>,
    first_violation_trace: Option<Vec<String>>,
    foreign_seq: u64,
    unqueued: BTreeMap<tocsin::domain::IdempotencyKey, Millis>,
    /// The calm after the storm has begun (see [`CALM_MS`]).
    calm: bool,
    /// The other applications' traffic has stopped at the horizon (it may resume for the calm).
    foreign_stopped: bool,
    provider: Provider,
}

/// Steps kept for the failure report (`TOCSIN_SIM_TRACE_KEEP` keeps more, for a replay).
fn trace_keep() -> usize {
    static KEEP: OnceLock<usize> = OnceLock::new();
    *KEEP.get_or_init(|| std::env::var("TOCSIN_SIM_TRACE_KEEP").ok().and_then(|v| v.parse().ok()).unwrap_or(400))
}

impl Driver {
    fn new(s: &Scenario) -> Driver {
        let workload = Workload::generate(s.kind, s.alerts, s.seed);
        // People answer only where the stack can hear them: End User Messaging's two-way numbers.
        let answer = s.provider == Provider::EndUserMessaging && crate::workload::replies_in_the_world();
        let deployment = deployment(s.storm, workload.sms_rate, workload.parts_per_hour, answer);
        let mut sms = Sms::new(workload.sms_rate);
        sms.carriers = workload.carriers.clone();
        sms.networks = workload.networks.from(EPOCH_MS);
        let networks_did = sms.networks.what();
        sms.spend_exhausted_from = workload.spend_exhausted_at.map(|t| EPOCH_MS + t);
        sms.breaker = Some(deployment.sender.spend_ceiling.parts_per_hour);
        let mut world = World::new(s.seed, s.faults.clone(), sms);
        world.now = EPOCH_MS;
        world.people.answer = answer;
        for what in networks_did {
            world.coverage.count(crate::world::networks::COVERAGE, what, 1);
        }
        // The operator's roster: the workload's people (+1206555…).
        world.registry.roster = ["+1206555"].iter().filter_map(|e| RosterEntry::parse(e).ok()).collect();
        // The template's chain, set before the first alert (`tocsin chains set`).
        world.registry.chain_policies = workload
            .chain_policy
            .iter()
            .map(|spec| {
                tocsin::domain::chain_policy::ChainPolicy::parse(
                    "payment_failed",
                    spec,
                    crate::exec::to_time(EPOCH_MS - 3_600_000),
                    Catalog::builtin(),
                )
                .unwrap_or_else(|e| panic!("the workload's chain policy: {e}"))
            })
            .collect();
        let vis = |d: std::time::Duration| d.as_millis() as Millis;
        world.sqs.configure(QueueName::Send, vis(deployment.send_visibility), Some(deployment.send_max_receives));
        world.sqs.configure(QueueName::Urgent, vis(deployment.urgent_visibility), Some(deployment.urgent_max_receives));
        let sim = Sim::new(s.seed, EPOCH_MS, world);
        let clock = SimClock { sim: sim.clone() };
        let ledger = |shards: u32| SimLedger { sim: sim.clone(), shards };
        let sqs = SimSqs::new(sim.clone());
        let registry = SimRegistry { sim: sim.clone() };
        let d = &deployment;
        let intake = Arc::new(intake::Intake {
            store: ledger(d.intake.due_shards),
            queue: sqs.clone(),
            rejects: sqs.clone(),
            clock: clock.clone(),
            roster: intake::roster::RosterCache::new(registry.clone()),
            policies: intake::chain_policy::PolicyCache::new(registry.clone()),
            config: d.intake.clone(),
            catalog: Catalog::builtin(),
        });
        let senders = (0..d.esm.max_concurrency)
            .map(|_| {
                Arc::new(sender::Sender::new(
                    ledger(d.intake.due_shards),
                    registry.clone(),
                    SimGateway::of(s.provider, sim.clone()),
                    SimSqs::new(sim.clone()),
                    clock.clone(),
                    d.sender.clone(),
                ))
            })
            .collect::<Vec<_>>();
        let status = Arc::new(status::StatusHandler {
            store: ledger(d.intake.due_shards),
            registry: registry.clone(),
            clock: clock.clone(),
            config: d.status.clone(),
            carriers_written: status::CarriersWritten::default(),
        });
        let replies = Arc::new(replies::Replies {
            store: ledger(d.intake.due_shards),
            registry: registry.clone(),
            gateway: SimGateway::of(Provider::EndUserMessaging, sim.clone()),
            clock: clock.clone(),
            config: d.replies.clone(),
        });
        let escalation = Arc::new(escalation::Escalator {
            store: ledger(d.escalation.due_shards),
            send_queue: sqs.clone(),
            escalations: sqs.clone(),
            logs: SimSearch::of(s.provider, sim.clone(), &d.sender.stack),
            registry,
            clock,
            config: d.escalation.clone(),
        });
        let horizon = EPOCH_MS + workload.horizon() + 15 * 60_000;
        let busy = vec![false; senders.len()];
        let held = (0..senders.len()).map(|_| None).collect();
        Driver {
            tasks: Tasks::new(sim.clone()),
            sim,
            meta: BTreeMap::new(),
            crash_streaks: BTreeMap::new(),
            deployment,
            workload,
            intake,
            senders,
            busy,
            held,
            status,
            escalation,
            replies,
            poll_at: None,
            tries: BTreeMap::new(),
            throttled_requests: BTreeMap::new(),
            horizon,
            invocations: 0,
            trace: VecDeque::new(),
            first_violation_trace: None,
            foreign_seq: 0,
            foreign_stopped: false,
            unqueued: BTreeMap::new(),
            calm: false,
            provider: s.provider,
        }
    }

    fn schedule(&self, at: Millis, e: WorldEvent) {
        self.sim.lock().core.schedule(at, Event::World(e));
    }

    fn note(&mut self, step: Step) {
        if self.trace.len() >= trace_keep() {
            self.trace.pop_front();
        }
        self.trace.push_back((self.sim.now(), step));
    }

    fn trace_lines(&self) -> Vec<String> {
        self.trace.iter().map(|(at, step)| format!("{:>10.3}s {step}", (at - EPOCH_MS) as f64 / 1000.0)).collect()
    }

    fn spawn(&mut self, fut: crate::exec::TaskFuture<Done>, timeout: std::time::Duration, meta: Meta, what: String) {
        let deadline = self.sim.now() + timeout.as_millis() as Millis;
        let id = self.tasks.spawn(fut, Some(deadline));
        let function = meta.function();
        let now = self.sim.now();
        let streak = self.crash_streaks.get(function).filter(|(until, _)| now < *until).map(|(_, after)| *after);
        let crash = match streak {
            // A crash that persists: this invocation ends where the last ones did.
            Some(after) => Some(after),
            None => {
                let mut st = self.sim.lock();
                let p = st.world.faults.crash;
                // Where it crashes: most invocations make a few dozen calls; early ones more often.
                let crash = st.world.chance(p).then(|| {
                    let span = if st.world.chance(0.5) { 12 } else { 60 };
                    st.world.between(0, span) as u32
                });
                let (streak_p, streak_ms) = (st.world.faults.crash_streak, st.world.faults.crash_streak_ms);
                if let Some(after) = crash
                    && st.world.chance(streak_p)
                {
                    let until = now + st.world.between(30_000, streak_ms.max(30_000));
                    self.crash_streaks.insert(function, (until, after));
                    st.world.coverage.count("Lambda invocation", "crash streak began", 1);
                }
                crash
            }
        };
        if let Some(after) = crash {
            self.tasks.plan_crash(id, after);
        }
        self.invocations += 1;
        self.note(Step::Start { task: id, what });
        self.meta.insert(id, meta);
    }

    fn deadline(&self, timeout: std::time::Duration) -> chrono::DateTime<chrono::Utc> {
        to_time(self.sim.now() + timeout.as_millis() as Millis)
    }

    fn start(&mut self) {
        for (n, r) in self.workload.requests.iter().enumerate() {
            self.sim.lock().core.schedule(EPOCH_MS + r.at, Event::World(WorldEvent::Request(n)));
        }
        self.schedule(EPOCH_MS + 30_000, WorldEvent::Sweep);
        // Other senders' SMS share SNS's account-wide groups; End User Messaging's events go to the
        // stack's own group, where no other sender's can be.
        if self.workload.foreign_per_minute > 0 && self.provider == Provider::Sns {
            self.schedule(EPOCH_MS + 10_000, WorldEvent::Foreign);
        }
        for (n, at) in self.workload.operator_at.iter().enumerate() {
            self.sim.lock().core.schedule(EPOCH_MS + at, Event::World(WorldEvent::Operator(n)));
        }
        for (n, (at, _)) in self.workload.acks_at.iter().enumerate() {
            self.sim.lock().core.schedule(EPOCH_MS + at, Event::World(WorldEvent::Acknowledge(n)));
        }
    }

    fn on_world(&mut self, e: WorldEvent) {
        let now = self.sim.now();
        match e {
            WorldEvent::Request(n) => {
                let body = self.workload.requests[n].body.clone();
                let h = self.intake.clone();
                let tries = self.tries.entry(n).or_default();
                *tries += 1;
                if *tries == 1 {
                    // The second stack gets the same business event from the same monitor.
                    let mut st = self.sim.lock();
                    let share = self.workload.second_stack.share;
                    if st.world.chance(share) {
                        let at = now + st.world.between(0, 30_000);
                        st.world.schedule(at, WorldEvent::SecondStack(n));
                    }
                }
                {
                    // Lambda throttled intake: API Gateway answers 5xx and the producer sends the
                    // same request again with backoff (2 s doubling to a minute), as often as it
                    // takes (not counted as a try).
                    let mut st = self.sim.lock();
                    if st.world.lambda_throttles() {
                        *tries -= 1;
                        let throttled = self.throttled_requests.entry(n).or_default();
                        let backoff = (2_000 << (*throttled).min(5)).min(60_000);
                        *throttled += 1;
                        st.world.coverage.count(THROTTLED, "intake: throttled, the producer sends again", 1);
                        let at = now + backoff + st.world.between(0, 2_000);
                        st.world.schedule(at, WorldEvent::Request(n));
                        return;
                    }
                }
                let fut =
                    Box::pin(async move { Done::Intake(h.submit(&body, Origin::Api, workload_producer()).await) });
                self.spawn(
                    fut,
                    self.deployment.timeouts.intake,
                    Meta::Intake { request: n },
                    format!("intake request {n}"),
                );
            }
            WorldEvent::Poll => {
                if self.poll_at.is_some_and(|at| at <= now) {
                    self.poll_at = None;
                }
                self.poll(now);
            }
            WorldEvent::Record(n) => {
                let mut st = self.sim.lock();
                let w = &mut st.world;
                let searchable_at = now + w.ingestion_delay();
                if let Some(r) = w.sms.records.remove(&n)
                    && w.logs.write(r.group, r.message, now, searchable_at)
                {
                    let at = now + w.between(300, 1_500);
                    w.schedule(at, WorldEvent::Deliver(r.group));
                }
            }
            WorldEvent::Deliver(group) => {
                let batch = {
                    let mut st = self.sim.lock();
                    let b = st.world.logs.take_batch(group, 1_000);
                    if st.world.logs.has_undelivered(group) {
                        st.world.logs.delivery_due.insert(group, true);
                        st.world.schedule(now + 200, WorldEvent::Deliver(group));
                    }
                    b
                };
                if let Some(b) = batch {
                    self.invoke_status(b);
                }
            }
            WorldEvent::StatusRetry(b) => self.invoke_status(b),
            WorldEvent::SweepRetry(fired_at) => self.invoke_sweep(fired_at),
            WorldEvent::Sweep => {
                {
                    let mut st = self.sim.lock();
                    st.world.maybe_start_throttling();
                    let lost = invariants::queued_have_messages(&st.world, &mut self.unqueued, 120_000);
                    st.world.oracle.violations.extend(lost);
                }
                let twice = {
                    let mut st = self.sim.lock();
                    let p = st.world.faults.sweep_twice;
                    st.world.chance(p)
                };
                for _ in 0..(1 + usize::from(twice)) {
                    self.invoke_sweep(now);
                }
                let next = now + self.deployment.sweep_every.as_millis() as Millis;
                if next <= self.horizon {
                    self.schedule(next, WorldEvent::Sweep);
                } else if !self.calm {
                    // The calm after the storm: the faults stop and the schedule runs on, so what
                    // is checked at quiescence is where the pipeline converges, not where the
                    // last fault happened to leave it.
                    self.calm = true;
                    self.sim.lock().world.faults = crate::world::FaultPlan::none();
                    self.horizon = next + CALM_MS;
                    self.schedule(next, WorldEvent::Sweep);
                    // Where the networks have an incident or a change of shape to judge, the
                    // other applications go on sending through the calm: the traffic signal
                    // judges only after its baseline's first hour.
                    if self.foreign_stopped && !self.workload.networks.is_quiet() {
                        self.foreign_stopped = false;
                        self.schedule(next, WorldEvent::Foreign);
                    }
                }
            }
            WorldEvent::Foreign => {
                let per_minute = self.workload.foreign_per_minute;
                {
                    let mut st = self.sim.lock();
                    let w = &mut st.world;
                    // The phones tocsin pages receive other senders' SMS too (MFA codes, another
                    // application, a second tocsin stack), logged in the same groups in the same
                    // minutes: a record to the number in an alert's window is not the alert's.
                    let recipients: Vec<String> = w.sms.carriers.keys().cloned().collect();
                    for _ in 0..per_minute {
                        self.foreign_seq += 1;
                        let to = if !recipients.is_empty() && w.chance(FOREIGN_TO_RECIPIENTS) {
                            recipients[(w.draw() % recipients.len() as u64) as usize].clone()
                        } else {
                            format!("+4479{:08}", w.draw() % 100_000_000)
                        };
                        // Another application's traffic changed for good (issue 35, world item
                        // 6): an application left the network, or the account's halved.
                        let keeps = w.sms.networks.keeps(&to, now);
                        if keeps < 1.0 && !w.chance(keeps) {
                            continue;
                        }
                        let minute = now - now.rem_euclid(60_000);
                        w.oracle.others_sms.entry((crate::world::networks::network_of(&to), minute)).or_default()[0] +=
                            1;
                        let failed = w.chance(0.05);
                        let (group, status, response) = if failed {
                            (Group::Failure, "FAILURE", "Phone is currently unreachable/unavailable")
                        } else {
                            (Group::Success, "SUCCESS", "Message has been accepted by phone carrier")
                        };
                        let id = format!("foreign-{}", self.foreign_seq);
                        let at = now - w.between(0, 60_000);
                        let mut when = now + w.between(0, 60_000);
                        let mut dwell = 2_000;
                        // A network in an incident holds it and hands it over at the end.
                        let released = w.sms.networks.released(&to, when);
                        if released > when {
                            when = released + w.between(0, 120_000);
                            dwell = when - at;
                        }
                        let msg = record_json(&id, at, &to, 1, status, response, dwell);
                        let rec = w.sms.add_record(group, msg);
                        w.schedule(when, WorldEvent::Record(rec));
                    }
                }
                // Where the networks have something to judge, the other applications send
                // without a gap until the calm begins (and through it, below).
                if now + 60_000 <= self.horizon || (!self.calm && !self.workload.networks.is_quiet()) {
                    self.schedule(now + 60_000, WorldEvent::Foreign);
                } else {
                    self.foreign_stopped = true;
                }
            }
            WorldEvent::Operator(n) => self.operator(n),
            WorldEvent::Acknowledge(n) => self.acknowledge(n),
            WorldEvent::EsmInvoke(slot) => {
                if let Some(batch) = self.held.get_mut(slot).and_then(Option::take) {
                    self.invoke_sender(slot, batch);
                }
            }
            WorldEvent::Reply { n, receives } => self.invoke_replies(n, receives),
            WorldEvent::SecondStack(n) => {
                let body = &self.workload.requests[n].body;
                let Some((to, key)) = business_event(body) else { return };
                let mut st = self.sim.lock();
                st.world.second_stack_send(self.provider, self.workload.second_stack, &to, &key);
            }
        }
    }

    /// The event source mapping: every free poller takes a batch of visible messages, waiting
    /// up to the batching window for a full one.
    fn poll(&mut self, now: Millis) {
        let window = self.deployment.esm.batching_window.as_millis() as Millis;
        let batch = self.deployment.esm.batch_size;
        for slot in 0..self.busy.len() {
            if self.busy[slot] {
                continue;
            }
            let (visible, oldest, next_visible) = {
                let st = self.sim.lock();
                let q = st.world.sqs.queues.get(&QueueName::Send);
                let visible: Vec<Millis> = q
                    .map(|q| q.messages.values().filter(|m| m.visible_at <= now).map(|m| m.visible_at).collect())
                    .unwrap_or_default();
                let next =
                    q.and_then(|q| q.messages.values().filter(|m| m.visible_at > now).map(|m| m.visible_at).min());
                (visible.len(), visible.iter().min().copied(), next)
            };
            if visible == 0 {
                if let Some(at) = next_visible {
                    self.poll_later(at);
                }
                return;
            }
            if visible < batch
                && let Some(oldest) = oldest
                && now < oldest + window
            {
                self.poll_later(oldest + window);
                return;
            }
            let messages = {
                let mut st = self.sim.lock();
                let dead = st.world.sqs.queue(QueueName::SendDlq).messages.len();
                let mut messages = st.world.sqs.receive(QueueName::Send, batch, now);
                let moved = st.world.sqs.queue(QueueName::SendDlq).messages.len() - dead;
                if moved > 0 {
                    st.world.coverage.count(THROTTLED, "sender: message moved to the dead-letter queue", moved as u64);
                }
                let p = st.world.faults.sqs_duplicate;
                if !messages.is_empty()
                    && st.world.chance(p)
                    && let Some(again) = st.world.sqs.receive_again(QueueName::Send, &messages, now)
                {
                    messages.push(again);
                    st.world.coverage.count("SQS ReceiveMessage (event source)", "delivered twice", 1);
                }
                messages
            };
            if messages.is_empty() {
                return;
            }
            let mut event = SqsEvent::default();
            let mut receipts = Vec::new();
            for m in &messages {
                let mut r = SqsMessage::default();
                r.message_id = Some(m.id.clone());
                r.receipt_handle = m.receipt.clone();
                r.body = Some(m.body.clone());
                r.event_source = Some("aws:sqs".into());
                r.attributes.insert("SentTimestamp".into(), m.sent_at.to_string());
                r.attributes.insert("ApproximateReceiveCount".into(), m.receives.to_string());
                receipts.extend(m.receipt.clone());
                event.records.push(r);
            }
            self.busy[slot] = true;
            let lapses_at = messages.iter().map(|m| m.visible_at).min().unwrap_or(now);
            self.invoke_sender(slot, HeldBatch { event, receipts, lapses_at, throttles: 0 });
        }
    }

    /// The event source mapping invokes the sender with a batch it holds. Lambda may throttle
    /// the invocation (`FaultPlan::lambda_throttled`): the mapping keeps the batch in flight and
    /// tries again with backoff, and gives it back to the queue (doing nothing: its messages
    /// turn visible again, each receive counted toward the dead-letter queue) once the next try
    /// would come after their visibility timeout lapsed. The poller is busy all that while.
    fn invoke_sender(&mut self, slot: usize, mut batch: HeldBatch) {
        let now = self.sim.now();
        {
            let mut st = self.sim.lock();
            if st.world.lambda_throttles() {
                let backoff = (1_000 << batch.throttles.min(5)) + st.world.between(0, 1_000);
                let coverage = &mut st.world.coverage;
                coverage.count(THROTTLED, "sender: throttled, the event source mapping retries", 1);
                if now + backoff >= batch.lapses_at {
                    coverage.count(THROTTLED, "sender: batch given back, its visibility lapsed", 1);
                    drop(st);
                    self.busy[slot] = false;
                    self.poll_later(batch.lapses_at);
                    return;
                }
                batch.throttles += 1;
                drop(st);
                self.held[slot] = Some(batch);
                self.schedule(now + backoff, WorldEvent::EsmInvoke(slot));
                return;
            }
            if batch.throttles > 0 {
                st.world.coverage.count(THROTTLED, "sender: invoked after throttling", 1);
            }
        }
        let HeldBatch { event, receipts, .. } = batch;
        let h = self.senders[slot].clone();
        let deadline = self.deadline(self.deployment.timeouts.sender);
        let n = event.records.len();
        let fut = Box::pin(async move { Done::Sender(h.handle(event, deadline).await) });
        self.spawn(
            fut,
            self.deployment.timeouts.sender,
            Meta::Sender { slot, receipts },
            format!("sender[{slot}] batch of {n}"),
        );
    }

    /// The replies queue's event source mapping hands reply `n` to the replies function (a
    /// batch of one). SQS may hand a copy to a second invocation at once; Lambda may throttle it
    /// (the mapping tries again in a moment). A reply not finished — reported failed, or its
    /// invocation crashed or timed out — turns visible again after the queue's visibility
    /// timeout, and after `maxReceiveCount` receives rests in the dead-letter queue.
    fn invoke_replies(&mut self, n: usize, receives: u32) {
        let now = self.sim.now();
        let body = {
            let mut st = self.sim.lock();
            if st.world.lambda_throttles() {
                let at = now + st.world.between(1_000, 10_000);
                st.world.coverage.count(THROTTLED, "replies: throttled, the event source mapping retries", 1);
                st.world.schedule(at, WorldEvent::Reply { n, receives });
                return;
            }
            let p = st.world.faults.sqs_duplicate;
            if receives == 0 && st.world.chance(p) {
                let at = now + st.world.between(0, 5_000);
                st.world.schedule(at, WorldEvent::Reply { n, receives: 1 });
                st.world.coverage.count(crate::world::people::REPLY_COVERAGE, "a reply delivered twice", 1);
            }
            let Some(reply) = st.world.people.replies.get(n) else { return };
            reply.queue_body(reply.sent_at + 200)
        };
        let mut record = SqsMessage::default();
        record.message_id = Some(format!("reply-{n}-{receives}"));
        record.body = Some(body);
        record.event_source = Some("aws:sqs".into());
        record.attributes.insert("ApproximateReceiveCount".into(), (receives + 1).to_string());
        let mut event = SqsEvent::default();
        event.records.push(record);
        let h = self.replies.clone();
        let fut = Box::pin(async move { Done::Replies(h.handle(event).await) });
        self.spawn(
            fut,
            self.deployment.timeouts.replies,
            Meta::Replies { reply: n, receives },
            format!("replies: reply {n} (receive {})", receives + 1),
        );
    }

    fn poll_later(&mut self, at: Millis) {
        if self.poll_at.is_none_or(|p| at < p) {
            self.poll_at = Some(at);
            self.schedule(at, WorldEvent::Poll);
        }
    }

    /// Invokes the status function with a subscription batch. Lambda may throttle it: its
    /// asynchronous queue keeps the event and tries again with backoff (1 s doubling to 5 min;
    /// the status function keeps the default maximum event age, 6 h), not counted as a retry.
    fn invoke_status(&mut self, batch: u64) {
        let now = self.sim.now();
        let (group, events) = {
            let mut st = self.sim.lock();
            if !st.world.logs.batches.contains_key(&batch) {
                return;
            }
            if st.world.lambda_throttles() {
                let jitter = st.world.between(0, 1_000);
                let Some(b) = st.world.logs.batches.get_mut(&batch) else { return };
                let backoff = (1_000 << b.throttles.min(9)).min(300_000) + jitter;
                b.throttles += 1;
                st.world.coverage.count(THROTTLED, "status: throttled, Lambda retries the event", 1);
                st.world.schedule(now + backoff, WorldEvent::StatusRetry(batch));
                return;
            }
            let Some(b) = st.world.logs.batches.get_mut(&batch) else { return };
            b.attempts += 1;
            (b.group, b.events.clone())
        };
        let h = self.status.clone();
        let deadline = self.deadline(self.deployment.timeouts.status);
        let header =
            status::payload::Header { message_type: "DATA_MESSAGE".into(), log_group: group.name().to_owned() };
        let n = events.len();
        let fut = Box::pin(async move {
            let ok = h.handle_decoded(Some(&header), futures::stream::iter(events), deadline).await.is_ok();
            Done::Status(ok)
        });
        self.spawn(
            fut,
            self.deployment.timeouts.status,
            Meta::Status { batch, started: self.sim.now() },
            format!("status batch {batch} of {n}"),
        );
    }

    /// An operator acts on what the world shows now: resends an alert that failed or whose
    /// outcome is unknown, acknowledges an escalation, or re-enables a suppressed number — at any
    /// moment, racing the automation.
    fn operator(&mut self, n: usize) {
        use tocsin::ports::{RecipientRegistry, new_id};
        use tocsin::services::operator::{
            RESENDABLE, ResendError, ResendRequest, acknowledge, operator_attempt_id, resend,
        };
        let (action, target, number) = {
            let mut st = self.sim.lock();
            let w = &mut st.world;
            let pick = w.draw();
            let candidates: Vec<tocsin::domain::IdempotencyKey> = w
                .ledger
                .intents
                .iter()
                .filter(|(_, i)| match n % 3 {
                    0 => RESENDABLE.contains(&i.record.status.state),
                    _ => i.record.status.escalation.is_some(),
                })
                .map(|(k, _)| k.clone())
                .collect();
            let suppressed: Vec<String> =
                w.registry.numbers.iter().filter(|(_, r)| r.suppressed).map(|(p, _)| p.clone()).collect();
            let target =
                (!candidates.is_empty()).then(|| candidates[(pick % candidates.len() as u64) as usize].clone());
            let number =
                (!suppressed.is_empty()).then(|| suppressed[(pick % suppressed.len() as u64) as usize].clone());
            (n % 3, target, number)
        };
        let store = self.escalation.store.clone();
        let registry = self.escalation.registry.clone();
        let clock = self.escalation.clock.clone();
        let gateway = SimGateway::of(self.provider, self.sim.clone());
        let defaults = self.deployment.sender.sms_policy.defaults.clone();
        let stack = self.deployment.sender.stack.clone();
        let sim = self.sim.clone();
        let fut: crate::exec::TaskFuture<Done> = match (action, target, number) {
            (0, Some(key), _) => Box::pin(async move {
                let attempt = operator_attempt_id(&new_id(&clock));
                let req = ResendRequest {
                    key: &key,
                    operator: "sim-operator",
                    reason: "simulated resend",
                    attempt_id: &attempt,
                    lease: std::time::Duration::from_secs(120),
                    defaults: &defaults,
                    stack: &stack,
                };
                let what = match resend(&store, &registry, &gateway, &clock, req).await {
                    Ok(r) if r.outcome.accepted() => "sent: accepted",
                    Ok(_) => "sent: not accepted",
                    Err(ResendError::BeingEscalated { .. }) => "refused: an escalation run held it",
                    Err(ResendError::NotResendable { .. }) => "refused: not resendable (any more)",
                    Err(ResendError::Suppressed { .. }) => "refused: the number is suppressed",
                    Err(ResendError::Missing(_)) => "refused: gone",
                    Err(ResendError::Port { .. }) => "failed (a fault; nobody retries)",
                };
                sim.lock().world.coverage.count(crate::world::RESEND_COVERAGE, what, 1);
                Done::Operator
            }),
            (1, Some(key), _) => Box::pin(async move {
                let now = tocsin::ports::Clock::now(&clock);
                let _ = acknowledge(&store, &key, "sim-operator", "simulated acknowledgement", now).await;
                Done::Operator
            }),
            (2, _, Some(number)) => Box::pin(async move {
                if let Ok(p) = tocsin::domain::PhoneNumber::parse(&number) {
                    let now = tocsin::ports::Clock::now(&clock);
                    let _ = registry.re_enable(&p, "sim-operator", "simulated re-enable", now).await;
                }
                Done::Operator
            }),
            _ => return,
        };
        let what = ["resend", "acknowledge", "re-enable"][action].to_owned();
        self.spawn(fut, std::time::Duration::from_secs(60), Meta::Operator, format!("operator {what}"));
    }

    /// Someone takes an alert (`tocsin ack`): one still open and not escalated, picked by the
    /// workload's draw — racing the sweep, the sender and the status function like any operator.
    fn acknowledge(&mut self, n: usize) {
        use tocsin::domain::acknowledgement::AckVia;
        use tocsin::services::acknowledging::acknowledge_alert;
        let Some(&(_, pick)) = self.workload.acks_at.get(n) else { return };
        let target = {
            let st = self.sim.lock();
            let open: Vec<&tocsin::domain::IdempotencyKey> = st
                .world
                .ledger
                .intents
                .iter()
                .filter(|(_, i)| {
                    // A level of an escalation chain waits for someone after its delivery too.
                    let s = &i.record.status;
                    let waiting = s.state != tocsin::domain::State::Delivered || i.record.intent.chain.is_some();
                    s.escalation.is_none() && s.acknowledgement.is_none() && waiting
                })
                .map(|(k, _)| k)
                .collect();
            (!open.is_empty()).then(|| open[(pick % open.len() as u64) as usize].clone())
        };
        let Some(key) = target else { return };
        let store = self.escalation.store.clone();
        let clock = self.escalation.clock.clone();
        let request = format!("sim-ack-{n}");
        let sim = self.sim.clone();
        let fut: crate::exec::TaskFuture<Done> = Box::pin(async move {
            use tocsin::services::acknowledging::AlertAck;
            let now = tocsin::ports::Clock::now(&clock);
            let what = match acknowledge_alert(&store, &key, "sim-operator", AckVia::Operator, &request, now).await {
                Ok(AlertAck::Now(_)) => "recorded",
                Ok(AlertAck::Before(_)) => "an earlier acknowledgement stood",
                Err(_) => "failed (a fault; nobody retries)",
            };
            sim.lock().world.coverage.count(crate::world::ACK_COVERAGE, what, 1);
            Done::Operator
        });
        self.spawn(fut, std::time::Duration::from_secs(60), Meta::Operator, "operator ack".to_owned());
    }

    /// Invokes the sweep with the schedule's event that fired at `fired_at`. Lambda may throttle
    /// it: its asynchronous queue tries again with backoff while the event is younger than the
    /// function's maximum event age, then drops it (the next minute's run is the retry).
    fn invoke_sweep(&mut self, fired_at: Millis) {
        let now = self.sim.now();
        {
            let mut st = self.sim.lock();
            if st.world.lambda_throttles() {
                let backoff = st.world.between(1_000, 10_000);
                let max_age = self.deployment.sweep_max_event_age.as_millis() as Millis;
                let what = if now + backoff - fired_at <= max_age {
                    st.world.schedule(now + backoff, WorldEvent::SweepRetry(fired_at));
                    "sweep: throttled, Lambda retries the event"
                } else {
                    "sweep: throttled past its maximum event age, dropped"
                };
                st.world.coverage.count(THROTTLED, what, 1);
                return;
            }
        }
        let h = self.escalation.clone();
        let timeout = self.deployment.timeouts.escalation;
        let stop_at = self.deadline(timeout.saturating_sub(self.deployment.escalation.safety_margin));
        let fut = Box::pin(async move {
            // Clean: it could act on every due intent — complete, no intent's work failed, and
            // no escalation left to another run's lease (a run that crashed or lost the lease's
            // answer holds it until it lapses: the intent waits that long, by design).
            let summary = h.run(stop_at).await;
            let clean =
                summary.as_ref().is_ok_and(|s| s.complete && s.errors == 0 && s.escalation_lease_held_elsewhere == 0);
            let verdict = summary.ok().and_then(|s| crate::oracle::CarrierVerdict::of(&s));
            Done::Escalation { clean, verdict }
        });
        self.spawn(fut, timeout, Meta::Escalation { started: self.sim.now() }, "sweep".into());
    }

    fn on_done(&mut self, id: TaskId, done: Option<Done>) {
        let now = self.sim.now();
        let Some(meta) = self.meta.remove(&id) else { return };
        self.note(Step::End { task: id, returned: done.is_some() });
        match (meta, done) {
            // A producer over its rate waits as told (Retry-After) and sends the same request
            // again, as often as it takes: shed, never lost.
            (Meta::Intake { request }, Some(Done::Intake(Submitted::RateLimited { retry_after, .. }))) => {
                if let Some(t) = self.tries.get_mut(&request) {
                    *t = t.saturating_sub(1);
                }
                let wait = i64::from(retry_after) * 1_000;
                let at = now + wait + self.sim.lock().world.between(0, 1_000);
                self.schedule(at, WorldEvent::Request(request));
            }
            (Meta::Intake { request }, outcome) => {
                let retry = matches!(outcome, Some(Done::Intake(Submitted::Unavailable(_))) | None);
                if retry && self.tries.get(&request).copied().unwrap_or(0) < 5 {
                    let at = now + self.sim.lock().world.between(1_000, 5_000);
                    self.schedule(at, WorldEvent::Request(request));
                }
            }
            (Meta::Sender { slot, receipts }, outcome) => {
                if let Some(Done::Sender(resp)) = outcome {
                    let failed: BTreeSet<&str> =
                        resp.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
                    let mut st = self.sim.lock();
                    for r in &receipts {
                        let msg_id = r.split('#').next().unwrap_or_default();
                        if !failed.contains(msg_id) {
                            st.world.sqs.delete(QueueName::Send, r);
                        }
                    }
                }
                self.busy[slot] = false;
                self.poll_later(now);
            }
            (Meta::Status { batch, started }, outcome) => {
                let ok = matches!(outcome, Some(Done::Status(true)));
                let mut st = self.sim.lock();
                let retries = self.deployment.status_retries;
                if ok {
                    let failures =
                        st.world.logs.batches.get(&batch).map(|b| b.permanent_failures.clone()).unwrap_or_default();
                    let found = invariants::suppressed_at_once(&st.world, &failures, started);
                    st.world.oracle.violations.extend(found);
                    let p = st.world.faults.batch_twice;
                    if st.world.chance(p) {
                        let at = now + st.world.between(1_000, 60_000);
                        st.world.schedule(at, WorldEvent::StatusRetry(batch));
                    } else {
                        st.world.logs.batches.remove(&batch);
                    }
                } else {
                    let attempts = st.world.logs.batches.get(&batch).map_or(0, |b| b.attempts);
                    if attempts <= retries {
                        // Lambda's asynchronous retries: about a minute, then two.
                        let at = now + 60_000 * Millis::from(attempts);
                        st.world.schedule(at, WorldEvent::StatusRetry(batch));
                    } else if let Some(b) = st.world.logs.batches.remove(&batch) {
                        st.world.oracle.parked_batches += 1;
                        for e in b.events {
                            st.world.oracle.parked_records.insert(e.id);
                        }
                    }
                }
            }
            (Meta::Escalation { started }, Some(Done::Escalation { clean, verdict })) => {
                let mut st = self.sim.lock();
                if clean {
                    st.world.oracle.clean_sweeps.push((started, now));
                }
                if let Some(v) = verdict {
                    use crate::world::networks::{COVERAGE, NETWORKS, NO_REASON};
                    for carrier in &v.by_traffic {
                        let network = NETWORKS.iter().position(|n| n.name == carrier);
                        let why = match (v.all_slow, st.world.sms.networks.reason(network, now), network) {
                            (true, _, _) => "verdict: every carrier slow",
                            (_, NO_REASON, Some(n)) if invariants::others_storm(&st.world, n, now).is_some() => {
                                "verdict: after another stack's alert storm to it (SNS)"
                            }
                            (_, why, _) => why,
                        };
                        st.world.coverage.count(COVERAGE, why, 1);
                    }
                    st.world.oracle.carrier_verdicts.push((now, v));
                }
            }
            (Meta::Replies { reply, receives }, outcome) => {
                let finished = matches!(&outcome, Some(Done::Replies(r)) if r.batch_item_failures.is_empty());
                let mut st = self.sim.lock();
                if !finished {
                    if receives + 1 < self.deployment.replies_max_receives {
                        let at = now + self.deployment.replies_visibility.as_millis() as Millis;
                        st.world.schedule(at, WorldEvent::Reply { n: reply, receives: receives + 1 });
                    } else {
                        st.world.coverage.count(crate::world::people::REPLY_COVERAGE, "a reply dead-lettered", 1);
                    }
                }
            }
            (Meta::Escalation { .. } | Meta::Operator, _) => {}
        }
    }

    /// Runs until the world is quiet; returns the report.
    fn run(mut self, s: &Scenario) -> Report {
        self.start();
        let mut violations_seen = 0;
        loop {
            for (id, done) in self.tasks.poll_woken() {
                self.on_done(id, Some(done));
            }
            let poll = std::mem::take(&mut self.sim.lock().world.sqs.poll_wanted);
            if poll {
                let at = self.sim.now();
                self.poll_later(at);
            }
            let event = {
                let mut st = self.sim.lock();
                let outbox = std::mem::take(&mut st.world.outbox);
                for (at, e) in outbox {
                    st.core.schedule(at, Event::World(e));
                }
                st.core.pop()
            };
            let Some(event) = event else { break };
            let now = self.sim.now();
            self.sim.lock().world.now = now;
            match event {
                Event::Op(id) => {
                    let resolved = {
                        let mut st = self.sim.lock();
                        resolve_op(&mut st, id)
                    };
                    let Some(r) = resolved else { continue };
                    self.note(Step::Op {
                        task: r.task,
                        label: r.label,
                        verdict: r.verdict.clone(),
                        abandoned: r.abandoned,
                    });
                    if let (crate::exec::Verdict::Crash(_), Some(task)) = (&r.verdict, r.task)
                        && self.tasks.kill(task)
                    {
                        self.on_done(task, None);
                    }
                }
                Event::Timer(id) => fire_timer(&mut self.sim.lock(), id),
                Event::Kill(task) => {
                    if self.tasks.kill(task) {
                        self.note(Step::Timeout { task });
                        self.on_done(task, None);
                    }
                }
                Event::World(e) => {
                    self.note(Step::World(e.clone()));
                    self.on_world(e);
                }
            }
            let seen = self.sim.lock().world.oracle.violations.len();
            if seen > violations_seen {
                violations_seen = seen;
                if self.first_violation_trace.is_none() {
                    self.first_violation_trace = Some(self.trace_lines());
                }
            }
        }
        let st = self.sim.lock();
        let w = &st.world;
        let mut violations = w.oracle.violations.clone();
        violations.extend(invariants::at_quiescence(w));
        violations.extend(invariants::orphans_applied(w));
        violations.extend(invariants::every_permanent_failure_suppresses(w, self.provider));
        violations.extend(invariants::observations_tell_what_happened(w));
        let ops = w.coverage.ops.values().sum();
        let trace = self.first_violation_trace.clone().unwrap_or_else(|| self.trace_lines());
        let mut keys: Vec<&str> = violations.iter().filter_map(|v| v.key.as_deref()).collect();
        keys.dedup();
        let story = keys
            .into_iter()
            .take(3)
            .filter_map(|k| tocsin::domain::IdempotencyKey::parse(k).ok())
            .flat_map(|k| chain_levels(w, k))
            .chain(asked_stories(w))
            .flat_map(|k| story_of(w, &k))
            .collect();
        Report {
            scenario: s.clone(),
            violations,
            lifecycles: w.oracle.intents.len(),
            sms: w.oracle.sms_sent,
            escalations: w.oracle.escalations_sent,
            duplicate_escalations: w.oracle.duplicate_escalations,
            parked_batches: w.oracle.parked_batches,
            invocations: self.invocations,
            ops,
            simulated_ms: w.now - EPOCH_MS,
            coverage: w.coverage.clone(),
            chain_lateness: invariants::chain_lateness(w),
            trace,
            story,
        }
    }
}

/// Runs one scenario to quiescence. The handlers' EMF metric lines are discarded (the simulation
/// reads the world, not the metrics).
pub fn run(s: &Scenario) -> Report {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(tocsin::telemetry::discard_metrics);
    Driver::new(s).run(s)
}

/// The alerts whose stories `TOCSIN_SIM_STORIES` asks for besides the first violation's: short
/// keys (or their prefixes), comma-separated — the other alerts a failing run's story points at.
fn asked_stories(w: &World) -> Vec<tocsin::domain::IdempotencyKey> {
    let Ok(asked) = std::env::var("TOCSIN_SIM_STORIES") else { return Vec::new() };
    let prefixes: Vec<&str> = asked.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    w.oracle.intents.keys().filter(|k| prefixes.iter().any(|p| k.short().starts_with(p))).cloned().collect()
}

/// `key` and, when it is a chain's root, every level after it: a chain's story is its levels'.
fn chain_levels(w: &World, key: tocsin::domain::IdempotencyKey) -> Vec<tocsin::domain::IdempotencyKey> {
    let place = w.oracle.intents.get(&key).and_then(|t| t.chain.as_ref()).filter(|c| c.root == key);
    let levels = place.map_or(1, |c| c.levels);
    let more = (1..levels).filter_map(|n| u8::try_from(n).ok()).map(|n| tocsin::domain::chain::level_key(&key, n));
    std::iter::once(key.clone()).chain(more).collect()
}

/// An alert's story as the world saw it: every state the ledger held, every observation, the
/// SMS and escalations, and the record as it ends.
fn story_of(w: &World, key: &tocsin::domain::IdempotencyKey) -> Vec<String> {
    let t = |ms: Millis| format!("{:>10.3}s", (ms - EPOCH_MS) as f64 / 1000.0);
    let mut out = Vec::new();
    if let Some(truth) = w.oracle.intents.get(key) {
        out.push(format!(
            "alert {} to {}: created {}, deadline {}",
            key.short(),
            tocsin::domain::phone::mask_phone_like(&truth.recipient),
            t(truth.created),
            t(truth.deadline)
        ));
        for (at, s) in &truth.states {
            out.push(format!("{} state {s}", t(*at)));
        }
        for (at, op) in &truth.sms {
            out.push(format!("{} SMS left{}", t(*at), if *op { " (operator)" } else { "" }));
        }
        for at in &truth.escalations {
            out.push(format!("{} escalation sent", t(*at)));
        }
        out.push(format!("attempts: {:?}", truth.attempts));
    }
    for ((k, id), o) in &w.ledger.observations {
        if k == key {
            out.push(format!(
                "{} observation {id} -> {:?}: {}",
                t(o.obs.at.timestamp_millis()),
                o.obs.state_after,
                o.obs.summary()
            ));
        }
    }
    if let Some(item) = w.ledger.intents.get(key) {
        for (id, o) in &item.carried {
            out.push(format!(
                "{} observation {id} (carried) -> {:?}: {}",
                t(o.at.timestamp_millis()),
                o.state_after,
                o.summary()
            ));
        }
        out.push(format!("record: {:?}", item.record.status));
    }
    out
}

/// The producer the workload's requests come from (one, for now).
/// A workload request's recipient and the key any tocsin stack derives for its business event.
fn business_event(body: &serde_json::Value) -> Option<(tocsin::domain::PhoneNumber, tocsin::domain::IdempotencyKey)> {
    let to = tocsin::domain::PhoneNumber::parse(body["recipient"].as_str()?).ok()?;
    let template = tocsin::domain::template::TemplateRef {
        name: body["template"]["name"].as_str()?.to_owned(),
        version: u32::try_from(body["template"]["version"].as_u64()?).ok()?,
    };
    let key = tocsin::domain::IdempotencyKey::derive(&workload_producer(), body["event_id"].as_str()?, &template);
    Some((to, key))
}

fn workload_producer() -> tocsin::domain::producer::ProducerName {
    tocsin::domain::producer::ProducerName::parse("monitoring").unwrap_or_else(|e| panic!("{e}"))
}
