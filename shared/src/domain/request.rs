//! Validation of an alert request, the same for every trigger (HTTP API, REST API, EventBridge).
//! Every failing field is reported at once, each with a machine-readable code.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use super::chain::{ChainErrorKind, ChainSpec, parse_chain};
use super::phone::PhoneNumber;
use super::reply::prompt::longest_prompt;
use super::segments::{SegmentCount, measure};
use super::sms::{PolicyRefusal, SmsOptions, SmsPolicy};
use super::template::{Catalog, TemplateRef};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Required,
    InvalidType,
    InvalidFormat,
    TooLong,
    OutOfRange,
    /// A value of the right shape that the deployment does not allow (a sender id or origination
    /// number not on its allow-lists).
    NotAllowed,
    UnknownField,
    UnknownTemplate,
    UnknownTemplateVersion,
    MissingVariable,
    UnexpectedVariable,
    InvalidPhoneNumber,
    DeadlineInPast,
    DeadlineTooSoon,
    DeadlineTooFar,
    TooManySegments,
    EmptyMessage,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `template.version` or `variables.host`.
    pub field: String,
    pub code: ErrorCode,
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        FieldError { field: field.into(), code, message: message.into() }
    }
}

/// Limits that come from the deployment's configuration.
#[derive(Debug, Clone)]
pub struct Limits {
    pub default_deadline: Duration,
    pub min_deadline: Duration,
    pub max_deadline: Duration,
    pub max_segments: u32,
    /// Whether the sender adds the reply prompt (`TOCSIN_REPLIES`): the body must then fit with
    /// the longest prompt (" - Reply 999 to ack"), and the parts counted are the SMS's as sent.
    pub reply_prompt: bool,
    /// What a request may choose of its SMS settings (price cap, sender id, origination number).
    pub sms: SmsPolicy,
}

pub const MAX_EVENT_ID_CHARS: usize = 256;
pub const MAX_VARIABLE_CHARS: usize = 512;
pub const MAX_VARIABLES: usize = 32;

#[derive(Debug, Clone)]
pub struct ValidatedRequest {
    pub event_id: String,
    pub template: TemplateRef,
    pub variables: BTreeMap<String, String>,
    pub recipient: PhoneNumber,
    pub body: String,
    pub segments: SegmentCount,
    pub deadline: DateTime<Utc>,
    pub deadline_spec: Option<String>,
    pub sms: SmsOptions,
    /// The escalation chain the request names (`None`: the default chain).
    pub chain: Option<ChainSpec>,
}

const TOP_FIELDS: [&str; 7] = ["event_id", "template", "variables", "recipient", "deadline", "sms", "chain"];

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

struct Checker<'a> {
    errors: Vec<FieldError>,
    obj: &'a Map<String, Value>,
}

impl<'a> Checker<'a> {
    fn err(&mut self, field: impl Into<String>, code: ErrorCode, msg: impl Into<String>) {
        self.errors.push(FieldError::new(field, code, msg));
    }

    fn string(&mut self, field: &str, required: bool) -> Option<&'a str> {
        match self.obj.get(field) {
            None | Some(Value::Null) if required => {
                self.err(field, ErrorCode::Required, format!("'{field}' is required"));
                None
            }
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                self.err(
                    field,
                    ErrorCode::InvalidType,
                    format!("'{field}' must be a string, not {}", type_name(other)),
                );
                None
            }
        }
    }
}

