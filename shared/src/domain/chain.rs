//! Escalation chains (issue 37, docs/acknowledgement.md "Chains"): who is texted when nobody
//! acknowledges, in order, and how long each has. A leaf of the domain (keys and numbers only).
//!
//! A chain is the alert's recipient (level 0), then the people the request names, each a phone
//! number with its own wait, then the stack's on-call escalation queue, always last. A level
//! that is a phone is a **tracked alert of its own** (its key derived from the root's and the
//! level: [`level_key`]), claimed, sent at most once, its delivery and acknowledgement recorded;
//! when nobody at a level acknowledges within its wait, the chain moves on. The root intent's
//! item is the arbiter: each level is started there by one conditional write that an
//! acknowledgement refuses, so of an acknowledgement and the next level's start exactly one comes
//! first, and an acknowledgement at any level stops every later one.
//!
//! The request's shape:
//!
//! ```json
//! "chain": {"wait": "5m", "repeats": 1,
//!           "then": [{"to": "+14155550101", "wait": "10m"}, {"to": "+14155550102", "wait": "10m"}]}
//! ```
//!
//! `wait` is how long a level has to acknowledge: from its SMS's delivery; from its acceptance
//! when no receipt comes (or its deadline, if sooner); a failed, suppressed or stale level moves
//! on at once. `repeats` sends the same level's SMS again (each a tracked alert with its own
//! code) before moving on. An alert without `chain` is the default chain — its recipient, then
//! on-call when it is not delivered by its deadline — exactly as before chains existed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::key::IdempotencyKey;
use super::phone::PhoneNumber;

/// The shortest wait a level may have: under it a person cannot read, unlock and reply.
pub const MIN_WAIT: Duration = Duration::from_secs(60);
/// The longest: a chain that waits a day per level is a ticket queue, not paging.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// How many times one level may be repeated.
pub const MAX_REPEATS: u64 = 3;
/// People after the recipient.
pub const MAX_THEN: usize = 5;
/// Levels once repeats are counted (the recipient's included): a bound on the SMS one alert can
/// cause, whatever the request says.
pub const MAX_LEVELS: usize = 12;

/// One level: who is texted and how long they have to acknowledge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Level {
    pub to: PhoneNumber,
    /// Seconds.
    pub wait_s: u64,
}

impl Level {
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.wait_s)
    }
}

/// The chain as the request gave it (or its template's policy), repeats laid out: `levels[0]`
/// is the recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSpec {
    pub levels: Vec<Level>,
    /// As given, compared on replay.
    pub spec: Value,
    /// The template policy it came from; `None`: the request named it.
    pub policy: Option<PolicyRef>,
}

/// A chain read without its recipient: the request's `chain`, or a template's policy
/// (`domain::chain_policy`), laid out for each alert's recipient by [`ChainShape::for_recipient`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainShape {
    wait_s: u64,
    repeats: u64,
    then: Vec<(Level, u64)>,
    /// As given.
    pub spec: Value,
}

impl ChainShape {
    /// The people after the recipient, in order (each once, repeats aside).
    pub fn people(&self) -> impl Iterator<Item = &PhoneNumber> {
        self.then.iter().map(|(l, _)| &l.to)
    }

    /// One line, each level with its wait: `recipient 5m ×2 → +1******0101 10m → on-call`
    /// (numbers masked unless `reveal`).
    pub fn summary(&self, reveal: bool) -> String {
        let level = |who: String, wait_s: u64, repeats: u64| {
            let wait = humantime::format_duration(Duration::from_secs(wait_s));
            if repeats == 0 { format!("{who} {wait}") } else { format!("{who} {wait} ×{}", repeats + 1) }
        };
        let mut parts = vec![level("recipient".into(), self.wait_s, self.repeats)];
        for (l, repeats) in &self.then {
            let who = if reveal { l.to.expose().to_owned() } else { l.to.masked() };
            parts.push(level(who, l.wait_s, *repeats));
        }
        parts.push("on-call".into());
        parts.join(" → ")
    }

    /// The chain of an alert to `recipient`: its levels with repeats laid out, the recipient
    /// first.
    pub fn for_recipient(&self, recipient: &PhoneNumber, policy: Option<PolicyRef>) -> ChainSpec {
        let first = (Level { to: recipient.clone(), wait_s: self.wait_s }, self.repeats);
        let mut levels = Vec::new();
        for (level, repeats) in std::iter::once(&first).chain(&self.then) {
            for _ in 0..=*repeats {
                levels.push(level.clone());
            }
        }
        ChainSpec { levels, spec: self.spec.clone(), policy }
    }
}

