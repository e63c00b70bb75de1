//! The guarantees checked once the world is quiet (no more requests, every timer past): what must
//! hold of every intent in the end, whatever happened on the way. The checks made as events
//! happen are the oracle's ([`crate::oracle`]).

use std::sync::Arc;

use tocsin::domain::State;
use tocsin::domain::delivery::DeliveryRecord;

use crate::exec::Millis;
use crate::oracle::{Invariant, Truth, Violation};
use crate::world::World;
use crate::world::logs::permanent_failure;

/// Intents "not sent" states: an SMS that covered the alert must never leave it in one of these.
const NOT_SENT: [State; 4] = [State::Received, State::Queued, State::Stale, State::Suppressed];

/// The final states an alert cannot be delivered from: once it rests in one, its deadline is
/// already lost.
const CANNOT_BE_DELIVERED: [State; 3] = [State::Failed, State::Suppressed, State::Stale];

/// How long after an intent's deadline the sweep may take to escalate it (a schedule period and
/// a run, with margin for retries of a failed run).
const ESCALATION_GRACE_MS: Millis = 10 * 60_000;

/// When the sweep can first act on an alert that owes its escalation from `moment`: not before
/// the due-index shows the entry the intent had by then (a GSI lags; AWS promises no bound, and
/// the sweep finds due intents only through it), nor while an escalation lease that a run took
/// and never used holds the intent (a run that crashed or lost the lease's answer holds it for
/// `TOCSIN_ESCALATION_LEASE`, by design). The lease of the escalation that was sent is not one
/// of those.
fn actionable_from(truth: &Truth, moment: Millis) -> Millis {
    let index = truth.due_index_behind.iter().rev().find(|(written, _)| *written <= moment).map_or(moment, |(_, v)| *v);
    let first = truth.escalations.first().copied().unwrap_or(Millis::MAX);
    let taken_before_first: Vec<_> = truth.lease_untils.iter().filter(|(at, _)| *at <= first).collect();
    let unused = match truth.escalations.first() {
        Some(_) => &taken_before_first[..taken_before_first.len().saturating_sub(1)],
        None => &taken_before_first[..],
    };
    let lease = unused.iter().map(|(_, until)| *until).max().unwrap_or(moment);
    moment.max(index).max(lease)
}

/// By when the sweep must have escalated an alert that owes it from `moment` (its deadline, or
/// the moment it could no longer be delivered): the grace, or — when faults failed the sweeps of
/// those minutes, the index lagged, or an unused lease held it — the end of the second sweep that
/// started once the sweep could act on it ([`actionable_from`]) and ran clean, with no
/// escalation waiting on another run's lease either (the sweep escalates at its first run that
/// completes the intent's write; a minute of schedule is not a run that could act).
fn escalation_owed_by(world: &World, truth: &Truth, moment: Millis) -> Millis {
    let from = actionable_from(truth, moment);
    let second_clean = world.oracle.clean_sweeps.iter().filter(|(started, _)| *started >= from).nth(1);
    (moment + ESCALATION_GRACE_MS).max(second_clean.map_or(Millis::MAX, |(_, ended)| *ended))
}

