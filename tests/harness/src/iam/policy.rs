//! IAM policy documents and how AWS evaluates identity-based policies within one account: an
//! explicit `Deny` that applies wins; otherwise an `Allow` that applies allows; otherwise the
//! request is implicitly denied.
//!
//! A statement applies when its `Action` (or `NotAction`) matches the action, its `Resource` (or
//! `NotResource`) matches the resource ARN, and its `Condition` holds. Actions match
//! case-insensitively with `*` and `?`; resources match case-sensitively, ARN segment by ARN
//! segment (a wildcard does not cross the first five colons; the sixth segment, the resource, may
//! hold more colons), and `*` alone matches anything.
//!
//! Conditions are evaluated for the keys the gate knows the value of (see
//! [`MODELLED_CONDITION_KEYS`]) with the string, ARN, `Bool` and `Null` operators, the
//! `ForAnyValue:`/`ForAllValues:` qualifiers and the `IfExists` suffix. A condition the gate cannot
//! evaluate (another key, or a numeric/date operator) is treated conservatively: an `Allow` with
//! it does not apply, a `Deny` with it does — and the decision says which condition it was.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why a policy document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {policy}: {message}")]
    Malformed { policy: String, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Effect {
    Allow,
    Deny,
}

/// `Action` or `NotAction` (likewise `Resource` / `NotResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patterns {
    Listed(Vec<String>),
    AllBut(Vec<String>),
}

impl Patterns {
    /// The patterns that match `value` (for `AllBut`, `["Not[...]"]` when none of them does).
    fn matching(&self, value: &str, matches: impl Fn(&str, &str) -> bool) -> Vec<String> {
        match self {
            Patterns::Listed(p) => p.iter().filter(|p| matches(p, value)).cloned().collect(),
            Patterns::AllBut(p) if p.iter().any(|p| matches(p, value)) => Vec::new(),
            Patterns::AllBut(p) => vec![format!("Not{p:?}")],
        }
    }

    /// Every pattern, as a grant is reported (`Not[...]` for the negated forms).
    pub fn grants(&self) -> Vec<String> {
        match self {
            Patterns::Listed(p) => p.clone(),
            Patterns::AllBut(p) => vec![format!("Not{p:?}")],
        }
    }
}

/// One condition: `{"<operator>": {"<key>": [values]}}`, one key per entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub operator: String,
    pub key: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sid: Option<String>,
    pub effect: Effect,
    pub actions: Patterns,
    pub resources: Patterns,
    pub conditions: Vec<Condition>,
}

/// A named policy document (an inline policy of a role, or a managed one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub statements: Vec<Statement>,
}

/// The request context's condition keys, each with its values (multi-valued keys have several).
pub type Context = BTreeMap<String, Vec<String>>;

/// The keys whose value the gate knows for the requests it sees: a condition on one of these is
/// evaluated (a key absent from the context is absent from the request); any other key is not.
pub const MODELLED_CONDITION_KEYS: &[&str] = &[
    "aws:PrincipalAccount",
    "aws:PrincipalArn",
    "aws:MultiFactorAuthPresent",
    "aws:RequestedRegion",
    "kms:CallerAccount",
    "kms:ViaService",
    "kms:ResourceAliases",
    "kms:EncryptionContext:aws:sqs:arn",
    "iam:PassedToService",
];

/// Where a statement is: its policy, its position and its `Sid`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct StatementRef {
    pub policy: String,
    pub index: usize,
    pub sid: Option<String>,
}

impl std::fmt::Display for StatementRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.sid {
            Some(sid) => write!(f, "{sid} (policy {})", self.policy),
            None => write!(f, "statement {} of policy {}", self.index, self.policy),
        }
    }
}

/// One statement that applied: the action and resource patterns of it that matched.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    pub statement: StatementRef,
    pub action: String,
    pub resource: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by each of these (every Allow statement that applies).
    Allowed(Vec<Grant>),
    /// Denied by this Deny statement (which wins over any Allow).
    ExplicitDeny(Grant),
    /// No statement allows it. `unevaluated`: Allow statements that would have applied but for a
    /// condition the gate cannot evaluate.
    ImplicitDeny { unevaluated: Vec<String> },
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed(_))
    }
}

