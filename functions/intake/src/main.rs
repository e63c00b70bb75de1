//! The intake Lambda: configuration, clients, adapters, then the runtime loop.
// The handler's future nests the ports' futures deeply (the SDK's included); computing its
// layout needs more than the default 128 levels.
#![recursion_limit = "256"]

use intake::chain_policy::PolicyCache;
use intake::roster::RosterCache;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::adapters::sqs::{SqsRejectSink, SqsSendQueue};
use tocsin::config::{Env, IntakeConfig};
use tocsin::domain::template::Catalog;
use tocsin::ports::System;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = IntakeConfig::from_env(&mut Env::from_process())?;
    let aws = tocsin::adapters::sdk::config().await?;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let intake = intake::Intake {
        store: DynamoLedger::new(dynamodb.clone(), &config.ledger_table).with_due_shards(config.due_shards),
        roster: RosterCache::new(DynamoRegistry::new(dynamodb.clone(), &config.recipients_table)),
        policies: PolicyCache::new(DynamoRegistry::new(dynamodb, &config.recipients_table)),
        queue: SqsSendQueue::new(sqs.clone(), &config.send_queue_url).with_urgent(&config.urgent_queue_url),
        rejects: SqsRejectSink::new(sqs, &config.rejects_queue_url),
        clock: System,
        catalog: Catalog::builtin(),
        config,
    };
    let intake = &intake;
    run(service_fn(move |event: LambdaEvent<Value>| async move { intake.handle(event.payload).await })).await
}
