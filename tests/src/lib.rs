//! The whole pipeline wired for local runs: the real function handlers with the real AWS adapters,
//! pointed at the emulator, configured from `template.yaml`'s own function environments. Used by
//! the end-to-end tests and by the demo (`cargo run -p tocsin-tests --bin demo`).
//!
//! Where AWS itself would act (API Gateway invoking intake, the SQS event source mapping, SNS
//! writing delivery-status logs, the CloudWatch Logs subscription, the schedule), this module acts
//! in its place with the same shapes, through real emulator calls.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::SqsBatchResponse;
use chrono::{DateTime, Utc};
use intake::chain_policy::PolicyCache;
use intake::roster::RosterCache;
use serde_json::Value;
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::adapters::sms::{ProviderLogs, SmsProvider};
use tocsin::adapters::sqs::{SqsEscalationQueue, SqsRejectSink, SqsSendQueue};
use tocsin::config::{Env, EscalationConfig, IntakeConfig, RepliesConfig, SenderConfig, StatusConfig};
use tocsin::domain::observation::Observation;
use tocsin::domain::template::Catalog;
use tocsin::domain::{IdempotencyKey, IntentRecord};
use tocsin::ports::{Clock, EscalationMessage, IntentStore};
use tocsin_harness::events::{LogLine, logs_envelope, logs_payload, sns_delivery_record};
use tocsin_harness::iam::LOCAL_STACK;
use tocsin_harness::{Emulator, Principal, Stack};

pub use tocsin_harness;

/// The wall clock plus an offset the test moves forward by hand (time still flows, so the order
/// of observations stays causal); clones share the offset.
#[derive(Clone, Debug)]
pub struct TestClock(Arc<Mutex<chrono::Duration>>);

impl TestClock {
    pub fn starting_now() -> Self {
        TestClock(Arc::new(Mutex::new(chrono::Duration::zero())))
    }
    pub fn now_utc(&self) -> DateTime<Utc> {
        self.now()
    }
    pub fn advance(&self, d: chrono::Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += d;
        }
    }
    /// This clock's now plus `d`: a deadline on the handlers' clock.
    pub fn in_(&self, d: std::time::Duration) -> DateTime<Utc> {
        tocsin::ports::after(self.now(), d)
    }
    /// The deadline Lambda gives an invocation that starts now: the functions' `Timeout` (30 s,
    /// the template's Globals).
    pub fn invocation_deadline(&self) -> DateTime<Utc> {
        self.in_(std::time::Duration::from_secs(30))
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.0.lock().map(|t| *t).unwrap_or_else(|_| chrono::Duration::zero())
    }

    async fn sleep_until(&self, at: DateTime<Utc>) {
        // Real time passes at the real rate; an advance by hand moves `at` closer.
        while let Ok(left) = at.signed_duration_since(self.now()).to_std() {
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(std::time::Duration::from_millis(100))).await;
        }
    }
}

impl tocsin::ports::Entropy for TestClock {
    fn next_u64(&self) -> u64 {
        rand::random()
    }
}

pub type IntakeFn =
    intake::Intake<DynamoLedger, SqsSendQueue, SqsRejectSink, TestClock, DynamoRegistry, DynamoRegistry>;
pub type SenderFn = sender::Sender<DynamoLedger, DynamoRegistry, SmsProvider, SqsSendQueue, TestClock>;
pub type StatusHandlerFn = status::StatusHandler<DynamoLedger, DynamoRegistry, TestClock>;

/// The status function as Lambda invokes it: each invocation's deadline is the function's
/// `Timeout` (from template.yaml) from now, as the Lambda context gives it.
pub struct StatusFn {
    pub handler: StatusHandlerFn,
    pub timeout: std::time::Duration,
}

impl StatusFn {
    pub async fn handle(&self, event: Value) -> Result<status::Summary, status::StatusError> {
        self.handler.handle(event, self.handler.clock.in_(self.timeout)).await
    }
}

impl std::ops::Deref for StatusFn {
    type Target = StatusHandlerFn;
    fn deref(&self) -> &StatusHandlerFn {
        &self.handler
    }
}

/// A function's `Timeout` in template.yaml (its own, else the Globals'), as Lambda applies it.
pub fn function_timeout(stack: &Stack, logical_id: &str) -> std::time::Duration {
    let t = stack.template();
    let seconds = t["Resources"][logical_id]["Properties"]["Timeout"]
        .as_u64()
        .or_else(|| t["Globals"]["Function"]["Timeout"].as_u64())
        .unwrap_or_else(|| panic!("template.yaml sets no Timeout for {logical_id}"));
    std::time::Duration::from_secs(seconds)
}
pub type RepliesFn = replies::Replies<DynamoLedger, DynamoRegistry, SmsProvider, TestClock>;
pub type EscalationFn =
    escalation::Escalator<DynamoLedger, SqsSendQueue, SqsEscalationQueue, ProviderLogs, DynamoRegistry, TestClock>;

