//! SNS SMS publishing, with the error classification that keeps "at most once" honest.
//!
//! The SDK's own retries are switched off for this client: a retried Publish after a timeout is
//! exactly the duplicate SMS tocsin exists to prevent. Each publish has a bounded timeout; past
//! it the outcome is *unknown*, never retried. Only answers that prove SNS did not accept the
//! request (throttling, 5xx, a refused connection) are retryable, and the sender retries them
//! through the queue with backoff.

use std::time::Duration;

use aws_sdk_sns::Client;
use aws_sdk_sns::config::retry::RetryConfig;
use aws_sdk_sns::config::timeout::TimeoutConfig;
use aws_sdk_sns::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sns::operation::publish::PublishError;
use aws_sdk_sns::types::MessageAttributeValue;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use crate::adapters::describe;
use crate::adapters::publish_errors::transport_outcome;
use crate::domain::phone::mask_numbers_in;
use crate::ports::{PublishOutcome, Refusal, SmsGateway, SmsMessage};

#[derive(Clone, Debug)]
pub struct SnsGateway {
    client: Client,
}

const RETRYABLE_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "KMSThrottling",
    "KMSThrottlingException",
    "InternalError",
    "InternalErrorException",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestLimitExceeded",
];

impl SnsGateway {
    /// Builds the SNS client with retries off and `publish_timeout` per call.
    pub fn new(sdk: &aws_config::SdkConfig, publish_timeout: Duration) -> Self {
        let conf = aws_sdk_sns::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(publish_timeout.min(Duration::from_secs(3)))
                    .operation_timeout(publish_timeout)
                    .build(),
            )
            .build();
        SnsGateway { client: Client::from_conf(conf) }
    }
}

/// A message attribute of SNS's `String` type.
fn attr(v: &str) -> Option<MessageAttributeValue> {
    typed_attr("String", v)
}

/// An attribute of another SNS data type; the value still travels as `StringValue`.
fn typed_attr(data_type: &str, v: &str) -> Option<MessageAttributeValue> {
    MessageAttributeValue::builder().data_type(data_type).string_value(v).build().ok()
}

/// Refusals that are the account's or the deployment's, not this message's: every SMS would be
/// refused the same way until someone fixes the account (the role, the key).
const ACCOUNT_CODES: &[&str] = &[
    "AuthorizationError",
    "InvalidSecurity",
    "KMSAccessDenied",
    "KMSDisabled",
    "KMSInvalidState",
    "KMSNotFound",
    "KMSOptInRequired",
];

/// Sorts an SDK error into the classes that matter.
pub fn classify_error(err: &SdkError<PublishError, HttpResponse>) -> PublishOutcome {
    let text = describe(err);
    match err {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let is_5xx = se.raw().status().is_server_error();
            // The message may quote the destination: masked before it is recorded.
            let error = format!("{code}: {}", mask_numbers_in(se.err().message().unwrap_or("")));
            if RETRYABLE_CODES.contains(&code) || is_5xx {
                PublishOutcome::Retryable { error }
            } else if ACCOUNT_CODES.contains(&code) {
                PublishOutcome::Rejected { error, refusal: Refusal::Account }
            } else {
                PublishOutcome::Rejected { error, refusal: Refusal::Message }
            }
        }
        _ => transport_outcome(err, text),
    }
}

impl SmsGateway for SnsGateway {
    fn records_name_their_alert(&self) -> bool {
        false
    }

    async fn is_opted_out(&self, recipient: &crate::domain::PhoneNumber) -> crate::ports::PortResult<bool> {
        // A read: safe to ask again if the answer is lost (the client's retries are off for
        // Publish's sake, so the caller retries through SQS).
        let out =
            self.client.check_if_phone_number_is_opted_out().phone_number(recipient.expose()).send().await.map_err(
                |e| crate::ports::PortError::Unavailable {
                    operation: "SNS CheckIfPhoneNumberIsOptedOut",
                    message: describe(&e),
                },
            )?;
        Ok(out.is_opted_out)
    }

    /// OptInPhoneNumber. SNS refuses a second opt-in within 30 days (its answer, masked); throttling
    /// or a lost answer is unavailability (asked again later).
    async fn opt_in(&self, recipient: &crate::domain::PhoneNumber) -> crate::ports::PortResult<crate::ports::OptIn> {
        match self.client.opt_in_phone_number().phone_number(recipient.expose()).send().await {
            Ok(_) => Ok(crate::ports::OptIn::Done),
            Err(SdkError::ServiceError(se))
                if !matches!(
                    se.err().code(),
                    Some("Throttling" | "ThrottledException" | "InternalError" | "InternalErrorException")
                ) =>
            {
                Ok(crate::ports::OptIn::Refused(format!(
                    "{}: {}",
                    se.err().code().unwrap_or("refused"),
                    mask_numbers_in(se.err().message().unwrap_or(""))
                )))
            }
            Err(e) => Err(crate::ports::PortError::Unavailable {
                operation: "SNS OptInPhoneNumber",
                message: mask_numbers_in(&describe(&e)),
            }),
        }
    }

