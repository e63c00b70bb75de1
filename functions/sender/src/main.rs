//! The sender Lambda: configuration, clients, adapters, then the runtime loop.

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::adapters::sms::SmsProvider;
use tocsin::adapters::sqs::SqsSendQueue;
use tocsin::config::{Env, SenderConfig};
use tocsin::ports::System;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = SenderConfig::from_env(&mut Env::from_process())?;
    let aws = tocsin::adapters::sdk::config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let sender = sender::Sender::new(
        DynamoLedger::new(dynamodb.clone(), &config.ledger_table),
        DynamoRegistry::new(dynamodb, &config.recipients_table),
        SmsProvider::new(&aws, &config.provider, config.publish_timeout),
        SqsSendQueue::new(aws_sdk_sqs::Client::new(&aws), &config.send_queue_url).with_urgent(&config.urgent_queue_url),
        System,
        config,
    );
    let sender = &sender;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let deadline = tocsin::ports::invocation_deadline(event.context.deadline);
        Ok::<_, std::convert::Infallible>(sender.handle(event.payload, deadline).await)
    }))
    .await
}
