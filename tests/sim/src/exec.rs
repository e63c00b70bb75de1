//! The deterministic executor: simulated time, the port calls of every running invocation as
//! scheduled operations, and a single-threaded loop that polls the invocations' futures.
//!
//! Every port call of a handler is an [`Op`]: registered when the handler first awaits it, given a
//! latency drawn from the seeded RNG, and resolved when the simulated clock reaches its due time —
//! so which of two concurrent calls reaches the store first is decided by the seed, as on AWS by
//! the network. At resolution the op may meet a fault (an error before it took effect, an answer
//! lost after it did, the SDK's retry of a write that had landed) or its invocation may end right
//! there (a crash or a Lambda timeout: the future is dropped, as Lambda drops a process), before
//! or after the write landed. Waits (`Clock::sleep_until`) are timers on the same clock. Nothing
//! here knows AWS: [`crate::world`] gives ops their meaning.

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use chrono::{DateTime, Utc};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::world::{World, WorldEvent};

/// Simulated time: milliseconds since the Unix epoch.
pub type Millis = i64;
pub type TaskId = u64;
pub type OpId = u64;
type TimerId = u64;

pub fn to_time(ms: Millis) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

pub fn to_ms(t: DateTime<Utc>) -> Millis {
    t.timestamp_millis()
}

/// What kind of request an op is, which decides the faults it can meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    /// Changes nothing: it can fail, never half-happen.
    Read,
    /// A write without an idempotency token: the SDK's retry after a lost answer sends it again.
    Write,
    /// A write with an idempotency token (TransactWriteItems' ClientRequestToken): a retry after a
    /// lost answer is answered as the first call was, without writing again.
    TokenWrite,
    /// An SNS publish: its faults are the SMS world's own (the SNS client's retries are off).
    Publish,
}

/// How an op ended, as the calling code sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The request failed before it took effect (throttled, 5xx, connection refused).
    Before,
    /// The request took effect; its answer was lost (timeouts beyond the SDK's retries).
    After,
    /// The request took effect, its answer was lost, and the SDK sent it again: the caller gets
    /// the second answer.
    Retried,
}

/// Where an invocation ended at an op: its future is dropped there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashAt {
    /// Before the request reached the service.
    Before,
    /// After the service acted on it, before the answer came back.
    After,
}

/// The decision for one op at its due time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Answer,
    Fault(Fault),
    Crash(CrashAt),
}

type AnyBox = Box<dyn Any + Send>;
type Apply = Box<dyn Fn(&mut World) -> AnyBox + Send>;

struct PendingOp {
    task: Option<TaskId>,
    label: &'static str,
    kind: OpKind,
    apply: Apply,
    outcome: Option<Result<AnyBox, Fault>>,
    waker: Option<Waker>,
    /// The caller dropped the call before it resolved (its invocation ended, or it gave up
    /// waiting); whether the request had left the client, decided then.
    abandoned: Option<bool>,
}

struct TimerSlot {
    fired: bool,
    waker: Option<Waker>,
}

#[derive(Debug)]
pub enum Event {
    Op(OpId),
    Timer(TimerId),
    /// Lambda ends an invocation at its deadline.
    Kill(TaskId),
    World(WorldEvent),
}

/// The scheduling half of the simulation's state: the event queue, ops, timers.
pub struct Core {
    pub now: Millis,
    pub rng: SmallRng,
    seq: u64,
    queue: BinaryHeap<Reverse<(Millis, u64, u64)>>,
    events: BTreeMap<u64, Event>,
    ops: BTreeMap<OpId, PendingOp>,
    timers: BTreeMap<TimerId, TimerSlot>,
    /// The task being polled: the owner of the ops it registers.
    pub current: Option<TaskId>,
    /// Invocations planned to crash: how many more of their ops resolve before the one they
    /// crash at.
    pub crash_plan: BTreeMap<TaskId, u32>,
    /// Immediate mode (contract tests): every op resolves when first polled, without faults.
    pub immediate: bool,
}