    async fn publish(&self, m: SmsMessage<'_>) -> PublishOutcome {
        let mut req = self.client.publish().phone_number(m.to.expose()).message(m.body).set_message_attributes(None);
        if let Some(a) = attr("Transactional") {
            req = req.message_attributes("AWS.SNS.SMS.SMSType", a);
        }
        if let Some(a) = m.options.sender_id.as_deref().and_then(attr) {
            req = req.message_attributes("AWS.SNS.SMS.SenderID", a);
        }
        if let Some(a) = m.options.origination_number.as_ref().and_then(|n| attr(n.expose())) {
            req = req.message_attributes("AWS.MM.SMS.OriginationNumber", a);
        }
        // SNS documents MaxPrice as a `Number` (the others are `String`).
        if let Some(a) = m.options.max_price_usd.as_deref().and_then(|p| typed_attr("Number", p)) {
            req = req.message_attributes("AWS.SNS.SMS.MaxPrice", a);
        }
        match req.send().await {
            Ok(out) => match out.message_id {
                Some(id) => PublishOutcome::Accepted { message_id: id },
                // Accepted but no id: it may be sent, and we cannot match its receipt.
                None => PublishOutcome::Unknown { error: "SNS answered without a MessageId".into() },
            },
            Err(e) => classify_error(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The Publish request on the wire: the real gateway (client configuration included) sends to
    //! a one-shot local HTTP endpoint that records the form body and answers as SNS does.

    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::domain::PhoneNumber;
    use crate::domain::intent::SmsOptions;

    fn test_context() -> crate::domain::send_context::SendContext {
        let key = crate::domain::IdempotencyKey::parse(&"ab".repeat(32)).expect("key");
        crate::domain::send_context::SendContext::alert("tocsin-test", key, "attempt-1")
    }

    /// Accepts one request, answers with a Publish result, returns the request's form body.
    fn one_request_endpoint() -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("header");
                if line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().expect("length");
                }
            }
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).expect("body");
            let answer = "<PublishResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><PublishResult>\
                <MessageId>5a6b7c8d-0000-4000-8000-000000000001</MessageId></PublishResult><ResponseMetadata>\
                <RequestId>r-1</RequestId></ResponseMetadata></PublishResponse>";
            let mut out = stream;
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            )
            .expect("answer");
            String::from_utf8(body).expect("utf-8 form body")
        });
        (format!("http://{addr}"), handle)
    }

    fn form_decode(v: &str) -> String {
        let bytes = v.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).expect("hex"));
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8(out).expect("utf-8")
    }

    /// (name, data type, value) of every message attribute in a Publish form body.
    fn attributes(form: &str) -> BTreeSet<(String, String, String)> {
        let fields: std::collections::HashMap<String, String> = form
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (form_decode(k), form_decode(v)))
            .collect();
        (1..)
            .map_while(|i| {
                let get = |f: &str| fields.get(&format!("MessageAttributes.entry.{i}.{f}")).cloned();
                Some((get("Name")?, get("Value.DataType")?, get("Value.StringValue")?))
            })
            .collect()
    }

    #[tokio::test]
    async fn every_message_attribute_is_sent_with_the_type_sns_documents() {
        let (endpoint, server) = one_request_endpoint();
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sns::config::Credentials::new("test", "test", None, None, "test"))
            .load()
            .await;
        let gateway = SnsGateway::new(&sdk, Duration::from_secs(5));
        let to = PhoneNumber::parse("+14155550100").expect("valid");
        let options = SmsOptions {
            sender_id: Some("TOCSIN".into()),
            origination_number: Some(PhoneNumber::parse("+18005550100").expect("valid")),
            max_price_usd: Some("0.50".into()),
        };
        let context = test_context();
        let outcome = gateway
            .publish(SmsMessage {
                to: &to,
                body: "disk full on db-1",
                options: &options,
                context: &context,
                worth_until: chrono::Utc::now(),
            })
            .await;
        assert_eq!(outcome, PublishOutcome::Accepted { message_id: "5a6b7c8d-0000-4000-8000-000000000001".into() });
        let form = server.join().expect("the endpoint saw one request");
        assert!(form.contains("Action=Publish"), "{form}");
        let expected: BTreeSet<(String, String, String)> = [
            ("AWS.SNS.SMS.SMSType", "String", "Transactional"),
            ("AWS.SNS.SMS.SenderID", "String", "TOCSIN"),
            ("AWS.MM.SMS.OriginationNumber", "String", "+18005550100"),
            ("AWS.SNS.SMS.MaxPrice", "Number", "0.50"),
        ]
        .into_iter()
        .map(|(n, t, v)| (n.to_owned(), t.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(attributes(&form), expected);
    }

    #[tokio::test]
    async fn without_settings_only_the_sms_type_is_sent() {
        let (endpoint, server) = one_request_endpoint();
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sns::config::Credentials::new("test", "test", None, None, "test"))
            .load()
            .await;
        let gateway = SnsGateway::new(&sdk, Duration::from_secs(5));
        let to = PhoneNumber::parse("+14155550100").expect("valid");
        let context = test_context();
        gateway
            .publish(SmsMessage {
                to: &to,
                body: "x",
                options: &SmsOptions::default(),
                context: &context,
                worth_until: chrono::Utc::now(),
            })
            .await;
        let form = server.join().expect("one request");
        let only: BTreeSet<_> =
            [("AWS.SNS.SMS.SMSType".to_owned(), "String".to_owned(), "Transactional".to_owned())].into();
        assert_eq!(attributes(&form), only);
    }
}

