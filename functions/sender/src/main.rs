//! The sender Lambda: configuration, clients, adapters, then the runtime loop.

use std::time::{Instant, SystemTime};

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tocsin::adapters::dynamodb::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::adapters::sns::SnsGateway;
use tocsin::adapters::sqs::SqsSendQueue;
use tocsin::config::{Env, SenderConfig};
use tocsin::ports::SystemClock;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = SenderConfig::from_env(&mut Env::from_process())?;
    let aws = tocsin::adapters::sdk::config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let sender = sender::Sender::new(
        DynamoLedger::new(dynamodb.clone(), &config.ledger_table),
        DynamoRegistry::new(dynamodb, &config.recipients_table),
        SnsGateway::new(&aws, config.publish_timeout),
        SqsSendQueue::new(aws_sdk_sqs::Client::new(&aws), &config.send_queue_url).with_urgent(&config.urgent_queue_url),
        SystemClock,
        config,
    );
    let sender = &sender;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        // The context deadline (wall clock) as a point on the monotonic clock the handler waits on.
        let left = event.context.deadline().duration_since(SystemTime::now()).unwrap_or_default();
        Ok::<_, std::convert::Infallible>(sender.handle(event.payload, Instant::now() + left).await)
    }))
    .await
}
