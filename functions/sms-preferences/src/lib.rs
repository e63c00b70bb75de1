//! SMS account preferences as code: the CloudFormation custom resource `Custom::SmsPreferences`.
//!
//! CloudFormation has no resource for the account's SNS SMS preferences, yet tocsin depends on
//! them: without a `DeliveryStatusIAMRole` and a success sampling rate of 100 the status function
//! never learns whether an SMS arrived. On Create and Update this function calls
//! `SetSMSAttributes` (delivery-status role, sampling rate 100, `Transactional`, and the monthly
//! spend limit when the stack sets one); every invocation ends with an answer to CloudFormation's
//! pre-signed `ResponseURL` — on success, on failure and on a malformed event — so a stack
//! operation never waits an hour for a silent resource.
//!
//! **The values are the stack's, never the event's.** Every account-wide attribute it sets comes
//! from the function's own environment (`TOCSIN_DELIVERY_STATUS_ROLE_ARN`,
//! `TOCSIN_MONTHLY_SPEND_LIMIT_USD`, which `template.yaml` sets from the stack's role and its
//! `MonthlySpendLimitUsd` parameter). Anyone allowed to invoke the function can hand it any event,
//! and its role may raise the account's spend limit: an event's `ResourceProperties` only tell it
//! that the stack changed (CloudFormation sends an Update only when a property changes, so the
//! template passes the same values there too). A value in the event that differs from the stack's
//! is ignored, and logged as such.
//!
//! Delete leaves the preferences in place and answers SUCCESS. They are account-wide (per region),
//! may be shared with other stacks or applications, and SNS has no way to "unset" them: a delete
//! that reset them would silently switch off someone else's delivery logs or spend limit, and a
//! delete that could fail would block the stack's removal.

pub mod adapters;
pub mod country_rules;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::{Duration, SystemTime};

use aws_lambda_events::cloudformation::{
    CloudFormationCustomResourceRequest, CloudFormationCustomResourceResponse,
    CloudFormationCustomResourceResponseStatus,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tocsin::config::{ConfigError, Env};
use tokio::time::Instant;

/// The only sampling rate tocsin can work with: below 100, some deliveries are never logged.
pub const SUCCESS_SAMPLING_RATE: &str = "100";
/// Alerts are transactional: SNS optimises them for reliability rather than cost.
pub const DEFAULT_SMS_TYPE: &str = "Transactional";
/// What a Delete answers: the preferences stay.
const LEFT_IN_PLACE: &str = "account SMS preferences left in place: they are account-wide and may be shared";
/// A custom resource response is at most 4 KiB; the reason is kept well below.
const MAX_REASON_CHARS: usize = 1500;

/// The delivery-status role this stack hands SNS (`!GetAtt SmsDeliveryStatusRole.Arn`).
pub const DELIVERY_STATUS_ROLE_VAR: &str = "TOCSIN_DELIVERY_STATUS_ROLE_ARN";
/// The stack's `MonthlySpendLimitUsd`: whole USD, or empty to leave the account's limit alone.
pub const MONTHLY_SPEND_LIMIT_VAR: &str = "TOCSIN_MONTHLY_SPEND_LIMIT_USD";

/// The resource's properties, as CloudFormation passes them (every value a string). They are
/// read, and compared with the stack's own configuration, but never applied: see the module.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct SmsPreferencesProperties {
    /// The function's ARN; CloudFormation copies it into the properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_token: Option<String>,
    /// The stack's delivery-status role, passed so that replacing it is an Update.
    #[serde(rename = "DeliveryStatusIAMRole", default, skip_serializing_if = "Option::is_none")]
    pub delivery_status_iam_role: Option<String>,
    /// The stack's `MonthlySpendLimitUsd`, passed so that changing it is an Update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_spend_limit: Option<String>,
}

/// A CloudFormation custom resource request carrying these properties (the old properties of an
/// Update are not used, so any shape is accepted there).
pub type Request = CloudFormationCustomResourceRequest<Value, SmsPreferencesProperties>;
pub type Response = CloudFormationCustomResourceResponse;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPreference {
    #[error(
        "{DELIVERY_STATUS_ROLE_VAR} must be an IAM role ARN (arn:<partition>:iam::<account>:role/<name>), got {0:?}"
    )]
    RoleArn(String),
    #[error(
        "{MONTHLY_SPEND_LIMIT_VAR} must be a whole number of US dollars (or empty to leave the account's limit unchanged), got {0:?}"
    )]
    SpendLimit(String),
}