/// What is asked: an action on a resource, with the request's condition keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask<'a> {
    pub action: &'a str,
    pub resource: &'a str,
    pub context: &'a Context,
}

/// Evaluates `ask` against every statement of `policies`, as AWS does for identity-based policies.
pub fn evaluate(policies: &[Policy], ask: &Ask<'_>) -> Decision {
    let mut allowed = Vec::new();
    let mut unevaluated = Vec::new();
    for policy in policies {
        for (index, s) in policy.statements.iter().enumerate() {
            let actions = s.actions.matching(ask.action, action_matches);
            let resources = s.resources.matching(ask.resource, resource_matches);
            if actions.is_empty() || resources.is_empty() {
                continue;
            }
            let statement = StatementRef { policy: policy.name.clone(), index, sid: s.sid.clone() };
            let grant =
                |a: &String, r: &String| Grant { statement: statement.clone(), action: a.clone(), resource: r.clone() };
            let holds = conditions_hold(&s.conditions, ask.context);
            match (s.effect, holds) {
                // A Deny whose condition cannot be evaluated is taken to apply (conservative).
                (Effect::Deny, Truth::True | Truth::Unknown(_)) => {
                    return Decision::ExplicitDeny(grant(&actions[0], &resources[0]));
                }
                (Effect::Deny, Truth::False) | (Effect::Allow, Truth::False) => {}
                (Effect::Allow, Truth::True) => {
                    for a in &actions {
                        for r in &resources {
                            allowed.push(grant(a, r));
                        }
                    }
                }
                (Effect::Allow, Truth::Unknown(why)) => unevaluated.push(format!("{statement}: {why}")),
            }
        }
    }
    if allowed.is_empty() { Decision::ImplicitDeny { unevaluated } } else { Decision::Allowed(allowed) }
}

/// `*` any run of characters, `?` any one character; nothing else is special.
pub fn glob(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let same = |a: char, b: char| if ignore_case { a.eq_ignore_ascii_case(&b) } else { a == b };
    // Two pointers with backtracking to the last `*`: linear in practice, never exponential.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && same(p[pi], t[ti]))) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// IAM action matching: `service:Action` patterns, case-insensitive, with wildcards.
pub fn action_matches(pattern: &str, action: &str) -> bool {
    glob(pattern, action, true)
}

/// IAM resource matching: `*` matches anything; an ARN pattern matches segment by segment (its
/// last segment takes the rest of the resource, colons included).
pub fn resource_matches(pattern: &str, resource: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let p: Vec<&str> = pattern.splitn(6, ':').collect();
    let r: Vec<&str> = resource.splitn(p.len(), ':').collect();
    p.len() == r.len() && p.iter().zip(&r).all(|(p, r)| glob(p, r, false))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Truth {
    True,
    False,
    Unknown(String),
}

/// Every condition of a statement must hold (AND across operators and keys).
fn conditions_hold(conditions: &[Condition], context: &Context) -> Truth {
    let mut unknown = None;
    for c in conditions {
        match condition_holds(c, context) {
            Truth::False => return Truth::False,
            Truth::Unknown(why) => unknown = Some(why),
            Truth::True => {}
        }
    }
    unknown.map_or(Truth::True, Truth::Unknown)
}

/// The principal's tags are known to the gate when a test gives them: an absent tag is untagged.
const MODELLED_CONDITION_PREFIXES: &[&str] = &["aws:PrincipalTag/"];

/// A condition value with its policy variables (`${aws:PrincipalTag/x}`) replaced from the
/// request's context; `None` when one has no value there, and the value then matches nothing —
/// so a statement that needs it does not apply, whatever its operator (a `Deny` on a missing tag
/// must say so with `Null`).
fn substituted(value: &str, context: &Context) -> Option<String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}')? + start;
        let key = &rest[start + 2..end];
        let v = context.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).and_then(|(_, v)| v.first())?;
        out.push_str(v);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn condition_holds(c: &Condition, context: &Context) -> Truth {
    let Some(values) = c.values.iter().map(|v| substituted(v, context)).collect::<Option<Vec<String>>>() else {
        return Truth::False;
    };
    let c = &Condition { values, ..c.clone() };
    let modelled = MODELLED_CONDITION_KEYS.iter().any(|k| k.eq_ignore_ascii_case(&c.key))
        || MODELLED_CONDITION_PREFIXES
            .iter()
            .any(|p| c.key.len() > p.len() && c.key[..p.len()].eq_ignore_ascii_case(p));
    let present = context.iter().find(|(k, _)| k.eq_ignore_ascii_case(&c.key)).map(|(_, v)| v.as_slice());
    if !modelled && present.is_none() {
        return Truth::Unknown(format!("condition {} on {}, a key the gate does not model", c.operator, c.key));
    }
    let (qualifier, rest) = match c.operator.split_once(':') {
        Some((q, rest)) if q == "ForAnyValue" || q == "ForAllValues" => (Some(q), rest),
        _ => (None, c.operator.as_str()),
    };
    let (operator, if_exists) = match rest.strip_suffix("IfExists") {
        Some(op) => (op, true),
        None => (rest, false),
    };
    if operator == "Null" {
        let want_absent = c.values.iter().any(|v| v.eq_ignore_ascii_case("true"));
        return truth(present.is_none() == want_absent);
    }
    let Some((positive, negated)) = string_test(operator) else {
        return Truth::Unknown(format!("condition operator {} is not evaluated by the gate", c.operator));
    };
    let Some(values) = present else {
        // Absent key: IfExists and ForAllValues hold, negated operators hold, the rest do not.
        return truth(if_exists || qualifier == Some("ForAllValues") || (negated && qualifier.is_none()));
    };
    let one = |v: &str| {
        let hit = c.values.iter().any(|p| positive(p, v));
        if negated { !hit } else { hit }
    };
    truth(match qualifier {
        Some("ForAllValues") => values.iter().all(|v| one(v)),
        Some(_) => values.iter().any(|v| one(v)),
        // A single-valued operator on a multi-valued key: any value will do.
        None if negated => values.iter().all(|v| one(v)),
        None => values.iter().any(|v| one(v)),
    })
}