pub fn at_quiescence(world: &World) -> Vec<Violation> {
    let mut out = Vec::new();
    let now = world.now;
    let mut v = |invariant, key: &tocsin::domain::IdempotencyKey, detail: String| {
        out.push(Violation { at: now, invariant, key: Some(key.to_string()), detail });
    };
    for (key, item) in &world.ledger.intents {
        let Some(truth) = world.oracle.intents.get(key) else { continue };
        let s = &item.record.status;
        let escalated = s.escalation.is_some();
        // Someone has it (issue 37): since when the ledger says so, if at all (the
        // acknowledgement's own time is when it was made; its write may land later).
        let acked_at = s.acknowledgement.as_ref().and(truth.acknowledged_written);
        let acked_by = |moment: Millis| acked_at.is_some_and(|a| a <= moment);
        if let Some(acked) = acked_at {
            for &e in truth.escalations.iter().filter(|&&e| e > acked) {
                let leased_before = truth.lease_untils.iter().any(|&(l, until)| l <= acked && e <= until);
                if !leased_before {
                    v(
                        Invariant::AcknowledgedNeverEscalated,
                        key,
                        format!("acknowledged in the ledger at {acked} ms, escalated at {e} ms by a lease taken after"),
                    );
                }
            }
        }
        if !s.state.is_final() && !escalated && acked_at.is_none() {
            v(Invariant::NothingStuck, key, format!("{} and not escalated", s.state));
        } else if s.state == State::Sending {
            v(Invariant::NothingStuck, key, "sending forever (escalated, but no attempt's outcome is recorded)".into());
        }
        // Delivered before the sweep could escalate it: nothing to escalate any more.
        let owed = escalation_owed_by(world, truth, truth.deadline);
        let delivered_in_time = truth.delivered_at.is_some_and(|d| d <= owed);
        if !delivered_in_time && !acked_by(owed) && now >= truth.deadline + ESCALATION_GRACE_MS {
            let ledger = if s.state == State::Delivered { "delivered after its deadline" } else { s.state.as_str() };
            match truth.escalations.first() {
                None => v(Invariant::UndeliveredEscalated, key, format!("{ledger}; never escalated")),
                // Escalated, but later than the bound promise 7 states.
                Some(&at) if at > owed => v(
                    Invariant::UndeliveredEscalated,
                    key,
                    format!(
                        "{ledger}; escalated at {at} ms, {} s after its deadline and {} s after the bound ({owed} ms)",
                        (at - truth.deadline) / 1000,
                        (at - owed) / 1000
                    ),
                ),
                Some(_) => {}
            }
        }
        // Late is said early: the first moment before its deadline that the alert could no
        // longer be delivered (a final state other than delivered) owes its escalation as a
        // deadline does.
        if let Some(&(known, state)) = truth.states.iter().find(|(_, st)| CANNOT_BE_DELIVERED.contains(st))
            && known < truth.deadline
            && now >= known + ESCALATION_GRACE_MS
        {
            let owed = escalation_owed_by(world, truth, known);
            match truth.escalations.first() {
                Some(&at) if at <= owed => {}
                // An operator's resend delivered it before the escalation was owed.
                _ if truth.delivered_at.is_some_and(|d| d <= owed) => {}
                // Someone had it before the escalation was owed.
                _ if acked_by(owed) => {}
                // An operator resent it before the escalation was owed: the resend is a new
                // attempt, held to its deadline like any other.
                _ if truth.attempts.iter().any(|(a, at)| a.starts_with("operator:") && (known..=owed).contains(at)) => {
                }
                first => v(
                    Invariant::LateSaidEarly,
                    key,
                    format!(
                        "{state} at {known} ms, {} s before its deadline; escalated {} (owed by {owed} ms)",
                        (truth.deadline - known) / 1000,
                        first.map_or("never".to_owned(), |at| format!("at {at} ms"))
                    ),
                ),
            }
        }
        if escalated && truth.escalations.is_empty() {
            v(Invariant::UndeliveredEscalated, key, "marked escalated, but no escalation message was sent".into());
        }
        // Every state it rests in is explained (received is the intent item itself; `sending`
        // is the claim on the intent item, whose attempt every later observation names).
        if !matches!(s.state, State::Received | State::Sending) && !truth.observed_states.contains(&s.state) {
            v(Invariant::Explained, key, format!("rests in {} with no observation saying so", s.state));
        }
        // A delivery record that settled the intent after an attempt's claim tells how that
        // attempt's SMS ended, whoever would have recorded it.
        for (attempt, claimed) in &truth.attempts {
            if truth.explained_attempts.contains(attempt) || truth.receipts.iter().any(|r| r >= claimed) {
                continue;
            }
            if s.attempt_id.as_deref() == Some(attempt.as_str()) && s.state == State::Sending {
                continue;
            }
            v(Invariant::Explained, key, format!("attempt {attempt} claimed it; no observation says how it ended"));
        }
        if truth.sms.is_empty() && s.state == State::Delivered {
            v(Invariant::NoFalseDelivery, key, "delivered, yet no SMS carried it".into());
        } else if s.state == State::Delivered && !truth.sms_ids.iter().any(|id| world.sms.handed_over.contains(id)) {
            // The carrier's truth, not the ledger's: an acceptance, a blocked SMS or one whose
            // time to live ran out is not a delivery.
            v(Invariant::NoFalseDelivery, key, "delivered, yet no carrier delivered any SMS that carried it".into());
        }
        if !truth.sms.is_empty() && (NOT_SENT.contains(&s.state) || s.state == State::Sending) {
            v(Invariant::SentRemembered, key, format!("an SMS went out, the ledger says {}", s.state));
        }
        // The last attempt says SNS refused it, yet an SMS left after that attempt's claim.
        let last_claim = s.claimed_at.map(crate::exec::to_ms).unwrap_or(i64::MIN);
        if s.state == State::Failed
            && truth.sms.iter().any(|(at, _)| *at >= last_claim)
            && s.last_error.as_deref().is_some_and(refused_by_provider)
        {
            v(
                Invariant::SentRemembered,
                key,
                format!("an SMS went out, the ledger says SNS refused it ({:?})", s.last_error),
            );
        }
        if item.expires_at <= 0 {
            v(Invariant::Expires, key, "intent without a TTL".into());
        }
    }
    // A digest's fate reaches every member.
    for (reference, digest_members) in &world.oracle.sent_digests {
        let members: Vec<(&tocsin::domain::IdempotencyKey, State)> = digest_members
            .iter()
            // A member an operator resent on its own since has that attempt's fate instead.
            .filter(|k| {
                world
                    .oracle
                    .intents
                    .get(*k)
                    .is_some_and(|t| !t.sms.is_empty() && !t.attempts.keys().any(|a| a.starts_with("operator:")))
            })
            .filter_map(|k| world.ledger.intents.get(k).map(|i| (k, i.record.status.state)))
            .collect();
        // `accepted` and `delay_suspected` are one fate (SNS took the SMS, no record yet): a member
        // settled later than its siblings is suspected of a delay at its own next check.
        let fate = |s: State| if s == State::DelaySuspected { State::Accepted } else { s };
        if members.windows(2).any(|w| fate(w[0].1) != fate(w[1].1)) {
            let states: Vec<String> = members.iter().map(|(k, s)| format!("{} {s}", k.short())).collect();
            out.push(Violation {
                at: now,
                invariant: Invariant::DigestFate,
                key: members.first().map(|(k, _)| k.to_string()),
                detail: format!("digest {reference} members disagree: {}", states.join(", ")),
            });
            for (k, _) in members.iter().skip(1) {
                out.push(Violation {
                    at: now,
                    invariant: Invariant::DigestFate,
                    key: Some(k.to_string()),
                    detail: "(the same digest)".into(),
                });
            }
        }
    }
    // Every item expires.
    for ((key, id), o) in &world.ledger.observations {
        if o.expires_at <= 0 {
            out.push(Violation {
                at: now,
                invariant: Invariant::Expires,
                key: Some(key.to_string()),
                detail: format!("observation {id} without TTL"),
            });
        }
    }
    for (id, m) in &world.ledger.messages {
        if m.expires_at <= 0 {
            out.push(Violation {
                at: now,
                invariant: Invariant::Expires,
                key: None,
                detail: format!("message index {id} without TTL"),
            });
        }
    }
    for (number, r) in &world.registry.numbers {
        if !r.suppressed && r.expires_at.is_none() && !r.history.is_empty() {
            out.push(Violation {
                at: now,
                invariant: Invariant::Expires,
                key: None,
                detail: format!(
                    "registry entry of {} neither suppressed nor expiring",
                    tocsin::domain::phone::mask_phone_like(number)
                ),
            });
        }
    }
    out.extend(breaker_holds(world));
    out.extend(chains_walked(world));
    out.extend(carrier_verdicts_clear(world));
    out
}

