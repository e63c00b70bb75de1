//! The intent state machine.
//!
//! ```text
//! received ─► queued ─► sending ─► accepted ─► delay_suspected ─┬─► delivered
//!                │         │  │        │              │          ├─► failed
//!                │         │  │        └──────────────┴──────────┴─► expired_unknown (73 h, no receipt)
//!                │         │  └─► send_unknown ─► delivered | failed   (only from a delivery record)
//!                │         ├─► failed (SNS refused the publish, or retries exhausted)
//!                │         ├─► suppressed (recipient on the suppression list; nothing sent)
//!                │         └─► stale (deadline passed before sending; nothing sent)
//!                └─ sending ─► queued: the one step back, taken only when SNS *proved* it did
//!                   not accept the publish (throttled, 5xx), so the attempt never happened.
//! ```
//! Final states absorb. Escalation is not a state but a fact recorded beside it. A delivery record
//! that contradicts a final state is stored and counted, never applied.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Written to the ledger; not yet confirmed on the send queue.
    Received,
    /// On the send queue.
    Queued,
    /// Claimed by a sender attempt that holds a lease.
    Sending,
    /// SNS returned a MessageId. Not delivered: only a delivery record says that.
    Accepted,
    /// The publish may or may not have reached SNS. Never re-sent automatically.
    SendUnknown,
    /// Accepted, and no delivery record after the configured threshold. A warning.
    DelaySuspected,
    Delivered,
    Failed,
    Suppressed,
    Stale,
    /// Accepted, and no delivery record within the carriers' 73-hour receipt window.
    ExpiredUnknown,
}

pub const ALL_STATES: [State; 11] = [
    State::Received,
    State::Queued,
    State::Sending,
    State::Accepted,
    State::SendUnknown,
    State::DelaySuspected,
    State::Delivered,
    State::Failed,
    State::Suppressed,
    State::Stale,
    State::ExpiredUnknown,
];

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Received => "received",
            State::Queued => "queued",
            State::Sending => "sending",
            State::Accepted => "accepted",
            State::SendUnknown => "send_unknown",
            State::DelaySuspected => "delay_suspected",
            State::Delivered => "delivered",
            State::Failed => "failed",
            State::Suppressed => "suppressed",
            State::Stale => "stale",
            State::ExpiredUnknown => "expired_unknown",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, State::Delivered | State::Failed | State::Suppressed | State::Stale | State::ExpiredUnknown)
    }

    /// No SMS for the intent is known to be with SNS yet: waiting to be sent, being sent, or
    /// sent with an unknown outcome. Such intents are in the ledger's pending-index under their
    /// recipient (what an orphaned delivery record is matched against, and a person's backlog).
    pub fn is_pending(self) -> bool {
        matches!(self, State::Received | State::Queued | State::Sending | State::SendUnknown)
    }

    /// A sender may claim the intent from these states.
    pub const CLAIMABLE: [State; 2] = [State::Received, State::Queued];

    /// States in which a delivery-status record moves the intent to delivered or failed.
    pub const AWAITING_RECEIPT: [State; 3] = [State::Accepted, State::SendUnknown, State::DelaySuspected];

    /// Progress order: a move must never lower it (the proven-not-sent release aside).
    pub fn rank(self) -> u8 {
        match self {
            State::Received => 0,
            State::Queued => 1,
            State::Sending => 2,
            State::Accepted | State::SendUnknown => 3,
            State::DelaySuspected => 4,
            _ => 5,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown state '{0}'")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_STATES.into_iter().find(|st| st.as_str() == s).ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// What a delivery-status record says about the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Receipt {
    Delivered,
    Failed,
}

impl Receipt {
    pub fn target(self) -> State {
        match self {
            Receipt::Delivered => State::Delivered,
            Receipt::Failed => State::Failed,
        }
    }
}

/// The effect a delivery record has on an intent's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptEffect {
    /// The state moves to the record's outcome.
    Moved { from: State, to: State },
    /// The intent is already in the state the record reports (e.g. a second record).
    Redundant,
    /// The record contradicts a final state: stored and counted, never applied.
    Conflicting,
    /// The intent's receipt window closed (expired_unknown) or it never left: stored as late.
    Late,
    /// The record's status is not one tocsin knows: stored and counted, never applied.
    Unrecognised,
}