impl Core {
    fn new(seed: u64, start: Millis) -> Self {
        Core {
            now: start,
            rng: SmallRng::seed_from_u64(seed),
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            ops: BTreeMap::new(),
            timers: BTreeMap::new(),
            current: None,
            crash_plan: BTreeMap::new(),
            immediate: false,
        }
    }

    fn next_id(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Schedules `event` at `at` (never before now). Events at the same instant come out in an
    /// order drawn from the seed.
    pub fn schedule(&mut self, at: Millis, event: Event) {
        let at = at.max(self.now);
        let id = self.next_id();
        let tie: u64 = self.rng.random();
        self.events.insert(id, event);
        self.queue.push(Reverse((at, tie, id)));
    }

    /// The next event, with the clock moved to its time.
    pub fn pop(&mut self) -> Option<Event> {
        let Reverse((at, _, id)) = self.queue.pop()?;
        self.now = self.now.max(at);
        self.events.remove(&id)
    }

    /// When the next event is due.
    pub fn next_at(&self) -> Option<Millis> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    pub fn open_ops(&self) -> usize {
        self.ops.len()
    }
}

/// The whole simulation's state, behind one lock: what the ports read and write.
pub struct State {
    pub core: Core,
    pub world: World,
}

/// A handle on the simulation, held by every simulated port.
#[derive(Clone)]
pub struct Sim(Arc<Mutex<State>>);

impl Sim {
    pub fn new(seed: u64, start: Millis, world: World) -> Self {
        Sim(Arc::new(Mutex::new(State { core: Core::new(seed, start), world })))
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn now(&self) -> Millis {
        self.lock().core.now
    }

    /// One request to a simulated service: `apply` is what the service does, run when the op
    /// resolves (twice for a retried write, never for a failed one). The answer is `apply`'s
    /// result, or the fault.
    pub fn call<T, F>(&self, label: &'static str, kind: OpKind, apply: F) -> Call<T>
    where
        T: Send + 'static,
        F: Fn(&mut World) -> T + Send + 'static,
    {
        Call {
            sim: self.clone(),
            pending: Some((label, kind, Box::new(move |w: &mut World| Box::new(apply(w)) as AnyBox))),
            id: None,
            _out: std::marker::PhantomData,
        }
    }

    /// Resolves until `at`.
    pub fn sleep_until(&self, at: Millis) -> Sleep {
        Sleep { sim: self.clone(), at, id: None }
    }
}

/// A port call in flight (see [`Sim::call`]).
pub struct Call<T> {
    sim: Sim,
    pending: Option<(&'static str, OpKind, Apply)>,
    id: Option<OpId>,
    _out: std::marker::PhantomData<fn() -> T>,
}

impl<T: Send + 'static> Future for Call<T> {
    type Output = Result<T, (Fault, &'static str)>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut st = this.sim.lock();
        let State { core, world } = &mut *st;
        match this.id {
            None => {
                let Some((label, kind, apply)) = this.pending.take() else {
                    return Poll::Pending;
                };
                if core.immediate {
                    let verdict = world.forced(label).unwrap_or(Verdict::Answer);
                    world.note_op(label, kind, &verdict);
                    return match act(&apply, kind, &verdict, world) {
                        Some(result) => Poll::Ready(result.map(downcast).map_err(|f| (f, label))),
                        None => Poll::Pending,
                    };
                }
                let id = core.next_id();
                let latency = world.latency(kind, label, &mut core.rng);
                core.ops.insert(
                    id,
                    PendingOp {
                        task: core.current,
                        label,
                        kind,
                        apply,
                        outcome: None,
                        waker: Some(cx.waker().clone()),
                        abandoned: None,
                    },
                );
                let at = core.now + latency;
                core.schedule(at, Event::Op(id));
                this.id = Some(id);
                Poll::Pending
            }
            Some(id) => {
                let Some(op) = core.ops.get_mut(&id) else { return Poll::Pending };
                match op.outcome.take() {
                    Some(result) => {
                        let label = op.label;
                        core.ops.remove(&id);
                        this.id = None;
                        Poll::Ready(result.map(downcast).map_err(|f| (f, label)))
                    }
                    None => {
                        op.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        }
    }
}

impl<T> Drop for Call<T> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut st = self.sim.lock();
        let core = &mut st.core;
        let left: bool = core.rng.random();
        if let Some(op) = core.ops.get_mut(&id) {
            if op.outcome.is_some() {
                core.ops.remove(&id);
            } else {
                op.abandoned = Some(left);
                op.waker = None;
            }
        }
    }
}

fn downcast<T: 'static>(b: AnyBox) -> T {
    match b.downcast::<T>() {
        Ok(v) => *v,
        // The call site and its closure share `T` by construction (`Sim::call`).
        Err(_) => unreachable!("an op's answer has the type its call asked for"),
    }
}

/// A wait on the simulated clock.
pub struct Sleep {
    sim: Sim,
    at: Millis,
    id: Option<TimerId>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut st = this.sim.lock();
        let core = &mut st.core;
        if core.now >= this.at {
            if let Some(id) = this.id.take() {
                core.timers.remove(&id);
            }
            return Poll::Ready(());
        }
        match this.id {
            None => {
                let id = core.next_id();
                core.timers.insert(id, TimerSlot { fired: false, waker: Some(cx.waker().clone()) });
                core.schedule(this.at, Event::Timer(id));
                this.id = Some(id);
                Poll::Pending
            }
            Some(id) => match core.timers.get_mut(&id) {
                Some(slot) if slot.fired => {
                    core.timers.remove(&id);
                    this.id = None;
                    Poll::Ready(())
                }
                Some(slot) => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                None => Poll::Ready(()),
            },
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.sim.lock().core.timers.remove(&id);
        }
    }
}

/// The run queue: tasks woken since they were last polled, in wake order.
#[derive(Default)]
struct RunQueue {
    queue: Mutex<VecDeque<TaskId>>,
}

struct TaskWaker {
    id: TaskId,
    run: Arc<RunQueue>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let mut q = self.run.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !q.contains(&self.id) {
            q.push_back(self.id);
        }
    }
}

/// An invocation's future. Not `Send`: the simulation runs on one thread.
pub type TaskFuture<O> = Pin<Box<dyn Future<Output = O>>>;

struct TaskSlot<O> {
    fut: TaskFuture<O>,
    waker: Waker,
}

/// The running invocations, each a future polled on this thread when woken.
pub struct Tasks<O> {
    sim: Sim,
    run: Arc<RunQueue>,
    slots: BTreeMap<TaskId, TaskSlot<O>>,
    next: TaskId,
}

impl<O> Tasks<O> {
    pub fn new(sim: Sim) -> Self {
        Tasks { sim, run: Arc::new(RunQueue::default()), slots: BTreeMap::new(), next: 0 }
    }

