//! Where the status function's init and first-invocation CPU goes: the steps of
//! `functions/status/src/main.rs`, one at a time, then what its first invocation does lazily (the
//! first DynamoDB request: credentials resolved and cached, endpoint resolution, the connection)
//! against a second, identical request (the steady state). Run by the bench in a fresh process with
//! the status function's environment; prints one JSON object of CPU milliseconds per step.
//!
//! The SDK configuration is the functions' own (`tocsin::adapters::sdk::config`: region and
//! credentials from the environment, one shared HTTPS client with compiled-in roots, its connector
//! built in init), or, for comparison, with `TOCSIN_INIT_STAGES_LOADER=load_from_env`,
//! `aws_config::load_from_env`'s default chains and default HTTPS client per SDK client (what the
//! functions did before), or with `TOCSIN_INIT_STAGES_LOADER=env` region and credentials from the
//! environment only but still the default HTTPS client per SDK client. A second client (SQS, as
//! the other functions build) shows what each further client costs.
//!
//! Each step's CPU time is read from the process's CPU clock (all threads) around it.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tocsin::config::{Env, StatusConfig};
use tocsin_bench::cpu_clock;

fn settled() -> Duration {
    cpu_clock::own().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let mut steps: Vec<(&str, f64)> = Vec::new();
    let mut last = settled();
    steps.push(("exec, loading, tokio runtime (to main)", ms(last)));
    let mut step = |name: &'static str, steps: &mut Vec<(&str, f64)>| {
        let now = settled();
        steps.push((name, ms(now.saturating_sub(last))));
        last = now;
    };
    tocsin::telemetry::init();
    step("telemetry::init (JSON log subscriber, level filter)", &mut steps);
    let config = match StatusConfig::from_env(&mut Env::from_process()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("init-stages: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    step("StatusConfig::from_env", &mut steps);
    let aws = match std::env::var("TOCSIN_INIT_STAGES_LOADER").as_deref() {
        Ok("load_from_env") => aws_config::load_from_env().await,
        Ok("env") => {
            aws_config::defaults(aws_config::BehaviorVersion::latest())
                .region(aws_config::environment::EnvironmentVariableRegionProvider::new())
                .credentials_provider(aws_config::environment::EnvironmentVariableCredentialsProvider::new())
                .load()
                .await
        }
        _ => match tocsin::adapters::sdk::config().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("init-stages: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
    };
    step("SDK configuration (region and credential providers, HTTP client)", &mut steps);
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    step("aws_sdk_dynamodb::Client::new", &mut steps);
    let sqs = aws_sdk_sqs::Client::new(&aws);
    step("aws_sdk_sqs::Client::new (a second client, as the other functions build)", &mut steps);
    drop(sqs);
    let get = || {
        dynamodb
            .get_item()
            .table_name(&config.ledger_table)
            .key("pk", AttributeValue::S("MSG#init-stages".into()))
            .key("sk", AttributeValue::S("MSG".into()))
            .send()
    };
    let first = get().await;
    step(
        "first GetItem (lazy: credentials, endpoint, connection, SigV4; the HTTP connector unless built in init)",
        &mut steps,
    );
    let second = get().await;
    step("second GetItem (steady state: SigV4, serialization, HTTP)", &mut steps);
    let failed = [first.err(), second.err()].into_iter().flatten().map(|e| format!("{e:?}")).collect::<Vec<_>>();
    let out = serde_json::json!({
        "steps": steps.iter().map(|(n, v)| serde_json::json!([n, v])).collect::<Vec<_>>(),
        "errors": failed,
    });
    println!("{out}");
    std::process::ExitCode::SUCCESS
}