pub struct Pipeline {
    pub emulator: Emulator,
    /// The fault proxy the functions talk through, when `Options::fault_seed` was given.
    pub proxy: Option<tocsin_harness::fault_proxy::FaultProxy>,
    pub stack: Stack,
    pub clock: TestClock,
    /// Each function signs with its own credentials (`Principal::Function`), so the IAM gate in
    /// front of the emulator checks every call against that function's role.
    pub intake: IntakeFn,
    pub sender: SenderFn,
    pub status: StatusFn,
    pub escalation: EscalationFn,
    /// The replies function, when the stack takes replies (`Replies=on`). Boxed: a pipeline is
    /// held across every await of a test, whose future lives on a 2 MiB test thread.
    pub replies: Option<Box<RepliesFn>>,
    /// The replies queue's event source mapping (polls with the replies function's role).
    replies_mapping_sqs: Option<aws_sdk_sqs::Client>,
    /// The harness's own ledger client (through the fault proxy when there is one): the test
    /// arranging state, or playing a function that crashed. Not checked by the IAM gate.
    pub ledger: DynamoLedger,
    /// The ledger read straight from the emulator (never through the fault proxy).
    pub inspect: DynamoLedger,
    sender_config: SenderConfig,
    failed_receipts: Mutex<Vec<String>>,
    /// The harness's own registry client.
    pub registry: DynamoRegistry,
    /// The harness's own SQS client (straight to the emulator): on-call reading the escalation
    /// queue, a producer the test plays.
    pub sqs: aws_sdk_sqs::Client,
    /// The sender's SQS event source mapping, which polls with the sender's role.
    pub mapping_sqs: aws_sdk_sqs::Client,
    pub logs: aws_sdk_cloudwatchlogs::Client,
    /// Under End User Messaging: the account's origination number the stand-in was given (a
    /// US toll-free number, 3 message parts per second unless a test says otherwise).
    pub origination: Option<tocsin_harness::eum::PhoneNumber>,
    /// Where the functions' clients connect: the fault proxy, or the emulator (its IAM gate).
    function_endpoint: String,
    seen_log_events: Mutex<HashSet<String>>,
}

fn env_of(stack: &Stack, function: &str, overrides: &[(&str, &str)]) -> Env {
    let mut vars = stack.function_env(function).unwrap_or_default();
    for (k, v) in overrides {
        vars.insert((*k).to_owned(), (*v).to_owned());
    }
    Env::from_map(vars)
}

/// The replies function and its queue's event source mapping, when the stack takes replies; and
/// what the account owner does after the deploy: two-way on for the origination number, its
/// channel the stack's replies topic.
#[allow(clippy::too_many_arguments)]
async fn replies_of(
    emulator: &Emulator,
    stack: &Stack,
    origination: Option<&tocsin_harness::eum::PhoneNumber>,
    direct: &aws_config::SdkConfig,
    function_endpoint: &str,
    overrides: &[(&str, &str)],
    clock: &TestClock,
    ledger_of: &dyn Fn(&aws_config::SdkConfig) -> DynamoLedger,
    registry_of: &dyn Fn(&aws_config::SdkConfig) -> DynamoRegistry,
) -> (Option<Box<RepliesFn>>, Option<aws_sdk_sqs::Client>) {
    if !stack.condition("TakesReplies").unwrap_or(false) {
        return (None, None);
    }
    let cfg =
        RepliesConfig::from_env(&mut env_of(stack, "RepliesFunction", overrides)).unwrap_or_else(|e| panic!("{e}"));
    let sdk = function_sdk(function_endpoint, "RepliesFunction").await;
    let topic = stack.topic("RepliesTopic").unwrap_or_else(|| panic!("Replies=on and no RepliesTopic"));
    if let Some(number) = origination {
        emulator.eum().enable_two_way(direct, number, topic).await.unwrap_or_else(|e| panic!("two-way: {e}"));
    }
    let mapping =
        Emulator::sdk_config_for(&emulator.endpoint(), &Principal::EventSourceMapping("RepliesFunction".into())).await;
    let handler = replies::Replies {
        store: ledger_of(&sdk),
        registry: registry_of(&sdk),
        gateway: SmsProvider::new(&sdk, &cfg.provider, cfg.publish_timeout),
        clock: clock.clone(),
        config: cfg,
    };
    (Some(Box::new(handler)), Some(aws_sdk_sqs::Client::new(&mapping)))
}

/// Options for building a pipeline.
#[derive(Default, Clone)]
pub struct Options {
    /// Environment overrides applied to every function (e.g. a shorter orphan wait).
    pub env: Vec<(&'static str, &'static str)>,
    /// Send SNS traffic to this endpoint instead of the emulator (a fault proxy in front of it).
    pub sns_endpoint: Option<String>,
    /// Put a fault proxy (with this seed) between every function and the emulator; the harness's
    /// own reads and the carrier's writes still go straight to the emulator.
    pub fault_seed: Option<u64>,
    /// Template parameters instead of their defaults (e.g. `CanaryNumber`). Without
    /// `SmsProvider` the pipeline sends through SNS: most scenarios play SNS's carrier by writing
    /// its delivery-status records ([`Pipeline::carrier_reports`]); End User Messaging's carrier is
    /// the stand-in ([`Options::end_user_messaging`]).
    pub parameters: Vec<(&'static str, &'static str)>,
}

impl Options {
    /// The pipeline sending through AWS End User Messaging SMS (the local stand-in): the stack's
    /// configuration set and event group provisioned, an account out of the sandbox with one
    /// active toll-free number.
    pub fn end_user_messaging() -> Self {
        Options {
            env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
            parameters: vec![("SmsProvider", "end-user-messaging")],
            ..Default::default()
        }
    }

    /// The pipeline sending through SNS.
    pub fn sns() -> Self {
        Options {
            env: vec![("TOCSIN_ORPHAN_WAIT", "0s")],
            parameters: vec![("SmsProvider", "sns")],
            ..Default::default()
        }
    }
}