    /// Starts `fut` as a task that Lambda ends at `deadline` (if given).
    pub fn spawn(&mut self, fut: TaskFuture<O>, deadline: Option<Millis>) -> TaskId {
        self.next += 1;
        let id = self.next;
        let waker = Waker::from(Arc::new(TaskWaker { id, run: self.run.clone() }));
        self.slots.insert(id, TaskSlot { fut, waker: waker.clone() });
        if let Some(d) = deadline {
            self.sim.lock().core.schedule(d, Event::Kill(id));
        }
        waker.wake();
        id
    }

    pub fn is_running(&self, id: TaskId) -> bool {
        self.slots.contains_key(&id)
    }

    pub fn running(&self) -> usize {
        self.slots.len()
    }

    /// Ends a task where it stands (its future is dropped): a crash or Lambda's timeout. Its
    /// calls still in flight may or may not have left the client.
    pub fn kill(&mut self, id: TaskId) -> bool {
        self.sim.lock().core.crash_plan.remove(&id);
        // Dropped outside any lock: the futures' drops take it.
        self.slots.remove(&id).is_some()
    }

    /// Plans task `id` to crash at the op after the next `after` ops.
    pub fn plan_crash(&mut self, id: TaskId, after: u32) {
        self.sim.lock().core.crash_plan.insert(id, after);
    }