fn truth(b: bool) -> Truth {
    if b { Truth::True } else { Truth::False }
}

type Test = fn(&str, &str) -> bool;

/// (how a condition value matches a context value, whether the operator is negated).
fn string_test(operator: &str) -> Option<(Test, bool)> {
    let eq: Test = |p, v| p == v;
    let eq_ic: Test = |p, v| p.eq_ignore_ascii_case(v);
    let like: Test = |p, v| glob(p, v, false);
    let arn_like: Test = resource_matches;
    let bool_eq: Test = |p, v| p.eq_ignore_ascii_case(v);
    Some(match operator {
        "StringEquals" => (eq, false),
        "StringNotEquals" => (eq, true),
        "StringEqualsIgnoreCase" => (eq_ic, false),
        "StringNotEqualsIgnoreCase" => (eq_ic, true),
        "StringLike" => (like, false),
        "StringNotLike" => (like, true),
        "ArnEquals" | "ArnLike" => (arn_like, false),
        "ArnNotEquals" | "ArnNotLike" => (arn_like, true),
        "Bool" => (bool_eq, false),
        _ => return None,
    })
}

fn strings(policy: &str, what: &str, v: &Value) -> Result<Vec<String>, PolicyError> {
    let malformed = |m: String| PolicyError::Malformed { policy: policy.to_owned(), message: m };
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Bool(b) => Ok(vec![b.to_string()]),
        Value::Number(n) => Ok(vec![n.to_string()]),
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => Ok(s.clone()),
                Value::Bool(b) => Ok(b.to_string()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(malformed(format!("{what}: {other} is not a string (an unresolved intrinsic?)"))),
            })
            .collect(),
        other => Err(malformed(format!("{what}: {other} is not a string (an unresolved intrinsic?)"))),
    }
}