/// The SDK configuration of function `logical_id` (its own credentials), reaching `endpoint`.
pub async fn function_sdk(endpoint: &str, logical_id: &str) -> aws_config::SdkConfig {
    Emulator::sdk_config_for(endpoint, &Principal::function(logical_id)).await
}

impl Pipeline {
    pub async fn start() -> Self {
        Self::start_with(Options { env: vec![("TOCSIN_ORPHAN_WAIT", "0s")], ..Default::default() }).await
    }

    pub async fn start_with(mut options: Options) -> Self {
        if !options.parameters.iter().any(|(k, _)| *k == "SmsProvider") {
            options.parameters.push(("SmsProvider", "sns"));
        }
        capture_metrics();
        let emulator = Emulator::start().await.unwrap_or_else(|e| panic!("emulator: {e}"));
        let direct = emulator.sdk_config().await;
        let stack = Stack::provision_with(&direct, LOCAL_STACK, &options.parameters)
            .await
            .unwrap_or_else(|e| panic!("provision: {e}"));
        if !options.parameters.is_empty() {
            // The roles as deployed with these parameters (their conditional statements follow).
            let parameters = options.parameters.clone();
            let principals =
                tokio::task::spawn_blocking(move || tocsin_harness::iam::principals_with(LOCAL_STACK, &parameters))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
                    .unwrap_or_else(|e| panic!("{e}"));
            emulator.iam().enforce(principals);
        }
        let origination = if stack.condition("UsesEndUserMessaging").unwrap_or(false) {
            // What an account owner does before the first send: leave the sandbox, get a number.
            let eum = emulator.eum();
            eum.production_account().await.unwrap_or_else(|e| panic!("stand-in account: {e}"));
            let number = eum
                .active_phone_number(&direct, aws_sdk_pinpointsmsvoicev2::types::RequestableNumberType::TollFree, "US")
                .await
                .unwrap_or_else(|e| panic!("stand-in number: {e}"));
            Some(number)
        } else {
            None
        };
        let proxy = match options.fault_seed {
            Some(seed) => Some(
                tocsin_harness::fault_proxy::FaultProxy::start(&emulator.endpoint(), seed)
                    .await
                    .unwrap_or_else(|e| panic!("proxy: {e}")),
            ),
            None => None,
        };
        // What the functions use: through the proxy when there is one.
        let function_endpoint = proxy.as_ref().map_or_else(|| emulator.endpoint(), |pr| pr.endpoint());
        let harness = Emulator::sdk_config_for(&function_endpoint, &Principal::Harness).await;
        let [intake_sdk, sender_sdk, status_sdk, escalation_sdk] = [
            function_sdk(&function_endpoint, "IntakeFunction").await,
            function_sdk(&function_endpoint, "SenderFunction").await,
            function_sdk(&function_endpoint, "StatusFunction").await,
            function_sdk(&function_endpoint, "EscalationFunction").await,
        ];
        let clock = TestClock::starting_now();
        let sqs = aws_sdk_sqs::Client::new(&direct);
        let ov = options.env.as_slice();

        let intake_cfg =
            IntakeConfig::from_env(&mut env_of(&stack, "IntakeFunction", ov)).unwrap_or_else(|e| panic!("{e}"));
        let sender_cfg =
            SenderConfig::from_env(&mut env_of(&stack, "SenderFunction", ov)).unwrap_or_else(|e| panic!("{e}"));
        let status_cfg =
            StatusConfig::from_env(&mut env_of(&stack, "StatusFunction", ov)).unwrap_or_else(|e| panic!("{e}"));
        let esc_cfg =
            EscalationConfig::from_env(&mut env_of(&stack, "EscalationFunction", ov)).unwrap_or_else(|e| panic!("{e}"));

        let (ledger_table, due_shards) = (intake_cfg.ledger_table.clone(), intake_cfg.due_shards);
        let recipients_table = sender_cfg.recipients_table.clone();
        let ledger_of = |sdk: &aws_config::SdkConfig| {
            DynamoLedger::new(aws_sdk_dynamodb::Client::new(sdk), &ledger_table).with_due_shards(due_shards)
        };
        let registry_of =
            |sdk: &aws_config::SdkConfig| DynamoRegistry::new(aws_sdk_dynamodb::Client::new(sdk), &recipients_table);
        let ledger = ledger_of(&harness);
        let registry = registry_of(&harness);
        let direct_ddb = aws_sdk_dynamodb::Client::new(&direct);
        let sns_sdk = match &options.sns_endpoint {
            Some(ep) => function_sdk(ep, "SenderFunction").await,
            None => sender_sdk.clone(),
        };
        let intake_sqs = aws_sdk_sqs::Client::new(&intake_sdk);
        let intake = intake::Intake {
            store: ledger_of(&intake_sdk),
            queue: SqsSendQueue::new(intake_sqs.clone(), &intake_cfg.send_queue_url)
                .with_urgent(&intake_cfg.urgent_queue_url),
            rejects: SqsRejectSink::new(intake_sqs, &intake_cfg.rejects_queue_url),
            clock: clock.clone(),
            roster: RosterCache::new(registry_of(&intake_sdk)),
            policies: PolicyCache::new(registry_of(&intake_sdk)),
            catalog: Catalog::builtin(),
            config: intake_cfg,
        };
        let sender = sender::Sender::new(
            ledger_of(&sender_sdk),
            registry_of(&sender_sdk),
            SmsProvider::new(&sns_sdk, &sender_cfg.provider, sender_cfg.publish_timeout),
            SqsSendQueue::new(aws_sdk_sqs::Client::new(&sender_sdk), &sender_cfg.send_queue_url)
                .with_urgent(&sender_cfg.urgent_queue_url),
            clock.clone(),
            sender_cfg.clone(),
        );
        let status = StatusFn {
            handler: status::StatusHandler {
                store: ledger_of(&status_sdk),
                registry: registry_of(&status_sdk),
                clock: clock.clone(),
                config: status_cfg,
                carriers_written: status::CarriersWritten::default(),
            },
            timeout: function_timeout(&stack, "StatusFunction"),
        };
        let escalation_sqs = aws_sdk_sqs::Client::new(&escalation_sdk);
        let escalation = escalation::Escalator {
            store: ledger_of(&escalation_sdk),
            send_queue: SqsSendQueue::new(escalation_sqs.clone(), &esc_cfg.send_queue_url)
                .with_urgent(&esc_cfg.urgent_queue_url),
            escalations: SqsEscalationQueue::new(escalation_sqs, &esc_cfg.escalation_queue_url),
            logs: ProviderLogs::new(aws_sdk_cloudwatchlogs::Client::new(&escalation_sdk), &esc_cfg.delivery_logs),
            registry: registry_of(&escalation_sdk),
            clock: clock.clone(),
            config: esc_cfg,
        };
        let mapping =
            Emulator::sdk_config_for(&emulator.endpoint(), &Principal::EventSourceMapping("SenderFunction".into()))
                .await;
        // Replies: the function, its queue's event source mapping, and what the account owner
        // does after the deploy - two-way on for the origination number, its channel the topic.
        // Boxed: the pipeline's start is a deep future already (a test thread's stack is small).
        let (replies, replies_mapping_sqs) = Box::pin(replies_of(
            &emulator,
            &stack,
            origination.as_ref(),
            &direct,
            &function_endpoint,
            ov,
            &clock,
            &ledger_of,
            &registry_of,
        ))
        .await;
        Pipeline {
            logs: aws_sdk_cloudwatchlogs::Client::new(&direct),
            inspect: DynamoLedger::new(direct_ddb, stack.table("LedgerTable"))
                .with_due_shards(ledger.due_shard_count()),
            proxy,
            emulator,
            stack,
            clock,
            intake,
            sender,
            status,
            escalation,
            replies,
            replies_mapping_sqs,
            ledger,
            sender_config: sender_cfg,
            failed_receipts: Mutex::new(Vec::new()),
            registry,
            sqs,
            mapping_sqs: aws_sdk_sqs::Client::new(&mapping),
            origination,
            function_endpoint,
            seen_log_events: Mutex::new(HashSet::new()),
        }
    }

