//! `SendTextMessage`, with the error classification that keeps "at most once" honest.
//!
//! As for SNS, the client's own retries are off (a retried send after a timeout is the duplicate
//! tocsin exists to prevent; End User Messaging has no idempotency token either) and each send
//! has a bounded timeout past which the outcome is unknown. Only answers that prove the message
//! was not accepted are retryable (throttling, a 5xx); the rest are refusals, sorted by whose
//! problem they are ([`Refusal`]): the recipient's (opted out: suppressed at once), the account's
//! (the spend limit; the sandbox, an origination identity missing or inactive, access denied) or
//! the message's.
//!
//! Every send carries: the alert's context (key and attempt, or the digest — echoed in every
//! event), `MessageType` TRANSACTIONAL, the stack's configuration set (its event destination is
//! the stack's own log group), the stack's protect configuration (its country rules), the origination identity (the request's number, else the
//! deployment's pool or number), `MaxPrice` when one is set, and a `TimeToLive` that ends when the
//! SMS stops being worth delivering (the alert's deadline: [`time_to_live`]).

use std::time::Duration;

use aws_sdk_pinpointsmsvoicev2::Client;
use aws_sdk_pinpointsmsvoicev2::config::retry::RetryConfig;
use aws_sdk_pinpointsmsvoicev2::config::timeout::TimeoutConfig;
use aws_sdk_pinpointsmsvoicev2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_pinpointsmsvoicev2::operation::delete_opted_out_number::DeleteOptedOutNumberError;
use aws_sdk_pinpointsmsvoicev2::operation::describe_opted_out_numbers::DescribeOptedOutNumbersError;
use aws_sdk_pinpointsmsvoicev2::operation::send_text_message::SendTextMessageError;
use aws_sdk_pinpointsmsvoicev2::types::{
    ConflictExceptionReason, MessageType, ResourceType, ServiceQuotaExceededExceptionReason, ValidationExceptionReason,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use chrono::{DateTime, Utc};

use crate::adapters::describe;
use crate::adapters::publish_errors::transport_outcome;
use crate::config::EumSettings;
use crate::domain::PhoneNumber;
use crate::domain::phone::mask_numbers_in;
use crate::ports::{OptIn, PortError, PortResult, PublishOutcome, Refusal, SmsGateway, SmsMessage};

#[derive(Clone, Debug)]
pub struct EumGateway {
    client: Client,
    sending: EumSettings,
}

impl EumGateway {
    /// Builds the End User Messaging client with retries off and `send_timeout` per call.
    pub fn new(sdk: &aws_config::SdkConfig, send_timeout: Duration, sending: EumSettings) -> Self {
        let conf = aws_sdk_pinpointsmsvoicev2::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(send_timeout.min(Duration::from_secs(3)))
                    .operation_timeout(send_timeout)
                    .build(),
            )
            .build();
        EumGateway { client: Client::from_conf(conf), sending }
    }
}

/// End User Messaging's limits on `TimeToLive` (seconds; its API model).
const TTL_MIN_SECONDS: i64 = 5;
const TTL_MAX_SECONDS: i64 = 259_200;

/// The `TimeToLive` for an SMS worth delivering until `worth_until`, sent at `now`: the seconds
/// in between, within the service's 5 s – 72 h. End User Messaging stops trying to hand a message
/// to a carrier when its TimeToLive ends and says so (`TEXT_TTL_EXPIRED`). The sender passes the
/// alert's deadline (a digest's latest member's): past it the alert is escalated to on-call
/// anyway, and an SMS that sat in a throughput queue until after it — a late SMS at 3 a.m. about
/// what a person already handled — is worse than none; the definite "never sent" also lets the
/// escalation say so instead of "no receipt yet".
pub fn time_to_live(worth_until: DateTime<Utc>, now: DateTime<Utc>) -> i32 {
    let seconds = worth_until.signed_duration_since(now).num_seconds();
    i32::try_from(seconds.clamp(TTL_MIN_SECONDS, TTL_MAX_SECONDS)).unwrap_or(i32::MAX)
}

/// A price cap (decimal USD as the deployment or request gives it, e.g. `0.50`, `1`) as
/// End User Messaging's `MaxPrice` takes it (`[0-9]{0,2}\.[0-9]{1,5}`): never above the given cap
/// (extra decimals are cut, which only lowers it); `None` for text that is not a price.
pub fn max_price(usd: &str) -> Option<String> {
    let usd = usd.trim();
    let (whole, fraction) = usd.split_once('.').unwrap_or((usd, "0"));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) || (whole.is_empty() && fraction.is_empty()) {
        return None;
    }
    let whole = match whole.trim_start_matches('0') {
        "" => "0",
        w => w,
    };
    if whole.len() > 2 {
        // Over 99.99999 USD a message: the service's own ceiling.
        return Some("99.99999".into());
    }
    let fraction = if fraction.is_empty() { "0" } else { &fraction[..fraction.len().min(5)] };
    Some(format!("{whole}.{fraction}"))
}