/// Which template's policy a chain came from, and the version of it (when it was set): kept in
/// the intent, so `tocsin show` says where an alert's chain came from and a replay is compared
/// with what its request said, not with a policy changed since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRef {
    pub template: String,
    pub set_at: DateTime<Utc>,
}

/// Where an intent stands in its chain (stored in the intent: immutable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    /// The chain's first intent (the alert as requested): the arbiter of its levels.
    pub root: IdempotencyKey,
    /// This intent's level (0: the root).
    pub level: u8,
    pub levels: Vec<Level>,
    /// The request's `chain` (or the template policy's), as given.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// The template policy the chain came from; `None`: the request named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyRef>,
}

impl Chain {
    /// How long this level has to acknowledge.
    pub fn wait(&self) -> Duration {
        self.levels.get(usize::from(self.level)).map_or(MIN_WAIT, Level::wait)
    }

    /// The level after this one: `None` when on-call's queue comes next.
    pub fn next(&self) -> Option<(u8, &Level)> {
        let next = self.level.checked_add(1)?;
        self.levels.get(usize::from(next)).map(|l| (next, l))
    }

    /// The level on-call's queue is, after every phone.
    pub fn on_call_level(&self) -> u8 {
        u8::try_from(self.levels.len()).unwrap_or(u8::MAX)
    }

    pub fn is_root(&self) -> bool {
        self.level == 0
    }

    /// The chain the request itself named (compared on replay); `None` when the chain came from
    /// its template's policy.
    pub fn requested(&self) -> Option<&Value> {
        match self.policy {
            None => Some(&self.spec),
            Some(_) => None,
        }
    }
}

const LEVEL_TAG: &[u8] = b"tocsin/chain-level/v1\0";

/// The key of a chain's level `level` (≥ 1): derived from the root's, so every run that starts
/// the level writes the same intent, and a retry finds it.
pub fn level_key(root: &IdempotencyKey, level: u8) -> IdempotencyKey {
    let mut h = Sha256::new();
    h.update(LEVEL_TAG);
    h.update(root.as_str().as_bytes());
    h.update([level]);
    IdempotencyKey::parse(&hex::encode(h.finalize())).unwrap_or_else(|_| root.clone())
}

/// A field of `chain` that is wrong, and why (`request` turns it into its `FieldError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainError {
    pub field: String,
    pub kind: ChainErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainErrorKind {
    Required,
    InvalidType,
    InvalidFormat,
    OutOfRange,
    UnknownField,
    InvalidPhoneNumber,
    TooLong,
}

fn err(errors: &mut Vec<ChainError>, field: impl Into<String>, kind: ChainErrorKind, message: impl Into<String>) {
    errors.push(ChainError { field: field.into(), kind, message: message.into() });
}

fn wait_of(o: &Map<String, Value>, field: &str, errors: &mut Vec<ChainError>) -> Option<u64> {
    match o.get("wait") {
        None | Some(Value::Null) => {
            err(
                errors,
                field,
                ChainErrorKind::Required,
                format!("'{field}' is required (how long to wait, e.g. \"5m\")"),
            );
            None
        }
        Some(Value::String(s)) => match humantime::parse_duration(s) {
            Ok(d) if (MIN_WAIT..=MAX_WAIT).contains(&d) => Some(d.as_secs()),
            Ok(_) => {
                err(errors, field, ChainErrorKind::OutOfRange, format!("'{field}' must be from 1m to 24h"));
                None
            }
            Err(_) => {
                err(errors, field, ChainErrorKind::InvalidFormat, format!("'{field}' must be a duration like \"5m\""));
                None
            }
        },
        Some(_) => {
            err(errors, field, ChainErrorKind::InvalidType, format!("'{field}' must be a string like \"5m\""));
            None
        }
    }
}

fn repeats_of(o: &Map<String, Value>, field: &str, errors: &mut Vec<ChainError>) -> u64 {
    match o.get("repeats") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(r) if r <= MAX_REPEATS => r,
            _ => {
                err(
                    errors,
                    field,
                    ChainErrorKind::OutOfRange,
                    format!("'{field}' must be a whole number from 0 to {MAX_REPEATS}"),
                );
                0
            }
        },
        Some(_) => {
            err(errors, field, ChainErrorKind::InvalidType, format!("'{field}' must be a number"));
            0
        }
    }
}