    /// Function `logical_id`'s SDK configuration (its own credentials), reaching the emulator
    /// the way the pipeline's functions do (through the fault proxy when there is one).
    pub async fn sdk_of(&self, logical_id: &str) -> aws_config::SdkConfig {
        function_sdk(&self.function_endpoint, logical_id).await
    }

    /// Fails the test with every call the IAM gate denied so far (each names the function, the
    /// action, the resource and the statement that is missing). Called after every function
    /// invocation the pipeline makes, so the test that made the call fails there — even when the
    /// function swallowed the AccessDenied.
    pub fn assert_iam_allowed(&self) {
        self.emulator.iam().assert_no_denials();
    }

    /// Rebuilds the sender so its SNS client talks to `endpoint` (a fault proxy, a closed port).
    pub async fn with_sns_endpoint(mut self, endpoint: &str) -> Self {
        let sdk = function_sdk(endpoint, "SenderFunction").await;
        self.sender = sender::Sender::new(
            self.sender.store.clone(),
            self.sender.registry.clone(),
            SmsProvider::new(&sdk, &self.sender_config.provider, self.sender_config.publish_timeout),
            self.sender.queue.clone(),
            self.clock.clone(),
            self.sender_config.clone(),
        );
        self
    }

    /// The same intake, enqueueing through `sqs` to `send_queue_url` (a queue that does not exist,
    /// a client behind a fault proxy): for the enqueue-failure scenarios. `sqs` should sign as
    /// the intake function (`function_sdk(endpoint, "IntakeFunction")`).
    pub fn intake_enqueueing_to(&self, sqs: aws_sdk_sqs::Client, send_queue_url: &str) -> IntakeFn {
        intake::Intake {
            store: self.intake.store.clone(),
            queue: SqsSendQueue::new(sqs.clone(), send_queue_url),
            rejects: SqsRejectSink::new(sqs, &self.stack.queue("IntakeRejectsQueue").url),
            clock: self.clock.clone(),
            roster: RosterCache::new(self.intake.roster.source().clone()),
            policies: PolicyCache::new(self.intake.policies.source().clone()),
            config: self.intake.config.clone(),
            catalog: Catalog::builtin(),
        }
    }

    /// An intake of this stack under another configuration (an earlier deployment's SMS policy,
    /// say): the same table, queues and clock.
    pub fn intake_configured(&self, config: IntakeConfig) -> IntakeFn {
        intake::Intake {
            store: self.intake.store.clone(),
            queue: self.intake.queue.clone(),
            rejects: self.intake.rejects.clone(),
            clock: self.clock.clone(),
            roster: RosterCache::new(self.intake.roster.source().clone()),
            policies: PolicyCache::new(self.intake.policies.source().clone()),
            config,
            catalog: Catalog::builtin(),
        }
    }