impl Policy {
    /// Reads a policy document whose values are already resolved to strings.
    pub fn parse(name: &str, document: &Value) -> Result<Policy, PolicyError> {
        let malformed = |m: String| PolicyError::Malformed { policy: name.to_owned(), message: m };
        let statements = match &document["Statement"] {
            Value::Array(a) => a.clone(),
            s @ Value::Object(_) => vec![s.clone()],
            other => return Err(malformed(format!("Statement is {other}"))),
        };
        let mut out = Vec::new();
        for (i, s) in statements.iter().enumerate() {
            let effect = match s["Effect"].as_str() {
                Some("Allow") => Effect::Allow,
                Some("Deny") => Effect::Deny,
                other => return Err(malformed(format!("statement {i}: Effect {other:?}"))),
            };
            let pick = |yes: &str, no: &str| -> Result<Patterns, PolicyError> {
                match (s.get(yes), s.get(no)) {
                    (Some(v), None) => Ok(Patterns::Listed(strings(name, yes, v)?)),
                    (None, Some(v)) => Ok(Patterns::AllBut(strings(name, no, v)?)),
                    _ => Err(malformed(format!("statement {i}: exactly one of {yes} and {no}"))),
                }
            };
            let mut conditions = Vec::new();
            if let Some(c) = s.get("Condition") {
                let ops = c.as_object().ok_or_else(|| malformed(format!("statement {i}: Condition is {c}")))?;
                for (operator, keys) in ops {
                    let keys = keys
                        .as_object()
                        .ok_or_else(|| malformed(format!("statement {i}: Condition {operator} is {keys}")))?;
                    for (key, values) in keys {
                        conditions.push(Condition {
                            operator: operator.clone(),
                            key: key.clone(),
                            values: strings(name, "Condition", values)?,
                        });
                    }
                }
            }
            out.push(Statement {
                sid: s["Sid"].as_str().map(str::to_owned),
                effect,
                actions: pick("Action", "NotAction")?,
                resources: pick("Resource", "NotResource")?,
                conditions,
            });
        }
        Ok(Policy { name: name.to_owned(), statements: out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(statements: Value) -> Vec<Policy> {
        vec![Policy::parse("p", &json!({ "Version": "2012-10-17", "Statement": statements })).expect("parses")]
    }

    fn decide(policies: &[Policy], action: &str, resource: &str) -> Decision {
        evaluate(policies, &Ask { action, resource, context: &Context::new() })
    }

    const LEDGER: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-ledger";

    #[test]
    fn an_action_no_statement_mentions_is_implicitly_denied() {
        let p = policy(json!([{ "Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": LEDGER }]));
        assert_eq!(decide(&p, "dynamodb:GetItem", LEDGER), Decision::ImplicitDeny { unevaluated: vec![] });
        assert!(decide(&p, "dynamodb:PutItem", LEDGER).is_allowed());
    }

    #[test]
    fn an_explicit_deny_wins_over_any_allow_whatever_their_order() {
        let allow = json!({ "Sid": "Any", "Effect": "Allow", "Action": "sns:Publish", "Resource": "*" });
        let deny =
            json!({ "Sid": "NoTopics", "Effect": "Deny", "Action": "sns:Publish", "Resource": "arn:aws:sns:*:*:*" });
        for statements in [json!([allow.clone(), deny.clone()]), json!([deny, allow])] {
            let p = policy(statements);
            match decide(&p, "sns:Publish", "arn:aws:sns:us-east-1:123456789012:tocsin-local-oncall") {
                Decision::ExplicitDeny(g) => assert_eq!(g.statement.sid.as_deref(), Some("NoTopics")),
                other => panic!("{other:?}"),
            }
            assert!(decide(&p, "sns:Publish", "*").is_allowed(), "a phone number has no ARN: resource *");
        }
    }

    #[test]
    fn actions_match_case_insensitively_with_star_and_question_mark() {
        let p = policy(json!([{ "Effect": "Allow", "Action": ["sqs:Get*", "SQS:?eleteMessage"], "Resource": "*" }]));
        for yes in ["sqs:GetQueueAttributes", "sqs:getqueueurl", "sqs:DeleteMessage"] {
            assert!(decide(&p, yes, "arn:aws:sqs:us-east-1:1:q").is_allowed(), "{yes}");
        }
        for no in ["sqs:SendMessage", "sqs:DeleteMessageBatch", "sns:GetTopicAttributes"] {
            assert!(!decide(&p, no, "arn:aws:sqs:us-east-1:1:q").is_allowed(), "{no}");
        }
    }

    #[test]
    fn resources_match_case_sensitively_segment_by_segment() {
        assert!(resource_matches("arn:aws:sns:*:*:*", "arn:aws:sns:us-east-1:123456789012:topic"));
        assert!(resource_matches("arn:aws:sns:*:*:*", "arn:aws:sns:us-east-1:123456789012:endpoint/GCM/app/x"));
        assert!(!resource_matches("arn:aws:sns:*:*:*", "*"), "a phone number publish is not a topic");
        assert!(!resource_matches(LEDGER, &LEDGER.to_uppercase()));
        assert!(resource_matches(
            "arn:aws:sqs:us-east-1:123456789012:tocsin-local-*",
            "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send"
        ));
        // A wildcard does not cross the first five colons.
        assert!(!resource_matches("arn:aws:*:123456789012:x", "arn:aws:sqs:us-east-1:123456789012:x"));
        assert!(resource_matches("arn:aws:logs:us-east-1:1:log-group:g:*", "arn:aws:logs:us-east-1:1:log-group:g:*"));
        assert!(!resource_matches(
            "arn:aws:logs:us-east-1:1:log-group:g:*",
            "arn:aws:logs:us-east-1:1:log-group:g/Failure:*"
        ));
    }

    #[test]
    fn a_query_on_an_index_needs_the_index_arn_not_the_table_arn() {
        let p = policy(json!([{ "Effect": "Allow", "Action": "dynamodb:Query", "Resource": LEDGER }]));
        let index = format!("{LEDGER}/index/pending-index");
        assert!(decide(&p, "dynamodb:Query", LEDGER).is_allowed());
        assert!(!decide(&p, "dynamodb:Query", &index).is_allowed(), "the table's ARN does not cover its indexes");
        let p =
            policy(json!([{ "Effect": "Allow", "Action": "dynamodb:Query", "Resource": format!("{LEDGER}/index/*") }]));
        assert!(decide(&p, "dynamodb:Query", &index).is_allowed());
    }

    #[test]
    fn a_transactions_condition_check_needs_condition_check_item_not_update_item() {
        let p = policy(
            json!([{ "Effect": "Allow", "Action": ["dynamodb:UpdateItem", "dynamodb:PutItem"], "Resource": LEDGER }]),
        );
        assert!(!decide(&p, "dynamodb:ConditionCheckItem", LEDGER).is_allowed());
    }

    #[test]
    fn not_action_allows_everything_but_the_listed_actions() {
        let p = policy(json!([{ "Effect": "Allow", "NotAction": ["sns:*"], "Resource": "*" }]));
        assert!(decide(&p, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q").is_allowed());
        assert!(!decide(&p, "sns:Publish", "*").is_allowed());
        let p = policy(json!([
            { "Effect": "Allow", "Action": "*", "Resource": "*" },
            { "Sid": "NothingButSms", "Effect": "Deny", "NotAction": "sns:Publish", "Resource": "*" }
        ]));
        assert!(decide(&p, "sns:Publish", "*").is_allowed());
        assert!(matches!(decide(&p, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q"), Decision::ExplicitDeny(_)));
    }

    #[test]
    fn not_resource_applies_to_every_resource_but_the_listed_ones() {
        let p = policy(json!([
            { "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*" },
            { "Effect": "Deny", "Action": "sqs:SendMessage", "NotResource": "arn:aws:sqs:us-east-1:1:tocsin-*" }
        ]));
        assert!(decide(&p, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:tocsin-send").is_allowed());
        assert!(matches!(decide(&p, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:other"), Decision::ExplicitDeny(_)));
    }

    #[test]
    fn every_allow_that_applies_is_reported_with_the_patterns_that_matched() {
        let p = policy(json!([
            { "Sid": "A", "Effect": "Allow", "Action": ["sqs:SendMessage", "sqs:Send*"], "Resource": "arn:aws:sqs:us-east-1:1:q" },
            { "Sid": "B", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": ["*", "arn:aws:sqs:us-east-1:1:other"] }
        ]));
        let Decision::Allowed(grants) = decide(&p, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q") else { panic!() };
        let seen: Vec<(Option<&str>, &str, &str)> =
            grants.iter().map(|g| (g.statement.sid.as_deref(), g.action.as_str(), g.resource.as_str())).collect();
        assert_eq!(
            seen,
            [
                (Some("A"), "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q"),
                (Some("A"), "sqs:Send*", "arn:aws:sqs:us-east-1:1:q"),
                (Some("B"), "sqs:SendMessage", "*")
            ]
        );
    }

    #[test]
    fn conditions_on_modelled_keys_are_evaluated() {
        let p = policy(json!([{
            "Effect": "Allow", "Action": "kms:Decrypt", "Resource": "arn:aws:kms:us-east-1:1:key/*",
            "Condition": { "ForAnyValue:StringEquals": { "kms:ResourceAliases": "alias/tocsin-local-data" },
                           "StringLike": { "kms:ViaService": "sqs.*.amazonaws.com" } }
        }]));
        let ask = |aliases: &[&str], via: &str| {
            let context: Context = [
                ("kms:ResourceAliases".to_owned(), aliases.iter().map(|a| (*a).to_owned()).collect()),
                ("kms:ViaService".to_owned(), vec![via.to_owned()]),
            ]
            .into();
            evaluate(&p, &Ask { action: "kms:Decrypt", resource: "arn:aws:kms:us-east-1:1:key/k", context: &context })
        };
        assert!(ask(&["alias/other", "alias/tocsin-local-data"], "sqs.us-east-1.amazonaws.com").is_allowed());
        assert!(!ask(&["alias/other"], "sqs.us-east-1.amazonaws.com").is_allowed());
        assert!(!ask(&["alias/tocsin-local-data"], "sns.us-east-1.amazonaws.com").is_allowed());
        // No alias at all: ForAnyValue over nothing is false.
        assert!(
            !evaluate(
                &p,
                &Ask { action: "kms:Decrypt", resource: "arn:aws:kms:us-east-1:1:key/k", context: &Context::new() }
            )
            .is_allowed()
        );
    }

    #[test]
    fn a_condition_the_gate_cannot_evaluate_stops_an_allow_and_keeps_a_deny() {
        let allow = policy(json!([{ "Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": LEDGER,
            "Condition": { "ForAllValues:StringEquals": { "dynamodb:LeadingKeys": ["INTENT#1"] } } }]));
        match decide(&allow, "dynamodb:GetItem", LEDGER) {
            Decision::ImplicitDeny { unevaluated } => {
                assert!(unevaluated[0].contains("dynamodb:LeadingKeys"), "{unevaluated:?}")
            }
            other => panic!("{other:?}"),
        }
        let deny = policy(json!([
            { "Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": LEDGER },
            { "Effect": "Deny", "Action": "dynamodb:GetItem", "Resource": LEDGER,
              "Condition": { "DateGreaterThan": { "aws:CurrentTime": "2020-01-01T00:00:00Z" } } }
        ]));
        assert!(matches!(decide(&deny, "dynamodb:GetItem", LEDGER), Decision::ExplicitDeny(_)));
    }

    #[test]
    fn glob_handles_stars_anywhere_without_backtracking_blowups() {
        assert!(glob("a*b*c", "aXXbYYc", false));
        assert!(!glob("a*b*c", "aXXbYY", false));
        assert!(glob("*", "", false));
        assert!(glob("a?c", "abc", false));
        assert!(!glob("a?c", "ac", false));
        let long = "a".repeat(200);
        assert!(!glob(&format!("{}b", "*a".repeat(30)), &long, false));
    }

    #[test]
    fn an_unresolved_intrinsic_in_a_policy_is_an_error_not_a_silent_grant() {
        let doc = json!({ "Statement": [{ "Effect": "Allow", "Action": "sqs:SendMessage",
            "Resource": { "Fn::GetAtt": ["SendQueue", "Arn"] } }] });
        assert!(Policy::parse("p", &doc).is_err());
    }
}