    /// Polls every woken task until none is woken; returns the tasks that finished, with their
    /// outputs, in the order they finished.
    pub fn poll_woken(&mut self) -> Vec<(TaskId, O)> {
        let mut done = Vec::new();
        loop {
            let next = self.run.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
            let Some(id) = next else { break };
            let Some(slot) = self.slots.get_mut(&id) else { continue };
            self.sim.lock().core.current = Some(id);
            let waker = slot.waker.clone();
            let mut cx = Context::from_waker(&waker);
            let polled = slot.fut.as_mut().poll(&mut cx);
            self.sim.lock().core.current = None;
            if let Poll::Ready(out) = polled {
                self.slots.remove(&id);
                self.sim.lock().core.crash_plan.remove(&id);
                done.push((id, out));
            }
        }
        done
    }
}

/// How an op was resolved, for the trace.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub task: Option<TaskId>,
    pub label: &'static str,
    pub verdict: Verdict,
    /// Its caller had gone already; whether the request still acted.
    pub abandoned: Option<bool>,
}

/// Resolves op `id` at its due time: the verdict, the service's action, the caller woken. A crash
/// verdict names the task to end (`Resolved::task` with `Verdict::Crash`).
pub fn resolve_op(st: &mut State, id: OpId) -> Option<Resolved> {
    let State { core, world } = st;
    let op = core.ops.get_mut(&id)?;
    if let Some(left) = op.abandoned {
        // Its caller is gone: the request still acts if it had left the client.
        let acted = left && op.kind != OpKind::Read;
        if acted {
            let apply = &op.apply;
            let _ = apply(world);
        }
        let r = Resolved { task: op.task, label: op.label, verdict: Verdict::Answer, abandoned: Some(acted) };
        core.ops.remove(&id);
        return Some(r);
    }
    let crash_now = match op.task.and_then(|t| core.crash_plan.get_mut(&t)) {
        Some(0) => true,
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    };
    let verdict = match world.forced(op.label) {
        Some(v) => v,
        None => world.verdict(op.kind, op.label, crash_now, &mut core.rng),
    };
    world.note_op(op.label, op.kind, &verdict);
    let outcome = act(&op.apply, op.kind, &verdict, world);
    let resolved = Resolved { task: op.task, label: op.label, verdict: verdict.clone(), abandoned: None };
    match outcome {
        Some(result) => {
            op.outcome = Some(result);
            if let Some(w) = op.waker.take() {
                w.wake();
            }
        }
        None => {
            core.ops.remove(&id);
        }
    }
    Some(resolved)
}

/// What the service does under `verdict`, and what its caller hears (`None`: its caller is gone).
fn act(apply: &Apply, kind: OpKind, verdict: &Verdict, world: &mut World) -> Option<Result<AnyBox, Fault>> {
    match verdict {
        Verdict::Answer => Some(Ok(apply(world))),
        Verdict::Fault(Fault::Before) => Some(Err(Fault::Before)),
        Verdict::Fault(Fault::After) => {
            let _ = apply(world);
            Some(Err(Fault::After))
        }
        Verdict::Fault(Fault::Retried) => {
            let first = apply(world);
            // A token write retried is answered as the first was; any other is done again.
            if kind == OpKind::TokenWrite { Some(Ok(first)) } else { Some(Ok(apply(world))) }
        }
        Verdict::Crash(at) => {
            if *at == CrashAt::After && kind != OpKind::Read {
                let _ = apply(world);
            }
            None
        }
    }
}

/// Fires timer `id`: its sleeper is woken.
pub fn fire_timer(st: &mut State, id: u64) {
    if let Some(slot) = st.core.timers.get_mut(&id) {
        slot.fired = true;
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
}