    /// Takes the IAM gate's denials so far, asserting that `action` on a resource containing
    /// `resource` is among them and that every one is on that resource: for a test that makes
    /// such a call on purpose.
    pub fn expect_iam_denied(&self, action: &str, resource: &str) -> Vec<tocsin_harness::iam::Denial> {
        let denials = self.emulator.iam().take_denials();
        assert!(
            denials.iter().any(|d| d.action == action && d.resource.contains(resource)),
            "expected {action} on …{resource}… to be denied; denied: {denials:#?}"
        );
        for d in &denials {
            assert!(d.resource.contains(resource), "expected denials on …{resource}… only; also:\n{}", d.message);
        }
        denials
    }

    /// Puts another send request for `key` on the queue (a redelivery, a duplicate producer).
    pub async fn enqueue_again(&self, key: &IdempotencyKey) {
        use tocsin::ports::SendQueue;
        SqsSendQueue::new(self.sqs.clone(), &self.stack.queue("SendQueue").url)
            .enqueue(key, tocsin::domain::storm::Lane::Normal, std::time::Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("enqueue: {e}"));
    }

    /// Ends the backoff of every message the sender reported as failed (instead of waiting).
    pub async fn make_send_queue_visible(&self) {
        let url = self.stack.queue("SendQueue").url.clone();
        let handles: Vec<String> = std::mem::take(&mut *self.failed_receipts.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = self
                .sqs
                .change_message_visibility()
                .queue_url(&url)
                .receipt_handle(h)
                .visibility_timeout(0)
                .send()
                .await;
        }
    }

    /// API Gateway (HTTP API) invoking intake with `body`: (status code, JSON body).
    pub async fn submit(&self, body: &Value) -> (u16, Value) {
        let event = tocsin_harness::events::http_api_post(&body.to_string());
        self.invoke_intake(event).await
    }

    pub async fn invoke_intake(&self, event: Value) -> (u16, Value) {
        let resp = self.intake.handle(event).await;
        self.assert_iam_allowed();
        let resp = resp.unwrap_or_else(|e| panic!("intake failed: {e}"));
        let status = resp["statusCode"].as_u64().unwrap_or(0) as u16;
        let body = resp["body"].as_str().and_then(|b| serde_json::from_str(b).ok()).unwrap_or(Value::Null);
        (status, body)
    }

    /// Receives up to `max` messages from a queue (visible now), as the harness.
    pub async fn receive(&self, queue_url: &str, max: i32) -> Vec<aws_sdk_sqs::types::Message> {
        receive_with(&self.sqs, queue_url, max).await
    }

    /// The SQS event source mapping: hands queued messages to the sender in batches of ten and
    /// deletes those not reported as failures, polling with the sender's role as Lambda's mapping
    /// does. Returns every batch response.
    pub async fn run_sender(&self) -> Vec<SqsBatchResponse> {
        let q = self.stack.queue("SendQueue").clone();
        let mut responses = Vec::new();
        loop {
            let msgs = receive_with(&self.mapping_sqs, &q.url, 10).await;
            self.assert_iam_allowed();
            if msgs.is_empty() {
                break;
            }
            let event = tocsin_harness::events::sqs_event(&q.arn, &msgs);
            let resp = Box::pin(self.sender.handle(event, self.clock.invocation_deadline())).await;
            self.assert_iam_allowed();
            let failed: HashSet<&str> = resp.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
            for m in &msgs {
                if failed.contains(m.message_id.as_deref().unwrap_or_default()) {
                    if let Some(h) = &m.receipt_handle {
                        self.failed_receipts.lock().unwrap_or_else(|e| e.into_inner()).push(h.clone());
                    }
                } else {
                    self.acknowledge(&q.url, std::slice::from_ref(m)).await;
                }
            }
            responses.push(resp);
        }
        responses
    }

    /// Deletes `messages` from the queue, as the event source mapping does with those a batch
    /// finished (with the sender's role).
    pub async fn acknowledge(&self, queue_url: &str, messages: &[aws_sdk_sqs::types::Message]) {
        for m in messages {
            let _ = self
                .mapping_sqs
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                .send()
                .await;
        }
    }

    /// SNS playing the carrier: writes a delivery-status record (real format) to the success or
    /// failure log group.
    pub async fn carrier_reports(
        &self,
        sns_message_id: &str,
        destination: &str,
        success: bool,
        provider_response: &str,
    ) {
        let group = if success { "SmsSuccessLogGroup" } else { "SmsFailureLogGroup" };
        let message = sns_delivery_record(sns_message_id, destination, success, provider_response, self.clock.now());
        self.put_log(self.stack.log_group(group), &message).await;
    }

    pub async fn put_log(&self, group: &str, message: &str) {
        let stream = "sms-delivery";
        let _ = self.logs.create_log_stream().log_group_name(group).log_stream_name(stream).send().await;
        self.logs
            .put_log_events()
            .log_group_name(group)
            .log_stream_name(stream)
            .log_events(
                aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
                    .timestamp(Utc::now().timestamp_millis())
                    .message(message)
                    .build()
                    .unwrap_or_else(|e| panic!("{e}")),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("put_log_events: {e}"));
    }

    /// Whether the stack sends through End User Messaging (else SNS).
    pub fn uses_end_user_messaging(&self) -> bool {
        self.stack.condition("UsesEndUserMessaging").unwrap_or(false)
    }

    /// The log groups the status function is subscribed to: the stack's End User Messaging event
    /// group, or the two SNS delivery-status groups.
    pub fn delivery_log_groups(&self) -> Vec<String> {
        let ids: &[&str] = if self.uses_end_user_messaging() {
            &["SmsEventLogGroup"]
        } else {
            &["SmsSuccessLogGroup", "SmsFailureLogGroup"]
        };
        ids.iter().map(|id| self.stack.log_group(id).to_owned()).filter(|g| !g.is_empty()).collect()
    }

