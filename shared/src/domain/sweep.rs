//! What the scheduled sweep (the escalation function) does with an intent, and when the intent
//! next needs looking at.
//!
//! Every intent that may still need attention carries a `next_check` instant in a sparse index;
//! the sweep reads only those whose instant has passed, so its cost follows the due intents, not
//! the table. A writer may always set an *earlier* `next_check` than needed (it costs one read);
//! never a later one. A delivered or fully-settled intent leaves the index.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::delivery::RECEIPT_WINDOW;
use super::intent::{IntentRecord, Status};
use super::reconcile::ReconcileState;
use super::state::State;

#[derive(Debug, Clone)]
pub struct SweepPolicy {
    /// Accepted with no receipt after this long → `delay_suspected` (warning).
    pub delay_suspected_after: Duration,
    /// Left in `received` this long (enqueue likely failed) → re-enqueue.
    pub reenqueue_grace: Duration,
    /// Left in `queued` this long since it was last enqueued, unclaimed (its message was lost,
    /// e.g. acknowledged by a duplicate delivery while a retry was pending) → re-enqueue. Longer
    /// than the longest retry backoff; a duplicate message is harmless (the claim).
    pub requeue_after: Duration,
}

/// When a not-yet-sent intent should be put on the queue again if nothing picked it up.
fn requeue_due(record: &IntentRecord, policy: &SweepPolicy) -> Option<DateTime<Utc>> {
    let s = &record.status;
    match s.state {
        State::Received => Some(record.intent.created_at + chrono(policy.reenqueue_grace)),
        State::Queued => Some(s.enqueued_at.unwrap_or(record.intent.created_at) + chrono(policy.requeue_after)),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Put the intent on the send queue again (the claim makes a duplicate harmless).
    ReEnqueue,
    /// A sender's lease ran out with no recorded result: the publish may have happened.
    LeaseExpired,
    MarkDelaySuspected,
    MarkExpiredUnknown,
    Escalate {
        reason: String,
    },
    /// Search the delivery-status logs for the SMS of an unknown outcome.
    Reconcile,
}

/// When an unknown outcome should next be searched for in the delivery-status logs: right away
/// at first, then with backoff, while a delivery record may still appear (the receipt window).
fn reconcile_due_at(record: &IntentRecord, state: State) -> Option<DateTime<Utc>> {
    let s = &record.status;
    let claimed = s.claimed_at?;
    if state != State::SendUnknown || s.reconcile_state != ReconcileState::Pending {
        return None;
    }
    let due = s.reconcile_next_at.unwrap_or(claimed);
    (due < claimed + chrono(RECEIPT_WINDOW)).then_some(due)
}

/// Converts a configured duration; capped at a century so that adding it to an instant can
/// never overflow the calendar (and panic), whatever the configuration says.
fn chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX).min(chrono::Duration::days(36_500))
}

/// The one-line reason on-call reads in the escalation message.
pub fn escalation_reason(state: State, status: &Status, deadline: DateTime<Utc>) -> String {
    let dl = deadline.format("%Y-%m-%d %H:%M:%S UTC");
    match state {
        // Why it was withheld (the recipient suppressed, off the roster, the stack's SMS breaker
        // open) when the sender recorded it; older records say nothing more.
        State::Suppressed => match &status.last_error {
            Some(why) => format!("this alert was NOT sent: {why}; reach them another way"),
            None => "recipient is suppressed (earlier permanent failure): this alert was NOT sent; reach them another \
                     way"
            .into(),
        },
        State::Stale => format!("picked up after its deadline {dl}: NOT sent, to avoid a late SMS; handle it by hand"),
        State::Failed => match &status.last_error {
            Some(e) => format!("delivery failed ({e}); the person did not get the SMS"),
            None => "delivery failed; the person did not get the SMS".into(),
        },
        State::SendUnknown => {
            format!("not confirmed by {dl}: the publish outcome is unknown (timeout or crash); check before resending")
        }
        State::Sending => format!("not confirmed by {dl}: a send attempt never reported back; check before resending"),
        State::Accepted | State::DelaySuspected => {
            format!("accepted by the SMS provider but no delivery receipt by {dl}: the carrier is silent")
        }
        State::ExpiredUnknown => "accepted by the SMS provider, no delivery receipt within 73 h".into(),
        State::Received | State::Queued => format!("never sent by {dl}: the send queue did not get to it"),
        State::Delivered => "delivered".into(),
    }
}

