//! The mobile networks behind the numbers: which network each number is on (the name, MCC and MNC
//! its delivery records and events carry), a network's incident (it holds every SMS for a while,
//! then releases them: late, not lost), and the account's other traffic changing for good — an
//! application leaves a network, or the whole account's other traffic halves. Drawn per workload
//! from a generator of its own, so every other draw of a seed is as it was.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::exec::Millis;

/// The coverage table's section for the networks: what the world did, and the carrier view's
/// verdicts by the traffic against it.
pub const COVERAGE: &str = "Carrier networks";

/// A verdict the networks give no reason for (another stack's storm may: see
/// `invariants::others_storm`).
pub const NO_REASON: &str = "verdict: no reason in the world";

/// One network: what its records say, and its share of the numbers.
#[derive(Debug)]
pub struct Network {
    pub name: &'static str,
    pub mcc: &'static str,
    pub mnc: &'static str,
    /// Percent of the numbers on it (the four sum to 100).
    share: u64,
}

/// Four US networks, shared as the month-long carrier benchmark shares them (35/30/25/10 %).
pub const NETWORKS: [Network; 4] = [
    Network { name: "AT&T Wireless", mcc: "310", mnc: "410", share: 35 },
    Network { name: "T-Mobile USA", mcc: "310", mnc: "260", share: 30 },
    Network { name: "Verizon Wireless", mcc: "311", mnc: "480", share: 25 },
    Network { name: "US Cellular", mcc: "311", mnc: "580", share: 10 },
];

/// The network `number` is on: fixed by the number (FNV-1a of its digits into the shares), so
/// every record to it names the same network.
pub fn network_of(number: &str) -> usize {
    let hash = number.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut slot = hash % 100;
    for (i, n) in NETWORKS.iter().enumerate() {
        if slot < n.share {
            return i;
        }
        slot -= n.share;
    }
    NETWORKS.len() - 1
}

/// A network holds every SMS handed to it in `[from, to)` and releases them after `to`: their
/// records are written then (the incident carrier alerting suffers most: late, not lost).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Incident {
    pub network: usize,
    pub from: Millis,
    pub to: Millis,
}

/// Traffic that changes for good, no network at fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShapeChange {
    /// An application stops sending through `network`: the other traffic there keeps `keeps`
    /// (a tenth, or nothing at all).
    Leaves { network: usize, keeps: f64 },
    /// The account's other traffic halves, on every network alike.
    AccountHalves,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrafficChange {
    pub at: Millis,
    pub change: ShapeChange,
}

impl TrafficChange {
    /// Whether the change touched `network`'s traffic.
    pub fn touches(&self, network: usize) -> bool {
        match self.change {
            ShapeChange::Leaves { network: n, .. } => n == network,
            ShapeChange::AccountHalves => true,
        }
    }
}

/// A workload's networks: at most one incident and one change of the traffic's shape, each in
/// about a third of the workloads, both after the traffic baseline's first hour (before it, the
/// traffic signal judges nothing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Networks {
    pub incident: Option<Incident>,
    pub change: Option<TrafficChange>,
}

/// The traffic baseline's warm-up (`TrafficPolicy::warmup_minutes`) and a little more.
const AFTER_WARMUP_MS: Millis = 65 * 60_000;