    /// The CloudWatch Logs subscription: reads new events of the delivery log groups and hands
    /// them to the status function (gzip + base64 envelope, real event ids).
    pub async fn run_status(&self) -> Vec<status::Summary> {
        let mut out = Vec::new();
        for name in self.delivery_log_groups() {
            let events = self
                .logs
                .filter_log_events()
                .log_group_name(&name)
                .send()
                .await
                .unwrap_or_else(|e| panic!("filter_log_events: {e}"))
                .events
                .unwrap_or_default();
            let lines: Vec<LogLine> = {
                let mut seen = self.seen_log_events.lock().unwrap_or_else(|e| e.into_inner());
                events
                    .into_iter()
                    .filter_map(|e| {
                        let id = format!("{name}:{}", e.event_id?);
                        seen.insert(id.clone()).then(|| LogLine {
                            id: id.rsplit(':').next().unwrap_or_default().to_owned(),
                            timestamp: e.timestamp.unwrap_or_default(),
                            message: e.message.unwrap_or_default(),
                        })
                    })
                    .collect()
            };
            if lines.is_empty() {
                continue;
            }
            let event = logs_envelope(&logs_payload(&name, "DATA_MESSAGE", &lines));
            let summary = Box::pin(self.status.handle(event)).await;
            self.assert_iam_allowed();
            out.push(summary.unwrap_or_else(|e| panic!("status failed: {e}")));
        }
        out
    }

    /// The replies queue's event source mapping: hands what the two-way topic delivered to the
    /// replies function in batches of ten, deleting what it finished (with the function's role).
    /// Returns every batch response.
    pub async fn run_replies(&self) -> Vec<SqsBatchResponse> {
        let (Some(handler), Some(sqs)) = (&self.replies, &self.replies_mapping_sqs) else {
            panic!("the stack takes no replies (Replies=off)")
        };
        let q = self.stack.queue("RepliesQueue").clone();
        let mut responses = Vec::new();
        loop {
            let msgs = receive_with(sqs, &q.url, 10).await;
            self.assert_iam_allowed();
            if msgs.is_empty() {
                break;
            }
            let event = tocsin_harness::events::sqs_event(&q.arn, &msgs);
            let resp = handler.handle(event).await;
            self.assert_iam_allowed();
            let failed: HashSet<&str> = resp.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
            for m in msgs.iter().filter(|m| !failed.contains(m.message_id.as_deref().unwrap_or_default())) {
                let _ = sqs
                    .delete_message()
                    .queue_url(&q.url)
                    .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                    .send()
                    .await;
            }
            let stop = !failed.is_empty();
            responses.push(resp);
            if stop {
                break;
            }
        }
        responses
    }

    /// As [`Self::replies_handled`], how each ended.
    pub async fn reply_outcomes(&self) -> Vec<replies::Outcome> {
        self.replies_handled().await.into_iter().map(|h| h.outcome).collect()
    }

    /// As [`Self::run_replies`], one record at a time, returning how each ended and what became
    /// of its confirmation (what the function's metrics count).
    pub async fn replies_handled(&self) -> Vec<replies::Handled> {
        let (Some(handler), Some(sqs)) = (&self.replies, &self.replies_mapping_sqs) else {
            panic!("the stack takes no replies (Replies=off)")
        };
        let q = self.stack.queue("RepliesQueue").clone();
        let mut out = Vec::new();
        loop {
            let msgs = receive_with(sqs, &q.url, 10).await;
            if msgs.is_empty() {
                break;
            }
            let event = tocsin_harness::events::sqs_event(&q.arn, &msgs);
            for (record, m) in event.records.iter().zip(&msgs) {
                let outcome = handler.process(record).await;
                self.assert_iam_allowed();
                if !outcome.outcome.unfinished() {
                    let handle = m.receipt_handle.clone().unwrap_or_default();
                    let _ = sqs.delete_message().queue_url(&q.url).receipt_handle(handle).send().await;
                }
                out.push(outcome);
            }
        }
        out
    }

    /// A person texts `text` from `from` to the stack's origination number (End User Messaging
    /// publishes it to the replies topic). Returns its `inboundMessageId`.
    pub async fn person_replies(&self, from: &str, text: &str) -> String {
        let to = self.origination.as_ref().map(|n| n.number.clone()).unwrap_or_else(|| panic!("no origination number"));
        self.emulator
            .eum()
            .reply(from, &to, text, 1)
            .await
            .unwrap_or_else(|e| panic!("reply: {e}"))
            .unwrap_or_else(|| panic!("two-way is off: the reply was dropped"))
    }

    /// The schedule firing the escalation sweep (with a generous time budget).
    pub async fn run_escalation(&self) -> escalation::RunSummary {
        self.run_escalation_within(std::time::Duration::from_secs(50)).await
    }

    /// One sweep run that stops (as the Lambda does before its timeout) after `budget`.
    pub async fn run_escalation_within(&self, budget: std::time::Duration) -> escalation::RunSummary {
        let stop = self.clock.in_(budget);
        // Boxed, as in the function's main: the sweep's future is too deep for a test thread's stack.
        let summary = Box::pin(self.escalation.run(stop)).await;
        self.assert_iam_allowed();
        summary.unwrap_or_else(|e| panic!("escalation failed: {e}"))
    }

