//! The status Lambda: configuration, clients, adapters, then the runtime loop.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::config::{Env, StatusConfig};
use tocsin::ports::System;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = StatusConfig::from_env(&mut Env::from_process())?;
    let aws = tocsin::adapters::sdk::config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let handler = status::StatusHandler {
        store: DynamoLedger::new(dynamodb.clone(), &config.ledger_table),
        registry: DynamoRegistry::new(dynamodb, &config.recipients_table),
        clock: System,
        config,
        carriers_written: status::CarriersWritten::default(),
    };
    let handler = &handler;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = tocsin::ports::invocation_deadline(event.context.deadline);
        handler.handle(event.payload, deadline).await
    }))
    .await
}
