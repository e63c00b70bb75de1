//! The floor for cold-start comparisons: a bare `lambda_runtime` function that echoes its event
//! (no configuration, no SDK clients, no telemetry), on the same tokio runtime as the functions
//! (`current_thread`, as `functions/*/src/main.rs` start theirs).

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    run(service_fn(|event: LambdaEvent<Value>| async move { Ok::<Value, Error>(event.payload) })).await
}