/// When a level of a chain stopped waiting for its person: at once when it could no longer be
/// delivered; else its wait after its acceptance (the provider's answer, as recorded), or its
/// deadline if sooner — unless its delivery was written before that, and then its wait after the
/// delivery (the carrier's time, as recorded). What tocsin could know, when it could know it.
fn stopped_waiting(
    truth: &Truth,
    status: Option<&tocsin::domain::intent::Status>,
    wait_ms: Millis,
    next_started: Millis,
) -> Millis {
    // An operator's resend in the ledger before the next level started texts the person anew:
    // the level waits from it (promise 19 counts the wait from the level's acceptance, or its
    // claim, and the resend's are the level's now), not from an earlier attempt's. In the ledger:
    // its claim written (`sending`), which is what a sweep that started the next level could see.
    let resends = truth.attempts.iter().filter(|(id, _)| id.starts_with("operator:")).map(|(_, at)| *at);
    let written =
        |claimed: Millis| truth.states.iter().find(|(at, s)| *at >= claimed && *s == State::Sending).map(|(at, _)| *at);
    // Each resend's claim as the operator's command timed it, and its write in the ledger.
    let (resend_timed, resent) = resends
        .filter_map(|timed| written(timed).map(|at| (timed, at)))
        .filter(|(_, at)| *at < next_started)
        .max_by_key(|(_, at)| *at)
        .unzip();
    let states: Vec<(Millis, State)> =
        truth.states.iter().copied().filter(|(at, _)| resent.is_none_or(|r| *at >= r)).collect();
    let first = |wanted: &[State]| states.iter().find(|(_, s)| wanted.contains(s)).map(|(at, _)| *at);
    // The first acceptance: an operator's resend since records its own in the ledger.
    let recorded = status.and_then(|s| s.accepted_at).map(crate::exec::to_ms);
    // An acceptance learnt from its delivery record has no time of its own, and an unknown
    // outcome none at all: the claim an SMS may have left under is the earliest the wait may
    // count from (not one handed back unsent).
    let handed_back = |i: usize| states.get(i + 1).is_some_and(|(_, s)| matches!(s, State::Queued | State::Received));
    let claimed =
        states.iter().enumerate().find(|(i, (_, s))| *s == State::Sending && !handed_back(*i)).map(|(_, (at, _))| *at);
    // The claim as the sender timed it (a moment before its write reached the ledger): that
    // claim's own time, which a later claim overwrites in the ledger (long-mode seed 151138).
    let claim_recorded =
        claimed.and_then(|c| truth.claim_times.iter().find(|(written, _)| *written == c).map(|(_, timed)| *timed));
    // A resend's claim counts from its own time too, as a sender's does (a moment before its
    // write reached the ledger: long-mode seed 227992, a write slowed by 870 ms).
    let accepted =
        [recorded, first(&[State::Accepted]), claimed, claim_recorded, resend_timed].into_iter().flatten().min();
    let undelivered = accepted.map_or(truth.deadline, |a| (a + wait_ms).min(truth.deadline));
    let delivered = status.filter(|s| s.state == State::Delivered).and_then(|s| s.final_at).map(crate::exec::to_ms);
    let waiting = match (truth.delivered_at, delivered) {
        (Some(written), Some(at)) if written <= undelivered => at + wait_ms,
        _ => undelivered,
    };
    first(&CANNOT_BE_DELIVERED).map_or(waiting, |failed| failed.min(waiting))
}

