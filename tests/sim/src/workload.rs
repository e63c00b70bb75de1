//! Workloads: the traffic a run sends through the stack and the world it meets — how many alerts,
//! to whom, when, with which deadlines; which carriers deliver, stay silent or refuse; replays;
//! other applications' SMS; the account's rate and spend limit.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::exec::Millis;
use crate::world::second_stack::SecondStack;
use crate::world::sms::Carrier;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Alerts to many people, one or two each, spread over minutes.
    Singles,
    /// Alerts whose clients send them again (same event: replays; a changed payload: conflicts).
    Replays,
    /// A storm to one person: dozens of alerts within a minute.
    StormOne,
    /// A storm to many: hundreds of alerts to a few dozen people at once.
    StormMany,
    /// Carriers that never answer, or answer hours late.
    CarrierSilence,
    /// Dead numbers: permanent failures, suppression, the next alert to them.
    DeadNumbers,
    /// The log groups full of other applications' SMS.
    ForeignTraffic,
    /// A throttled account: 1 part per second, bursts.
    Throttled,
    /// The monthly spend limit runs out in the middle.
    SpendExhausted,
}

pub const ALL_KINDS: [Kind; 9] = [
    Kind::Singles,
    Kind::Replays,
    Kind::StormOne,
    Kind::StormMany,
    Kind::CarrierSilence,
    Kind::DeadNumbers,
    Kind::ForeignTraffic,
    Kind::Throttled,
    Kind::SpendExhausted,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Singles => "singles",
            Kind::Replays => "replays",
            Kind::StormOne => "storm to one",
            Kind::StormMany => "storm to many",
            Kind::CarrierSilence => "carrier silence",
            Kind::DeadNumbers => "dead numbers",
            Kind::ForeignTraffic => "foreign traffic",
            Kind::Throttled => "throttled account",
            Kind::SpendExhausted => "spend limit",
        }
    }
}

/// One call to intake: when (from the run's start), and its body.
#[derive(Debug, Clone)]
pub struct Request {
    pub at: Millis,
    pub body: Value,
}

#[derive(Debug, Clone)]
pub struct Workload {
    pub kind: Kind,
    /// The networks behind the numbers: an incident, a change of the other traffic's shape.
    pub networks: crate::world::networks::Networks,
    pub requests: Vec<Request>,
    pub carriers: BTreeMap<String, Carrier>,
    /// Other applications' SMS records per minute.
    pub foreign_per_minute: u32,
    /// The account's SMS parts per second.
    pub sms_rate: u32,
    /// When (from the start) the spend limit runs out.
    pub spend_exhausted_at: Option<Millis>,
    /// Distinct alerts (business events).
    pub alerts: usize,
    /// When (from the start) an operator acts: resends a failed or unknown alert, acknowledges an
    /// escalation, or re-enables a suppressed number (chosen from the world at that moment).
    pub operator_at: Vec<Millis>,
    /// The stack's SMS breaker (`SmsPartsPerHour`) set low enough to open mid-run — half the
    /// spend-limit workloads meet it instead of the template's default; `None`: the default.
    pub parts_per_hour: Option<u32>,
    /// A second tocsin stack in the account, paging the same people for the same business events
    /// ([`crate::world::second_stack`]).
    pub second_stack: SecondStack,
    /// When (from the start) someone acknowledges an alert (`tocsin ack`, issue 37): the
    /// `n`-th still open, not escalated alert at that moment, `n` drawn here.
    pub acks_at: Vec<(Millis, u64)>,
    /// The chain the workload's template (`payment_failed`) has by policy (`tocsin chains set`):
    /// an alert whose request names no chain walks it. Its people are not the workload's
    /// recipients (each level's SMS is told apart by its phone).
    pub chain_policy: Option<Value>,
}