fn unknown_fields(o: &Map<String, Value>, at: &str, allowed: &[&str], errors: &mut Vec<ChainError>) {
    for k in o.keys().filter(|k| !allowed.contains(&k.as_str())) {
        err(
            errors,
            format!("{at}.{k}"),
            ChainErrorKind::UnknownField,
            format!("unknown field '{at}.{k}'; expected one of {allowed:?}"),
        );
    }
}

/// Reads a `chain` without its recipient (a request's, or a template's policy). Every failing
/// field is reported.
pub fn parse_chain_shape(value: &Value) -> Result<ChainShape, Vec<ChainError>> {
    let mut errors = Vec::new();
    let Some(o) = value.as_object() else {
        err(
            &mut errors,
            "chain",
            ChainErrorKind::InvalidType,
            "'chain' must be an object: {\"wait\": \"5m\", \"then\": [...]}",
        );
        return Err(errors);
    };
    unknown_fields(o, "chain", &["wait", "repeats", "then"], &mut errors);
    let wait = wait_of(o, "chain.wait", &mut errors);
    let repeats = repeats_of(o, "chain.repeats", &mut errors);
    let mut then = Vec::new();
    match o.get("then") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.len() <= MAX_THEN => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("chain.then[{i}]");
                let Some(level) = item.as_object() else {
                    err(
                        &mut errors,
                        at,
                        ChainErrorKind::InvalidType,
                        "each level must be an object: {\"to\": …, \"wait\": …}",
                    );
                    continue;
                };
                unknown_fields(level, &at, &["to", "wait", "repeats"], &mut errors);
                let to = match level.get("to") {
                    Some(Value::String(s)) => match PhoneNumber::parse(s) {
                        Ok(p) => Some(p),
                        Err(e) => {
                            err(
                                &mut errors,
                                format!("{at}.to"),
                                ChainErrorKind::InvalidPhoneNumber,
                                format!("'{at}.to' {e}"),
                            );
                            None
                        }
                    },
                    None | Some(Value::Null) => {
                        err(
                            &mut errors,
                            format!("{at}.to"),
                            ChainErrorKind::Required,
                            format!("'{at}.to' is required"),
                        );
                        None
                    }
                    Some(_) => {
                        err(
                            &mut errors,
                            format!("{at}.to"),
                            ChainErrorKind::InvalidType,
                            format!("'{at}.to' must be a string"),
                        );
                        None
                    }
                };
                let wait = wait_of(level, &format!("{at}.wait"), &mut errors);
                let repeats = repeats_of(level, &format!("{at}.repeats"), &mut errors);
                if let (Some(to), Some(wait_s)) = (to, wait) {
                    then.push((Level { to, wait_s }, repeats));
                }
            }
        }
        Some(Value::Array(_)) => {
            err(
                &mut errors,
                "chain.then",
                ChainErrorKind::TooLong,
                format!("at most {MAX_THEN} levels after the recipient"),
            );
        }
        Some(_) => err(&mut errors, "chain.then", ChainErrorKind::InvalidType, "'chain.then' must be an array"),
    }
    let Some(wait_s) = wait else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let levels = (repeats + 1) as usize + then.iter().map(|(_, r)| (*r + 1) as usize).sum::<usize>();
    if levels > MAX_LEVELS {
        err(
            &mut errors,
            "chain",
            ChainErrorKind::TooLong,
            format!("{levels} levels with repeats; at most {MAX_LEVELS}"),
        );
        return Err(errors);
    }
    Ok(ChainShape { wait_s, repeats, then, spec: value.clone() })
}