/// The preferences to set: the stack's, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preferences {
    pub delivery_status_iam_role: String,
    pub monthly_spend_limit_usd: Option<u64>,
}

/// A property of an event whose value is not the stack's (what is logged about it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    pub property: &'static str,
    /// The stack's value, which is applied.
    pub applied: String,
    /// The event's value when it is safe to log (a plausible spend limit); otherwise its length.
    pub event_value: String,
}

impl Preferences {
    /// Validates the stack's values (`role`, and `limit`: `None` or empty leaves the account's
    /// limit unchanged).
    pub fn new(role: &str, limit: Option<&str>) -> Result<Self, InvalidPreference> {
        let role = role.trim();
        if !is_role_arn(role) {
            return Err(InvalidPreference::RoleArn(role.to_owned()));
        }
        Ok(Preferences { delivery_status_iam_role: role.to_owned(), monthly_spend_limit_usd: spend_limit(limit)? })
    }

    /// The stack's preferences from the function's environment, read at start-up. Both variables
    /// must be there (the spend limit may be empty: the template's "leave it as it is").
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let role = env.required(DELIVERY_STATUS_ROLE_VAR);
        let limit = env.present(MONTHLY_SPEND_LIMIT_VAR);
        if !role.is_empty() && !is_role_arn(&role) {
            env.invalid(InvalidPreference::RoleArn(role.clone()).to_string());
        }
        if let Err(e) = spend_limit(limit.as_deref()) {
            env.invalid(e.to_string());
        }
        std::mem::replace(env, Env::from_map(HashMap::new())).finish()?;
        Preferences::new(&role, limit.as_deref()).map_err(|e| ConfigError(vec![e.to_string()]))
    }

    /// The `SetSMSAttributes` attributes. Without a spend limit the attribute is left out, so the
    /// account keeps the limit it has.
    pub fn attributes(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::from([
            ("DeliveryStatusIAMRole".to_owned(), self.delivery_status_iam_role.clone()),
            ("DeliveryStatusSuccessSamplingRate".to_owned(), SUCCESS_SAMPLING_RATE.to_owned()),
            ("DefaultSMSType".to_owned(), DEFAULT_SMS_TYPE.to_owned()),
        ]);
        if let Some(limit) = self.monthly_spend_limit_usd {
            a.insert("MonthlySpendLimit".to_owned(), limit.to_string());
        }
        a
    }

    /// The event's properties that differ from the stack's values (and are therefore ignored).
    /// Absent properties are not differences: the template always passes both, but an event
    /// that leaves one out asks for nothing.
    pub fn ignored_in(&self, p: &SmsPreferencesProperties) -> Vec<Ignored> {
        let mut out = Vec::new();
        if let Some(role) = p.delivery_status_iam_role.as_deref()
            && role.trim() != self.delivery_status_iam_role
        {
            out.push(Ignored {
                property: "DeliveryStatusIAMRole",
                applied: self.delivery_status_iam_role.clone(),
                event_value: loggable(role),
            });
        }
        if let Some(limit) = p.monthly_spend_limit.as_deref() {
            let same = match (spend_limit(Some(limit)), self.monthly_spend_limit_usd) {
                (Ok(event), stack) => event == stack,
                (Err(_), _) => false,
            };
            if !same {
                out.push(Ignored {
                    property: "MonthlySpendLimit",
                    applied: self.monthly_spend_limit_usd.map_or_else(|| "(unchanged)".to_owned(), |l| l.to_string()),
                    event_value: loggable(limit),
                });
            }
        }
        out
    }
}

/// An event's value as it may appear in a log: the event is anyone's text, so only a value that
/// cannot be a phone number (at most 6 digits: an E.164 number has at least 7) is shown.
fn loggable(value: &str) -> String {
    let v = value.trim();
    if v.is_empty() {
        "(empty)".to_owned()
    } else if v.len() <= 6 && v.bytes().all(|b| b.is_ascii_digit()) {
        v.to_owned()
    } else {
        format!("(not shown: {} characters)", v.chars().count())
    }
}