/// A template's chain: one or two people of their own (numbers after the workload's `people`,
/// with carriers that deliver), each with a wait of 2 to 10 minutes.
fn policy_chain(rng: &mut SmallRng, people: usize, carriers: &mut BTreeMap<String, Carrier>) -> Value {
    let wait = |rng: &mut SmallRng| format!("{}s", rng.random_range(120..=600));
    let then: Vec<Value> = (0..rng.random_range(1..=2))
        .map(|k| {
            let to = number(people + k);
            carriers.insert(to.clone(), Carrier::Delivers { lo: 1_000, hi: 30_000 });
            json!({"to": to, "wait": wait(rng)})
        })
        .collect();
    json!({"wait": wait(rng), "then": then})
}

fn number(i: usize) -> String {
    format!("+1206555{:04}", i % 10_000)
}

fn alert(seed: u64, n: usize, to: &str, deadline_s: u64) -> Value {
    json!({
        "event_id": format!("sim:{seed}:{n}"),
        "template": {"name": "payment_failed", "version": 1},
        "variables": {"run_id": format!("r{seed}-{n}"), "stage": "settle"},
        "recipient": to,
        "deadline": format!("{deadline_s}s"),
    })
}

/// Whether the people End User Messaging texts answer: the stack takes replies, every SMS shows
/// a code, and people reply ([`crate::world::people`]). On; `TOCSIN_SIM_REPLIES=0` turns them
/// off (to see whether a finding needs them).
pub fn replies_in_the_world() -> bool {
    std::env::var("TOCSIN_SIM_REPLIES").map_or(true, |v| v != "0")
}

/// Whether workloads name escalation chains. On; `TOCSIN_SIM_CHAINS=0` turns them off.
pub fn chains_in_the_world() -> bool {
    std::env::var("TOCSIN_SIM_CHAINS").map_or(true, |v| v != "0")
}

/// A chain after `recipient`: one or two other people of the workload, each with a wait of 2 to
/// 10 minutes (no repeats: each level's SMS is told apart by its text and its phone).
fn chain(rng: &mut SmallRng, people: usize, recipient: &str) -> Value {
    let wait = |rng: &mut SmallRng| format!("{}s", rng.random_range(120..=600));
    let mut then: Vec<Value> = Vec::new();
    let mut taken = vec![recipient.to_owned()];
    for _ in 0..rng.random_range(1..=2) {
        let to = number(rng.random_range(0..people));
        if !taken.contains(&to) {
            then.push(json!({"to": to, "wait": wait(rng)}));
            taken.push(to);
        }
    }
    json!({"wait": wait(rng), "then": then})
}