fn has_control_chars(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// Validates a parsed JSON request against the catalog and limits at `now`.
pub fn validate(
    body: &Value,
    catalog: &Catalog,
    limits: &Limits,
    now: DateTime<Utc>,
) -> Result<ValidatedRequest, Vec<FieldError>> {
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new(
            "",
            ErrorCode::InvalidType,
            format!("the request must be a JSON object, not {}", type_name(body)),
        )]);
    };
    let mut c = Checker { errors: Vec::new(), obj };

    for key in obj.keys() {
        if !TOP_FIELDS.contains(&key.as_str()) {
            c.err(
                key.clone(),
                ErrorCode::UnknownField,
                format!("unknown field '{key}'; expected one of {TOP_FIELDS:?}"),
            );
        }
    }

    // event_id
    let event_id = c.string("event_id", true).and_then(|s| {
        if s.trim().is_empty() {
            c.err("event_id", ErrorCode::Required, "'event_id' must not be blank");
            None
        } else if s.chars().count() > MAX_EVENT_ID_CHARS {
            c.err("event_id", ErrorCode::TooLong, format!("'event_id' is longer than {MAX_EVENT_ID_CHARS} characters"));
            None
        } else if has_control_chars(s) {
            c.err("event_id", ErrorCode::InvalidFormat, "'event_id' must not contain control characters");
            None
        } else {
            Some(s.to_owned())
        }
    });

    // template
    let template = match obj.get("template") {
        None | Some(Value::Null) => {
            c.err("template", ErrorCode::Required, "'template' is required: {\"name\": …, \"version\": …}");
            None
        }
        Some(Value::Object(t)) => {
            for key in t.keys() {
                if key != "name" && key != "version" {
                    c.err(
                        format!("template.{key}"),
                        ErrorCode::UnknownField,
                        format!("unknown field 'template.{key}'"),
                    );
                }
            }
            let name = match t.get("name") {
                Some(Value::String(n)) if !n.is_empty() && n.len() <= 64 => Some(n.clone()),
                Some(Value::String(_)) => {
                    c.err("template.name", ErrorCode::InvalidFormat, "'template.name' must be 1 to 64 characters");
                    None
                }
                None | Some(Value::Null) => {
                    c.err("template.name", ErrorCode::Required, "'template.name' is required");
                    None
                }
                Some(v) => {
                    c.err(
                        "template.name",
                        ErrorCode::InvalidType,
                        format!("'template.name' must be a string, not {}", type_name(v)),
                    );
                    None
                }
            };
            let version = match t.get("version") {
                Some(Value::Number(n)) => match n.as_u64().and_then(|v| u32::try_from(v).ok()) {
                    Some(v) if v >= 1 => Some(v),
                    _ => {
                        c.err(
                            "template.version",
                            ErrorCode::OutOfRange,
                            "'template.version' must be a whole number from 1",
                        );
                        None
                    }
                },
                None | Some(Value::Null) => {
                    c.err("template.version", ErrorCode::Required, "'template.version' is required");
                    None
                }
                Some(v) => {
                    c.err(
                        "template.version",
                        ErrorCode::InvalidType,
                        format!("'template.version' must be a number, not {}", type_name(v)),
                    );
                    None
                }
            };
            match (name, version) {
                (Some(name), Some(version)) => match catalog.get(&name, version) {
                    Some(t) => Some(t),
                    None if catalog.has_name(&name) => {
                        c.err(
                            "template.version",
                            ErrorCode::UnknownTemplateVersion,
                            format!("template '{name}' has no published version {version}"),
                        );
                        None
                    }
                    None => {
                        c.err("template.name", ErrorCode::UnknownTemplate, format!("no template named '{name}'"));
                        None
                    }
                },
                _ => None,
            }
        }
        Some(v) => {
            c.err("template", ErrorCode::InvalidType, format!("'template' must be an object, not {}", type_name(v)));
            None
        }
    };

    // variables
    let mut variables = BTreeMap::new();
    let mut variables_ok = true;
    match obj.get("variables") {
        None | Some(Value::Null) => {}
        Some(Value::Object(vars)) => {
            if vars.len() > MAX_VARIABLES {
                c.err("variables", ErrorCode::TooLong, format!("at most {MAX_VARIABLES} variables"));
                variables_ok = false;
            }
            for (k, v) in vars {
                let field = format!("variables.{k}");
                let text = match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    other => {
                        c.err(
                            field.clone(),
                            ErrorCode::InvalidType,
                            format!("'{field}' must be a string or a number, not {}", type_name(other)),
                        );
                        None
                    }
                };
                match text {
                    Some(t) if t.chars().count() > MAX_VARIABLE_CHARS => {
                        c.err(field, ErrorCode::TooLong, format!("longer than {MAX_VARIABLE_CHARS} characters"));
                        variables_ok = false;
                    }
                    Some(t) if has_control_chars(&t) => {
                        c.err(
                            field,
                            ErrorCode::InvalidFormat,
                            "must not contain control characters (line breaks included)",
                        );
                        variables_ok = false;
                    }
                    Some(t) => {
                        variables.insert(k.clone(), t);
                    }
                    None => variables_ok = false,
                }
            }
        }
        Some(v) => {
            c.err("variables", ErrorCode::InvalidType, format!("'variables' must be an object, not {}", type_name(v)));
            variables_ok = false;
        }
    }

    // recipient
    let recipient = c.string("recipient", true).and_then(|s| match PhoneNumber::parse(s) {
        Ok(p) => Some(p),
        Err(e) => {
            c.err("recipient", ErrorCode::InvalidPhoneNumber, format!("'recipient' {e}"));
            None
        }
    });

    // deadline
    let deadline = match obj.get("deadline") {
        None | Some(Value::Null) => Some((now + limits.default_deadline, None)),
        Some(Value::String(s)) => parse_deadline(s, now, limits).map_or_else(
            |(code, msg)| {
                c.err("deadline", code, msg);
                None
            },
            Some,
        ),
        Some(v) => {
            c.err(
                "deadline",
                ErrorCode::InvalidType,
                format!("'deadline' must be a string (RFC 3339 or a duration like \"15m\"), not {}", type_name(v)),
            );
            None
        }
    };

    // sms
    let sms = match obj.get("sms") {
        None | Some(Value::Null) => Some(SmsOptions::default()),
        Some(Value::Object(o)) => validate_sms(o, &limits.sms, &mut c.errors),
        Some(v) => {
            c.err("sms", ErrorCode::InvalidType, format!("'sms' must be an object, not {}", type_name(v)));
            None
        }
    };

    // chain (docs/acknowledgement.md, "Chains")
    let chain = match obj.get("chain") {
        None | Some(Value::Null) => Some(None),
        Some(v) => match parse_chain(v, recipient.as_ref()) {
            Ok(spec) => Some(Some(spec)),
            Err(errors) => {
                for e in errors {
                    let code = match e.kind {
                        ChainErrorKind::Required => ErrorCode::Required,
                        ChainErrorKind::InvalidType => ErrorCode::InvalidType,
                        ChainErrorKind::InvalidFormat => ErrorCode::InvalidFormat,
                        ChainErrorKind::OutOfRange => ErrorCode::OutOfRange,
                        ChainErrorKind::UnknownField => ErrorCode::UnknownField,
                        ChainErrorKind::InvalidPhoneNumber => ErrorCode::InvalidPhoneNumber,
                        ChainErrorKind::TooLong => ErrorCode::TooLong,
                    };
                    // The recipient's own error is reported once, under `recipient`.
                    if e.field != "recipient" {
                        c.err(e.field, code, e.message);
                    }
                }
                None
            }
        },
    };

    // template variables and rendering, once both are known
    let mut rendered = None;
    if let Some(t) = template
        && variables_ok
    {
        let expected = t.variables();
        let mut vars_ok = true;
        for name in &expected {
            if !variables.contains_key(*name) {
                c.err(
                    format!("variables.{name}"),
                    ErrorCode::MissingVariable,
                    format!("template {} needs variable '{name}'", t.reference()),
                );
                vars_ok = false;
            }
        }
        for name in variables.keys() {
            if !expected.contains(name.as_str()) {
                c.err(
                    format!("variables.{name}"),
                    ErrorCode::UnexpectedVariable,
                    format!("template {} has no variable '{name}'", t.reference()),
                );
                vars_ok = false;
            }
        }
        if vars_ok {
            let body = t.render(&variables);
            let room = if limits.reply_prompt { longest_prompt() } else { String::new() };
            let seg = measure(&format!("{body}{room}"));
            if body.trim().is_empty() {
                c.err("variables", ErrorCode::EmptyMessage, "the rendered message is empty");
            } else if seg.segments > limits.max_segments {
                c.err(
                    "variables",
                    ErrorCode::TooManySegments,
                    format!(
                        "the rendered message needs {} SMS parts ({:?}, {} units{}); the limit is {}",
                        seg.segments,
                        seg.encoding,
                        seg.units,
                        if room.is_empty() { String::new() } else { format!(" with the reply prompt {room:?}") },
                        limits.max_segments
                    ),
                );
            } else {
                rendered = Some((body, seg));
            }
        }
    }

    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    match (event_id, template, recipient, deadline, sms, rendered, chain) {
        (
            Some(event_id),
            Some(t),
            Some(recipient),
            Some((deadline, deadline_spec)),
            Some(sms),
            Some((body, segments)),
            Some(chain),
        ) => Ok(ValidatedRequest {
            event_id,
            template: t.reference(),
            variables,
            recipient,
            body,
            segments,
            deadline,
            deadline_spec,
            sms,
            chain,
        }),
        _ => Err(vec![FieldError::new("", ErrorCode::InvalidFormat, "the request is incomplete")]),
    }
}