/// When a level of an escalation chain that nobody acknowledged moves on (`domain::chain`): its
/// wait after the SMS was delivered; after it was accepted while no receipt came, or at its
/// deadline if that is sooner; after its claim (or at its deadline, if sooner) while the send's
/// outcome is not known — the SMS may have reached the person then, and no later; at the
/// deadline while it is not with the provider yet. (A failed, suppressed or stale level moves on
/// at once: `escalates_at_once`.) `None`: not a chain.
pub fn moves_on_at(record: &IntentRecord, state: State) -> Option<DateTime<Utc>> {
    let chain = record.intent.chain.as_ref()?;
    let (i, s) = (&record.intent, &record.status);
    let wait = chrono(chain.wait());
    Some(match state {
        State::Delivered => s.final_at.unwrap_or(i.created_at) + wait,
        // An acceptance learnt from its delivery record (the sender's own write late or lost)
        // has no time of its own: its claim's is the closest before it.
        State::Accepted | State::DelaySuspected | State::ExpiredUnknown => {
            (s.accepted_at.or(s.claimed_at).unwrap_or(i.created_at) + wait).min(i.deadline)
        }
        // Sent or not, nobody can tell yet: if it left, it left just after its claim.
        State::Sending | State::SendUnknown => (s.claimed_at.unwrap_or(i.created_at) + wait).min(i.deadline),
        _ => i.deadline,
    })
}

/// The reason a level of a chain moves on, for the next level's person and for on-call.
pub fn unanswered_reason(record: &IntentRecord, state: State) -> String {
    let (i, s) = (&record.intent, &record.status);
    let wait =
        record.intent.chain.as_ref().map(|c| humantime::format_duration(c.wait()).to_string()).unwrap_or_default();
    let to = i.recipient.masked();
    match state {
        State::Delivered => format!(
            "delivered to {to} at {} UTC, not acknowledged within {wait}",
            s.final_at.unwrap_or(i.created_at).format("%H:%M")
        ),
        State::Accepted | State::DelaySuspected => format!(
            "accepted for {to} at {} UTC, no delivery receipt and not acknowledged within {wait}",
            s.accepted_at.unwrap_or(i.created_at).format("%H:%M")
        ),
        State::Sending | State::SendUnknown => format!(
            "sent to {to} at {} UTC with its outcome unknown (no answer from the SMS provider), not acknowledged \
             within {wait}",
            s.claimed_at.unwrap_or(i.created_at).format("%H:%M")
        ),
        _ => escalation_reason(state, s, i.deadline),
    }
}

/// Intake expected the SMS after the deadline (`Status::late_expected`) and the intent is still
/// waiting to be sent: "late is said early", once.
pub fn said_late(record: &IntentRecord, state: State) -> Option<crate::domain::storm::LateReason> {
    let expected = record.status.late_expected?;
    let waiting = matches!(state, State::Received | State::Queued);
    (waiting && expected > record.intent.deadline)
        .then_some(crate::domain::storm::LateReason { expected, deadline: record.intent.deadline })
}

/// States that escalate as soon as they are reached: nothing more will happen by itself.
pub fn escalates_at_once(state: State) -> bool {
    matches!(state, State::Suppressed | State::Stale | State::Failed)
}