/// Promise 19: every chain walks its levels once each, in order; each level is started (or
/// on-call paged) within the escalation bound of the moment the level before stopped waiting;
/// none after the chain was acknowledged at any level; and a chain nobody acknowledged ends with
/// on-call paged once.
fn chains_walked(world: &World) -> Vec<Violation> {
    let mut out = Vec::new();
    let now = world.now;
    let oracle = &world.oracle;
    for (root, truth) in &oracle.intents {
        let Some(place) = truth.chain.as_ref().filter(|c| c.level == 0 && &c.root == root) else { continue };
        let mut v = |detail: String| {
            out.push(Violation { at: now, invariant: Invariant::ChainWalked, key: Some(root.to_string()), detail });
        };
        let levels: Vec<(tocsin::domain::IdempotencyKey, Option<&Truth>)> = (0..place.levels)
            .map(|l| {
                let n = u8::try_from(l).unwrap_or(u8::MAX);
                let key = if n == 0 { root.clone() } else { tocsin::domain::chain::level_key(root, n) };
                let t = oracle.intents.get(&key);
                (key, t)
            })
            .collect();
        let starts = &truth.chain_starts;
        if starts.windows(2).any(|w| w[1].0 <= w[0].0) {
            v(format!("levels started out of order or twice: {starts:?}"));
        }
        // The first acknowledgement written at any level, and each start, in the order the
        // ledger made them (two in one millisecond too: long-mode seed 153928).
        let acked_in_order =
            levels.iter().filter_map(|(_, t)| t.and_then(|t| t.acknowledged_written.zip(t.acknowledged_seq))).min();
        let acked = acked_in_order.map(|(at, _)| at);
        let starts_in_order = || starts.iter().zip(&truth.chain_start_seqs).map(|(&(l, at), &seq)| (l, (at, seq)));
        // Whatever the root's record says: no level's intent is written, and on-call is not paged,
        // after the chain was acknowledged (but by a sweep that leased the level before).
        // A level started on the root before the acknowledgement (the ledger's arbitration: it
        // came first) is written and texted even when the write lands after it.
        for (n, (_, t)) in levels.iter().enumerate().skip(1) {
            let started_before =
                |a: (Millis, u64)| starts_in_order().any(|(l, started)| usize::from(l) == n && started < a);
            if let (Some(a), Some(t)) = (acked_in_order, t)
                && a.0 <= t.created
                && !started_before(a)
            {
                v(format!("level {n} written at {} ms, after the chain was acknowledged at {} ms", t.created, a.0));
            }
        }
        if let (Some(a), Some((_, Some(last)))) = (acked, levels.last()) {
            for &e in last.escalations.iter().filter(|&&e| e > a) {
                if !last.lease_untils.iter().any(|&(l, until)| l <= a && e <= until) {
                    v(format!("on-call paged at {e} ms, after the chain was acknowledged at {a} ms"));
                }
            }
        }
        for (level, (at, seq)) in starts_in_order() {
            if acked_in_order.is_some_and(|a| a <= (at, seq)) {
                v(format!("level {level} started at {at} ms, after the chain was acknowledged at {acked:?} ms"));
            }
            let Some(previous) = levels.get(usize::from(level).saturating_sub(1)).and_then(|(_, t)| *t) else {
                v(format!("level {level} started, but the level before it does not exist"));
                continue;
            };
            // The level before must have stopped waiting; then the sweep owes the start.
            let wait = previous.chain.as_ref().map_or(0, |c| c.wait_ms);
            let previous_status =
                world.ledger.intents.get(&levels[usize::from(level).saturating_sub(1)].0).map(|i| &i.record.status);
            let moment = stopped_waiting(previous, previous_status, wait, at);
            // Moving on early is said, and only for two reasons: late is said early (the level's
            // SMS cannot make its deadline), or its carrier is degraded or held.
            // Why it started: as the root keeps it (`chain_reason_<level>`), else as the level
            // before was marked.
            let previous_key = &levels[usize::from(level).saturating_sub(1)].0;
            let started_for = world.ledger.intents.get(root).and_then(|i| i.chain_reasons.get(&level)).or_else(|| {
                world
                    .ledger
                    .intents
                    .get(previous_key)
                    .and_then(|i| i.record.status.escalation.as_ref())
                    .map(|e| &e.reason)
            });
            // A carrier is degraded by its own signal ("carrier …") or by every carrier falling
            // silent together ("all carriers silent: …", which degrades each of them too).
            let early = started_for.is_some_and(|reason| {
                let why = reason.rsplit_once("the last): ").map_or(reason.as_str(), |(_, why)| why);
                why.starts_with("carrier ")
                    || why.starts_with("all carriers silent")
                    || why.contains("escalated before the deadline")
            });
            if at < moment && !early {
                let was = previous_status
                    .map(|s| format!("{} {:?} {:?}", s.state, s.accepted_at, s.escalation.as_ref().map(|e| &e.reason)));
                v(format!(
                    "level {level} started at {at} ms, before level {} stopped waiting at {moment} ms (deadline {}; {was:?}; states {:?})",
                    level - 1,
                    previous.deadline,
                    previous.states
                ));
            }
            // A receipt written after the level stopped waiting, but before the sweep moved on,
            // gives the person their wait from the delivery (the SMS reached them before it was no
            // use): the sweep may honour either moment, so the later one bounds the start.
            let late_receipt = match (previous.delivered_at, previous_status) {
                (Some(written), Some(s)) if written > moment && written <= at && s.state == State::Delivered => {
                    s.final_at.map(|d| crate::exec::to_ms(d) + wait)
                }
                _ => None,
            };
            let owed = escalation_owed_by(world, previous, late_receipt.map_or(moment, |r| r.max(moment)));
            if at > owed {
                v(format!("level {level} started at {at} ms, {} s after the bound ({owed} ms)", (at - owed) / 1000));
            }
            // A run that started a level and died holds the level before until its lease ends;
            // a chain acknowledged by the time the start had to be finished needs it no more.
            let unwritten = levels.get(usize::from(level)).is_none_or(|(_, t)| t.is_none());
            if usize::from(level) < place.levels
                && unwritten
                && acked.is_none_or(|a| a > escalation_owed_by(world, previous, at))
            {
                v(format!("level {level} started at {at} ms, but its intent was never written"));
            }
        }
        if acked.is_none() {
            let last = levels.last().and_then(|(_, t)| *t);
            let quiet = last.is_some_and(|t| now >= t.deadline + ESCALATION_GRACE_MS);
            let on_call = u8::try_from(place.levels).unwrap_or(u8::MAX);
            if quiet && !starts.iter().any(|(l, _)| *l == on_call) {
                v(format!("nobody acknowledged it, and on-call was never reached: levels started {starts:?}"));
            }
            if quiet && last.is_some_and(|t| t.escalations.is_empty()) {
                v("nobody acknowledged it; its last level was never paged".into());
            }
        }
    }
    out
}