impl Networks {
    /// Drawn from `seed` (milliseconds from the run's start).
    pub fn draw(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6e37_0c4b);
        let incident = (rng.random_range(0..3) == 0).then(|| {
            let from = AFTER_WARMUP_MS + rng.random_range(0..30 * 60_000);
            Incident {
                network: rng.random_range(0..NETWORKS.len()),
                from,
                to: from + rng.random_range(5 * 60_000..=40 * 60_000),
            }
        });
        let change = (rng.random_range(0..3) == 0).then(|| TrafficChange {
            at: AFTER_WARMUP_MS + rng.random_range(0..30 * 60_000),
            change: match rng.random_range(0..3) {
                0 => ShapeChange::Leaves { network: rng.random_range(0..NETWORKS.len()), keeps: 0.1 },
                1 => ShapeChange::Leaves { network: rng.random_range(0..NETWORKS.len()), keeps: 0.0 },
                _ => ShapeChange::AccountHalves,
            },
        });
        Networks { incident, change }
    }

    /// Neither an incident nor a change of shape.
    pub fn is_quiet(&self) -> bool {
        self.incident.is_none() && self.change.is_none()
    }

    /// Shifted to absolute time (the run's epoch added).
    pub fn from(&self, epoch: Millis) -> Self {
        Networks {
            incident: self.incident.map(|i| Incident { from: i.from + epoch, to: i.to + epoch, ..i }),
            change: self.change.map(|c| TrafficChange { at: c.at + epoch, ..c }),
        }
    }

    /// What the world does to the networks in this run, for the coverage table.
    pub fn what(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.incident.is_some() {
            out.push("a network held every SMS for minutes (an incident)");
        }
        match self.change.map(|c| c.change) {
            Some(ShapeChange::Leaves { keeps, .. }) if keeps > 0.0 => {
                out.push("an application left a network for good (a tenth of its traffic stays)");
            }
            Some(ShapeChange::Leaves { .. }) => out.push("an application left a network for good (none stays)"),
            Some(ShapeChange::AccountHalves) => out.push("the account's other traffic halved for good"),
            None => {}
        }
        out
    }

    /// Why a network may be judged degraded at `at`, for the coverage table: in or after its
    /// incident, after its traffic changed shape, or for no reason the world gave.
    pub fn reason(&self, network: Option<usize>, at: Millis) -> &'static str {
        let Some(network) = network else { return "verdict: a carrier no network is named" };
        match (self.incident, self.change) {
            (Some(i), _) if i.network == network && (i.from..i.to).contains(&at) => {
                "verdict: during its network's incident"
            }
            (Some(i), _) if i.network == network && at >= i.to => "verdict: after its network's incident ended",
            (_, Some(c)) if c.touches(network) && at >= c.at => "verdict: after its traffic changed for good",
            _ => NO_REASON,
        }
    }

    /// When the network of `number` hands over an SMS it would have at `at`: then, or — held by
    /// its incident — once the incident ends.
    pub fn released(&self, number: &str, at: Millis) -> Millis {
        match self.incident {
            Some(i) if network_of(number) == i.network && (i.from..i.to).contains(&at) => i.to,
            _ => at,
        }
    }

    /// The share of the other applications' traffic to `number` that still flows at `at`.
    pub fn keeps(&self, number: &str, at: Millis) -> f64 {
        match self.change {
            Some(c) if at >= c.at => match c.change {
                ShapeChange::Leaves { network, keeps } if network_of(number) == network => keeps,
                ShapeChange::Leaves { .. } => 1.0,
                ShapeChange::AccountHalves => 0.5,
            },
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_spread_over_the_networks_by_their_shares() {
        let mut counts = [0u32; 4];
        for n in 0..10_000 {
            counts[network_of(&format!("+1206555{n:04}"))] += 1;
        }
        for (i, net) in NETWORKS.iter().enumerate() {
            let share = f64::from(counts[i]) / 100.0;
            assert!((share - net.share as f64).abs() < 3.0, "{}: {share} % of numbers, not ~{}", net.name, net.share);
        }
    }

    #[test]
    fn a_network_in_an_incident_releases_what_it_held_at_its_end_and_no_other_is_touched() {
        let on = |k| (0..).map(|n| format!("+1206555{n:04}")).find(|m| network_of(m) == k).expect("a number");
        let n = Networks { incident: Some(Incident { network: 1, from: 1_000, to: 5_000 }), change: None };
        assert_eq!(n.released(&on(1), 2_000), 5_000);
        assert_eq!(n.released(&on(1), 5_000), 5_000);
        assert_eq!(n.released(&on(1), 900), 900);
        assert_eq!(n.released(&on(0), 2_000), 2_000);
    }
}