type DeadlineResult = Result<(DateTime<Utc>, Option<String>), (ErrorCode, String)>;

fn parse_deadline(s: &str, now: DateTime<Utc>, limits: &Limits) -> DeadlineResult {
    let (at, spec) = if let Ok(abs) = DateTime::parse_from_rfc3339(s) {
        let at = abs.with_timezone(&Utc);
        (at, at.to_rfc3339_opts(SecondsFormat::Millis, true))
    } else if let Ok(d) = humantime::parse_duration(s) {
        // Bounded before any arithmetic: a huge duration must not overflow the calendar.
        let too_far = || {
            (
                ErrorCode::DeadlineTooFar,
                format!("'deadline' must be at most {} ahead", humantime::format_duration(limits.max_deadline)),
            )
        };
        if d > limits.max_deadline {
            return Err(too_far());
        }
        let at =
            chrono::Duration::from_std(d).ok().and_then(|delta| now.checked_add_signed(delta)).ok_or_else(too_far)?;
        (at, s.trim().to_owned())
    } else {
        return Err((
            ErrorCode::InvalidFormat,
            "'deadline' must be an RFC 3339 instant (2026-11-30T08:00:00Z) or a duration (\"15m\", \"2h\")".into(),
        ));
    };
    if at <= now {
        return Err((ErrorCode::DeadlineInPast, format!("'deadline' {} is in the past", at.to_rfc3339())));
    }
    let ahead = (at - now).to_std().unwrap_or_default();
    if ahead < limits.min_deadline {
        return Err((
            ErrorCode::DeadlineTooSoon,
            format!("'deadline' must be at least {} ahead", humantime::format_duration(limits.min_deadline)),
        ));
    }
    if ahead > limits.max_deadline {
        return Err((
            ErrorCode::DeadlineTooFar,
            format!("'deadline' must be at most {} ahead", humantime::format_duration(limits.max_deadline)),
        ));
    }
    Ok((at, Some(spec)))
}