/// Sorts a `SendTextMessage` error into the classes that matter.
pub fn classify_error(err: &SdkError<SendTextMessageError, HttpResponse>) -> PublishOutcome {
    let text = describe(err);
    let SdkError::ServiceError(se) = err else { return transport_outcome(err, text) };
    let e = se.err();
    // The modeled reason says whose problem it is; it goes with the message into the record.
    let reason = match e {
        SendTextMessageError::ConflictException(c) => c.reason().map(|r| r.as_str().to_owned()),
        SendTextMessageError::ValidationException(v) => v.reason().map(|r| r.as_str().to_owned()),
        SendTextMessageError::ServiceQuotaExceededException(q) => q.reason().map(|r| r.as_str().to_owned()),
        SendTextMessageError::AccessDeniedException(a) => a.reason().map(|r| r.as_str().to_owned()),
        _ => None,
    };
    let code = e.code().unwrap_or("");
    // The message may quote the destination: it goes into the ledger and the escalation masked.
    let message = mask_numbers_in(e.message().unwrap_or(""));
    let error = match reason {
        Some(r) => format!("{code} {r}: {message}"),
        None => format!("{code}: {message}"),
    };
    let refused = |refusal| PublishOutcome::Rejected { error: error.clone(), refusal };
    match e {
        SendTextMessageError::ThrottlingException(_) | SendTextMessageError::InternalServerException(_) => {
            PublishOutcome::Retryable { error }
        }
        SendTextMessageError::ServiceQuotaExceededException(q) => match q.reason() {
            Some(ServiceQuotaExceededExceptionReason::MonthlySpendLimitReachedForText) => refused(Refusal::SpendLimit),
            _ => refused(Refusal::Account),
        },
        SendTextMessageError::ConflictException(c) => match c.reason() {
            Some(ConflictExceptionReason::DestinationPhoneNumberOptedOut) => refused(Refusal::Recipient),
            // The deployment's own protect configuration keeps this destination out: this message
            // cannot go, the number is not dead.
            Some(
                ConflictExceptionReason::DestinationCountryBlockedByProtectConfiguration
                | ConflictExceptionReason::DestinationPhoneNumberBlockedByProtectNumberOverride,
            ) => refused(Refusal::Message),
            // Not verified (the sandbox), no or an inactive origination identity, …: no SMS of
            // this deployment goes out until someone fixes the account.
            _ => refused(Refusal::Account),
        },
        SendTextMessageError::ValidationException(v) => match v.reason() {
            Some(
                ValidationExceptionReason::InvalidIdentityForDestinationCountry
                | ValidationExceptionReason::SenderIdNotRegistered
                | ValidationExceptionReason::SenderIdNotSupported
                | ValidationExceptionReason::SenderIdRequiresRegistration
                | ValidationExceptionReason::ChannelNotEnabled
                | ValidationExceptionReason::CountryNotEnabled
                | ValidationExceptionReason::InternationalSendingNotSupported
                | ValidationExceptionReason::ResourceNotAccessible
                | ValidationExceptionReason::InvalidArn,
            ) => refused(Refusal::Account),
            _ => refused(Refusal::Message),
        },
        SendTextMessageError::AccessDeniedException(_) | SendTextMessageError::ResourceNotFoundException(_) => {
            refused(Refusal::Account)
        }
        _ if se.raw().status().is_server_error() => PublishOutcome::Retryable { error },
        _ => refused(Refusal::Message),
    }
}

impl SmsGateway for EumGateway {
    fn records_name_their_alert(&self) -> bool {
        true
    }

    async fn publish(&self, m: SmsMessage<'_>) -> PublishOutcome {
        let identity = m.options.origination_number.as_ref().map(|n| n.expose().to_owned());
        let mut req = self
            .client
            .send_text_message()
            .destination_phone_number(m.to.expose())
            .message_body(m.body)
            .message_type(MessageType::Transactional)
            .configuration_set_name(&self.sending.configuration_set)
            .set_protect_configuration_id(self.sending.protect_configuration.clone())
            .set_origination_identity(identity.or_else(|| self.sending.origination_identity.clone()))
            .set_max_price(m.options.max_price_usd.as_deref().and_then(max_price))
            .time_to_live(time_to_live(m.worth_until, Utc::now()));
        for (k, v) in m.context.entries() {
            req = req.context(k, v);
        }
        match req.send().await {
            Ok(out) => match out.message_id {
                Some(id) => PublishOutcome::Accepted { message_id: id },
                // Accepted but no id: it may be sent; its events still name it by its context.
                None => PublishOutcome::Unknown { error: "End User Messaging answered without a MessageId".into() },
            },
            Err(e) => classify_error(&e),
        }
    }

