//! The End User Messaging SMS stand-in (`tests/harness/eum_standin.py`) against the real
//! `aws-sdk-pinpointsmsvoicev2` client, through the IAM gate: what it accepts, what it refuses and
//! with which typed error and reason, the events it writes (AWS's format, the request's context in
//! each), and the carriers' bad day — late, duplicated, silent, failed, a STOP reply.

use aws_config::SdkConfig;
use aws_sdk_pinpointsmsvoicev2 as eum;
use eum::operation::send_text_message::{SendTextMessageError, SendTextMessageOutput};
use eum::types::{
    ConflictExceptionReason, MessageType, RequestableNumberType, ResourceType, ServiceQuotaExceededExceptionReason,
    ValidationExceptionReason,
};
use serde_json::Value;
use tocsin_harness::Emulator;
use tocsin_harness::Principal;
use tocsin_harness::eum::{AccountTier, Carrier, CarrierBehaviour, EumControl, PhoneNumber};
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};

const CONFIGURATION_SET: &str = "tocsin-local";
const EVENTS: &str = "/tocsin-local/eum-events";
const TO: &str = "+14255550100";

/// A production account with an active toll-free number and a configuration set logging every SMS
/// event to [`EVENTS`]; the client makes one attempt per call (no SDK retry hides an answer).
struct World {
    emulator: Emulator,
    eum: EumControl,
    sdk: SdkConfig,
    client: eum::Client,
    number: PhoneNumber,
}

fn single_attempt(sdk: &SdkConfig) -> eum::Client {
    eum::Client::from_conf(
        eum::config::Builder::from(sdk).retry_config(aws_config::retry::RetryConfig::disabled()).build(),
    )
}

async fn world() -> World {
    let emulator = Emulator::start().await.expect("emulator");
    let sdk = emulator.sdk_config().await;
    let control = emulator.eum();
    control.production_account().await.expect("production account");
    let number = control.active_phone_number(&sdk, RequestableNumberType::TollFree, "US").await.expect("a number");
    control.configuration_set_logging_to(&sdk, CONFIGURATION_SET, EVENTS).await.expect("configuration set");
    let client = single_attempt(&sdk);
    World { emulator, eum: control, sdk, client, number }
}

impl World {
    async fn send(&self, to: &str, body: &str) -> Result<SendTextMessageOutput, SendTextMessageError> {
        self.client
            .send_text_message()
            .destination_phone_number(to)
            .origination_identity(&self.number.number)
            .configuration_set_name(CONFIGURATION_SET)
            .message_body(body)
            .message_type(MessageType::Transactional)
            .context("alert", format!("key-of-{to}"))
            .send()
            .await
            .map_err(|e| e.into_service_error())
    }

    /// The events written so far, parsed, oldest first.
    async fn events(&self) -> Vec<Value> {
        self.emulator
            .log_events(EVENTS)
            .await
            .expect("log events")
            .iter()
            .map(|l| serde_json::from_str(&l.message).expect("each log event is one JSON event"))
            .collect()
    }

    async fn events_of(&self, message_id: &str) -> Vec<(String, bool)> {
        self.events()
            .await
            .iter()
            .filter(|e| e["messageId"] == message_id)
            .map(|e| (e["eventType"].as_str().unwrap_or_default().to_owned(), e["isFinal"] == true))
            .collect()
    }
}

fn id_of(sent: SendTextMessageOutput) -> String {
    sent.message_id.expect("a message id")
}