fn spend_limit(raw: Option<&str>) -> Result<Option<u64>, InvalidPreference> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(raw) if raw.bytes().all(|b| b.is_ascii_digit()) => {
            raw.parse().map(Some).map_err(|_| InvalidPreference::SpendLimit(raw.to_owned()))
        }
        Some(raw) => Err(InvalidPreference::SpendLimit(raw.to_owned())),
    }
}

/// `arn:<partition>:iam::<12 digits>:role/<path and name>`.
fn is_role_arn(s: &str) -> bool {
    let parts: Vec<&str> = s.splitn(6, ':').collect();
    matches!(
        parts.as_slice(),
        ["arn", partition, "iam", "", account, resource]
            if partition.starts_with("aws")
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty())
    )
}

/// Why `SetSMSAttributes` did not take effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    /// Throttling, 5xx, timeouts, connection failures: the call is idempotent, so worth another try.
    #[error("{0}")]
    Transient(String),
    /// Refused for good (invalid parameter, not authorised).
    #[error("{0}")]
    Refused(String),
}

/// Why an answer did not reach the `ResponseURL`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("the HTTP client could not be built: {0}")]
    Client(String),
    #[error("the PUT did not complete: {0}")]
    Transport(String),
    #[error("the PUT was answered with HTTP {status}: {body}")]
    Status { status: u16, body: String },
}

/// Port: the account's SMS attributes.
pub trait SmsAttributes: Send + Sync {
    fn set_sms_attributes(
        &self,
        attributes: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), SetError>> + Send;
}

/// Port: CloudFormation's pre-signed response URL.
pub trait ResponseUrl: Send + Sync {
    fn put(&self, url: &str, body: Vec<u8>) -> impl Future<Output = Result<(), ResponseError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum SmsPreferencesError {
    #[error("the event has no ResponseURL, so CloudFormation cannot be answered (not a custom resource request?)")]
    Unanswerable,
    #[error("the answer could not be encoded: {0}")]
    Encode(String),
    #[error("the answer did not reach CloudFormation after {attempts} attempt(s): {last}")]
    ResponseNotDelivered { attempts: u32, last: ResponseError },
}

impl From<SmsPreferencesError> for lambda_runtime::Diagnostic {
    fn from(e: SmsPreferencesError) -> Self {
        let error_type = match e {
            SmsPreferencesError::Unanswerable => "tocsin.sms_preferences.Unanswerable",
            SmsPreferencesError::Encode(_) => "tocsin.sms_preferences.Encode",
            SmsPreferencesError::ResponseNotDelivered { .. } => "tocsin.sms_preferences.ResponseNotDelivered",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}

/// Bounds on the retries, so an answer always goes out before the function's timeout.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// `SetSMSAttributes` attempts in all.
    pub max_attempts: u32,
    /// Pause before the second attempt, doubled after each; above 1 s because the quota of
    /// `SetSMSAttributes` is one call per second.
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// Time kept at the end of the invocation for answering CloudFormation: no `SetSMSAttributes`
    /// retry starts inside it.
    pub answer_reserve: Duration,
    /// PUT attempts to the `ResponseURL`, and the pause between them.
    pub answer_attempts: u32,
    pub answer_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            first_delay: Duration::from_millis(1100),
            max_delay: Duration::from_secs(4),
            answer_reserve: Duration::from_secs(15),
            answer_attempts: 3,
            answer_delay: Duration::from_millis(500),
        }
    }
}

/// What the Lambda service says about this invocation.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub deadline: Instant,
    pub log_stream: Option<String>,
}

impl Invocation {
    pub fn from_context(ctx: &lambda_runtime::Context) -> Self {
        let remaining = ctx.deadline().duration_since(SystemTime::now()).unwrap_or_default();
        let log_stream = Some(ctx.env_config.log_stream.clone()).filter(|s| !s.is_empty());
        Invocation { deadline: Instant::now() + remaining, log_stream }
    }