/// Each chain level's start minus the moment the level before it stopped waiting (what its wait
/// promised): the chain's timing error, for the long mode's summary.
pub fn chain_lateness(world: &World) -> Vec<Millis> {
    let mut out = Vec::new();
    for (root, truth) in &world.oracle.intents {
        let Some(place) = truth.chain.as_ref().filter(|c| c.level == 0 && &c.root == root) else { continue };
        for &(level, at) in &truth.chain_starts {
            let n = level.saturating_sub(1);
            if usize::from(n) >= place.levels {
                continue;
            }
            let key = if n == 0 { root.clone() } else { tocsin::domain::chain::level_key(root, n) };
            let Some(previous) = world.oracle.intents.get(&key) else { continue };
            let wait = previous.chain.as_ref().map_or(0, |c| c.wait_ms);
            let status = world.ledger.intents.get(&key).map(|i| &i.record.status);
            out.push(at - stopped_waiting(previous, status, wait, at));
        }
    }
    out
}

/// How long a send the breaker counted may take to leave: the count is the sender's last step
/// before its publish, so only the two calls' latency lies between them.
const COUNTED_TO_SENT_MS: Millis = 60_000;

/// How long after a network hands over what it held a traffic verdict of "degraded" may stand:
/// the held records are written within two minutes of the end, and the judged window (15
/// minutes) then holds them (`TrafficPolicy::window_minutes`).
pub const CARRIER_RECOVERED_CLEARS_MS: Millis = 30 * 60_000;

/// How long after the traffic to a network changed for good a verdict of "degraded" may stand: a
/// silence judged for `TrafficPolicy::relearn_after` (3 hours) is learnt as the new shape, and
/// the verdict clears within the 45 minutes after (docs/operations.md, "Traffic that changes for good").
pub const TRAFFIC_RESHAPED_CLEARS_MS: Millis = 4 * 3_600_000;

/// Another stack's alert storm is a change of the traffic's shape on a network when its SMS there
/// were at least this share of the steady traffic over [`STORM_SPAN_MS`] (the ratio a silence is
/// judged by, `TrafficPolicy::ratio`), and at least [`STORM_MIN_SMS`] of them: under SNS nothing
/// in its records tells tocsin they are alerts, so the baseline learns them as steady load, and
/// the storm's end is a silence. It clears as any change of shape does.
pub const STORM_SHARE: f64 = 0.2;
pub const STORM_SPAN_MS: Millis = 15 * 60_000;
pub const STORM_MIN_SMS: u32 = 5;

/// When another stack's alert storm to `network` last began within the
/// [`TRAFFIC_RESHAPED_CLEARS_MS`] before `at` ([`STORM_SHARE`]).
pub fn others_storm(world: &World, network: usize, at: Millis) -> Option<Millis> {
    let from = at - TRAFFIC_RESHAPED_CLEARS_MS - STORM_SPAN_MS;
    let minutes: Vec<(Millis, [u32; 2])> =
        world.oracle.others_sms.range((network, from)..=(network, at)).map(|((_, m), n)| (*m, *n)).collect();
    minutes.iter().enumerate().rev().find_map(|(i, (start, _))| {
        let span = minutes[i..].iter().take_while(|(m, _)| *m < start + STORM_SPAN_MS);
        let (steady, storm) = span.fold((0u32, 0u32), |(a, b), (_, n)| (a + n[0], b + n[1]));
        (storm >= STORM_MIN_SMS && f64::from(storm) >= STORM_SHARE * f64::from(steady)).then_some(*start)
    })
}

/// The judged window of the traffic signal (`TrafficPolicy::window_minutes`) and its ratio
/// (`TrafficPolicy::ratio`): a silence is at most a fifth of what is expected.
const SILENCE_WINDOW_MINUTES: usize = 15;
const SILENCE_RATIO: f64 = 5.0;
/// How unlikely the world's own traffic must have been for a silence to be chance's doing. The
/// detector calls a carrier silent when what it saw is at most a fifth of what it expected and
/// chance explains it less than once in ten million (`TrafficPolicy::max_chance`): rare, not
/// impossible, and a long run makes millions of such judgements. When the world's own SMS to the
/// network were that few, as unlikely as once in a hundred thousand, the verdict read the world
/// right; a tally the status function failed to write (best effort) is what tipped it.
const WORLD_CHANCE: f64 = 1e-5;

/// Whether other applications' SMS to a network in the minutes before a verdict were, by chance,
/// as few as a silence: `minutes` holds their count per minute, oldest first, the last one the
/// verdict's latest closed minute; the hour before the last [`SILENCE_WINDOW_MINUTES`] sets the
/// rate expected. Some run of the latest minutes (1 to the window), ending at the last minute or
/// one or two before it (a minute's records reach the tallies a little after it closes), held at
/// most a fifth of that rate, and so few that chance explains it less than once in
/// [`WORLD_CHANCE`].
pub fn silent_by_chance(minutes: &[u32]) -> bool {
    const LAG: usize = 2;
    let Some(judged_from) = minutes.len().checked_sub(SILENCE_WINDOW_MINUTES + LAG) else { return false };
    let before = &minutes[judged_from.saturating_sub(60)..judged_from];
    if before.len() < 30 {
        return false;
    }
    let rate = f64::from(before.iter().sum::<u32>()) / before.len() as f64;
    (0..=LAG).any(|lag| {
        let end = minutes.len() - lag;
        (1..=SILENCE_WINDOW_MINUTES).any(|k| {
            let seen = u64::from(minutes[end - k..end].iter().sum::<u32>());
            let expected = rate * k as f64;
            expected > 0.0
                && seen as f64 * SILENCE_RATIO <= expected
                && tocsin::domain::carrier_traffic::poisson_cdf(seen, expected) <= WORLD_CHANCE
        })
    })
}