impl Workload {
    /// A workload of `kind` with about `alerts` alerts, drawn from `seed`.
    pub fn generate(kind: Kind, alerts: usize, seed: u64) -> Workload {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x3b1f_0ad5);
        let alerts = alerts.max(1);
        let (people, spread_ms, deadlines): (usize, Millis, (u64, u64)) = match kind {
            Kind::StormOne => (1, 60_000, (120, 1_800)),
            Kind::StormMany => ((alerts / 8).max(2), 30_000, (120, 1_800)),
            Kind::Throttled => ((alerts / 3).max(1), 20_000, (90, 900)),
            _ => (alerts.max(2) * 2 / 3, 10 * 60_000, (120, 1_800)),
        };
        let mut carriers = BTreeMap::new();
        for p in 0..people {
            let c = match kind {
                Kind::CarrierSilence => match rng.random_range(0..4) {
                    0 => Carrier::Silent,
                    1 => Carrier::Delivers { lo: 20 * 60_000, hi: 3 * 3_600_000 },
                    _ => Carrier::Delivers { lo: 1_000, hi: 30_000 },
                },
                Kind::DeadNumbers => match rng.random_range(0..3) {
                    0 => Carrier::Dead,
                    1 => Carrier::Unreachable,
                    _ => Carrier::Delivers { lo: 1_000, hi: 30_000 },
                },
                _ => match rng.random_range(0..20) {
                    0 => Carrier::Silent,
                    1 => Carrier::Dead,
                    2 => Carrier::Delivers { lo: 5 * 60_000, hi: 40 * 60_000 },
                    _ => Carrier::Delivers { lo: 1_000, hi: 30_000 },
                },
            };
            carriers.insert(number(p), c);
        }
        let mut requests = Vec::with_capacity(alerts * 2);
        // Escalation chains (issue 37) come from a generator of their own: every draw of `rng`,
        // and so every workload before chains, is as it was.
        let mut chain_rng = SmallRng::seed_from_u64(seed ^ 0x5eed_c4a1);
        // A third of the workloads with three people or more name chains.
        let chains = chains_in_the_world() && people >= 3 && chain_rng.random_range(0..3) == 0;
        for n in 0..alerts {
            let to = number(rng.random_range(0..people));
            let at = rng.random_range(0..=spread_ms);
            let deadline = rng.random_range(deadlines.0..=deadlines.1);
            let mut body = alert(seed, n, &to, deadline);
            if chains && chain_rng.random_range(0..4) == 0 {
                body["chain"] = chain(&mut chain_rng, people, &to);
            }
            if kind == Kind::Replays {
                // The client sends it again: the same payload later, or a changed one (a conflict).
                for _ in 0..rng.random_range(1..=3) {
                    let mut again = body.clone();
                    if rng.random_range(0..6) == 0 {
                        again["variables"]["stage"] = json!("capture");
                    }
                    requests.push(Request { at: at + rng.random_range(0..120_000), body: again });
                }
            }
            requests.push(Request { at, body });
        }
        requests.sort_by_key(|r| r.at);
        // A template's chain from a generator of its own, in a third of the workloads with three
        // people or more whose requests name none: every other workload is as before.
        let mut policy_rng = SmallRng::seed_from_u64(seed ^ 0x9011_c7a1);
        let chain_policy = (chains_in_the_world() && !chains && (3..9_990).contains(&people))
            .then(|| policy_rng.random_range(0..3) == 0)
            .filter(|set| *set)
            .map(|_| policy_chain(&mut policy_rng, people, &mut carriers));
        Workload {
            // Not under the heaviest foreign traffic: it would run on through the calm.
            networks: if kind == Kind::ForeignTraffic {
                crate::world::networks::Networks::default()
            } else {
                crate::world::networks::Networks::draw(seed)
            },
            chain_policy,
            kind,
            requests,
            carriers,
            foreign_per_minute: match kind {
                Kind::ForeignTraffic => 600,
                _ => rng.random_range(0..30),
            },
            sms_rate: match kind {
                Kind::Throttled => 1,
                _ => 20,
            },
            spend_exhausted_at: (kind == Kind::SpendExhausted).then(|| rng.random_range(0..spread_ms.max(1))),
            alerts,
            operator_at: if rng.random::<bool>() {
                let mut at: Vec<Millis> =
                    (0..=alerts / 8).map(|_| rng.random_range(60_000..=spread_ms + 30 * 60_000)).collect();
                at.sort();
                at
            } else {
                Vec::new()
            },
            // Drawn after the rest: every earlier draw, and so every other workload, is as before.
            parts_per_hour: (kind == Kind::SpendExhausted && rng.random::<bool>())
                .then(|| u32::try_from(alerts / 2).unwrap_or(u32::MAX).max(10)),
            // Drawn last.
            second_stack: match (kind, rng.random_range(0..4)) {
                (Kind::ForeignTraffic, _) => SecondStack { share: 1.0, shares_our_group: rng.random::<bool>() },
                (_, 0 | 1) => SecondStack::none(),
                (_, n) => SecondStack { share: rng.random_range(0.2..=1.0), shares_our_group: n == 3 },
            },
            // Drawn after the second stack: every earlier draw is as before.
            acks_at: if rng.random_range(0..3) == 0 {
                let mut at: Vec<(Millis, u64)> = (0..=alerts / 10)
                    .map(|_| (rng.random_range(30_000..=spread_ms + 20 * 60_000), rng.random::<u64>()))
                    .collect();
                at.sort();
                at
            } else {
                Vec::new()
            },
        }
    }

    /// The last deadline (from the start, at most), with the latest arrival.
    pub fn horizon(&self) -> Millis {
        let last = self.requests.last().map_or(0, |r| r.at);
        last + 1_800_000
    }
}
