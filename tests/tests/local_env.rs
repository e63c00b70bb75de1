//! `cargo run -p tocsin-tests --bin local-env` writes what `cargo lambda watch --env-file` and
//! `sam local invoke --env-vars` need: every variable each function's configuration requires,
//! resolved from template.yaml against the local stack. Runs the real binary (its emulator stops
//! when stdin closes) and loads each function's configuration from the files it wrote.

use std::collections::HashMap;

use tocsin::config::{Env, EscalationConfig, IntakeConfig, SenderConfig, StatusConfig};

#[test]
fn local_env_writes_every_variable_each_function_needs() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_local-env"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run local-env");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = tocsin_tests::tocsin_harness::workspace_root().join("target/tocsin-local");

    let text = std::fs::read_to_string(dir.join("env")).expect("env file");
    let vars: HashMap<String, String> = text
        .lines()
        .map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).expect("KEY=VALUE"))
        .collect();
    assert!(vars["AWS_ENDPOINT_URL"].starts_with("http://127.0.0.1:"), "{vars:?}");
    assert!(vars["TOCSIN_ESCALATION_QUEUE_URL"].ends_with("/tocsin-local-escalations"), "{vars:?}");
    let env = || Env::from_map(vars.clone());
    IntakeConfig::from_env(&mut env()).expect("intake starts from the env file");
    SenderConfig::from_env(&mut env()).expect("sender starts from the env file");
    StatusConfig::from_env(&mut env()).expect("status starts from the env file");
    EscalationConfig::from_env(&mut env()).expect("escalation starts from the env file");

    let sam: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sam-env.json")).expect("sam file")).expect("json");
    for f in ["IntakeFunction", "SenderFunction", "StatusFunction", "EscalationFunction"] {
        let per: HashMap<String, String> = serde_json::from_value(sam[f].clone()).expect("strings");
        assert_eq!(per["TOCSIN_LEDGER_TABLE"], "tocsin-local-ledger", "{f}");
    }
}
