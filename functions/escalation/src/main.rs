//! The escalation Lambda (scheduled): configuration, clients, adapters, then the runtime loop.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::adapters::sms::ProviderLogs;
use tocsin::adapters::sqs::{SqsEscalationQueue, SqsSendQueue};
use tocsin::config::{Env, EscalationConfig};
use tocsin::ports::System;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = EscalationConfig::from_env(&mut Env::from_process())?;
    let aws = tocsin::adapters::sdk::config().await?;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let escalator = escalation::Escalator {
        store: DynamoLedger::new(dynamodb.clone(), &config.ledger_table).with_due_shards(config.due_shards),
        send_queue: SqsSendQueue::new(sqs.clone(), &config.send_queue_url).with_urgent(&config.urgent_queue_url),
        escalations: SqsEscalationQueue::new(sqs, &config.escalation_queue_url),
        logs: ProviderLogs::new(aws_sdk_cloudwatchlogs::Client::new(&aws), &config.delivery_logs),
        registry: DynamoRegistry::new(dynamodb, &config.recipients_table),
        clock: System,
        config,
    };
    let escalator = &escalator;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        // Stop taking work the configured margin before Lambda's deadline.
        let deadline = tocsin::ports::invocation_deadline(event.context.deadline);
        // Boxed: the sweep's future is deep enough to overflow rustc's layout query limit inline.
        Box::pin(escalator.run(tocsin::ports::before(deadline, escalator.config.safety_margin))).await
    }))
    .await
}