/// Other applications' SMS to `network` per minute, from about 77 minutes before the minute of
/// `at` to the minute before it (the last closed), oldest first ([`silent_by_chance`]).
fn others_per_minute(world: &World, network: usize, at: Millis) -> Vec<u32> {
    let last = at - at.rem_euclid(60_000) - 60_000;
    let first = (last - (60 + SILENCE_WINDOW_MINUTES as Millis + 2) * 60_000).max(0);
    let mut counts = vec![0u32; ((last - first) / 60_000 + 1) as usize];
    for ((_, minute), n) in world.oracle.others_sms.range((network, first)..=(network, last)) {
        if let Some(c) = counts.get_mut(((minute - first) / 60_000) as usize) {
            *c += n[0] + n[1];
        }
    }
    counts
}

/// Every carrier a sweep judged degraded by the traffic has a reason in the world that ended at
/// most a bound before: its network's incident, or a change of the traffic's shape on it (an
/// application leaving it, the account's traffic halving, another stack's alert storm). A run
/// that judged every carrier slow is left out: that verdict is about the logs' path or what is
/// upstream of the carriers (a status function throttled for minutes tallies nothing), not one
/// carrier. So is a silence the world's own traffic made by chance ([`silent_by_chance`]): the
/// detector is statistical, and its rare false alarm is part of its design.
fn carrier_verdicts_clear(world: &World) -> Vec<Violation> {
    use crate::world::networks::NETWORKS;
    let n = &world.sms.networks;
    let mut out = Vec::new();
    for (at, verdict) in world.oracle.carrier_verdicts.iter().filter(|(_, v)| !v.all_slow) {
        for carrier in &verdict.by_traffic {
            let Some(network) = NETWORKS.iter().position(|net| net.name == carrier) else {
                out.push(Violation {
                    at: *at,
                    invariant: Invariant::CarrierVerdictClears,
                    key: None,
                    detail: format!("carrier {carrier:?} judged degraded: no network of the world has that name"),
                });
                continue;
            };
            let incident = n
                .incident
                .filter(|i| i.network == network && i.from <= *at && *at <= i.to + CARRIER_RECOVERED_CLEARS_MS);
            let reshaped =
                n.change.filter(|c| c.touches(network) && c.at <= *at && *at <= c.at + TRAFFIC_RESHAPED_CLEARS_MS);
            // Another stack's storm, and chance, are looked for only where the networks give no
            // reason.
            if incident.is_none()
                && reshaped.is_none()
                && others_storm(world, network, *at).is_none()
                && !silent_by_chance(&others_per_minute(world, network, *at))
            {
                out.push(Violation {
                    at: *at,
                    invariant: Invariant::CarrierVerdictClears,
                    key: None,
                    detail: format!(
                        "{carrier} judged degraded by the traffic at {at} ms; the world's incident: {:?}, change of shape: {:?}",
                        n.incident, n.change
                    ),
                });
            }
        }
    }
    out
}

/// The stack's SMS breaker (`SmsPartsPerHour`) as the SMS that left show it, operator resends
/// aside: every SMS that left at least [`COUNTED_TO_SENT_MS`] into a UTC hour was counted in that
/// hour, so those of one hour carry at most the ceiling's parts; and once the breaker opened, no
/// SMS leaves later than that bound after the opening.
fn breaker_holds(world: &World) -> Vec<Violation> {
    let Some(ceiling) = world.sms.breaker else { return Vec::new() };
    const HOUR_MS: Millis = 3_600_000;
    let own: Vec<&crate::world::sms::Sent> = world.sms.sent.iter().filter(|s| !s.operator).collect();
    let mut out = Vec::new();
    let mut per_hour: std::collections::BTreeMap<Millis, u32> = std::collections::BTreeMap::new();
    for s in own.iter().filter(|s| s.at.rem_euclid(HOUR_MS) >= COUNTED_TO_SENT_MS) {
        *per_hour.entry(s.at - s.at.rem_euclid(HOUR_MS)).or_default() += s.parts;
    }
    for (hour, parts) in per_hour.into_iter().filter(|(_, parts)| *parts > ceiling) {
        out.push(Violation {
            at: hour,
            invariant: Invariant::BreakerHolds,
            key: None,
            detail: format!(
                "{parts} parts left in the UTC hour from {hour} ms (after its first minute): the ceiling is {ceiling}"
            ),
        });
    }
    if let Some(open) = &world.ledger.spend_meter.open {
        let opened = crate::exec::to_ms(open.opened_at);
        if let Some(late) = own.iter().find(|s| s.at > opened + COUNTED_TO_SENT_MS) {
            out.push(Violation {
                at: late.at,
                invariant: Invariant::BreakerHolds,
                key: None,
                detail: format!(
                    "an SMS ({} parts) left {} s after the breaker opened",
                    late.parts,
                    (late.at - opened) / 1000
                ),
            });
        }
    }
    out
}

/// Whether an intent's last error says the provider did not take its SMS (retries used up, or a
/// refusal of the message or of the account): no SMS of that attempt left. (A spend-limit refusal
/// reads as SNS's later "No quota left" record does, after an SMS SNS took: not told apart here.)
fn refused_by_provider(e: &str) -> bool {
    ["SNS did not accept", "SNS rejected", "the provider refused", "the account cannot send"]
        .iter()
        .any(|p| e.starts_with(p))
}