fn validate_sms(o: &Map<String, Value>, policy: &SmsPolicy, errors: &mut Vec<FieldError>) -> Option<SmsOptions> {
    let mut sms = SmsOptions::default();
    let before = errors.len();
    for (k, v) in o {
        let field = format!("sms.{k}");
        let Value::String(s) = v else {
            let code = if k == "sender_id" || k == "origination_number" || k == "max_price_usd" {
                ErrorCode::InvalidType
            } else {
                ErrorCode::UnknownField
            };
            errors.push(FieldError::new(field.clone(), code, format!("'{field}' must be a string")));
            continue;
        };
        match k.as_str() {
            "sender_id" => {
                let ok = (3..=11).contains(&s.len())
                    && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && s.bytes().any(|b| b.is_ascii_alphabetic());
                if ok {
                    sms.sender_id = Some(s.clone());
                } else {
                    errors.push(FieldError::new(
                        field,
                        ErrorCode::InvalidFormat,
                        "3 to 11 letters, digits or hyphens, at least one letter",
                    ));
                }
            }
            "origination_number" => match PhoneNumber::parse(s) {
                Ok(p) => sms.origination_number = Some(p),
                Err(e) => errors.push(FieldError::new(field, ErrorCode::InvalidPhoneNumber, e.to_string())),
            },
            "max_price_usd" => {
                let valid_shape = !s.is_empty()
                    && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                    && s.bytes().filter(|b| *b == b'.').count() <= 1;
                match s.parse::<f64>() {
                    Ok(p) if valid_shape && p > 0.0 && p <= 10.0 => sms.max_price_usd = Some(s.clone()),
                    _ => errors.push(FieldError::new(
                        field,
                        ErrorCode::OutOfRange,
                        "a decimal USD amount above 0 and at most 10, e.g. \"0.50\"",
                    )),
                }
            }
            _ => {
                errors.push(FieldError::new(field.clone(), ErrorCode::UnknownField, format!("unknown field '{field}'")))
            }
        }
    }
    if errors.len() == before {
        for refusal in policy.refusals(&sms) {
            let code = match refusal {
                PolicyRefusal::PriceAboveCeiling { .. } => ErrorCode::OutOfRange,
                PolicyRefusal::SenderIdNotAllowed | PolicyRefusal::OriginationNumberNotAllowed => ErrorCode::NotAllowed,
            };
            errors.push(FieldError::new(refusal.field(), code, refusal.to_string()));
        }
    }
    (errors.len() == before).then_some(sms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> Limits {
        Limits {
            default_deadline: Duration::from_secs(900),
            min_deadline: Duration::from_secs(60),
            max_deadline: Duration::from_secs(72 * 3600),
            max_segments: 3,
            reply_prompt: false,
            sms: SmsPolicy::default(),
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z").map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    fn good() -> Value {
        json!({
            "event_id": "evt-1",
            "template": {"name": "disk_full", "version": 1},
            "variables": {"host": "db1", "mount": "/var", "percent": 97},
            "recipient": "+14155550100",
            "deadline": "15m"
        })
    }

    fn codes(v: Value) -> Vec<(String, ErrorCode)> {
        match validate(&v, Catalog::builtin(), &limits(), now()) {
            Ok(_) => vec![],
            Err(e) => e.into_iter().map(|f| (f.field, f.code)).collect(),
        }
    }

    #[test]
    fn a_good_request_validates_and_renders() {
        let r = validate(&good(), Catalog::builtin(), &limits(), now()).expect("valid");
        assert_eq!(r.body, "ALERT: db1 volume /var is 97% full.");
        assert_eq!(r.deadline, now() + chrono::Duration::minutes(15));
        assert_eq!(r.deadline_spec.as_deref(), Some("15m"));
        assert_eq!(r.segments.segments, 1);
    }

    #[test]
    fn a_missing_deadline_takes_the_deployment_default() {
        let mut v = good();
        v.as_object_mut().map(|o| o.remove("deadline"));
        let r = validate(&v, Catalog::builtin(), &limits(), now()).expect("valid");
        assert_eq!(r.deadline, now() + chrono::Duration::minutes(15));
        assert_eq!(r.deadline_spec, None);
    }

    #[test]
    fn every_failing_field_is_reported_at_once() {
        let got = codes(json!({"template": {"name": "disk_full"}, "recipient": "555", "extra": 1}));
        assert!(got.contains(&("event_id".into(), ErrorCode::Required)));
        assert!(got.contains(&("template.version".into(), ErrorCode::Required)));
        assert!(got.contains(&("recipient".into(), ErrorCode::InvalidPhoneNumber)));
        assert!(got.contains(&("extra".into(), ErrorCode::UnknownField)));
    }

    #[test]
    fn template_variables_must_match_exactly() {
        let mut v = good();
        v["variables"] = json!({"host": "db1", "mount": "/"});
        assert_eq!(codes(v.clone()), vec![("variables.percent".into(), ErrorCode::MissingVariable)]);
        v["variables"] = json!({"host": "db1", "mount": "/", "percent": "9", "colour": "red"});
        assert_eq!(codes(v), vec![("variables.colour".into(), ErrorCode::UnexpectedVariable)]);
    }

    #[test]
    fn unknown_template_and_unknown_version_are_told_apart() {
        let mut v = good();
        v["template"] = json!({"name": "nope", "version": 1});
        assert_eq!(codes(v.clone()), vec![("template.name".into(), ErrorCode::UnknownTemplate)]);
        v["template"] = json!({"name": "disk_full", "version": 9});
        assert_eq!(codes(v), vec![("template.version".into(), ErrorCode::UnknownTemplateVersion)]);
    }

    #[test]
    fn deadlines_are_bounded() {
        let mut v = good();
        v["deadline"] = json!("2026-11-29T11:00:00Z");
        assert_eq!(codes(v.clone()), vec![("deadline".into(), ErrorCode::DeadlineInPast)]);
        v["deadline"] = json!("10s");
        assert_eq!(codes(v.clone()), vec![("deadline".into(), ErrorCode::DeadlineTooSoon)]);
        v["deadline"] = json!("30days");
        assert_eq!(codes(v.clone()), vec![("deadline".into(), ErrorCode::DeadlineTooFar)]);
        // Found by the fuzzer: a duration past the end of the calendar used to overflow (panic).
        v["deadline"] = json!("122200012220005m");
        assert_eq!(codes(v.clone()), vec![("deadline".into(), ErrorCode::DeadlineTooFar)]);
        v["deadline"] = json!("9999999999999999999s");
        assert_ne!(codes(v.clone()), vec![]);
        v["deadline"] = json!("tomorrow-ish");
        assert_eq!(codes(v.clone()), vec![("deadline".into(), ErrorCode::InvalidFormat)]);
        v["deadline"] = json!("2026-11-29T13:00:00+01:00");
        assert_eq!(codes(v), vec![("deadline".into(), ErrorCode::DeadlineInPast)]);
    }

    #[test]
    fn with_replies_on_the_body_must_fit_with_the_longest_reply_prompt_and_its_parts_count_it() {
        let one_part = |prompt: bool| {
            let mut l = limits();
            l.max_segments = 1;
            l.reply_prompt = prompt;
            l
        };
        let with_host = |n: usize| {
            let mut v = good();
            v["variables"]["host"] = json!("h".repeat(n));
            v
        };
        // The longest host that fits one part without the prompt.
        let n = (1..200).rev().find(|&n| codes_under(with_host(n), one_part(false)).is_empty()).expect("some fit");
        assert_eq!(
            codes_under(with_host(n), one_part(true)),
            vec![("variables".into(), ErrorCode::TooManySegments)],
            "no room left for \" - Reply 999 to ack\""
        );
        let room = longest_prompt().len();
        assert_eq!(room, 19);
        assert!(codes_under(with_host(n - room), one_part(true)).is_empty(), "fits with the prompt");
        assert!(!codes_under(with_host(n - room + 1), one_part(true)).is_empty(), "one character more does not");
        let v = validate(&with_host(n - room), Catalog::builtin(), &one_part(true), now()).expect("valid");
        assert_eq!(v.segments.units, 160, "the parts counted are the SMS's with its prompt");
    }

    #[test]
    fn a_chain_is_read_with_the_recipient_first_and_its_errors_reported_by_field() {
        let mut v = good();
        v["chain"] = json!({"wait": "5m", "then": [{"to": "+14155550101", "wait": "10m"}]});
        let r = validate(&v, Catalog::builtin(), &limits(), now()).expect("valid");
        let levels: Vec<&str> = r.chain.as_ref().expect("a chain").levels.iter().map(|l| l.to.expose()).collect();
        assert_eq!(levels, vec!["+14155550100", "+14155550101"]);
        v["chain"] = json!({"then": [{"to": "+1", "wait": "10m", "why": 1}]});
        assert_eq!(
            codes(v.clone()),
            vec![
                ("chain.wait".into(), ErrorCode::Required),
                ("chain.then[0].why".into(), ErrorCode::UnknownField),
                ("chain.then[0].to".into(), ErrorCode::InvalidPhoneNumber),
            ]
        );
        v["chain"] = json!([]);
        assert_eq!(codes(v.clone()), vec![("chain".into(), ErrorCode::InvalidType)]);
        // A bad recipient is reported once, under its own name.
        v["chain"] = json!({"wait": "5m"});
        v["recipient"] = json!("555");
        assert_eq!(codes(v), vec![("recipient".into(), ErrorCode::InvalidPhoneNumber)]);
    }

    #[test]
    fn a_message_over_the_segment_cap_is_refused() {
        let mut v = good();
        v["variables"]["host"] = json!("h".repeat(500));
        assert_eq!(codes(v), vec![("variables".into(), ErrorCode::TooManySegments)]);
    }

    #[test]
    fn sms_options_are_checked() {
        let mut v = good();
        v["sms"] = json!({"sender_id": "12", "origination_number": "+1", "max_price_usd": "-1", "colour": "x"});
        let got = codes(v);
        assert_eq!(got.len(), 4, "{got:?}");
        let mut v = good();
        v["sms"] = json!({"sender_id": "TOCSIN", "origination_number": "+18005550100", "max_price_usd": "0.50"});
        assert_eq!(codes_under(v, allowing()), vec![]);
    }

    fn allowing() -> Limits {
        let mut l = limits();
        l.sms.defaults.max_price_usd = Some("0.50".into());
        l.sms.allowed_sender_ids.insert("TOCSIN".into());
        l.sms.allowed_origination_numbers.insert(PhoneNumber::parse("+18005550100").expect("number"));
        l
    }

    fn codes_under(v: Value, limits: Limits) -> Vec<(String, ErrorCode)> {
        match validate(&v, Catalog::builtin(), &limits, now()) {
            Ok(_) => vec![],
            Err(e) => e.into_iter().map(|f| (f.field, f.code)).collect(),
        }
    }

    #[test]
    fn a_request_cannot_raise_the_price_ceiling_or_name_an_identity_the_deployment_does_not_allow() {
        let mut v = good();
        v["sms"] = json!({"sender_id": "PRIZE", "origination_number": "+447700900123", "max_price_usd": "0.51"});
        assert_eq!(
            codes_under(v.clone(), allowing()),
            vec![
                ("sms.max_price_usd".into(), ErrorCode::OutOfRange),
                ("sms.sender_id".into(), ErrorCode::NotAllowed),
                ("sms.origination_number".into(), ErrorCode::NotAllowed),
            ]
        );
        // A deployment that allows none: a request names no identity of its own.
        v["sms"] = json!({"sender_id": "TOCSIN"});
        assert_eq!(codes(v.clone()), vec![("sms.sender_id".into(), ErrorCode::NotAllowed)]);
        v["sms"] = json!({"max_price_usd": "0.05"});
        assert_eq!(codes_under(v, allowing()), vec![], "lowering the ceiling is always allowed");
    }
}