/// What to do with `record` at `now`. The actions are applied in order; each is a conditional
/// write, so two overlapping runs cannot both apply one.
pub fn decide(record: &IntentRecord, now: DateTime<Utc>, policy: &SweepPolicy) -> Vec<Action> {
    let s = &record.status;
    let i = &record.intent;
    let mut actions = Vec::new();
    let mut state = s.state;
    match state {
        State::Received | State::Queued
            if requeue_due(record, policy).is_some_and(|d| now >= d) && now < i.deadline =>
        {
            actions.push(Action::ReEnqueue);
        }
        State::Sending if s.lease_until.is_some_and(|l| l <= now) => {
            actions.push(Action::LeaseExpired);
            state = State::SendUnknown;
        }
        State::Accepted | State::DelaySuspected => {
            let accepted = s.accepted_at.unwrap_or(i.created_at);
            if now >= accepted + chrono(RECEIPT_WINDOW) {
                actions.push(Action::MarkExpiredUnknown);
                state = State::ExpiredUnknown;
            } else if state == State::Accepted && now >= accepted + chrono(policy.delay_suspected_after) {
                actions.push(Action::MarkDelaySuspected);
                state = State::DelaySuspected;
            }
        }
        _ => {}
    }
    // An acknowledged alert is never escalated: someone has it.
    let unanswered = s.escalation.is_none() && s.acknowledgement.is_none();
    let due = match moves_on_at(record, state) {
        // A level of a chain: nobody acknowledged within its wait.
        Some(at) => now >= at,
        None => state != State::Delivered && now >= i.deadline,
    };
    if unanswered && (due || escalates_at_once(state)) {
        let reason = match &i.chain {
            Some(_) if !escalates_at_once(state) => unanswered_reason(record, state),
            _ => escalation_reason(state, s, i.deadline),
        };
        actions.push(Action::Escalate { reason });
    } else if unanswered && let Some(late) = said_late(record, state) {
        actions.push(Action::Escalate {
            reason: format!("{late}: escalated before the deadline; still queued, it may yet be sent"),
        });
    }
    if reconcile_due_at(record, state).is_some_and(|due| due <= now) {
        actions.push(Action::Reconcile);
    }
    actions
}