    /// Whether the number is in the deployment's opt-out list (the person replied STOP, or an
    /// operator put it there). End User Messaging refuses a send to it, so this is asked only
    /// before the first send after an operator re-enabled a number, as for SNS.
    async fn is_opted_out(&self, recipient: &PhoneNumber) -> PortResult<bool> {
        is_in_opt_out_list(&self.client, &self.sending.opt_out_list, recipient).await
    }

    /// DeleteOptedOutNumber from the deployment's opt-out list. Not on it (ResourceNotFound):
    /// done. A refusal (AWS allows it once per 30 days per number) is the provider's answer;
    /// throttling, a server error or a lost answer is unavailability (asked again later).
    async fn opt_in(&self, recipient: &PhoneNumber) -> PortResult<OptIn> {
        let res = self
            .client
            .delete_opted_out_number()
            .opt_out_list_name(&self.sending.opt_out_list)
            .opted_out_number(recipient.expose())
            .send()
            .await;
        match res {
            Ok(_) => Ok(OptIn::Done),
            Err(SdkError::ServiceError(se)) => match se.err() {
                DeleteOptedOutNumberError::ResourceNotFoundException(_) => Ok(OptIn::Done),
                DeleteOptedOutNumberError::ThrottlingException(_)
                | DeleteOptedOutNumberError::InternalServerException(_) => Err(PortError::Unavailable {
                    operation: "End User Messaging DeleteOptedOutNumber",
                    message: mask_numbers_in(&describe(se.err())),
                }),
                e => Ok(OptIn::Refused(format!(
                    "{}: {}",
                    e.code().unwrap_or("refused"),
                    mask_numbers_in(e.message().unwrap_or(""))
                ))),
            },
            Err(e) => Err(PortError::Unavailable {
                operation: "End User Messaging DeleteOptedOutNumber",
                message: mask_numbers_in(&describe(&e)),
            }),
        }
    }
}

