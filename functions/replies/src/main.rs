//! The replies Lambda: configuration, clients, adapters, then the runtime loop.

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::adapters::sms::SmsProvider;
use tocsin::config::{Env, RepliesConfig};
use tocsin::ports::System;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = RepliesConfig::from_env(&mut Env::from_process())?;
    let aws = tocsin::adapters::sdk::config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let replies = replies::Replies {
        store: DynamoLedger::new(dynamodb.clone(), &config.ledger_table),
        registry: DynamoRegistry::new(dynamodb, &config.recipients_table),
        gateway: SmsProvider::new(&aws, &config.provider, config.publish_timeout),
        clock: System,
        config,
    };
    let replies = &replies;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<_, std::convert::Infallible>(replies.handle(event.payload).await)
    }))
    .await
}