/// Decides what a delivery record does to an intent in `current`. Monotonic by construction.
pub fn apply_receipt(current: State, receipt: Receipt) -> ReceiptEffect {
    let target = receipt.target();
    if State::AWAITING_RECEIPT.contains(&current) {
        return ReceiptEffect::Moved { from: current, to: target };
    }
    match current {
        s if s == target => ReceiptEffect::Redundant,
        State::Delivered | State::Failed => ReceiptEffect::Conflicting,
        _ => ReceiptEffect::Late,
    }
}

/// Like [`apply_receipt`], for a record tied to the intent by reconciliation (destination and time
/// window) rather than by the message-id index: it may also settle an intent still `sending`
/// (its sender published but never recorded the MessageId).
pub fn apply_linked_receipt(current: State, receipt: Receipt) -> ReceiptEffect {
    if current == State::Sending {
        return ReceiptEffect::Moved { from: current, to: receipt.target() };
    }
    apply_receipt(current, receipt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn state_names_round_trip() {
        for s in ALL_STATES {
            assert_eq!(s.as_str().parse::<State>().ok(), Some(s));
            assert_eq!(serde_json::to_string(&s).ok(), Some(format!("\"{}\"", s.as_str())));
        }
    }

    #[test]
    fn receipts_move_accepted_unknown_and_delayed_intents_to_their_outcome() {
        for s in State::AWAITING_RECEIPT {
            assert_eq!(apply_receipt(s, Receipt::Delivered), ReceiptEffect::Moved { from: s, to: State::Delivered });
            assert_eq!(apply_receipt(s, Receipt::Failed), ReceiptEffect::Moved { from: s, to: State::Failed });
        }
    }

    #[test]
    fn a_failure_after_delivery_is_conflicting_and_never_flips_the_state() {
        assert_eq!(apply_receipt(State::Delivered, Receipt::Failed), ReceiptEffect::Conflicting);
        assert_eq!(apply_receipt(State::Failed, Receipt::Delivered), ReceiptEffect::Conflicting);
        assert_eq!(apply_receipt(State::Delivered, Receipt::Delivered), ReceiptEffect::Redundant);
    }

    #[test]
    fn records_after_the_receipt_window_are_late() {
        assert_eq!(apply_receipt(State::ExpiredUnknown, Receipt::Delivered), ReceiptEffect::Late);
        assert_eq!(apply_receipt(State::Suppressed, Receipt::Failed), ReceiptEffect::Late);
    }

    fn fold(start: State, receipts: &[Receipt]) -> State {
        receipts.iter().fold(start, |s, r| match apply_receipt(s, *r) {
            ReceiptEffect::Moved { to, .. } => to,
            _ => s,
        })
    }

    fn any_receipt() -> impl Strategy<Value = Receipt> {
        prop_oneof![Just(Receipt::Delivered), Just(Receipt::Failed)]
    }

    proptest! {
        #[test]
        fn receipts_never_move_a_state_backwards(start in proptest::sample::select(ALL_STATES.to_vec()), rs in proptest::collection::vec(any_receipt(), 0..8)) {
            let mut s = start;
            for r in rs {
                let next = fold(s, &[r]);
                prop_assert!(next.rank() >= s.rank());
                if s.is_final() { prop_assert_eq!(next, s); }
                s = next;
            }
        }

        #[test]
        fn duplicating_a_receipt_changes_nothing(start in proptest::sample::select(ALL_STATES.to_vec()), rs in proptest::collection::vec(any_receipt(), 1..6), dup in 0usize..6) {
            let once = fold(start, &rs);
            let mut twice = rs.clone();
            let i = dup % rs.len();
            twice.insert(i, rs[i]);
            prop_assert_eq!(fold(start, &twice), once);
        }

        #[test]
        fn the_first_receipt_decides_whatever_follows(start in proptest::sample::select(State::AWAITING_RECEIPT.to_vec()), first in any_receipt(), rest in proptest::collection::vec(any_receipt(), 0..6)) {
            let mut all = vec![first];
            all.extend(rest);
            prop_assert_eq!(fold(start, &all), first.target());
        }
    }

    /// A model of the ledger: observations stored once per log event id, the state folded over
    /// them in arrival order, contradictions counted.
    fn ledger(start: State, arrivals: &[(u8, Receipt)]) -> (State, std::collections::BTreeSet<u8>, u32) {
        let mut stored = std::collections::BTreeSet::new();
        let mut state = start;
        let mut conflicts = 0;
        for (id, r) in arrivals {
            if !stored.insert(*id) {
                continue; // the same log event again: stored once, applied once
            }
            match apply_receipt(state, *r) {
                ReceiptEffect::Moved { from, to } => {
                    assert!(to.rank() >= from.rank());
                    state = to;
                }
                ReceiptEffect::Conflicting => conflicts += 1,
                _ => {}
            }
        }
        (state, stored, conflicts)
    }

    /// Log events in arrival order: (log event id, what the record says).
    type Arrivals = Vec<(u8, Receipt)>;

    /// Distinct log events, then the same events shuffled with some delivered again.
    fn arrivals() -> impl Strategy<Value = (Arrivals, Arrivals)> {
        proptest::collection::vec(any_receipt(), 1..6).prop_flat_map(|rs| {
            let canonical: Vec<(u8, Receipt)> = rs.into_iter().enumerate().map(|(i, r)| (i as u8, r)).collect();
            let c = canonical.clone();
            (Just(canonical), proptest::collection::vec(proptest::sample::select(c), 0..6)).prop_flat_map(
                |(canonical, dups)| {
                    let mut noisy = canonical.clone();
                    noisy.extend(dups);
                    (Just(canonical), Just(noisy).prop_shuffle())
                },
            )
        })
    }

    proptest! {
        #[test]
        fn any_order_or_duplication_of_agreeing_records_ends_as_the_canonical_order(
            start in proptest::sample::select(ALL_STATES.to_vec()),
            r in any_receipt(),
            n in 1usize..6,
            dups in proptest::collection::vec(0u8..6, 0..6),
            seed in any::<u64>(),
        ) {
            let canonical: Vec<(u8, Receipt)> = (0..n as u8).map(|i| (i, r)).collect();
            let mut noisy = canonical.clone();
            noisy.extend(dups.into_iter().filter(|d| (*d as usize) < n).map(|d| (d, r)));
            // A deterministic shuffle from the seed.
            let mut x = seed | 1;
            for i in (1..noisy.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                noisy.swap(i, (x % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(ledger(start, &noisy), ledger(start, &canonical));
        }

        #[test]
        fn the_stored_observations_never_depend_on_order_and_the_state_never_regresses(
            start in proptest::sample::select(ALL_STATES.to_vec()),
            (canonical, noisy) in arrivals(),
        ) {
            let (state_c, stored_c, _) = ledger(start, &canonical);
            let (state_n, stored_n, conflicts_n) = ledger(start, &noisy);
            prop_assert_eq!(&stored_c, &stored_n, "every log event stored once, whatever the order");
            prop_assert!(state_n.rank() >= start.rank() && state_c.rank() >= start.rank());
            if State::AWAITING_RECEIPT.contains(&start) {
                // The first record to arrive decides; every later contradiction is counted.
                let first = noisy.first().map(|(_, r)| r.target());
                prop_assert_eq!(Some(state_n), first);
                let mut seen = std::collections::BTreeSet::new();
                let contradictions = noisy.iter().filter(|(id, r)| seen.insert(*id) && r.target() != state_n).count() as u32;
                prop_assert_eq!(conflicts_n, contradictions);
            } else {
                prop_assert_eq!(state_n, start);
            }
        }
    }
}
