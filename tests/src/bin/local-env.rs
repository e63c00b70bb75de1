//! `cargo run -p tocsin-tests --bin local-env`: a local stack for running the functions by hand.
//!
//! Starts the emulator, creates the stack's resources from template.yaml (as the tests do) and
//! writes each function's environment — template.yaml's Globals merged with the function's own,
//! resolved against the local resources, plus the emulator's AWS variables — to
//! `target/tocsin-local/`:
//! - `env`: every function's variables in one `KEY=VALUE` file, for
//!   `cargo lambda watch --env-file target/tocsin-local/env` (one watcher runs every function, so
//!   it signs as the harness: the IAM gate does not check it);
//! - `sam-env.json`: the same per function, in the shape `sam local invoke --env-vars` takes, each
//!   with the function's own access key id: the IAM gate in front of the emulator checks its
//!   calls against its role in template.yaml (a denial is printed here).
//!
//! Keeps the emulator running until Enter is pressed.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::ExitCode;

use tocsin_tests::tocsin_harness::{Emulator, Principal, Stack, workspace_root};

const FUNCTIONS: [&str; 4] = ["IntakeFunction", "SenderFunction", "StatusFunction", "EscalationFunction"];

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("local-env: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    println!("starting the local AWS emulator and creating the stack from template.yaml …");
    let emulator = Emulator::start().await?;
    let sdk = emulator.sdk_config().await;
    let stack = Stack::provision(&sdk, "tocsin-local").await?;
    if stack.condition("UsesEndUserMessaging")? {
        // As an account owner does before the first send: out of the sandbox, one active number.
        let eum = emulator.eum();
        eum.production_account().await?;
        let number = eum
            .active_phone_number(&sdk, aws_sdk_pinpointsmsvoicev2::types::RequestableNumberType::TollFree, "US")
            .await?;
        println!("End User Messaging (local stand-in): production account, origination number {}", number.number);
    }
    let dir = workspace_root().join("target/tocsin-local");
    std::fs::create_dir_all(&dir)?;
    let aws: BTreeMap<String, String> = emulator.aws_env(&Principal::Harness).into_iter().collect();
    let mut all = aws.clone();
    let mut sam = serde_json::Map::new();
    for f in FUNCTIONS {
        let env: BTreeMap<String, String> = stack.function_env(f)?.into_iter().collect();
        for (k, v) in &env {
            if let Some(other) = all.insert(k.clone(), v.clone())
                && other != *v
            {
                return Err(
                    format!("{k} differs between functions ({other} / {v}): one env file cannot serve both").into()
                );
            }
        }
        let mut own = env;
        own.extend(emulator.aws_env(&Principal::function(f)));
        sam.insert(f.to_owned(), serde_json::to_value(&own)?);
    }
    let env_file = dir.join("env");
    let text: String = all.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(&env_file, text)?;
    let sam_file = dir.join("sam-env.json");
    std::fs::write(&sam_file, serde_json::to_string_pretty(&serde_json::Value::Object(sam))?)?;
    let root = workspace_root();
    let rel = |p: &std::path::Path| p.strip_prefix(&root).map(|r| r.display().to_string()).unwrap_or_default();
    println!("emulator  {}", emulator.endpoint());
    println!("wrote     {} ({} variables)", rel(&env_file), all.len());
    println!("wrote     {}", rel(&sam_file));
    println!();
    println!("In another terminal, from the repository root:");
    println!("  cargo lambda watch --env-file {}", rel(&env_file));
    println!("  cargo lambda invoke intake --data-file events/intake/http-api-post.json");
    println!("  cargo lambda invoke sender --data-file events/sender/sqs-send-request.json");
    println!("  cargo lambda invoke escalation --data-file events/escalation/scheduled.json");
    println!("  cargo lambda invoke status --data-file events/status/eum-text-successful-then-delivered.json");
    println!(
        "  cargo run -p tocsin-cli -- --stack tocsin-local list   # with the emulator's AWS variables from the env file"
    );
    println!();
    println!("Press Enter to stop the emulator (its state is lost).");
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    })
    .await?;
    Ok(())
}