/// When the sweep must next look at an intent in this status; `None` takes it out of the index.
pub fn next_check(record: &IntentRecord, now: DateTime<Utc>, policy: &SweepPolicy) -> Option<DateTime<Utc>> {
    let s = &record.status;
    let i = &record.intent;
    let mut times: Vec<DateTime<Utc>> = Vec::new();
    let chained = i.chain.is_some();
    if s.escalation.is_none() && s.acknowledgement.is_none() && (s.state != State::Delivered || chained) {
        let at_once = escalates_at_once(s.state) || said_late(record, s.state).is_some();
        times.push(if at_once { now } else { moves_on_at(record, s.state).unwrap_or(i.deadline) });
    }
    // Re-enqueueing ends at the deadline (`decide`): a requeue time at or past it is no reason to
    // look again, and an escalated intent still waiting on the queue leaves the index.
    let before_deadline = |t: &DateTime<Utc>| *t < i.deadline && now < i.deadline;
    match s.state {
        State::Received => times.extend(
            Some((i.created_at + chrono(policy.reenqueue_grace)).max(now + chrono(policy.reenqueue_grace)))
                .filter(before_deadline),
        ),
        State::Queued => times.extend(requeue_due(record, policy).filter(before_deadline)),
        State::Sending => times.extend(s.lease_until),
        State::Accepted => {
            let a = s.accepted_at.unwrap_or(i.created_at);
            times.push(a + chrono(policy.delay_suspected_after));
            times.push(a + chrono(RECEIPT_WINDOW));
        }
        State::DelaySuspected => times.push(s.accepted_at.unwrap_or(i.created_at) + chrono(RECEIPT_WINDOW)),
        State::SendUnknown => times.extend(reconcile_due_at(record, s.state)),
        _ => {}
    }
    times.into_iter().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::intent::{Escalation, Intent, Origin};
    use crate::domain::request::{Limits, validate};
    use crate::domain::template::Catalog;
    use serde_json::json;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z").map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    fn policy() -> SweepPolicy {
        SweepPolicy {
            delay_suspected_after: Duration::from_secs(600),
            reenqueue_grace: Duration::from_secs(120),
            requeue_after: Duration::from_secs(600),
        }
    }

    fn record(state: State) -> IntentRecord {
        let limits = Limits {
            default_deadline: Duration::from_secs(1800),
            min_deadline: Duration::from_secs(60),
            max_deadline: Duration::from_secs(86400),
            max_segments: 3,
            reply_prompt: false,
            sms: Default::default(),
        };
        let req = validate(
            &json!({"event_id": "e", "template": {"name": "disk_full", "version": 1},
                    "variables": {"host": "h", "mount": "/", "percent": "90"}, "recipient": "+14155550100"}),
            Catalog::builtin(),
            &limits,
            t0(),
        )
        .expect("valid");
        let mut status = Status::new();
        status.state = state;
        if matches!(state, State::Accepted | State::DelaySuspected) {
            status.accepted_at = Some(t0());
        }
        IntentRecord {
            intent: Intent::from_request(
                req,
                Origin::Api,
                crate::domain::producer::ProducerName::parse("monitoring").expect("producer"),
                t0(),
            ),
            status,
        }
    }

    fn mins(m: i64) -> chrono::Duration {
        chrono::Duration::minutes(m)
    }

    #[test]
    fn an_undelivered_intent_past_its_deadline_is_escalated() {
        for s in [State::Accepted, State::SendUnknown, State::Queued, State::DelaySuspected] {
            let a = decide(&record(s), t0() + mins(31), &policy());
            assert!(a.iter().any(|a| matches!(a, Action::Escalate { .. })), "{s}: {a:?}");
        }
    }

    #[test]
    fn a_delivered_intent_is_never_escalated() {
        assert_eq!(decide(&record(State::Delivered), t0() + mins(999), &policy()), vec![]);
        assert_eq!(next_check(&record(State::Delivered), t0(), &policy()), None);
    }

    #[test]
    fn an_alert_expected_after_its_deadline_is_escalated_at_once_and_only_once() {
        // Deadline t0 + 30 min; intake expected the SMS at t0 + 41 min.
        let mut r = record(State::Queued);
        r.status.late_expected = Some(t0() + mins(41));
        assert_eq!(next_check(&r, t0(), &policy()), Some(t0()), "due at once");
        let actions = decide(&r, t0() + mins(1), &policy());
        let reason = actions
            .iter()
            .find_map(|a| match a {
                Action::Escalate { reason } => Some(reason.clone()),
                _ => None,
            })
            .expect("escalated before the deadline");
        assert!(reason.starts_with("SMS backlog: expected 12:41, deadline 12:30 (UTC)"), "{reason}");
        // Once escalated, neither the estimate nor the deadline escalates it again.
        r.status.escalation = Some(Escalation { at: t0() + mins(1), reason, folded: false, to_level: None });
        for at in [t0() + mins(2), t0() + mins(31)] {
            assert!(!decide(&r, at, &policy()).iter().any(|a| matches!(a, Action::Escalate { .. })));
        }
        // An estimate within the deadline, or an alert already on its way, is no reason.
        let mut on_time = record(State::Queued);
        on_time.status.late_expected = Some(t0() + mins(29));
        assert!(!decide(&on_time, t0() + mins(1), &policy()).iter().any(|a| matches!(a, Action::Escalate { .. })));
        let mut sending = record(State::Sending);
        sending.status.late_expected = Some(t0() + mins(41));
        assert!(!decide(&sending, t0() + mins(1), &policy()).iter().any(|a| matches!(a, Action::Escalate { .. })));
    }

    #[test]
    fn an_escalated_intent_is_not_escalated_again() {
        let mut r = record(State::Failed);
        r.status.escalation = Some(Escalation { at: t0(), reason: "x".into(), folded: false, to_level: None });
        assert_eq!(decide(&r, t0() + mins(60), &policy()), vec![]);
        assert_eq!(next_check(&r, t0(), &policy()), None);
    }

    #[test]
    fn an_acknowledged_intent_is_never_escalated_whatever_its_state_or_the_time() {
        use crate::domain::acknowledgement::{AckVia, Acknowledgement};
        for state in [State::Accepted, State::SendUnknown, State::Failed, State::Queued] {
            let mut r = record(state);
            r.status.late_expected = Some(t0() + mins(41));
            r.status.acknowledgement = Some(Acknowledgement { at: t0(), by: "dana".into(), via: AckVia::Reply });
            for at in [t0() + mins(1), t0() + mins(31), t0() + mins(600)] {
                let actions = decide(&r, at, &policy());
                assert!(
                    !actions.iter().any(|a| matches!(a, Action::Escalate { .. })),
                    "{state:?} at {at}: {actions:?}"
                );
            }
        }
    }

    #[test]
    fn suppressed_stale_and_failed_escalate_at_once_before_the_deadline() {
        for s in [State::Suppressed, State::Stale, State::Failed] {
            let a = decide(&record(s), t0() + mins(1), &policy());
            assert!(matches!(a.as_slice(), [Action::Escalate { .. }]), "{s}: {a:?}");
            assert_eq!(next_check(&record(s), t0() + mins(1), &policy()), Some(t0() + mins(1)));
        }
    }

    #[test]
    fn a_withheld_alerts_escalation_says_why_it_was_withheld() {
        let mut r = record(State::Suppressed);
        r.status.last_error = Some("the stack's SMS breaker is open since 2026-12-03T14:10:00Z".into());
        let reason = escalation_reason(State::Suppressed, &r.status, r.intent.deadline);
        assert!(reason.contains("NOT sent: the stack's SMS breaker is open"), "{reason}");
        let older = escalation_reason(State::Suppressed, &record(State::Suppressed).status, r.intent.deadline);
        assert!(older.contains("recipient is suppressed"), "{older}");
    }

    #[test]
    fn an_accepted_intent_becomes_delay_suspected_then_expired_unknown() {
        let r = record(State::Accepted);
        assert_eq!(decide(&r, t0() + mins(5), &policy()), vec![]);
        assert_eq!(decide(&r, t0() + mins(11), &policy()), vec![Action::MarkDelaySuspected]);
        let late = decide(&record(State::DelaySuspected), t0() + chrono::Duration::hours(74), &policy());
        assert_eq!(late.first(), Some(&Action::MarkExpiredUnknown));
        assert_eq!(next_check(&r, t0(), &policy()), Some(t0() + mins(10)));
    }

    #[test]
    fn an_expired_lease_becomes_unknown_never_a_resend() {
        let mut r = record(State::Sending);
        r.status.lease_until = Some(t0() + mins(2));
        assert_eq!(decide(&r, t0() + mins(1), &policy()), vec![]);
        assert_eq!(decide(&r, t0() + mins(3), &policy()), vec![Action::LeaseExpired]);
        assert_eq!(next_check(&r, t0(), &policy()), Some(t0() + mins(2)));
    }

    #[test]
    fn a_queued_intent_nobody_claimed_since_its_last_enqueue_is_re_enqueued() {
        let mut r = record(State::Queued);
        r.status.enqueued_at = Some(t0() + mins(1));
        assert_eq!(decide(&r, t0() + mins(10), &policy()), vec![]);
        assert_eq!(decide(&r, t0() + mins(11), &policy()), vec![Action::ReEnqueue]);
        assert_eq!(next_check(&r, t0(), &policy()), Some(t0() + mins(11)));
        assert!(
            decide(&r, t0() + mins(31), &policy()).iter().all(|a| *a != Action::ReEnqueue),
            "never past the deadline"
        );
    }

    #[test]
    fn an_escalated_intent_still_on_the_queue_after_its_deadline_leaves_the_index() {
        for s in [State::Queued, State::Received] {
            let mut r = record(s);
            r.status.enqueued_at = Some(t0());
            r.status.escalation =
                Some(Escalation { at: t0() + mins(31), reason: "never sent".into(), folded: false, to_level: None });
            assert_eq!(next_check(&r, t0() + mins(45), &policy()), None, "{s}");
        }
    }

    fn chained(state: State, wait: &str) -> IntentRecord {
        let mut r = record(state);
        let spec = crate::domain::chain::parse_chain(
            &json!({"wait": wait, "then": [{"to": "+14155550101", "wait": "10m"}]}),
            Some(&r.intent.recipient),
        )
        .expect("chain");
        r.intent.chain = Some(crate::domain::chain::Chain {
            root: r.intent.key.clone(),
            level: 0,
            levels: spec.levels,
            spec: spec.spec,
            policy: None,
        });
        r
    }

    fn escalates(r: &IntentRecord, at: DateTime<Utc>) -> bool {
        decide(r, at, &policy()).iter().any(|a| matches!(a, Action::Escalate { .. }))
    }

    #[test]
    fn a_delivered_level_of_a_chain_nobody_acknowledged_moves_on_after_its_wait_from_the_delivery() {
        let mut r = chained(State::Delivered, "5m");
        r.status.final_at = Some(t0() + mins(2));
        assert_eq!(next_check(&r, t0() + mins(2), &policy()), Some(t0() + mins(7)), "stays due for its wait");
        assert!(!escalates(&r, t0() + mins(6)));
        let reason = decide(&r, t0() + mins(7), &policy())
            .into_iter()
            .find_map(|a| match a {
                Action::Escalate { reason } => Some(reason),
                _ => None,
            })
            .expect("moves on");
        assert_eq!(reason, "delivered to +1******0100 at 12:02 UTC, not acknowledged within 5m");
        // The default chain: delivered is the end.
        let mut plain = record(State::Delivered);
        plain.status.final_at = Some(t0() + mins(2));
        assert!(!escalates(&plain, t0() + mins(600)));
    }

    #[test]
    fn an_accepted_level_with_no_receipt_moves_on_after_its_wait_from_acceptance_or_at_its_deadline() {
        let r = chained(State::Accepted, "5m");
        assert!(!escalates(&r, t0() + mins(4)));
        assert!(escalates(&r, t0() + mins(5)), "five minutes after the acceptance");
        let long = chained(State::Accepted, "2h");
        assert!(!escalates(&long, t0() + mins(29)));
        assert!(escalates(&long, t0() + mins(30)), "the deadline comes first");
        assert_eq!(next_check(&long, t0(), &policy()), Some(t0() + mins(10)), "delay suspected still comes first");
        for s in [State::Failed, State::Suppressed, State::Stale] {
            assert!(escalates(&chained(s, "5m"), t0() + mins(1)), "{s} moves on at once");
        }
    }

    #[test]
    fn a_level_whose_send_outcome_is_unknown_moves_on_after_its_wait_from_the_claim_not_at_the_deadline() {
        for state in [State::SendUnknown, State::Sending] {
            let mut r = chained(state, "5m");
            r.status.claimed_at = Some(t0() + mins(1));
            // A live claim is not lapsed by the sweep: only its wait is looked at here.
            r.status.lease_until = Some(t0() + mins(60));
            assert!(!escalates(&r, t0() + mins(5)), "{state}");
            assert!(escalates(&r, t0() + mins(6)), "{state}: five minutes after the claim, not the 30 min deadline");
            let next = next_check(&r, t0() + mins(1), &policy());
            assert!(next.is_some_and(|t| t <= t0() + mins(6)), "{state}: looked at again by then: {next:?}");
        }
        let mut r = chained(State::SendUnknown, "5m");
        r.status.claimed_at = Some(t0() + mins(1));
        let reason = decide(&r, t0() + mins(6), &policy())
            .into_iter()
            .find_map(|a| match a {
                Action::Escalate { reason } => Some(reason),
                _ => None,
            })
            .expect("moves on");
        assert!(reason.starts_with("sent to +1******0100 at 12:01 UTC with its outcome unknown"), "{reason}");
        // Not a chain: an unknown outcome waits for its deadline, as always.
        let mut plain = record(State::SendUnknown);
        plain.status.claimed_at = Some(t0() + mins(1));
        assert!(!escalates(&plain, t0() + mins(29)));
    }

    #[test]
    fn an_acknowledged_level_of_a_chain_never_moves_on() {
        use crate::domain::acknowledgement::{AckVia, Acknowledgement};
        let mut r = chained(State::Delivered, "5m");
        r.status.final_at = Some(t0());
        r.status.acknowledgement = Some(Acknowledgement { at: t0(), by: "dana".into(), via: AckVia::Reply });
        assert!(!escalates(&r, t0() + mins(600)));
        assert_eq!(next_check(&r, t0(), &policy()), None, "it leaves the index");
    }

    #[test]
    fn a_forgotten_received_intent_is_re_enqueued_after_the_grace_period() {
        let r = record(State::Received);
        assert_eq!(decide(&r, t0() + mins(1), &policy()), vec![]);
        assert_eq!(decide(&r, t0() + mins(3), &policy()), vec![Action::ReEnqueue]);
        assert_eq!(next_check(&r, t0() + mins(3), &policy()), Some(t0() + mins(5)));
    }
}