    pub fn with_timeout(timeout: Duration) -> Self {
        Invocation { deadline: Instant::now() + timeout, log_stream: None }
    }
}

/// The function's configuration: the region, which names the resource. (The preferences it sets
/// are read apart, by [`Preferences::from_env`]: an error there must still be answered.)
#[derive(Debug, Clone)]
pub struct Config {
    pub region: String,
}

impl Config {
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let region = env.required("AWS_REGION");
        std::mem::replace(env, Env::from_map(HashMap::new())).finish()?;
        Ok(Config { region })
    }

    /// Stable across updates, so CloudFormation never sees a replacement: one set of account
    /// preferences per region.
    pub fn physical_id(&self) -> String {
        format!("tocsin-sms-preferences-{}", self.region)
    }
}

/// The fields an answer echoes, read leniently so even a malformed event can be answered.
#[derive(Debug, Clone, Default)]
pub(crate) struct Envelope {
    request_type: Option<String>,
    response_url: Option<String>,
    stack_id: Option<String>,
    request_id: Option<String>,
    logical_resource_id: Option<String>,
    physical_resource_id: Option<String>,
}

impl Envelope {
    pub(crate) fn of(event: &Value) -> Self {
        let field = |k: &str| event.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        Envelope {
            request_type: field("RequestType"),
            response_url: field("ResponseURL"),
            stack_id: field("StackId"),
            request_id: field("RequestId"),
            logical_resource_id: field("LogicalResourceId"),
            physical_resource_id: field("PhysicalResourceId"),
        }
    }
}

/// What was made of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Set: the answer's reason, and its `Data` (what `Fn::GetAtt` may read).
    Applied {
        reason: String,
        data: BTreeMap<String, String>,
    },
    /// A Delete: nothing undone, for the reason given.
    LeftInPlace(&'static str),
    Failed(String),
}

/// A custom resource's handling of one request, whatever it sets: the event read leniently, the
/// decision taken, and the answer always sent to the `ResponseURL` (see [`SmsPreferences::handle`]).
pub(crate) async fn answer_request<R, F>(
    responder: &R,
    retry: &RetryPolicy,
    physical_id: &str,
    event: Value,
    invocation: &Invocation,
    decide: impl FnOnce(Value, Envelope) -> F,
) -> Result<Response, SmsPreferencesError>
where
    R: ResponseUrl,
    F: Future<Output = Decision>,
{
    let envelope = Envelope::of(&event);
    let Some(url) = envelope.response_url.clone() else {
        tracing::error!(request_type = ?envelope.request_type, "event without a ResponseURL; nothing to answer");
        return Err(SmsPreferencesError::Unanswerable);
    };
    let decision = decide(event, envelope.clone()).await;
    let response = response(physical_id, &envelope, &decision, invocation);
    // The ResponseURL is a pre-signed credential: it is never logged.
    tracing::info!(
        request_type = ?envelope.request_type,
        stack_id = ?envelope.stack_id,
        request_id = ?envelope.request_id,
        logical_resource_id = ?envelope.logical_resource_id,
        status = ?response.status,
        reason = ?response.reason,
        "answering CloudFormation"
    );
    let body = serde_json::to_vec(&response).map_err(|e| SmsPreferencesError::Encode(e.to_string()))?;
    answer(responder, retry, &url, body, invocation).await?;
    Ok(response)
}

fn response(physical_id: &str, envelope: &Envelope, decision: &Decision, invocation: &Invocation) -> Response {
    let mut r = Response::default();
    // Create has none yet; Update and Delete keep the one CloudFormation holds, so an answer
    // never turns into a replacement.
    r.physical_resource_id = envelope.physical_resource_id.clone().unwrap_or_else(|| physical_id.to_owned());
    r.stack_id = envelope.stack_id.clone().unwrap_or_default();
    r.request_id = envelope.request_id.clone().unwrap_or_default();
    r.logical_resource_id = envelope.logical_resource_id.clone().unwrap_or_default();
    match decision {
        Decision::Applied { reason, data } => {
            r.status = CloudFormationCustomResourceResponseStatus::Success;
            r.reason = Some(truncate(reason, MAX_REASON_CHARS));
            r.data = data.clone().into_iter().collect();
        }
        Decision::LeftInPlace(why) => {
            r.status = CloudFormationCustomResourceResponseStatus::Success;
            r.reason = Some((*why).to_owned());
        }
        Decision::Failed(reason) => {
            r.status = CloudFormationCustomResourceResponseStatus::Failed;
            let mut text = truncate(reason, MAX_REASON_CHARS);
            if let Some(stream) = &invocation.log_stream {
                text.push_str(&format!(" (details in CloudWatch log stream {stream})"));
            }
            r.reason = Some(text);
        }
    }
    r
}

