//! Update and condition expressions: the builder every conditional write uses, and the update a
//! transition makes to the intent item. Builds expressions only; sends nothing.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::DUE_SHARD;
use super::items::{Item, n, s, ts};
use crate::domain::State;
use crate::domain::reconcile::ReconcileState;
use crate::ports::{NextCheck, Transition};

/// Builds the update expression for a transition.
pub(super) struct Expr {
    pub(super) set: Vec<String>,
    pub(super) remove: Vec<String>,
    pub(super) names: HashMap<String, String>,
    pub(super) values: Item,
}

impl Expr {
    pub(super) fn new() -> Self {
        Expr { set: Vec::new(), remove: Vec::new(), names: HashMap::new(), values: Item::new() }
    }
    pub(super) fn set(&mut self, attr: &str, v: AttributeValue) {
        self.set_as(attr, attr, v);
    }
    /// `SET attr = v` through the placeholders `#<placeholder>` and `:<placeholder>`: for an
    /// attribute whose name is no valid placeholder (`obs#log:…`).
    pub(super) fn set_as(&mut self, placeholder: &str, attr: &str, v: AttributeValue) {
        self.set_placeholders(placeholder, attr, v, |name, val| format!("{name} = {val}"));
    }
    /// `SET attr = if_not_exists(attr, v)` through the placeholders `#<placeholder>` and
    /// `:<placeholder>`: written unless the item has it already.
    pub(super) fn set_if_absent_as(&mut self, placeholder: &str, attr: &str, v: AttributeValue) {
        self.set_placeholders(placeholder, attr, v, |name, val| format!("{name} = if_not_exists({name}, {val})"));
    }
    /// One `SET` clause, written by `clause` from the name and value placeholders
    /// (`#<placeholder>`, `:<placeholder>`), which are bound to `attr` and `v`.
    fn set_placeholders(
        &mut self,
        placeholder: &str,
        attr: &str,
        v: AttributeValue,
        clause: impl FnOnce(&str, &str) -> String,
    ) {
        let name = format!("#{placeholder}");
        let val = format!(":{placeholder}");
        self.set.push(clause(&name, &val));
        self.names.insert(name, attr.to_owned());
        self.values.insert(val, v);
    }
    pub(super) fn add(&mut self, attr: &str) {
        let name = format!("#{attr}");
        self.set.push(format!("{name} = if_not_exists({name}, :zero) + :one"));
        self.names.insert(name, attr.to_owned());
        self.values.insert(":zero".into(), n(0));
        self.values.insert(":one".into(), n(1));
    }
    pub(super) fn remove(&mut self, attr: &str) {
        let name = format!("#{attr}");
        self.remove.push(name.clone());
        self.names.insert(name, attr.to_owned());
    }
    pub(super) fn next_check(&mut self, next: NextCheck) {
        match next {
            NextCheck::Keep => {}
            NextCheck::At(t) => {
                // The intent's own partition (an item written before sharding has none: the old one).
                self.set.push("#due_shard = if_not_exists(#due_home, :legacy_shard)".into());
                self.names.insert("#due_shard".into(), "due_shard".into());
                self.names.insert("#due_home".into(), "due_home".into());
                self.values.insert(":legacy_shard".into(), s(DUE_SHARD));
                self.set("due_at", n(t.timestamp_millis()));
            }
            NextCheck::Remove => {
                self.remove("due_shard");
                self.remove("due_at");
            }
        }
    }
    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
    pub(super) fn expression(&self) -> String {
        let mut e = String::new();
        if !self.set.is_empty() {
            e.push_str("SET ");
            e.push_str(&self.set.join(", "));
        }
        if !self.remove.is_empty() {
            e.push_str(" REMOVE ");
            e.push_str(&self.remove.join(", "));
        }
        e
    }
    /// `attribute_exists(pk)`, plus `#state IN (...)` and `attempt_id = ...` when asked.
    pub(super) fn condition(&mut self, from: &[State], attempt_id: Option<&str>) -> String {
        let mut c = vec!["attribute_exists(pk)".to_owned()];
        if !from.is_empty() {
            self.names.insert("#cstate".into(), "state".into());
            let mut placeholders = Vec::new();
            for (i, st) in from.iter().enumerate() {
                let p = format!(":from{i}");
                self.values.insert(p.clone(), s(st.as_str()));
                placeholders.push(p);
            }
            c.push(format!("#cstate IN ({})", placeholders.join(", ")));
        }
        if let Some(a) = attempt_id {
            self.names.insert("#cattempt".into(), "attempt_id".into());
            self.values.insert(":cattempt".into(), s(a));
            c.push("#cattempt = :cattempt".into());
        }
        c.join(" AND ")
    }
}

