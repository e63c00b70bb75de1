//! The real `status` binary's log lines, under the Lambda Runtime API stand-in: each carries the
//! request id the runtime handed over (so a line can be matched to Lambda's REPORT line), and the
//! console's log level (`AWS_LAMBDA_LOG_LEVEL`) is honoured when `RUST_LOG` is not set.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tocsin_harness::runtime_api::{Invocation, RuntimeApi};
use tocsin_harness::{Emulator, Principal, Stack, workspace_root};
use tokio::io::AsyncBufReadExt;

/// Runs the binary with `env_changes` applied to its template environment, invokes the sample
/// delivery record once, and returns every JSON log line it wrote (EMF metric lines left out).
async fn log_lines_of_one_invocation(env_changes: &[(&str, Option<&str>)]) -> Vec<Value> {
    let emulator = Emulator::start().await.expect("emulator");
    let stack = Stack::provision(&emulator.sdk_config().await, "tocsin-local").await.expect("stack");
    let api = RuntimeApi::start().await.expect("runtime API");
    let mut env = stack.function_env("StatusFunction").expect("env");
    for (k, v) in env_changes {
        match v {
            Some(v) => env.insert((*k).to_owned(), (*v).to_owned()),
            None => env.remove(*k),
        };
    }
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_status"))
        .env_clear()
        .envs(env)
        .envs(emulator.aws_env(&Principal::function("StatusFunction")))
        .envs(api.lambda_env("StatusFunction"))
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut readers = Vec::new();
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    for pipe in [Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>, Box::new(stderr)] {
        let lines = lines.clone();
        readers.push(tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(pipe).lines();
            while let Ok(Some(l)) = reader.next_line().await {
                lines.lock().expect("lines").push(l);
            }
        }));
    }
    let event: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace_root().join("events/status/delivery-success.json")).expect("sample"),
    )
    .expect("json");
    let answer = api.invoke(event, Duration::from_secs(60)).await.expect("an answer");
    assert!(matches!(answer, Invocation::Response(_)), "{answer:?}");
    // The answer is posted after the handler's last line; give the pipe a moment, then stop.
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().await.expect("kill");
    emulator.iam().assert_no_denials();
    for r in readers {
        let _ = r.await;
    }
    let all = lines.lock().expect("lines").clone();
    all.iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("_aws").is_none()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_of_an_invocation_carries_its_request_id() {
    let lines = log_lines_of_one_invocation(&[]).await;
    let batch = lines
        .iter()
        .find(|l| l["message"] == "status batch processed")
        .unwrap_or_else(|| panic!("the batch line: {lines:#?}"));
    // The stand-in numbers its invocations: the first is req-000001.
    assert_eq!(batch["requestId"], "req-000001", "{batch}");
    assert_eq!(batch["level"], "INFO");
    let during: Vec<&Value> = lines.iter().filter(|l| l.get("requestId").is_some()).collect();
    assert!(during.iter().all(|l| l["requestId"] == "req-000001"), "{during:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_log_level_applies_when_rust_log_is_not_set() {
    // The sample record names a message id this stack never sent: kept as an orphan, a DEBUG line.
    let orphan =
        |lines: &[Value]| lines.iter().any(|l| l["message"] == "delivery record matches no intent; kept as orphan");
    let debug = log_lines_of_one_invocation(&[("RUST_LOG", None), ("AWS_LAMBDA_LOG_LEVEL", Some("DEBUG"))]).await;
    assert!(orphan(&debug), "DEBUG shows the orphan line: {debug:#?}");
    assert!(debug.iter().filter(|l| orphan(std::slice::from_ref(l))).all(|l| l["requestId"] == "req-000001"));
    let warn = log_lines_of_one_invocation(&[("RUST_LOG", None), ("AWS_LAMBDA_LOG_LEVEL", Some("WARN"))]).await;
    assert!(!orphan(&warn) && !warn.iter().any(|l| l["level"] == "INFO"), "WARN hides INFO and DEBUG: {warn:#?}");
}