fn conflict_reason(e: &SendTextMessageError) -> Option<&ConflictExceptionReason> {
    match e {
        SendTextMessageError::ConflictException(c) => c.reason(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_text_is_accepted_and_its_events_carry_its_context_into_the_log_group() {
    let w = world().await;
    let sent = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.id)
        .configuration_set_name(CONFIGURATION_SET)
        .message_body("db-1: /var 97% full")
        .message_type(MessageType::Transactional)
        .context("alert", "bff874c1604e")
        .context("attempt", "1")
        .time_to_live(900)
        .max_price("0.01")
        .send()
        .await
        .expect("accepted");
    let id = id_of(sent);

    let texts = w.eum.sent_texts().await.expect("messages");
    assert_eq!(texts.len(), 1);
    let t = &texts[0];
    assert_eq!(
        (t.message_id.as_str(), t.destination.as_str(), t.origination.as_str()),
        (id.as_str(), TO, w.number.number.as_str())
    );
    assert_eq!(
        (t.body.as_str(), t.message_type.as_str(), t.parts, t.encoding.as_str()),
        ("db-1: /var 97% full", "TRANSACTIONAL", 1, "GSM")
    );
    assert_eq!(
        (t.time_to_live, t.max_price.as_deref(), t.configuration_set.as_deref()),
        (Some(900), Some("0.01"), Some(CONFIGURATION_SET))
    );

    let lines = w.emulator.log_events(EVENTS).await.expect("log events");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_ne!(lines[0].id, lines[1].id, "each log event has its own CloudWatch id");
    let events = w.events().await;
    let kinds: Vec<(&str, bool)> =
        events.iter().map(|e| (e["eventType"].as_str().unwrap_or_default(), e["isFinal"] == true)).collect();
    assert_eq!(kinds, [("TEXT_SUCCESSFUL", false), ("TEXT_DELIVERED", true)]);
    let fields = [
        "eventType",
        "eventVersion",
        "eventTimestamp",
        "isFinal",
        "originationPhoneNumber",
        "destinationPhoneNumber",
        "isoCountryCode",
        "isInternationalSend",
        "mcc",
        "mnc",
        "carrierName",
        "messageId",
        "messageRequestTimestamp",
        "messageEncoding",
        "messageType",
        "messageStatus",
        "messageStatusDescription",
        "context",
        "totalMessageParts",
        "totalMessagePrice",
        "totalCarrierFee",
    ];
    for line in &lines {
        // Every field, once, in the order of AWS's example (read from the text: a parsed map sorts).
        let at: Vec<Option<usize>> = fields.iter().map(|f| line.message.find(&format!("\"{f}\":"))).collect();
        assert!(at.iter().all(Option::is_some), "a field is missing: {}", line.message);
        assert!(at.windows(2).all(|w| w[0] < w[1]), "not AWS's field order: {}", line.message);
    }
    for e in &events {
        assert_eq!(e.as_object().map(|o| o.len()), Some(fields.len()), "no field AWS's example lacks: {e}");
        assert_eq!(e["messageId"], id.as_str());
        assert_eq!(e["context"], serde_json::json!({"alert": "bff874c1604e", "attempt": "1"}), "the context, verbatim");
        assert_eq!(
            (e["originationPhoneNumber"].as_str(), e["destinationPhoneNumber"].as_str()),
            (Some(w.number.number.as_str()), Some(TO))
        );
        assert_eq!(
            (e["eventVersion"].as_str(), e["messageType"].as_str(), e["isoCountryCode"].as_str()),
            (Some("1.0"), Some("TRANSACTIONAL"), Some("US"))
        );
    }
    assert_eq!(events[0]["messageStatus"], "SUCCESSFUL");
    assert_eq!(events[0]["messageStatusDescription"], "Message has been accepted by phone carrier");
    assert_eq!(events[1]["messageStatus"], "DELIVERED");
    // What a subscription would hand the status function.
    let payload = tocsin_harness::events::logs_payload(EVENTS, "DATA_MESSAGE", &lines);
    assert!(payload.contains(&id), "{payload}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_configuration_set_or_identity_is_not_found_and_a_pending_or_absent_identity_is_a_conflict() {
    let w = world().await;
    let no_set = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.id)
        .configuration_set_name("no-such-set")
        .message_body("x")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("refused");
    let SendTextMessageError::ResourceNotFoundException(nf) = &no_set else { panic!("{no_set:?}") };
    assert_eq!((nf.resource_type(), nf.resource_id()), (Some(&ResourceType::ConfigurationSet), Some("no-such-set")));

    let no_number = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity("phone-00000000000000000000000000000000")
        .message_body("x")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("refused");
    let SendTextMessageError::ResourceNotFoundException(nf) = &no_number else { panic!("{no_number:?}") };
    assert_eq!(nf.resource_type(), Some(&ResourceType::PhoneNumber));

    // A number just requested is PENDING until its registration is approved.
    let pending = eum::Client::new(&w.sdk)
        .request_phone_number()
        .iso_country_code("US")
        .message_type(MessageType::Transactional)
        .number_capabilities(eum::types::NumberCapability::Sms)
        .number_type(RequestableNumberType::TenDlc)
        .send()
        .await
        .expect("requested");
    assert_eq!(pending.status, Some(eum::types::NumberStatus::Pending));
    let not_active = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(pending.phone_number.as_deref().unwrap_or_default())
        .message_body("x")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("refused");
    assert_eq!(conflict_reason(&not_active), Some(&ConflictExceptionReason::ResourceNotActive), "{not_active:?}");

    // No identity named, and none in the account for the destination's country.
    let nothing = w
        .client
        .send_text_message()
        .destination_phone_number("+447700900123")
        .message_body("x")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("refused");
    assert_eq!(conflict_reason(&nothing), Some(&ConflictExceptionReason::NoOriginationIdentitiesFound), "{nothing:?}");
    assert!(w.eum.sent_texts().await.expect("messages").is_empty(), "a refused text is not sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_an_opt_out_the_spend_and_max_price_each_refuse_a_text_with_their_reason() {
    let w = world().await;
    w.eum.set_account_tier(AccountTier::Sandboxed).await.expect("sandbox");
    let unverified = w.send(TO, "x").await.expect_err("refused");
    assert_eq!(
        conflict_reason(&unverified),
        Some(&ConflictExceptionReason::DestinationPhoneNumberNotVerified),
        "{unverified:?}"
    );
    w.eum.verify_destinations(&[TO]).await.expect("verified");
    w.send(TO, "x").await.expect("a verified destination is reachable from the sandbox");
    w.eum.set_account_tier(AccountTier::Production).await.expect("production");

    w.client.put_opted_out_number().opt_out_list_name("Default").opted_out_number(TO).send().await.expect("opted out");
    let opted_out = w.send(TO, "x").await.expect_err("refused");
    assert_eq!(
        conflict_reason(&opted_out),
        Some(&ConflictExceptionReason::DestinationPhoneNumberOptedOut),
        "{opted_out:?}"
    );
    w.client
        .delete_opted_out_number()
        .opt_out_list_name("Default")
        .opted_out_number(TO)
        .send()
        .await
        .expect("opted in");

    w.eum.set_spend_exhausted(true).await.expect("spent");
    let spent = w.send(TO, "x").await.expect_err("refused");
    let SendTextMessageError::ServiceQuotaExceededException(q) = &spent else { panic!("{spent:?}") };
    assert_eq!(q.reason(), Some(&ServiceQuotaExceededExceptionReason::MonthlySpendLimitReachedForText));
    w.eum.set_spend_exhausted(false).await.expect("a new month");

    let too_dear = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .message_body("x")
        .max_price("0.001")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("refused");
    let SendTextMessageError::ValidationException(v) = &too_dear else { panic!("{too_dear:?}") };
    assert_eq!(v.reason(), Some(&ValidationExceptionReason::PriceOverThreshold));

    assert_eq!(w.eum.sent_texts().await.expect("messages").len(), 1, "only the verified destination's text went out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_account_spends_one_dollar_and_is_then_refused_for_the_month() {
    let emulator = Emulator::start().await.expect("emulator");
    let sdk = emulator.sdk_config().await;
    let control = emulator.eum();
    let number = control.active_phone_number(&sdk, RequestableNumberType::TollFree, "US").await.expect("a number");
    control.verify_destinations(&[TO]).await.expect("verified");
    control.set_parts_per_second(&number.id, 1000).await.expect("fast");
    let client = single_attempt(&sdk);
    // 0.00581 USD a part: 172 texts fit in 1 USD, the 173rd does not.
    let mut accepted = 0;
    let refusal = loop {
        match client
            .send_text_message()
            .destination_phone_number(TO)
            .origination_identity(&number.id)
            .message_body("x")
            .send()
            .await
        {
            Ok(_) => accepted += 1,
            Err(e) => break e.into_service_error(),
        }
        assert!(accepted <= 200, "the spend limit never came");
    };
    assert_eq!(accepted, 172);
    let SendTextMessageError::ServiceQuotaExceededException(q) = &refusal else { panic!("{refusal:?}") };
    assert_eq!(q.reason(), Some(&ServiceQuotaExceededExceptionReason::MonthlySpendLimitReachedForText));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_comes_at_the_front_door_and_per_identity_parts_per_second() {
    let w = world().await;
    w.eum.throttle_next(1).await.expect("throttle");
    let throttled = w.send(TO, "x").await.expect_err("throttled");
    assert!(matches!(throttled, SendTextMessageError::ThrottlingException(_)), "{throttled:?}");
    w.send(TO, "x").await.expect("the next call goes through");

    // One part a second: a second text in the same second is over the identity's rate.
    w.eum.set_parts_per_second(&w.number.number, 1).await.expect("rate");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    w.send(TO, "x").await.expect("the first part of the second");
    let over = w.send(TO, "x").await.expect_err("throttled");
    assert!(matches!(over, SendTextMessageError::ThrottlingException(_)), "{over:?}");
    assert_eq!(w.eum.sent_texts().await.expect("messages").len(), 2, "a throttled text is not sent");

    // The SDK's standard retry (3 attempts) absorbs a throttle below that.
    w.eum.throttle_next(2).await.expect("throttle");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    eum::Client::new(&w.sdk)
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .message_body("x")
        .send()
        .await
        .expect("retried past two throttles");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_model_forbids_is_refused_before_anything_is_sent() {
    let w = world().await;
    let base = || {
        w.client
            .send_text_message()
            .destination_phone_number(TO)
            .origination_identity(&w.number.number)
            .configuration_set_name(CONFIGURATION_SET)
            .message_body("x")
    };
    let six = (0..6).fold(base(), |b, i| b.context(format!("k{i}"), "v"));
    let cases = [
        ("Context", six),
        ("Context[\"k\"]", base().context("k", "v".repeat(801))),
        ("TimeToLive", base().time_to_live(4)),
        ("MaxPrice", base().max_price("1")),
        ("MessageBody", base().message_body("x".repeat(1601))),
        ("Context[\"k\"]", base().context("k", " padded ")),
    ];
    for (field, request) in cases {
        let e = request.send().await.map_err(|e| e.into_service_error()).expect_err("refused");
        let SendTextMessageError::ValidationException(v) = &e else { panic!("{field}: {e:?}") };
        assert_eq!(v.reason(), Some(&ValidationExceptionReason::FieldValidationFailed), "{field}");
        assert!(v.fields().iter().any(|f| f.name() == field), "{field} not named in {:?}", v.fields());
    }
    // What the SDK itself would never send: a member the model lacks, a required one missing.
    let (status, body) =
        raw_call(&w, "SendTextMessage", r#"{"DestinationPhoneNumber":"+14255550100","MesageBody":"typo"}"#).await;
    assert_eq!(
        (status, body["__type"].as_str(), body["Fields"][0]["Name"].as_str()),
        (400, Some("ValidationException"), Some("MesageBody"))
    );
    let (status, body) = raw_call(&w, "SendTextMessage", r#"{"MessageBody":"x"}"#).await;
    assert_eq!((status, body["Reason"].as_str()), (400, Some("MISSING_PARAMETER")));
    let (status, body) = raw_call(&w, "SendTextMessage", r#"{"DestinationPhoneNumber":14255550100}"#).await;
    assert_eq!((status, body["Fields"][0]["Message"].as_str()), (400, Some("must be a string")));
    assert!(w.eum.sent_texts().await.expect("messages").is_empty());
    assert!(w.events().await.is_empty(), "no event for a refused request");
}

/// A JSON 1.0 call through the gate, signed as the harness (the gate reads the credential scope).
async fn raw_call(w: &World, op: &str, body: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(w.emulator.endpoint())
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", format!("PinpointSMSVoiceV2.{op}"))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=HARNESS/20260101/us-east-1/sms-voice/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(body.to_owned())
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_the_stand_in_does_not_implement_is_an_error_naming_it() {
    let w = world().await;
    let e = w
        .client
        .send_voice_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .message_body("x")
        .send()
        .await
        .expect_err("not implemented");
    let text = format!("{:?}", e.into_service_error());
    assert!(text.contains("does not implement SendVoiceMessage"), "{text}");
    let (status, body) = raw_call(&w, "NoSuchOperation", "{}").await;
    assert_eq!((status, body["__type"].as_str()), (400, Some("UnknownOperationException")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_iam_gate_refuses_a_text_from_a_role_without_send_text_message_on_its_resources() {
    let w = world().await;
    // The intake function may send no SMS at all: denied on both resources the request names.
    let intake = single_attempt(&w.emulator.sdk_config_as(&Principal::function("IntakeFunction")).await);
    let e = intake
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .configuration_set_name(CONFIGURATION_SET)
        .message_body("x")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("refused");
    assert!(matches!(e, SendTextMessageError::AccessDeniedException(_)), "{e:?}");
    let denials = w.emulator.iam().take_denials();
    let denied: Vec<(&str, &str)> = denials.iter().map(|d| (d.action.as_str(), d.resource.as_str())).collect();
    let set = format!("arn:aws:sms-voice:us-east-1:123456789012:configuration-set/{CONFIGURATION_SET}");
    assert_eq!(
        denied,
        [("sms-voice:SendTextMessage", set.as_str()), ("sms-voice:SendTextMessage", w.number.arn.as_str())]
    );
    assert!(w.eum.sent_texts().await.expect("messages").is_empty(), "a denied request never reaches the service");
    // The sender (End User Messaging, the default provider) may: its stack's configuration set,
    // the account's numbers.
    let sender = single_attempt(&w.emulator.sdk_config_as(&Principal::function("SenderFunction")).await);
    sender
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .configuration_set_name(CONFIGURATION_SET)
        .message_body("x")
        .send()
        .await
        .expect("the sender's role allows it");
    assert!(w.emulator.iam().take_denials().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failing_carrier_writes_its_own_final_event_and_a_success_may_be_final_alone() {
    let w = world().await;
    let cases = [
        (CarrierBehaviour::Blocked, "TEXT_BLOCKED"),
        (CarrierBehaviour::Invalid, "TEXT_INVALID"),
        (CarrierBehaviour::Unreachable, "TEXT_UNREACHABLE"),
        (CarrierBehaviour::CarrierUnreachable, "TEXT_CARRIER_UNREACHABLE"),
        (CarrierBehaviour::Spam, "TEXT_SPAM"),
        (CarrierBehaviour::CarrierBlocked, "TEXT_CARRIER_BLOCKED"),
        (CarrierBehaviour::Unknown, "TEXT_UNKNOWN"),
        (CarrierBehaviour::TtlExpired, "TEXT_TTL_EXPIRED"),
        (CarrierBehaviour::DeliveredSuccessfulFinal, "TEXT_SUCCESSFUL"),
    ];
    w.eum.set_parts_per_second(&w.number.id, 100).await.expect("rate");
    for (i, (behaviour, event)) in cases.into_iter().enumerate() {
        let to = format!("+1425555020{i}");
        w.eum.set_carrier(&to, Carrier::new(behaviour)).await.expect("carrier");
        let id = id_of(w.send(&to, "x").await.expect("accepted: the carrier fails later"));
        assert_eq!(w.events_of(&id).await, [(event.to_owned(), true)], "{behaviour:?}");
    }
    let to = "+14255550299";
    w.eum.set_carrier(to, Carrier::new(CarrierBehaviour::Deliver).after_pending()).await.expect("carrier");
    let id = id_of(w.send(to, "x").await.expect("accepted"));
    let pending = [
        ("TEXT_PENDING".to_owned(), false),
        ("TEXT_SUCCESSFUL".to_owned(), false),
        ("TEXT_DELIVERED".to_owned(), true),
    ];
    assert_eq!(w.events_of(&id).await, pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_events_come_late_on_release_and_duplicated_events_come_twice() {
    let w = world().await;
    let (late, twice) = ("+14255550301", "+14255550302");
    w.eum.set_carrier(late, Carrier::new(CarrierBehaviour::Deliver).held()).await.expect("carrier");
    w.eum.set_carrier(twice, Carrier::new(CarrierBehaviour::Blocked).duplicated()).await.expect("carrier");
    w.eum.set_parts_per_second(&w.number.id, 10).await.expect("rate");
    let late_id = id_of(w.send(late, "x").await.expect("accepted"));
    let twice_id = id_of(w.send(twice, "x").await.expect("accepted"));
    assert!(w.events_of(&late_id).await.is_empty(), "held back");
    assert_eq!(w.events_of(&twice_id).await, [("TEXT_BLOCKED".to_owned(), true), ("TEXT_BLOCKED".to_owned(), true)]);
    assert_eq!(w.eum.state().await.expect("state").held, 2);

    let later = chrono::Utc::now() + chrono::Duration::minutes(30);
    assert_eq!(w.eum.release(Some(later)).await.expect("released"), 2);
    let lines = w.emulator.log_events(EVENTS).await.expect("log events");
    let released: Vec<&tocsin_harness::events::LogLine> =
        lines.iter().filter(|l| l.message.contains(&late_id)).collect();
    assert_eq!(released.len(), 2);
    for l in released {
        assert_eq!(l.timestamp, later.timestamp_millis(), "logged when the receipt came");
        let e: Value = serde_json::from_str(&l.message).expect("JSON");
        assert_eq!(e["eventTimestamp"], later.timestamp_millis());
        assert!(e["messageRequestTimestamp"].as_i64() < e["eventTimestamp"].as_i64());
    }
    assert_eq!(w.eum.state().await.expect("state").held, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_carrier_writes_nothing_until_aws_gives_up_with_text_unknown() {
    let w = world().await;
    w.eum.set_carrier(TO, Carrier::new(CarrierBehaviour::Silent)).await.expect("carrier");
    let id = id_of(w.send(TO, "x").await.expect("accepted"));
    assert!(w.events_of(&id).await.is_empty());
    assert_eq!(w.eum.give_up(None).await.expect("72 h later"), 1);
    let events = w.events().await;
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0]["eventType"].as_str(), events[0]["messageStatus"].as_str(), events[0]["isFinal"].as_bool()),
        (Some("TEXT_UNKNOWN"), Some("UNKNOWN"), Some(true))
    );
    assert_eq!(w.eum.give_up(None).await.expect("again"), 0, "once final, never again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_reply_puts_the_number_in_the_identitys_opt_out_list_and_the_next_text_is_refused() {
    let w = world().await;
    w.eum.set_carrier(TO, Carrier::new(CarrierBehaviour::OptedOutByReply)).await.expect("carrier");
    let id = id_of(w.send(TO, "x").await.expect("accepted"));
    assert_eq!(w.events_of(&id).await, [("TEXT_SUCCESSFUL".to_owned(), false), ("TEXT_DELIVERED".to_owned(), true)]);
    let listed = w
        .client
        .describe_opted_out_numbers()
        .opt_out_list_name("Default")
        .opted_out_numbers(TO)
        .send()
        .await
        .expect("listed");
    let numbers = listed.opted_out_numbers();
    assert_eq!(numbers.len(), 1);
    assert!(numbers[0].end_user_opted_out(), "the person opted out, not the operator");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let refused = w.send(TO, "x").await.expect_err("opted out");
    assert_eq!(conflict_reason(&refused), Some(&ConflictExceptionReason::DestinationPhoneNumberOptedOut));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_account_is_sandboxed_with_one_dollar_and_a_default_opt_out_list_and_a_number_not_opted_out_is_not_found()
{
    let emulator = Emulator::start().await.expect("emulator");
    let client = single_attempt(&emulator.sdk_config().await);
    let tier = client.describe_account_attributes().send().await.expect("attributes");
    let attrs: Vec<(&str, &str)> = tier.account_attributes().iter().map(|a| (a.name().as_str(), a.value())).collect();
    assert_eq!(attrs, [("ACCOUNT_TIER", "SANDBOXED")]);
    let spend = client.describe_spend_limits().send().await.expect("limits");
    let limits: Vec<(&str, i64, i64)> =
        spend.spend_limits().iter().map(|l| (l.name().as_str(), l.enforced_limit(), l.max_limit())).collect();
    assert_eq!(limits, [("TEXT_MESSAGE_MONTHLY_SPEND_LIMIT", 1, 1)]);
    let lists = client.describe_opt_out_lists().send().await.expect("lists");
    let names: Vec<&str> = lists.opt_out_lists().iter().map(|l| l.opt_out_list_name()).collect();
    assert_eq!(names, ["Default"]);
    assert!(
        client
            .describe_verified_destination_numbers()
            .send()
            .await
            .expect("none")
            .verified_destination_numbers()
            .is_empty()
    );

    let not_opted_out = client
        .describe_opted_out_numbers()
        .opt_out_list_name("Default")
        .opted_out_numbers(TO)
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("not found");
    let eum::operation::describe_opted_out_numbers::DescribeOptedOutNumbersError::ResourceNotFoundException(nf) =
        &not_opted_out
    else {
        panic!("{not_opted_out:?}")
    };
    assert_eq!((nf.resource_type(), nf.resource_id()), (Some(&ResourceType::OptedOutNumber), Some(TO)));
    let no_list = client
        .describe_opted_out_numbers()
        .opt_out_list_name("no-such-list")
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("not found");
    let eum::operation::describe_opted_out_numbers::DescribeOptedOutNumbersError::ResourceNotFoundException(nf) =
        &no_list
    else {
        panic!("{no_list:?}")
    };
    assert_eq!(
        nf.resource_type(),
        Some(&ResourceType::OptOutList),
        "a missing list is told apart from a number not in it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_is_checked_and_answered_but_sends_charges_and_logs_nothing() {
    let w = world().await;
    let dry = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .configuration_set_name(CONFIGURATION_SET)
        .message_body("x")
        .dry_run(true)
        .send()
        .await
        .expect("checked");
    assert!(dry.message_id.is_some());
    assert!(w.eum.sent_texts().await.expect("messages").is_empty());
    assert!(w.events().await.is_empty());
    assert_eq!(w.eum.state().await.expect("state").spend_usd, 0.0);
    w.client.put_opted_out_number().opt_out_list_name("Default").opted_out_number(TO).send().await.expect("opted out");
    let e = w
        .client
        .send_text_message()
        .destination_phone_number(TO)
        .origination_identity(&w.number.number)
        .message_body("x")
        .dry_run(true)
        .send()
        .await
        .map_err(|e| e.into_service_error())
        .expect_err("a dry run is refused as the real one would be");
    assert_eq!(conflict_reason(&e), Some(&ConflictExceptionReason::DestinationPhoneNumberOptedOut));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_for_a_log_group_that_does_not_exist_are_dropped_and_counted() {
    let w = world().await;
    let logs = aws_sdk_cloudwatchlogs::Client::new(&w.sdk);
    logs.delete_log_group().log_group_name(EVENTS).send().await.expect("deleted");
    w.send(TO, "x").await.expect("accepted: the events are AWS's problem");
    assert_eq!(w.eum.state().await.expect("state").dropped, 2);
    assert_eq!(w.eum.sent_texts().await.expect("messages").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_still_sent_the_text_and_a_proxy_error_decodes_as_the_typed_error() {
    let w = world().await;
    let proxy = FaultProxy::start(&w.emulator.endpoint(), 7).await.expect("proxy");
    let through = single_attempt(&Emulator::sdk_config_for(&proxy.endpoint(), &Principal::Harness).await);
    let send = || {
        through
            .send_text_message()
            .destination_phone_number(TO)
            .origination_identity(&w.number.number)
            .configuration_set_name(CONFIGURATION_SET)
            .message_body("x")
            .send()
    };
    proxy.add_rule(Rule::once("PinpointSMSVoiceV2.SendTextMessage", Fault::DropResponse));
    send().await.expect_err("the caller never hears");
    assert_eq!(w.eum.sent_texts().await.expect("messages").len(), 1, "but the text went out");
    assert_eq!(w.events().await.len(), 2, "and its events with it");

    proxy.add_rule(Rule::once(
        "PinpointSMSVoiceV2.SendTextMessage",
        Fault::eum_error("ConflictException", "opted out", Some("DESTINATION_PHONE_NUMBER_OPTED_OUT")),
    ));
    let e = send().await.map_err(|e| e.into_service_error()).expect_err("refused by the proxy");
    assert_eq!(conflict_reason(&e), Some(&ConflictExceptionReason::DestinationPhoneNumberOptedOut), "{e:?}");
    let ops: Vec<String> = proxy.log().into_iter().map(|(op, _)| op).collect();
    assert_eq!(ops, ["PinpointSMSVoiceV2.SendTextMessage", "PinpointSMSVoiceV2.SendTextMessage"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resetting_the_emulator_resets_the_stand_in() {
    let w = world().await;
    w.send(TO, "x").await.expect("accepted");
    reqwest::Client::new().post(format!("{}/moto-api/reset", w.emulator.moto_endpoint())).send().await.expect("reset");
    assert!(w.eum.sent_texts().await.expect("messages").is_empty());
    let numbers = w.client.describe_phone_numbers().send().await.expect("described");
    assert!(numbers.phone_numbers().is_empty());
    assert_eq!(w.eum.state().await.expect("state").tier, AccountTier::Sandboxed, "a new account again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_event_types_an_enabled_destination_matches_are_written_and_a_deleted_set_is_gone() {
    let w = world().await;
    w.eum.set_parts_per_second(&w.number.id, 10).await.expect("rate");
    w.client
        .update_event_destination()
        .configuration_set_name(CONFIGURATION_SET)
        .event_destination_name("logs")
        .matching_event_types(eum::types::EventType::TextDelivered)
        .send()
        .await
        .expect("updated");
    let id = id_of(w.send(TO, "x").await.expect("accepted"));
    assert_eq!(w.events_of(&id).await, [("TEXT_DELIVERED".to_owned(), true)], "TEXT_SUCCESSFUL is not matched");

    w.client
        .update_event_destination()
        .configuration_set_name(CONFIGURATION_SET)
        .event_destination_name("logs")
        .enabled(false)
        .send()
        .await
        .expect("disabled");
    let id = id_of(w.send(TO, "x").await.expect("accepted"));
    assert!(w.events_of(&id).await.is_empty(), "a disabled destination gets nothing");

    let sets = w.client.describe_configuration_sets().send().await.expect("described");
    let destinations = sets.configuration_sets()[0].event_destinations();
    assert_eq!((destinations.len(), destinations[0].enabled()), (1, false));
    w.client
        .delete_event_destination()
        .configuration_set_name(CONFIGURATION_SET)
        .event_destination_name("logs")
        .send()
        .await
        .expect("deleted");
    w.client.delete_configuration_set().configuration_set_name(CONFIGURATION_SET).send().await.expect("deleted");
    let gone = w.send(TO, "x").await.expect_err("no such set");
    assert!(matches!(gone, SendTextMessageError::ResourceNotFoundException(_)), "{gone:?}");
}