/// The intent's update and its condition for a transition.
pub(super) fn transition_update(t: &Transition) -> (Expr, String) {
    let mut x = Expr::new();
    let p = &t.patch;
    if let Some(st) = p.state {
        x.set("state", s(st.as_str()));
    }
    if p.increment_attempts {
        x.add("attempts");
    }
    if let Some((aid, at, until)) = &p.claim {
        x.set("attempt_id", s(aid.as_str()));
        x.set("claimed_at", s(ts(*at)));
        x.set("lease_until", s(ts(*until)));
    } else if p.clear_claim {
        // The attempt id stays: it names the intent's last attempt, which a keyed delivery event
        // (End User Messaging's context) is matched against once the attempt is over.
        x.remove("lease_until");
    }
    if let Some(m) = &p.sns_message_id {
        x.set("sns_message_id", s(m.as_str()));
    }
    if let Some(a) = p.accepted_at {
        x.set("accepted_at", s(ts(a)));
    }
    if let Some(f) = p.final_at {
        x.set("final_at", s(ts(f)));
    }
    if let Some(e) = &p.escalation {
        x.set("escalated_at", s(ts(e.at)));
        x.set("escalation_reason", s(e.reason.as_str()));
        if e.folded {
            x.set("escalation_folded", AttributeValue::Bool(true));
        }
        if let Some(level) = e.to_level {
            x.set("escalation_level", n(level));
        }
        x.remove("esc_lease");
    }
    if p.add_conflict {
        x.add("conflicts");
    }
    if let Some(err) = &p.last_error {
        x.set("last_error", s(err.as_str()));
    }
    if let Some(t) = p.enqueued_at {
        x.set("enqueued_at", s(ts(t)));
    }
    if let Some(d) = &p.digest_id {
        x.set("digest_id", s(d.as_str()));
    }
    if let Some(late) = p.late_expected {
        x.set("late_expected", s(ts(late)));
    }
    if let Some(a) = &p.acknowledgement {
        x.set("ack_at", s(ts(a.at)));
        x.set("ack_by", s(a.by.as_str()));
        x.set("ack_via", s(a.via.as_str()));
    }
    if let Some((attempts, next, state)) = &p.reconcile {
        x.set("reconcile_attempts", n(attempts));
        match next {
            Some(t) => x.set("reconcile_next_at", s(ts(*t))),
            None => x.remove("reconcile_next_at"),
        }
        x.set("reconcile_state", s(if *state == ReconcileState::Ambiguous { "ambiguous" } else { "pending" }));
    }
    // The in-flight index holds every SMS from SNS's acceptance on (super::super::carriers).
    if let Some(at) = p.accepted_at {
        x.set("inflight_pk", s(crate::adapters::carriers::IN_FLIGHT_PARTITION));
        x.set("inflight_at", s(ts(at)));
    }
    // The pending-index holds an intent while no SMS for it is known to be with SNS.
    match p.state {
        Some(st) if !st.is_pending() => {
            x.remove("pending_by");
            // Items claimed by the release before the pending-index leave the retired open-index.
            x.remove("open_recipient");
        }
        Some(_) => {
            if let Some((recipient, deadline)) = &p.pending_again {
                x.set("pending_to", s(recipient.expose()));
                x.set("pending_by", s(ts(*deadline)));
            }
        }
        None => {}
    }
    x.next_check(t.next_check);
    let mut condition = x.condition(&t.from, t.attempt_id.as_deref());
    if let Some(mid) = &t.expect.sns_message_id {
        x.names.insert("#cmid".into(), "sns_message_id".into());
        x.values.insert(":cmid".into(), s(mid.as_str()));
        condition.push_str(" AND #cmid = :cmid");
    }
    if t.expect.not_escalated {
        x.names.insert("#cesc".into(), "escalated_at".into());
        condition.push_str(" AND attribute_not_exists(#cesc)");
    }
    if t.expect.not_acknowledged {
        x.names.insert("#cack".into(), "ack_at".into());
        condition.push_str(" AND attribute_not_exists(#cack)");
    }
    if t.expect.unchained {
        x.names.insert("#cchain".into(), "chain_root".into());
        condition.push_str(" AND attribute_not_exists(#cchain)");
    }
    if let Some(now) = t.expect.no_escalation_run_at {
        // As `lease_escalation` takes the lease: free when absent or lapsed.
        x.names.insert("#cesclease".into(), "esc_lease".into());
        x.values.insert(":cesclease".into(), s(ts(now)));
        condition.push_str(" AND (attribute_not_exists(#cesclease) OR #cesclease < :cesclease)");
    }
    (x, condition)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    use crate::domain::IdempotencyKey;
    use crate::domain::intent::Escalation;
    use crate::domain::observation::Observation;
    use crate::domain::observation::ObservationKind;
    use crate::ports::{Commit, Expect, StatusPatch};

    fn transition(patch: StatusPatch, next_check: NextCheck) -> Transition {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        Transition {
            key: IdempotencyKey::derive(
                &crate::domain::producer::ProducerName::parse("monitoring").expect("producer"),
                "evt",
                &crate::domain::template::TemplateRef { name: "t".into(), version: 1 },
            ),
            from: vec![State::Accepted],
            attempt_id: None,
            patch,
            observation: Observation::new("o", at, ObservationKind::DelaySuspected),
            next_check,
            index_message: None,
            expect: Expect::default(),
            retain_until: None,
            commit: Commit::Carried,
            carried_along: Vec::new(),
        }
    }

    #[test]
    fn a_transition_changes_the_intent_exactly_when_its_update_expression_writes_something() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let patches = [
            StatusPatch::default(),
            StatusPatch { state: Some(State::Delivered), ..Default::default() },
            StatusPatch { increment_attempts: true, ..Default::default() },
            StatusPatch { clear_claim: true, ..Default::default() },
            StatusPatch { claim: Some(("a".into(), at, at)), ..Default::default() },
            StatusPatch { sns_message_id: Some("m".into()), ..Default::default() },
            StatusPatch { accepted_at: Some(at), ..Default::default() },
            StatusPatch { final_at: Some(at), ..Default::default() },
            StatusPatch {
                escalation: Some(Escalation { at, reason: "r".into(), folded: false, to_level: None }),
                ..Default::default()
            },
            StatusPatch { add_conflict: true, ..Default::default() },
            StatusPatch { last_error: Some("e".into()), ..Default::default() },
            StatusPatch { enqueued_at: Some(at), ..Default::default() },
            StatusPatch { late_expected: Some(at), ..Default::default() },
            StatusPatch { reconcile: Some((1, None, ReconcileState::Pending)), ..Default::default() },
        ];
        for patch in patches {
            for next in [NextCheck::Keep, NextCheck::Remove, NextCheck::At(at)] {
                let t = transition(patch.clone(), next);
                let (update, _) = transition_update(&t);
                assert_eq!(t.changes_intent(), !update.is_empty(), "{patch:?} {next:?}");
            }
        }
    }
}