    /// What on-call finds on the escalation queue (received and deleted).
    pub async fn escalations(&self) -> Vec<(EscalationMessage, HashMap<String, String>)> {
        let url = self.stack.queue("EscalationQueue").url.clone();
        let msgs = self.receive(&url, 1000).await;
        let mut out = Vec::new();
        for m in msgs {
            let body: EscalationMessage = serde_json::from_str(m.body.as_deref().unwrap_or_default())
                .unwrap_or_else(|e| panic!("escalation body: {e}"));
            let attrs = m
                .message_attributes
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.string_value.unwrap_or_default()))
                .collect();
            let _ = self
                .sqs
                .delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle.unwrap_or_default())
                .send()
                .await;
            out.push((body, attrs));
        }
        out
    }

    pub async fn record(&self, key: &IdempotencyKey) -> IntentRecord {
        self.inspect.get(key).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|| panic!("no intent {key}"))
    }

    pub async fn timeline(&self, key: &IdempotencyKey) -> Vec<Observation> {
        self.inspect.observations(key).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Takes SNS message `id`'s index item out of the ledger, as if the sender's MessageId write
    /// had not landed yet; [`Self::put_back`] lands it.
    pub async fn take_message_index(&self, id: &str) -> HashMap<String, aws_sdk_dynamodb::types::AttributeValue> {
        use aws_sdk_dynamodb::types::AttributeValue;
        let ddb = aws_sdk_dynamodb::Client::new(&self.emulator.sdk_config().await);
        ddb.delete_item()
            .table_name(self.stack.table("LedgerTable"))
            .key("pk", AttributeValue::S(format!("MSG#{id}")))
            .key("sk", AttributeValue::S("MSG".into()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .attributes
            .expect("the sender indexed its message id")
    }

    /// Writes `item` back into the ledger (one [`Self::take_message_index`] took).
    pub async fn put_back(&self, item: HashMap<String, aws_sdk_dynamodb::types::AttributeValue>) {
        let ddb = aws_sdk_dynamodb::Client::new(&self.emulator.sdk_config().await);
        ddb.put_item()
            .table_name(self.stack.table("LedgerTable"))
            .set_item(Some(item))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The ledger's items about alerts (0: nothing was written): intents, observations, indexes,
    /// digests, escalations — not the producers' minute counters (`PRODUCER#`), which count requests,
    /// nor the stack's SMS spend meter (`METER#`), which counts parts.
    pub async fn ledger_item_count(&self) -> usize {
        let ddb = aws_sdk_dynamodb::Client::new(&self.emulator.sdk_config().await);
        let r = ddb
            .scan()
            .table_name(self.stack.table("LedgerTable"))
            .filter_expression("NOT begins_with(pk, :producer) AND NOT begins_with(pk, :meter)")
            .expression_attribute_values(":producer", aws_sdk_dynamodb::types::AttributeValue::S("PRODUCER#".into()))
            .expression_attribute_values(":meter", aws_sdk_dynamodb::types::AttributeValue::S("METER#".into()))
            .select(aws_sdk_dynamodb::types::Select::Count)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        r.count as usize
    }

    /// From now on the functions' due-index queries answer from a copy of the ledger taken at
    /// this moment, as a lagging GSI would: base-table reads and writes still go to the real
    /// table. Needs the fault proxy (`Options::fault_seed`); calling it again takes a new copy.
    pub async fn lag_due_index(&self) {
        use aws_sdk_dynamodb::types::{GlobalSecondaryIndex, PutRequest, WriteRequest};
        let proxy = self.proxy.as_ref().unwrap_or_else(|| panic!("lag_due_index needs Options::fault_seed"));
        let ddb = aws_sdk_dynamodb::Client::new(&self.emulator.sdk_config().await);
        let table = self.stack.table("LedgerTable").to_owned();
        let lagging = format!("{table}-lagging");
        let _ = ddb.delete_table().table_name(&lagging).send().await;
        let d = ddb.describe_table().table_name(&table).send().await.unwrap_or_else(|e| panic!("{e}"));
        let d = d.table.unwrap_or_else(|| panic!("no description of {table}"));
        let gsis: Vec<GlobalSecondaryIndex> = d
            .global_secondary_indexes()
            .iter()
            .map(|g| {
                GlobalSecondaryIndex::builder()
                    .index_name(g.index_name().unwrap_or_default())
                    .set_key_schema(g.key_schema.clone())
                    .set_projection(g.projection.clone())
                    .build()
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        ddb.create_table()
            .table_name(&lagging)
            .set_attribute_definitions(d.attribute_definitions.clone())
            .set_key_schema(d.key_schema.clone())
            .set_global_secondary_indexes(Some(gsis))
            .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
            .send()
            .await
            .unwrap_or_else(|e| panic!("create {lagging}: {e}"));
        let mut start = None;
        loop {
            let page = ddb
                .scan()
                .table_name(&table)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            for chunk in page.items().chunks(25) {
                let writes = chunk
                    .iter()
                    .map(|i| {
                        WriteRequest::builder()
                            .put_request(
                                PutRequest::builder()
                                    .set_item(Some(i.clone()))
                                    .build()
                                    .unwrap_or_else(|e| panic!("{e}")),
                            )
                            .build()
                    })
                    .collect();
                ddb.batch_write_item().request_items(&lagging, writes).send().await.unwrap_or_else(|e| panic!("{e}"));
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        // For IAM, the snapshot is the ledger's index: the gate authorizes it as the real one.
        let arn = |t: &str| format!("arn:aws:dynamodb:us-east-1:123456789012:table/{t}/");
        self.emulator.iam().authorize_as(&arn(&lagging), &arn(&table));
        proxy.clear_rules();
        proxy.add_rule(
            tocsin_harness::fault_proxy::Rule::sometimes(
                "DynamoDB_20120810.Query",
                tocsin_harness::fault_proxy::Fault::Rewrite {
                    from: format!("\"TableName\":\"{table}\""),
                    to: format!("\"TableName\":\"{lagging}\""),
                },
                1.0,
            )
            .when_body_contains("\"IndexName\":\"due-index\""),
        );
    }

    /// EventBridge Scheduler running the canary's schedule (`CanaryRun`, with `CanaryNumber` set)
    /// for the run scheduled at `scheduled`: its target input from template.yaml, the context
    /// attributes filled in as Scheduler fills them, handed to intake as Scheduler invokes it.
    /// `None` when the stack has no canary (the schedule's condition is false).
    pub async fn run_canary_schedule(&self, scheduled: DateTime<Utc>) -> Option<Value> {
        let template = self.stack.template();
        let run = template.get("Resources").and_then(|r| r.get("CanaryRun"))?;
        if !self.stack.is_created(run).unwrap_or_else(|e| panic!("{e}")) {
            return None;
        }
        let input = run
            .get("Properties")
            .and_then(|p| p.get("Target"))
            .and_then(|t| t.get("Input"))
            .unwrap_or_else(|| panic!("CanaryRun has no Target.Input"));
        let input = self.stack.resolve(input).unwrap_or_else(|e| panic!("CanaryRun input: {e}"));
        let time = scheduled.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let filled = input
            .replace("<aws.scheduler.scheduled-time>", &time)
            .replace("<aws.scheduler.execution-id>", &uuid_like(&time))
            .replace("<aws.scheduler.schedule-arn>", "arn:aws:scheduler:us-east-1:123456789012:schedule/default/canary")
            .replace("<aws.scheduler.attempt-number>", "1");
        let event: Value =
            serde_json::from_str(&filled).unwrap_or_else(|e| panic!("canary input is not JSON ({e}): {filled}"));
        self.intake.handle(event.clone()).await.unwrap_or_else(|e| panic!("intake failed: {e}"));
        Some(event)
    }

    /// Messages waiting on a queue (visible and in flight).
    pub async fn queue_depth(&self, logical_id: &str) -> usize {
        let url = self.stack.queue(logical_id).url.clone();
        let r = self
            .sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let attrs = r.attributes.unwrap_or_default();
        attrs.values().filter_map(|v| v.parse::<usize>().ok()).sum()
    }
}

/// Receives up to `max` messages from a queue (visible now) with `sqs`.
pub async fn receive_with(sqs: &aws_sdk_sqs::Client, queue_url: &str, max: i32) -> Vec<aws_sdk_sqs::types::Message> {
    let mut out = Vec::new();
    loop {
        let want = (max - out.len() as i32).clamp(0, 10);
        if want == 0 {
            break;
        }
        let r = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(want)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap_or_else(|e| panic!("receive: {e}"));
        let msgs = r.messages.unwrap_or_default();
        if msgs.is_empty() {
            break;
        }
        out.extend(msgs);
    }
    out
}

/// Test runs write EMF metric lines to files instead of stdout, one per test:
/// `target/tocsin-test-metrics/<test binary>/<test name>.jsonl`, emptied when the test starts its
/// pipeline. A line is filed under the thread that emits it — libtest names each test's thread
/// after the test, and a `#[tokio::test]` body runs there; lines from spawned tasks (runtime
/// worker threads) go to `untracked.jsonl`.
fn capture_metrics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tocsin::telemetry::set_metrics_sink(Box::new(PerTestMetrics)));
    let _ = std::fs::remove_file(metrics_file());
}

/// The EMF lines this test has emitted so far (see `capture_metrics`).
pub fn emitted_metrics() -> String {
    std::fs::read_to_string(metrics_file()).unwrap_or_default()
}

/// This thread's metrics file: the test binary's name without cargo's hash, the test's name.
fn metrics_file() -> std::path::PathBuf {
    let tocsin_harness::iam::coverage::TestId { binary, test } = tocsin_harness::iam::coverage::current_test();
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tocsin_harness::workspace_root().join("target"))
        .join("tocsin-test-metrics")
        .join(binary);
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!("{test}.jsonl"))
}

/// Appends each write to the emitting test's file (the telemetry sink's lock serialises writers).
struct PerTestMetrics;

impl std::io::Write for PerTestMetrics {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(metrics_file())?;
        std::io::Write::write_all(&mut file, buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An execution id as Scheduler makes one (distinct per run; only its shape matters here).
fn uuid_like(seed: &str) -> String {
    let h = seed.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    format!("{:08x}-0000-4000-8000-{:012x}", h >> 32, h & 0xffff_ffff_ffff)
}

/// A valid alert request body for the built-in `disk_full` template.
pub fn alert(event_id: &str, recipient: &str) -> Value {
    serde_json::json!({
        "event_id": event_id,
        "template": {"name": "disk_full", "version": 1},
        "variables": {"host": "db-1", "mount": "/var", "percent": "97"},
        "recipient": recipient,
        "deadline": "15m"
    })
}

/// The key in an intake answer.
pub fn key_of(body: &Value) -> IdempotencyKey {
    IdempotencyKey::parse(body["idempotency_key"].as_str().unwrap_or_default())
        .unwrap_or_else(|_| panic!("no key in {body}"))
}