/// `classify_error` decides whether an SMS may be sent again: each SDK error shape, pinned.
#[cfg(test)]
mod classifier_tests {
    use aws_sdk_sns::error::ErrorMetadata;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn answer(status: u16, code: &str, message: &str) -> SdkError<PublishError, HttpResponse> {
        let err = PublishError::generic(ErrorMetadata::builder().code(code).message(message).build());
        let status = StatusCode::try_from(status).expect("status");
        SdkError::service_error(err, HttpResponse::new(status, SdkBody::empty()))
    }

    fn class(outcome: PublishOutcome) -> &'static str {
        match outcome {
            PublishOutcome::Accepted { .. } => "accepted",
            PublishOutcome::Rejected { .. } => "rejected",
            PublishOutcome::Retryable { .. } => "retryable",
            PublishOutcome::Unknown { .. } => "unknown",
        }
    }

    #[test]
    fn throttling_kms_throttling_and_internal_errors_prove_nothing_was_sent_and_are_retryable() {
        for (status, code) in [(400, "Throttling"), (400, "KMSThrottling"), (500, "InternalError"), (503, "Whatever")] {
            assert_eq!(class(classify_error(&answer(status, code, "x"))), "retryable", "{status} {code}");
        }
    }

    #[test]
    fn validation_authorisation_and_other_4xx_answers_are_rejected_for_good() {
        for (status, code) in [
            (400, "InvalidParameter"),
            (400, "ParameterValueInvalid"),
            (400, "ValidationException"),
            (403, "AuthorizationError"),
            (400, "KMSDisabled"),
            (400, ""),
        ] {
            assert_eq!(class(classify_error(&answer(status, code, "x"))), "rejected", "{status} {code:?}");
        }
    }

    #[test]
    fn a_refusal_of_the_role_or_the_key_is_the_accounts_and_a_bad_parameter_the_messages() {
        let refusal = |code| match classify_error(&answer(400, code, "x")) {
            PublishOutcome::Rejected { refusal, .. } => refusal,
            other => panic!("{other:?}"),
        };
        assert_eq!(refusal("AuthorizationError"), Refusal::Account);
        assert_eq!(refusal("KMSDisabled"), Refusal::Account);
        assert_eq!(refusal("InvalidParameter"), Refusal::Message);
    }

    #[test]
    fn a_rejection_keeps_the_code_and_message_for_the_record() {
        match classify_error(&answer(400, "InvalidParameter", "Invalid parameter: PhoneNumber")) {
            PublishOutcome::Rejected { error, .. } => {
                assert_eq!(error, "InvalidParameter: Invalid parameter: PhoneNumber")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_timeout_may_have_reached_sns_and_is_unknown() {
        let operation_timeout: SdkError<PublishError, HttpResponse> = SdkError::timeout_error("operation timed out");
        assert_eq!(class(classify_error(&operation_timeout)), "unknown");
        let read_timeout = SdkError::dispatch_failure(ConnectorError::timeout("read timed out".into()));
        assert_eq!(class(classify_error(&read_timeout)), "unknown");
    }

    #[test]
    fn a_connection_lost_mid_request_or_an_unreadable_answer_is_unknown() {
        let reset = SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        ))));
        assert_eq!(class(classify_error(&reset)), "unknown");
        let closed = SdkError::dispatch_failure(ConnectorError::other(
            "connection closed before message completed".into(),
            None,
        ));
        assert_eq!(class(classify_error(&closed)), "unknown");
        let unreadable: SdkError<PublishError, HttpResponse> = SdkError::response_error(
            "could not parse the answer",
            HttpResponse::new(StatusCode::try_from(200).expect("status"), SdkBody::from("<garbage")),
        );
        assert_eq!(class(classify_error(&unreadable)), "unknown");
    }

    #[test]
    fn a_connection_that_was_never_made_sent_nothing_and_is_retryable() {
        let refused = SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))));
        assert_eq!(class(classify_error(&refused)), "retryable");
        let dns = SdkError::dispatch_failure(ConnectorError::io("dns error: no such host".into()));
        assert_eq!(class(classify_error(&dns)), "retryable");
    }

    #[test]
    fn a_request_that_could_not_be_built_or_was_refused_by_the_client_is_rejected() {
        let construction: SdkError<PublishError, HttpResponse> = SdkError::construction_failure("no region");
        assert_eq!(class(classify_error(&construction)), "rejected");
        let user = SdkError::dispatch_failure(ConnectorError::user("invalid URI".into()));
        assert_eq!(class(classify_error(&user)), "rejected");
    }
}
