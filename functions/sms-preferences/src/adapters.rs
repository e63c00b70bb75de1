//! The adapters behind the ports: SNS's `SetSMSAttributes`, End User Messaging's protect
//! configuration rule sets, and the HTTP PUT to the pre-signed `ResponseURL`. (They live here rather than in `shared/src/adapters/` because no other function
//! touches account SMS preferences or answers CloudFormation.)

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_sns::config::retry::RetryConfig;
use aws_sdk_sns::config::timeout::TimeoutConfig;
use aws_sdk_sns::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sns::operation::set_sms_attributes::SetSMSAttributesError;

use aws_sdk_pinpointsmsvoicev2::types::{
    NumberCapability, ProtectConfigurationCountryRuleSetInformation, ProtectStatus,
};

use crate::country_rules::ProtectConfigurations;
use crate::{ResponseError, ResponseUrl, SetError, SmsAttributes};

/// One `SetSMSAttributes` attempt; a hanging call must not eat the time kept for the answer.
pub const SNS_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// One PUT to the `ResponseURL`.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct SnsSmsAttributes {
    client: aws_sdk_sns::Client,
}

impl SnsSmsAttributes {
    /// SDK retries are off: the handler paces its own retries to the quota of one
    /// `SetSMSAttributes` call per second, and within the invocation's deadline.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        let config = aws_sdk_sns::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(TimeoutConfig::builder().operation_attempt_timeout(SNS_ATTEMPT_TIMEOUT).build())
            .build();
        SnsSmsAttributes { client: aws_sdk_sns::Client::from_conf(config) }
    }
}

impl SmsAttributes for SnsSmsAttributes {
    async fn set_sms_attributes(&self, attributes: &BTreeMap<String, String>) -> Result<(), SetError> {
        self.client
            .set_sms_attributes()
            .set_attributes(Some(attributes.clone().into_iter().collect()))
            .send()
            .await
            .map(|_| ())
            .map_err(classify)
    }
}

/// Throttling (SNS answers `Throttling` "Rate exceeded", or `Throttled`), internal errors, 5xx,
/// timeouts and connection failures are transient; the rest (`InvalidParameter`,
/// `AuthorizationError`, …) is final.
fn classify(e: SdkError<SetSMSAttributesError>) -> SetError {
    let text = match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => DisplayErrorContext(&e).to_string(),
    };
    let transient = match &e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let throttled = matches!(
                e.code(),
                Some(
                    "Throttling"
                        | "Throttled"
                        | "ThrottlingException"
                        | "TooManyRequestsException"
                        | "RequestLimitExceeded"
                        | "InternalError"
                        | "InternalFailure"
                        | "ServiceUnavailable"
                )
            );
            throttled
                || se.err().is_throttled_exception()
                || se.err().is_internal_error_exception()
                || status == 429
                || status >= 500
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        _ => false,
    };
    if transient { SetError::Transient(text) } else { SetError::Refused(text) }
}

/// End User Messaging's protect configuration rule sets (`GetProtectConfigurationCountryRuleSet`,
/// `UpdateProtectConfigurationCountryRuleSet`), SDK retries off as for SNS: the handler paces
/// its own within the invocation's deadline.
pub struct EumProtectConfigurations {
    client: aws_sdk_pinpointsmsvoicev2::Client,
}

impl EumProtectConfigurations {
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        use aws_sdk_pinpointsmsvoicev2::config::{Builder, retry::RetryConfig, timeout::TimeoutConfig};
        let config = Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(TimeoutConfig::builder().operation_attempt_timeout(SNS_ATTEMPT_TIMEOUT).build())
            .build();
        EumProtectConfigurations { client: aws_sdk_pinpointsmsvoicev2::Client::from_conf(config) }
    }
}

impl ProtectConfigurations for EumProtectConfigurations {
    async fn sms_rule_set(&self, id: &str) -> Result<BTreeMap<String, String>, SetError> {
        let out = self
            .client
            .get_protect_configuration_country_rule_set()
            .protect_configuration_id(id)
            .number_capability(NumberCapability::Sms)
            .send()
            .await
            .map_err(|e| classify_eum(&e))?;
        Ok(out.country_rule_set.into_iter().map(|(iso, rule)| (iso, rule.protect_status.as_str().to_owned())).collect())
    }

    async fn update_sms_rules(&self, id: &str, updates: &BTreeMap<String, &'static str>) -> Result<(), SetError> {
        let mut req = self
            .client
            .update_protect_configuration_country_rule_set()
            .protect_configuration_id(id)
            .number_capability(NumberCapability::Sms);
        for (iso, status) in updates {
            let rule = ProtectConfigurationCountryRuleSetInformation::builder()
                .protect_status(ProtectStatus::from(*status))
                .build()
                .map_err(|e| SetError::Refused(e.to_string()))?;
            req = req.country_rule_set_updates(iso, rule);
        }
        req.send().await.map(|_| ()).map_err(|e| classify_eum(&e))
    }
}

/// Throttling, internal errors, 5xx, timeouts and lost connections are worth another try; the
/// rest (not found, access denied, a refused country) is final.
fn classify_eum<E>(e: &SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>) -> SetError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let text = match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => DisplayErrorContext(e).to_string(),
    };
    let transient = match e {
        SdkError::ServiceError(se) => {
            matches!(se.err().code(), Some("ThrottlingException" | "InternalServerException"))
                || se.raw().status().as_u16() == 429
                || se.raw().status().is_server_error()
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        _ => false,
    };
    if transient { SetError::Transient(text) } else { SetError::Refused(text) }
}

pub struct HttpResponder {
    client: reqwest::Client,
}

impl HttpResponder {
    pub fn new() -> Result<Self, ResponseError> {
        let client = reqwest::Client::builder()
            .timeout(RESPONSE_TIMEOUT)
            .build()
            .map_err(|e| ResponseError::Client(e.to_string()))?;
        Ok(HttpResponder { client })
    }
}

impl ResponseUrl for HttpResponder {
    async fn put(&self, url: &str, body: Vec<u8>) -> Result<(), ResponseError> {
        // No Content-Type: the URL is signed without one. Errors drop the URL: it is a credential.
        let resp = self
            .client
            .put(url)
            .body(body)
            .send()
            .await
            .map_err(|e| ResponseError::Transport(error_chain(&e.without_url())))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let text = resp.text().await.unwrap_or_default();
        Err(ResponseError::Status { status: status.as_u16(), body: text.chars().take(300).collect() })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}