/// Reads the request's `chain` for `recipient`. Every failing field is reported.
pub fn parse_chain(value: &Value, recipient: Option<&PhoneNumber>) -> Result<ChainSpec, Vec<ChainError>> {
    let shape = parse_chain_shape(value);
    match (shape, recipient) {
        (Ok(shape), Some(recipient)) => Ok(shape.for_recipient(recipient, None)),
        (Ok(_), None) => Err(vec![ChainError {
            field: "recipient".into(),
            kind: ChainErrorKind::Required,
            message: "a chain starts with the recipient".into(),
        }]),
        (Err(errors), _) => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recipient() -> PhoneNumber {
        PhoneNumber::parse("+14155550100").expect("number")
    }

    #[test]
    fn a_chain_lays_out_its_levels_with_repeats_the_recipient_first() {
        let spec = parse_chain(
            &json!({"wait": "5m", "repeats": 1, "then": [{"to": "+14155550101", "wait": "10m", "repeats": 2}]}),
            Some(&recipient()),
        )
        .expect("valid");
        let got: Vec<(&str, u64)> = spec.levels.iter().map(|l| (l.to.expose(), l.wait_s)).collect();
        assert_eq!(
            got,
            vec![
                ("+14155550100", 300),
                ("+14155550100", 300),
                ("+14155550101", 600),
                ("+14155550101", 600),
                ("+14155550101", 600)
            ]
        );
    }

    #[test]
    fn a_chains_summary_names_each_level_its_wait_and_on_call_last_numbers_masked() {
        let shape =
            parse_chain_shape(&json!({"wait": "5m", "repeats": 1, "then": [{"to": "+14155550101", "wait": "1h 30m"}]}))
                .expect("valid");
        assert_eq!(shape.summary(false), "recipient 5m ×2 → +1******0101 1h 30m → on-call");
        assert_eq!(shape.summary(true), "recipient 5m ×2 → +14155550101 1h 30m → on-call");
    }

    #[test]
    fn every_wrong_field_of_a_chain_is_reported() {
        let errors = parse_chain(
            &json!({"wait": "5s", "colour": 1, "then": [{"to": "555", "wait": "2d"}, {"wait": "1m"}, 7]}),
            Some(&recipient()),
        )
        .expect_err("invalid");
        let fields: Vec<(&str, ChainErrorKind)> = errors.iter().map(|e| (e.field.as_str(), e.kind)).collect();
        assert_eq!(
            fields,
            vec![
                ("chain.colour", ChainErrorKind::UnknownField),
                ("chain.wait", ChainErrorKind::OutOfRange),
                ("chain.then[0].to", ChainErrorKind::InvalidPhoneNumber),
                ("chain.then[0].wait", ChainErrorKind::OutOfRange),
                ("chain.then[1].to", ChainErrorKind::Required),
                ("chain.then[2]", ChainErrorKind::InvalidType),
            ]
        );
    }

    #[test]
    fn a_chain_cannot_cause_more_than_its_bound_of_sms() {
        let then: Vec<Value> =
            (1..=4).map(|i| json!({"to": format!("+1415555010{i}"), "wait": "5m", "repeats": 3})).collect();
        let errors = parse_chain(&json!({"wait": "5m", "then": then}), Some(&recipient())).expect_err("too long");
        assert_eq!(errors[0].kind, ChainErrorKind::TooLong, "{errors:?}");
        let six: Vec<Value> = (1..=6).map(|i| json!({"to": format!("+1415555010{i}"), "wait": "5m"})).collect();
        assert_eq!(
            parse_chain(&json!({"wait": "5m", "then": six}), Some(&recipient())).expect_err("too many")[0].field,
            "chain.then"
        );
    }

    #[test]
    fn a_level_key_is_the_same_for_every_run_and_differs_per_level_and_root() {
        let root = IdempotencyKey::parse(&"a".repeat(64)).expect("key");
        let other = IdempotencyKey::parse(&"b".repeat(64)).expect("key");
        assert_eq!(level_key(&root, 1), level_key(&root, 1));
        assert_ne!(level_key(&root, 1), level_key(&root, 2));
        assert_ne!(level_key(&root, 1), level_key(&other, 1));
        assert_ne!(level_key(&root, 1), root);
    }

    #[test]
    fn the_next_level_is_on_call_after_the_last_phone() {
        let spec =
            parse_chain(&json!({"wait": "5m", "then": [{"to": "+14155550101", "wait": "10m"}]}), Some(&recipient()))
                .expect("valid");
        let root = IdempotencyKey::parse(&"a".repeat(64)).expect("key");
        let mut c = Chain { root, level: 0, levels: spec.levels, spec: Value::Null, policy: None };
        assert_eq!(c.wait(), Duration::from_secs(300));
        assert_eq!(c.next().map(|(n, l)| (n, l.to.expose().to_owned())), Some((1, "+14155550101".to_owned())));
        c.level = 1;
        assert_eq!(c.wait(), Duration::from_secs(600));
        assert_eq!(c.next(), None);
        assert_eq!(c.on_call_level(), 2);
    }
}