/// Whether `recipient` is in the opt-out list `list` (DescribeOptedOutNumbers). A number that is
/// not in the list is answered as a resource that does not exist (ResourceType
/// `opted-out-number`): that is "not opted out", and so is an empty list, should AWS ever answer
/// one instead. A missing list is an error: the deployment names a list that is not there.
pub async fn is_in_opt_out_list(client: &Client, list: &str, recipient: &PhoneNumber) -> PortResult<bool> {
    let res =
        client.describe_opted_out_numbers().opt_out_list_name(list).opted_out_numbers(recipient.expose()).send().await;
    match res {
        Ok(out) => Ok(out.opted_out_numbers().iter().any(|n| n.opted_out_number() == recipient.expose())),
        Err(SdkError::ServiceError(se))
            if matches!(se.err(), DescribeOptedOutNumbersError::ResourceNotFoundException(r)
                if r.resource_type() == Some(&ResourceType::OptedOutNumber)) =>
        {
            Ok(false)
        }
        Err(e) => Err(PortError::Unavailable {
            operation: "End User Messaging DescribeOptedOutNumbers",
            message: describe(&e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_pinpointsmsvoicev2::error::ErrorMetadata;
    use aws_sdk_pinpointsmsvoicev2::types::error::{
        AccessDeniedException, ConflictException, InternalServerException, ServiceQuotaExceededException,
        ThrottlingException, ValidationException,
    };
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn answer(status: u16, err: SendTextMessageError) -> SdkError<SendTextMessageError, HttpResponse> {
        SdkError::service_error(err, HttpResponse::new(StatusCode::try_from(status).expect("status"), SdkBody::empty()))
    }

    fn meta(code: &str) -> ErrorMetadata {
        ErrorMetadata::builder().code(code).message("m").build()
    }

    fn conflict(reason: ConflictExceptionReason) -> SendTextMessageError {
        SendTextMessageError::ConflictException(
            ConflictException::builder().reason(reason).message("m").meta(meta("ConflictException")).build(),
        )
    }

    fn refusal(outcome: PublishOutcome) -> Option<Refusal> {
        match outcome {
            PublishOutcome::Rejected { refusal, .. } => Some(refusal),
            _ => None,
        }
    }

    #[test]
    fn throttling_and_internal_errors_prove_nothing_was_sent_and_are_retryable() {
        let throttled = SendTextMessageError::ThrottlingException(
            ThrottlingException::builder().message("m").meta(meta("ThrottlingException")).build(),
        );
        assert!(matches!(classify_error(&answer(400, throttled)), PublishOutcome::Retryable { .. }));
        let internal = SendTextMessageError::InternalServerException(
            InternalServerException::builder().message("m").meta(meta("InternalServerException")).build(),
        );
        assert!(matches!(classify_error(&answer(500, internal)), PublishOutcome::Retryable { .. }));
    }

    #[test]
    fn an_opted_out_destination_is_the_recipients_refusal() {
        let opted_out = conflict(ConflictExceptionReason::DestinationPhoneNumberOptedOut);
        assert_eq!(refusal(classify_error(&answer(400, opted_out))), Some(Refusal::Recipient));
    }

    #[test]
    fn the_monthly_spend_limit_is_the_accounts_spend_refusal_never_the_numbers() {
        let spend = SendTextMessageError::ServiceQuotaExceededException(
            ServiceQuotaExceededException::builder()
                .reason(ServiceQuotaExceededExceptionReason::MonthlySpendLimitReachedForText)
                .message("m")
                .meta(meta("ServiceQuotaExceededException"))
                .build(),
        );
        assert_eq!(refusal(classify_error(&answer(400, spend))), Some(Refusal::SpendLimit));
    }

    #[test]
    fn a_destination_country_the_stacks_protect_configuration_blocks_is_the_messages_refusal_not_the_numbers() {
        for reason in [
            ConflictExceptionReason::DestinationCountryBlockedByProtectConfiguration,
            ConflictExceptionReason::DestinationPhoneNumberBlockedByProtectNumberOverride,
        ] {
            assert_eq!(
                refusal(classify_error(&answer(400, conflict(reason.clone())))),
                Some(Refusal::Message),
                "{reason:?}"
            );
        }
    }

    #[test]
    fn the_sandbox_an_inactive_identity_and_access_denied_are_the_accounts() {
        for reason in [
            ConflictExceptionReason::DestinationPhoneNumberNotVerified,
            ConflictExceptionReason::ResourceNotActive,
            ConflictExceptionReason::NoOriginationIdentitiesFound,
        ] {
            assert_eq!(
                refusal(classify_error(&answer(400, conflict(reason.clone())))),
                Some(Refusal::Account),
                "{reason:?}"
            );
        }
        let denied = SendTextMessageError::AccessDeniedException(
            AccessDeniedException::builder().message("m").meta(meta("AccessDeniedException")).build(),
        );
        assert_eq!(refusal(classify_error(&answer(403, denied))), Some(Refusal::Account));
    }

    #[test]
    fn a_validation_refusal_is_the_messages_unless_it_names_the_deployments_identity() {
        let v = |reason| {
            SendTextMessageError::ValidationException(
                ValidationException::builder().reason(reason).message("m").meta(meta("ValidationException")).build(),
            )
        };
        assert_eq!(
            refusal(classify_error(&answer(400, v(ValidationExceptionReason::PriceOverThreshold)))),
            Some(Refusal::Message)
        );
        assert_eq!(
            refusal(classify_error(&answer(400, v(ValidationExceptionReason::InvalidIdentityForDestinationCountry)))),
            Some(Refusal::Account)
        );
    }

    #[test]
    fn a_timeout_or_a_connection_lost_mid_request_is_unknown_and_never_retried() {
        let timeout: SdkError<SendTextMessageError, HttpResponse> = SdkError::timeout_error("operation timed out");
        assert!(matches!(classify_error(&timeout), PublishOutcome::Unknown { .. }));
        let reset = SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        ))));
        assert!(matches!(classify_error(&reset), PublishOutcome::Unknown { .. }));
        let refused = SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))));
        assert!(matches!(classify_error(&refused), PublishOutcome::Retryable { .. }));
    }

    #[test]
    fn the_time_to_live_ends_at_the_deadline_within_the_services_limits() {
        let now = Utc::now();
        assert_eq!(time_to_live(now + chrono::Duration::minutes(15), now), 900);
        assert_eq!(time_to_live(now - chrono::Duration::minutes(1), now), 5);
        assert_eq!(time_to_live(now + chrono::Duration::days(30), now), 259_200);
    }

    #[test]
    fn a_price_cap_is_written_as_the_service_takes_it_and_never_raised() {
        assert_eq!(max_price("0.50").as_deref(), Some("0.50"));
        assert_eq!(max_price("1").as_deref(), Some("1.0"));
        assert_eq!(max_price("0.1234567").as_deref(), Some("0.12345"));
        assert_eq!(max_price(".5").as_deref(), Some("0.5"));
        assert_eq!(max_price("250").as_deref(), Some("99.99999"));
        assert_eq!(max_price("abc"), None);
        assert_eq!(max_price("-1"), None);
        let pattern = |s: &str| {
            let (w, f) = s.split_once('.').expect("dot");
            w.len() <= 2 && (1..=5).contains(&f.len())
        };
        for p in ["0.50", "1", "0.1234567", ".5", "250", "07.25"] {
            assert!(pattern(&max_price(p).expect("price")), "{p}");
        }
    }
}