/// The alert whose SMS a record is, when the record names its alert (End User Messaging's context):
/// by the world's own account of the SMS this stack sent, so a second stack's SMS naming the same
/// key is not this stack's.
fn named_alert(world: &World, r: &DeliveryRecord) -> Option<tocsin::domain::IdempotencyKey> {
    r.context.as_ref()?;
    world.oracle.intents.iter().find(|(_, t)| t.sms_ids.contains(&r.message_id)).map(|(k, _)| k.clone())
}

/// Whether the registry holds `number` as unusable (suppressed, or re-enabled and waiting for
/// its opt-out check).
fn held_unusable(world: &World, number: &str) -> bool {
    world.registry.numbers.get(number).is_some_and(|n| n.suppressed || n.needs_opt_out_check)
}

/// After a status invocation that succeeded: every permanent failure among its records that
/// belonged to an intent when the invocation began has suppressed its number. (A record whose
/// message id the sender indexed only after that may have been kept as an orphan: the sweep owes
/// it, [`orphans_applied`].)
pub fn suppressed_at_once(
    world: &World,
    permanent_failures: &[Arc<DeliveryRecord>],
    started: Millis,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in permanent_failures {
        let indexed = world.ledger.messages.get(&r.message_id).filter(|m| m.written < started);
        // Under SNS a record is the alert's through the message index; under End User Messaging,
        // by the context it echoes.
        let ours = indexed.map(|m| m.entry.key.clone()).or_else(|| named_alert(world, r));
        let Some(destination) = r.destination.as_deref() else { continue };
        if ours.is_some() && !held_unusable(world, destination) {
            out.push(Violation {
                at: world.now,
                invariant: Invariant::Suppression,
                key: ours.map(|k| k.to_string()),
                detail: "a permanent failure was applied and its number is not suppressed".into(),
            });
        }
    }
    out
}

/// At quiescence: a permanent failure kept as an orphan (it overtook the sender's MessageId
/// write) whose message id is now an intent's has suppressed its number all the same — the sweep
/// looks orphans of a silent accepted intent up before it suspects a delay or escalates.
pub fn orphans_applied(world: &World) -> Vec<Violation> {
    let mut out = Vec::new();
    for ((message_id, _), orphan) in &world.ledger.orphans {
        // Most orphans are other senders' records, never indexed: looked up before they are read.
        let Some(indexed) = world.ledger.messages.get(message_id) else { continue };
        let Some(r) = permanent_failure(&orphan.message) else { continue };
        let Some(destination) = r.destination.as_deref() else { continue };
        if !held_unusable(world, destination) && !world.oracle.ever_suppressed.contains(destination) {
            out.push(Violation {
                at: world.now,
                invariant: Invariant::Suppression,
                key: Some(indexed.entry.key.to_string()),
                detail: "a permanent failure kept as an orphan belongs to an intent and never suppressed its number"
                    .into(),
            });
        }
    }
    out
}

/// At quiescence: every stored observation tells what happened — the state it says it left the
/// intent in was held at some point (the ledger's own history, as the oracle saw every write);
/// the move it says a delivery record made (`from` → `to`) is one the ledger made; the attempt it
/// names claimed this intent (or is an operator's resend of it).
pub fn observations_tell_what_happened(world: &World) -> Vec<Violation> {
    use tocsin::domain::observation::ObservationKind;
    use tocsin::domain::state::ReceiptEffect;
    let mut out = Vec::new();
    // The observation items, and those the intents carry (`Commit::Carried`).
    let items = world.ledger.observations.iter().map(|((key, id), item)| (key, id, &item.obs));
    let carried = world.ledger.intents.iter().flat_map(|(key, i)| i.carried.iter().map(move |(id, o)| (key, id, o)));
    for (key, id, o) in items.chain(carried) {
        let Some(truth) = world.oracle.intents.get(key) else { continue };
        let mut wrong = |detail: String| {
            out.push(Violation {
                at: world.now,
                invariant: Invariant::ObservationsTrue,
                key: Some(key.to_string()),
                detail: format!("observation {id}: {detail}"),
            });
        };
        // The life this truth is about: an observation of an earlier life of the key is not judged.
        if crate::exec::to_ms(o.at) < truth.created {
            continue;
        }
        // An attempt's own report (`attempt:<id>:…`) is written before its state change (facts
        // first: what the provider answered is never lost), and so may a lapsed lease's
        // (`lease:<id>:expired`, by the sender or the sweep); each names the state it asks for.
        // When another writer moved the intent out of `sending` first (a delivery record, the
        // lease's lapse), that state is never held — the report still tells what happened.
        let overtaken = |s: State| {
            (o.id.starts_with("attempt:") || o.id.starts_with("lease:"))
                && truth.states.windows(2).any(|w| w[0].1 == State::Sending && w[1].1 != s)
        };
        if let Some(s) = o.state_after
            && !truth.states.iter().any(|(_, held)| *held == s)
            && s != State::Received
            && !overtaken(s)
        {
            wrong(format!("says it left the intent {s}, a state the ledger never held ({})", history(truth)));
        }
        if let ObservationKind::DeliveryStatus { effect: ReceiptEffect::Moved { from, to }, .. } = &o.kind
            && !truth.states.windows(2).any(|w| w[0].1 == *from && w[1].1 == *to)
        {
            wrong(format!("says its record moved {from} -> {to}; the ledger made no such move ({})", history(truth)));
        }
        if let Some(attempt) = crate::oracle::attempt_of(o)
            && !truth.attempts.contains_key(attempt)
        {
            wrong(format!("names attempt {attempt}, which never claimed this intent"));
        }
    }
    out
}