async fn answer<R: ResponseUrl>(
    responder: &R,
    retry: &RetryPolicy,
    url: &str,
    body: Vec<u8>,
    invocation: &Invocation,
) -> Result<(), SmsPreferencesError> {
    let attempts = retry.answer_attempts.max(1);
    let mut made = 0;
    loop {
        made += 1;
        let err = match responder.put(url, body.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        tracing::warn!(attempt = made, error = %err, "answer to CloudFormation not delivered");
        let pause = retry.answer_delay * made;
        if made >= attempts || Instant::now() + pause >= invocation.deadline {
            return Err(SmsPreferencesError::ResponseNotDelivered { attempts: made, last: err });
        }
        tokio::time::sleep(pause).await;
    }
}

/// Calls `attempt` until it succeeds, is refused, or the retries run out (by count, or by the
/// time kept for answering CloudFormation): the error names `operation` and the last answer.
pub(crate) async fn with_retry<T, F>(
    operation: &str,
    retry: &RetryPolicy,
    invocation: &Invocation,
    mut attempt: impl FnMut() -> F,
) -> Result<T, String>
where
    F: Future<Output = Result<T, SetError>>,
{
    let mut delay = retry.first_delay;
    let mut made = 0;
    loop {
        made += 1;
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(SetError::Refused(m)) => return Err(format!("{operation} refused: {m}")),
            Err(SetError::Transient(m)) => {
                let out_of_time = Instant::now() + delay + retry.answer_reserve > invocation.deadline;
                if made >= retry.max_attempts || out_of_time {
                    return Err(format!("{operation} failed after {made} attempt(s); last error: {m}"));
                }
                tracing::warn!(operation, attempt = made, error = %m, retry_in_ms = delay.as_millis() as u64, "failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(retry.max_delay);
            }
        }
    }
}

pub struct SmsPreferences<A, R> {
    pub sns: A,
    pub responder: R,
    /// The stack's preferences, read from the environment at start-up ([`Preferences::from_env`]).
    /// A configuration error does not stop the function: every Create and Update is answered
    /// FAILED naming it (a custom resource that never answers holds the stack operation for an
    /// hour), and a Delete still succeeds.
    pub preferences: Result<Preferences, ConfigError>,
    /// `tocsin-sms-preferences-<region>` (see [`Config::physical_id`]).
    pub physical_id: String,
    pub retry: RetryPolicy,
}

impl<A: SmsAttributes, R: ResponseUrl> SmsPreferences<A, R> {
    /// The Lambda entry point. Returns the answer sent to CloudFormation; an error only when no
    /// answer could be delivered (Lambda then retries the asynchronous invocation).
    pub async fn handle(&self, event: Value, invocation: &Invocation) -> Result<Response, SmsPreferencesError> {
        // Boxed: the nested futures would otherwise pass the compiler's layout depth limit.
        let decide =
            |event, envelope: Envelope| Box::pin(async move { self.decide(event, &envelope, invocation).await });
        Box::pin(answer_request(&self.responder, &self.retry, &self.physical_id, event, invocation, decide)).await
    }

    async fn decide(&self, event: Value, envelope: &Envelope, invocation: &Invocation) -> Decision {
        // First, before anything can fail: a Delete always succeeds, whatever else the event holds.
        if envelope.request_type.as_deref() == Some("Delete") {
            return Decision::LeftInPlace(LEFT_IN_PLACE);
        }
        let request: Request = match serde_json::from_value(event) {
            Ok(r) => r,
            Err(e) => return Decision::Failed(format!("malformed custom resource request: {e}")),
        };
        let properties = match request {
            Request::Create(c) => c.resource_properties,
            Request::Update(u) => u.resource_properties,
            Request::Delete(_) => return Decision::LeftInPlace(LEFT_IN_PLACE),
            _ => return Decision::Failed("unsupported RequestType".into()),
        };
        let preferences = match &self.preferences {
            Ok(p) => p,
            Err(e) => {
                return Decision::Failed(format!("the function's configuration is invalid, nothing was set: {e}"));
            }
        };
        for ignored in preferences.ignored_in(&properties) {
            tracing::warn!(
                request_id = ?envelope.request_id,
                stack_id = ?envelope.stack_id,
                property = ignored.property,
                event_value = %ignored.event_value,
                applied = %ignored.applied,
                "the event asks for a value the stack does not set: ignored, the stack's value is applied"
            );
        }
        let attributes = preferences.attributes();
        match with_retry("SetSMSAttributes", &self.retry, invocation, || self.sns.set_sms_attributes(&attributes)).await
        {
            Ok(()) => {
                let names: Vec<&str> = attributes.keys().map(String::as_str).collect();
                Decision::Applied { reason: format!("SMS preferences set: {}", names.join(", ")), data: attributes }
            }
            Err(reason) => Decision::Failed(reason),
        }
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn props(role: &str, limit: Option<&str>) -> SmsPreferencesProperties {
        SmsPreferencesProperties {
            service_token: None,
            delivery_status_iam_role: Some(role.into()),
            monthly_spend_limit: limit.map(Into::into),
        }
    }

    const ROLE: &str = "arn:aws:iam::123456789012:role/tocsin-dev-SmsDeliveryStatusRole-1A2B3C";

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::from_map(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn preferences_always_sample_every_success_and_send_transactional() {
        let p = Preferences::new(ROLE, None).expect("valid");
        let a = p.attributes();
        assert_eq!(a.get("DeliveryStatusSuccessSamplingRate").map(String::as_str), Some("100"));
        assert_eq!(a.get("DefaultSMSType").map(String::as_str), Some("Transactional"));
        assert_eq!(a.get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE));
        assert!(!a.contains_key("MonthlySpendLimit"), "no limit given: the account's limit is left alone");
    }

    #[test]
    fn an_empty_spend_limit_leaves_the_limit_unchanged_and_a_number_sets_it() {
        let empty = Preferences::new(ROLE, Some(" ")).expect("valid");
        assert_eq!(empty.monthly_spend_limit_usd, None);
        let set = Preferences::new(ROLE, Some("250")).expect("valid");
        assert_eq!(set.attributes().get("MonthlySpendLimit").map(String::as_str), Some("250"));
    }

    #[test]
    fn a_spend_limit_that_is_not_whole_dollars_is_refused() {
        for bad in ["12.50", "-5", "ten", "1e3", "99999999999999999999999"] {
            assert_eq!(Preferences::new(ROLE, Some(bad)), Err(InvalidPreference::SpendLimit(bad.into())), "{bad}");
        }
    }

    #[test]
    fn the_preferences_come_from_the_functions_environment() {
        let p = Preferences::from_env(&mut env(&[(DELIVERY_STATUS_ROLE_VAR, ROLE), (MONTHLY_SPEND_LIMIT_VAR, "25")]))
            .expect("configured");
        assert_eq!(p, Preferences { delivery_status_iam_role: ROLE.into(), monthly_spend_limit_usd: Some(25) });
        let unchanged =
            Preferences::from_env(&mut env(&[(DELIVERY_STATUS_ROLE_VAR, ROLE), (MONTHLY_SPEND_LIMIT_VAR, "")]))
                .expect("empty is the template's 'leave the account's limit alone'");
        assert_eq!(unchanged.monthly_spend_limit_usd, None);
    }

    #[test]
    fn missing_or_invalid_configuration_is_an_error_naming_every_variable_not_a_default() {
        let err = Preferences::from_env(&mut env(&[])).expect_err("nothing set");
        let text = err.to_string();
        assert!(text.contains("TOCSIN_DELIVERY_STATUS_ROLE_ARN is not set"), "{text}");
        assert!(
            text.contains("TOCSIN_MONTHLY_SPEND_LIMIT_USD is not set"),
            "a missing limit is not 'unchanged': {text}"
        );
        let err = Preferences::from_env(&mut env(&[
            (DELIVERY_STATUS_ROLE_VAR, "my-role"),
            (MONTHLY_SPEND_LIMIT_VAR, "12.50"),
        ]))
        .expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("TOCSIN_DELIVERY_STATUS_ROLE_ARN must be an IAM role ARN"), "{text}");
        assert!(text.contains("TOCSIN_MONTHLY_SPEND_LIMIT_USD must be a whole number"), "{text}");
    }

    #[test]
    fn only_iam_role_arns_are_accepted_as_the_delivery_status_role() {
        for good in [ROLE, "arn:aws-us-gov:iam::123456789012:role/path/name", "arn:aws-cn:iam::123456789012:role/x"] {
            assert!(is_role_arn(good), "{good}");
        }
        for bad in [
            "",
            "tocsin-role",
            "arn:aws:iam::123456789012:user/alice",
            "arn:aws:iam::12345:role/x",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:sns:us-east-1:123456789012:role/x",
        ] {
            assert!(!is_role_arn(bad), "{bad}");
        }
    }

    #[test]
    fn unknown_properties_are_refused_so_a_typo_is_not_silently_ignored() {
        let v = serde_json::json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendlimit": "5"});
        assert!(serde_json::from_value::<SmsPreferencesProperties>(v).is_err());
    }

    #[test]
    fn an_event_value_that_is_not_the_stacks_is_reported_as_ignored_without_showing_free_text() {
        let stack = Preferences::new(ROLE, Some("5")).expect("valid");
        assert_eq!(stack.ignored_in(&props(ROLE, Some("5"))), vec![], "the template's own event: nothing ignored");
        assert_eq!(stack.ignored_in(&props(ROLE, Some(" 05 "))), vec![], "the same amount");
        let ignored = stack.ignored_in(&props("arn:aws:iam::123456789012:role/+14155550100", Some("100000")));
        assert_eq!(
            ignored,
            vec![
                Ignored {
                    property: "DeliveryStatusIAMRole",
                    applied: ROLE.into(),
                    event_value: "(not shown: 43 characters)".into()
                },
                Ignored { property: "MonthlySpendLimit", applied: "5".into(), event_value: "100000".into() },
            ]
        );
        let phone_as_limit = stack.ignored_in(&props(ROLE, Some("14155550100")));
        assert_eq!(phone_as_limit[0].event_value, "(not shown: 11 characters)", "digits a phone number could be");
        let unchanged = Preferences::new(ROLE, None).expect("valid");
        assert_eq!(unchanged.ignored_in(&props(ROLE, Some("")))[..], [], "empty is empty");
        assert_eq!(unchanged.ignored_in(&props(ROLE, Some("1")))[0].applied, "(unchanged)");
    }

    /// Records every `SetSMSAttributes` call.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<BTreeMap<String, String>>>);

    impl SmsAttributes for Recorded {
        async fn set_sms_attributes(&self, attributes: &BTreeMap<String, String>) -> Result<(), SetError> {
            self.0.lock().map_err(|_| SetError::Refused("lock".into()))?.push(attributes.clone());
            Ok(())
        }
    }

    struct Accepting;

    impl ResponseUrl for Accepting {
        async fn put(&self, _url: &str, _body: Vec<u8>) -> Result<(), ResponseError> {
            Ok(())
        }
    }

    fn function(preferences: Result<Preferences, ConfigError>) -> SmsPreferences<Recorded, Accepting> {
        SmsPreferences {
            sns: Recorded::default(),
            responder: Accepting,
            preferences,
            physical_id: "tocsin-sms-preferences-us-east-1".into(),
            retry: RetryPolicy::default(),
        }
    }

    fn event(kind: &str, properties: Value) -> Value {
        let mut e = serde_json::json!({
            "RequestType": kind,
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:tocsin-dev-sms-preferences",
            "ResponseURL": "https://example.invalid/answer",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tocsin-dev/x",
            "RequestId": "r-1",
            "LogicalResourceId": "SmsPreferences",
            "ResourceType": "Custom::SmsPreferences",
            "ResourceProperties": properties,
        });
        if kind != "Create" {
            e["PhysicalResourceId"] = serde_json::json!("tocsin-sms-preferences-us-east-1");
        }
        if kind == "Update" {
            e["OldResourceProperties"] = serde_json::json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "5"});
        }
        e
    }

    #[tokio::test]
    async fn an_invocation_carrying_a_higher_spend_limit_sets_the_stacks_limit_not_the_events() {
        let f = function(Ok(Preferences::new(ROLE, Some("5")).expect("valid")));
        let abuse = event(
            "Update",
            serde_json::json!({"DeliveryStatusIAMRole": "arn:aws:iam::123456789012:role/attacker", "MonthlySpendLimit": "100000"}),
        );

        let answer = f.handle(abuse, &Invocation::with_timeout(Duration::from_secs(30))).await.expect("answered");

        let calls = f.sns.0.lock().expect("calls").clone();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].get("MonthlySpendLimit").map(String::as_str), Some("5"), "{calls:?}");
        assert_eq!(calls[0].get("DeliveryStatusIAMRole").map(String::as_str), Some(ROLE), "{calls:?}");
        assert_eq!(answer.data.get("MonthlySpendLimit").map(String::as_str), Some("5"));
    }

    #[tokio::test]
    async fn an_invocation_naming_a_limit_when_the_stack_sets_none_leaves_the_accounts_limit_alone() {
        let f = function(Ok(Preferences::new(ROLE, None).expect("valid")));
        let abuse = event("Create", serde_json::json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "100000"}));

        f.handle(abuse, &Invocation::with_timeout(Duration::from_secs(30))).await.expect("answered");

        let calls = f.sns.0.lock().expect("calls").clone();
        assert_eq!(calls.len(), 1);
        assert!(!calls[0].contains_key("MonthlySpendLimit"), "{calls:?}");
    }

    #[tokio::test]
    async fn a_misconfigured_function_answers_failed_naming_the_variable_and_sets_nothing() {
        let f = function(Preferences::from_env(&mut env(&[(DELIVERY_STATUS_ROLE_VAR, ROLE)])));
        let create = event("Create", serde_json::json!({"DeliveryStatusIAMRole": ROLE, "MonthlySpendLimit": "5"}));

        let answer = f.handle(create, &Invocation::with_timeout(Duration::from_secs(30))).await.expect("answered");

        assert_eq!(answer.status, CloudFormationCustomResourceResponseStatus::Failed);
        let reason = answer.reason.unwrap_or_default();
        assert!(reason.contains("TOCSIN_MONTHLY_SPEND_LIMIT_USD is not set"), "{reason}");
        assert!(f.sns.0.lock().expect("calls").is_empty(), "nothing set");
        let delete = event("Delete", serde_json::json!({}));
        let answer = f.handle(delete, &Invocation::with_timeout(Duration::from_secs(30))).await.expect("answered");
        assert_eq!(answer.status, CloudFormationCustomResourceResponseStatus::Success, "a delete is never blocked");
    }

    #[test]
    fn the_sample_events_are_cloudformation_requests_with_these_properties() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/sms-preferences");
        let mut kinds = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("events dir") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("read");
            let request: Request = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let (kind, props) = match &request {
                Request::Create(c) => ("Create", &c.resource_properties),
                Request::Update(u) => ("Update", &u.resource_properties),
                Request::Delete(d) => ("Delete", &d.resource_properties),
                _ => panic!("unexpected request type"),
            };
            let role = props.delivery_status_iam_role.as_deref().unwrap_or_default();
            Preferences::new(role, props.monthly_spend_limit.as_deref())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let round_trip: Request =
                serde_json::from_value(serde_json::to_value(&request).expect("encode")).expect("decode");
            assert_eq!(round_trip, request);
            kinds.push(kind);
        }
        kinds.sort_unstable();
        assert_eq!(kinds, ["Create", "Delete", "Update"]);
    }

    #[test]
    fn long_reasons_are_cut_on_a_character_boundary() {
        let s = "é".repeat(2000);
        let t = truncate(&s, MAX_REASON_CHARS);
        assert_eq!(t.chars().count(), MAX_REASON_CHARS + 1);
        assert_eq!(truncate("short", 10), "short");
    }
}