fn history(truth: &crate::oracle::Truth) -> String {
    truth.states.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join(" -> ")
}

/// At quiescence, from the world's truth rather than the ledger's: every permanent failure record
/// of an SMS that carried an intent — alone or as a digest, its message id indexed or not — has
/// suppressed its number (it is held unusable now, or was suppressed at some point and an operator
/// re-enabled it since). Exempt, as docs/invariants.md states: a record in a batch Lambda gave up
/// on (parked, on-call paged); and under SNS an SMS whose message id never reached the ledger (its
/// publish answer lost): SNS's record carries nothing else that ties it to the alert, and tocsin
/// never guesses — the next alert to the number fails and suppresses it.
pub fn every_permanent_failure_suppresses(world: &World, provider: crate::world::sms::Provider) -> Vec<Violation> {
    let mut carried: std::collections::BTreeMap<&str, &tocsin::domain::IdempotencyKey> =
        std::collections::BTreeMap::new();
    for (key, truth) in &world.oracle.intents {
        for id in &truth.sms_ids {
            carried.entry(id.as_str()).or_insert(key);
        }
    }
    let known_to_the_ledger = |message_id: &str| {
        provider == crate::world::sms::Provider::EndUserMessaging
            || world.ledger.messages.contains_key(message_id)
            || world.ledger.intents.values().any(|i| i.record.status.sns_message_id.as_deref() == Some(message_id))
    };
    let mut out = Vec::new();
    for event in world.logs.groups.values().flatten() {
        if world.oracle.parked_records.contains(&event.id) {
            continue;
        }
        let Some(r) = &event.permanent_failure else { continue };
        let Some(key) = carried.get(r.message_id.as_str()) else { continue };
        let Some(destination) = r.destination.as_deref() else { continue };
        if !known_to_the_ledger(&r.message_id) {
            continue;
        }
        if !held_unusable(world, destination) && !world.oracle.ever_suppressed.contains(destination) {
            out.push(Violation {
                at: world.now,
                invariant: Invariant::Suppression,
                key: Some(key.to_string()),
                detail: format!(
                    "the permanent failure record of its SMS {} (log event {}) never suppressed the number",
                    r.message_id, event.id
                ),
            });
        }
    }
    out
}

/// Nothing is lost between the ledger and the queue: an intent waiting in `queued` always has a
/// message on the send queue (or the urgent lane, or the dead-letter queue that pages), so it never
/// depends on the sweep's late re-enqueue. `since` remembers when each was first seen without one;
/// a gap shorter than `grace` (a message being replaced) is no violation.
pub fn queued_have_messages(
    world: &World,
    since: &mut std::collections::BTreeMap<tocsin::domain::IdempotencyKey, Millis>,
    grace: Millis,
) -> Vec<Violation> {
    use crate::world::sqs::QueueName;
    let now = world.now;
    let mut carried = std::collections::BTreeSet::new();
    for name in [QueueName::Send, QueueName::Urgent, QueueName::SendDlq] {
        if let Some(q) = world.sqs.queues.get(&name) {
            for m in q.messages.values() {
                if let Some(k) = m.body.split('"').nth(3) {
                    carried.insert(k.to_owned());
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut still = std::collections::BTreeMap::new();
    for (key, item) in &world.ledger.intents {
        let s = &item.record.status;
        if s.state != State::Queued
            || item.record.intent.deadline.timestamp_millis() <= now
            || carried.contains(key.as_str())
        {
            continue;
        }
        let first = since.get(key).copied().unwrap_or(now);
        if now - first > grace {
            out.push(Violation {
                at: now,
                invariant: Invariant::NothingLost,
                key: Some(key.to_string()),
                detail: format!("queued with no message on any queue for {} s", (now - first) / 1000),
            });
        } else {
            still.insert(key.clone(), first);
        }
    }
    *since = still;
    out
}

#[cfg(test)]
mod tests {
    use super::silent_by_chance;

    /// An hour at 3 or 4 SMS a minute, then `window`.
    fn after_an_hour(window: &[u32]) -> Vec<u32> {
        let mut minutes: Vec<u32> = (0..62).map(|i| 3 + (i % 2)).collect();
        minutes.extend_from_slice(window);
        minutes
    }

    /// SNS seed 228685: US Cellular's other traffic, about 3.5 a minute, came to 6 in nine
    /// minutes (chance explains that about once in ten million); one tally the status function
    /// failed to write made it 5 in its view, and the detector called a silence.
    #[test]
    fn a_silence_the_worlds_own_traffic_made_by_chance_excuses_the_verdict() {
        assert!(silent_by_chance(&after_an_hour(&[1, 2, 5, 1, 6, 1, 3, 1, 2, 1, 0, 1, 0, 0, 1, 0, 3])));
    }

    /// The world sending as before: a verdict of silence then is the product's, never chance's —
    /// nor is one quiet minute, nor traffic at half its rate.
    #[test]
    fn traffic_as_usual_a_quiet_minute_or_half_the_rate_excuses_nothing() {
        assert!(!silent_by_chance(&after_an_hour(&[3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3])));
        assert!(!silent_by_chance(&after_an_hour(&[3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 0, 0, 0])));
        assert!(!silent_by_chance(&after_an_hour(&[3, 4, 3, 4, 3, 4, 3, 4, 2, 1, 2, 1, 2, 1, 2, 1, 2])));
    }

    /// Too short a history to know the rate: no excuse.
    #[test]
    fn without_half_an_hour_of_history_nothing_is_chance() {
        assert!(!silent_by_chance(&[3, 4, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    }
}
