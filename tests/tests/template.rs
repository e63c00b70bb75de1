//! template.yaml and the local stack agree: what the emulator holds after provisioning is what
//! the template describes, and every function starts with the environment the template gives it.

use std::collections::{BTreeSet, HashMap};

use serde_yaml_ng::Value as Yaml;
use tocsin::config::{Env, EscalationConfig, IntakeConfig, SenderConfig, StatusConfig};
use tocsin_harness::stack::{resource_type, resources};
use tocsin_harness::{Emulator, Stack};

fn s(v: Option<&Yaml>) -> String {
    match v {
        Some(Yaml::String(x)) => x.clone(),
        Some(Yaml::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn key_schema(v: Option<&Yaml>) -> Vec<(String, String)> {
    v.and_then(Yaml::as_sequence)
        .map(|seq| seq.iter().map(|k| (s(k.get("AttributeName")), s(k.get("KeyType")))).collect())
        .unwrap_or_default()
}

/// Provisions the local stack with `parameters` and compares what the emulator holds with what
/// template.yaml describes; answers the stack and the resources compared.
async fn provisioned_as_described(parameters: &[(&str, &str)]) -> (Stack, BTreeSet<String>) {
    let emulator = Emulator::start().await.expect("emulator");
    let sdk = emulator.sdk_config().await;
    let stack = Stack::provision_with(&sdk, "tocsin-local", parameters).await.expect("provision");
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let logs = aws_sdk_cloudwatchlogs::Client::new(&sdk);
    let res = resources(stack.template());
    let mut seen = BTreeSet::new();
    for (id, r) in &res {
        // A resource whose condition is false for these parameters is not created, as on AWS.
        if !stack.is_created(r).expect("condition") {
            continue;
        }
        let p = r.get("Properties").cloned().unwrap_or(Yaml::Null);
        match resource_type(r) {
            "AWS::DynamoDB::Table" => {
                let t =
                    ddb.describe_table().table_name(stack.table(id)).send().await.expect("table").table.expect("table");
                let actual: Vec<(String, String)> = t
                    .key_schema()
                    .iter()
                    .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
                    .collect();
                assert_eq!(actual, key_schema(p.get("KeySchema")), "{id} key schema");
                let want_attrs: BTreeSet<(String, String)> = p
                    .get("AttributeDefinitions")
                    .and_then(Yaml::as_sequence)
                    .expect("attrs")
                    .iter()
                    .map(|a| (s(a.get("AttributeName")), s(a.get("AttributeType"))))
                    .collect();
                let got_attrs: BTreeSet<(String, String)> = t
                    .attribute_definitions()
                    .iter()
                    .map(|a| (a.attribute_name().to_owned(), a.attribute_type().as_str().to_owned()))
                    .collect();
                assert_eq!(got_attrs, want_attrs, "{id} attributes");
                let want_gsi: HashMap<String, Vec<(String, String)>> = p
                    .get("GlobalSecondaryIndexes")
                    .and_then(Yaml::as_sequence)
                    .map(|g| g.iter().map(|i| (s(i.get("IndexName")), key_schema(i.get("KeySchema")))).collect())
                    .unwrap_or_default();
                let got_gsi: HashMap<String, Vec<(String, String)>> = t
                    .global_secondary_indexes()
                    .iter()
                    .map(|g| {
                        let keys = g
                            .key_schema()
                            .iter()
                            .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
                            .collect();
                        (g.index_name().unwrap_or_default().to_owned(), keys)
                    })
                    .collect();
                assert_eq!(got_gsi, want_gsi, "{id} indexes");
                if let Some(ttl) = p.get("TimeToLiveSpecification") {
                    let d = ddb.describe_time_to_live().table_name(stack.table(id)).send().await.expect("ttl");
                    let attr =
                        d.time_to_live_description().and_then(|t| t.attribute_name()).unwrap_or_default().to_owned();
                    assert_eq!(attr, s(ttl.get("AttributeName")), "{id} TTL attribute");
                }
                seen.insert(id.clone());
            }
            "AWS::SQS::Queue" => {
                let q = stack.queue(id);
                let attrs = sqs
                    .get_queue_attributes()
                    .queue_url(&q.url)
                    .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
                    .send()
                    .await
                    .expect("queue")
                    .attributes
                    .unwrap_or_default();
                let get =
                    |n: &str| attrs.iter().find(|(k, _)| k.as_str() == n).map(|(_, v)| v.clone()).unwrap_or_default();
                for prop in ["VisibilityTimeout", "MessageRetentionPeriod"] {
                    if p.get(prop).is_some() {
                        assert_eq!(get(prop), s(p.get(prop)), "{id} {prop}");
                    }
                }
                if let Some(rp) = p.get("RedrivePolicy") {
                    let actual: serde_json::Value = serde_json::from_str(&get("RedrivePolicy")).expect("redrive JSON");
                    assert_eq!(
                        actual["maxReceiveCount"].to_string().trim_matches('"'),
                        s(rp.get("maxReceiveCount")),
                        "{id}"
                    );
                    let target = stack.resolve(rp.get("deadLetterTargetArn").expect("target")).expect("resolves");
                    assert_eq!(actual["deadLetterTargetArn"], serde_json::json!(target), "{id}");
                }
                seen.insert(id.clone());
            }
            "AWS::Logs::LogGroup" => {
                let name = stack.log_group(id).to_owned();
                let found = logs.describe_log_groups().log_group_name_prefix(&name).send().await.expect("groups");
                assert!(found.log_groups().iter().any(|g| g.log_group_name() == Some(name.as_str())), "{id}");
                seen.insert(id.clone());
            }
            _ => {}
        }
    }
    (stack, seen)
}

const BOTH: [&str; 5] = ["LedgerTable", "RecipientsTable", "SendQueue", "SendDeadLetterQueue", "EscalationQueue"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_resources_are_the_ones_template_yaml_describes() {
    // The defaults: End User Messaging, whose events go to the stack's own log group.
    let (stack, seen) = provisioned_as_described(&[]).await;
    for expected in BOTH.iter().chain(&["SmsEventLogGroup"]) {
        assert!(seen.contains(*expected), "{expected} was provisioned and compared");
    }
    assert!(!seen.contains("SmsSuccessLogGroup"), "no account-wide SNS log group under End User Messaging");
    assert_eq!(stack.log_group("SmsEventLogGroup"), "/tocsin/tocsin-local/sms-events");

    let (stack, seen) = provisioned_as_described(&[("SmsProvider", "sns")]).await;
    for expected in BOTH.iter().chain(&["SmsSuccessLogGroup", "SmsFailureLogGroup"]) {
        assert!(seen.contains(*expected), "{expected} was provisioned and compared under SNS");
    }
    assert!(!seen.contains("SmsEventLogGroup"), "{seen:?}");
    assert!(stack.log_group("SmsFailureLogGroup").ends_with("/DirectPublishToPhoneNumber/Failure"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_function_starts_with_the_environment_template_yaml_gives_it() {
    let emulator = Emulator::start().await.expect("emulator");
    let stack = Stack::provision(&emulator.sdk_config().await, "tocsin-local").await.expect("provision");
    let env = |id: &str| Env::from_map(stack.function_env(id).expect("env"));
    let intake = IntakeConfig::from_env(&mut env("IntakeFunction")).expect("intake config");
    assert_eq!(intake.send_queue_url, stack.queue("SendQueue").url);
    let sender = SenderConfig::from_env(&mut env("SenderFunction")).expect("sender config");
    assert_eq!((sender.sms_rate_per_second, sender.max_concurrency, sender.instance_rate()), (20, 2, 10.0));
    StatusConfig::from_env(&mut env("StatusFunction")).expect("status config");
    let esc = EscalationConfig::from_env(&mut env("EscalationFunction")).expect("escalation config");
    assert_eq!(esc.escalation_queue_url, stack.queue("EscalationQueue").url);
    // The template's leases and timeouts are consistent with the functions' timeouts.
    assert!(sender.publish_timeout < sender.claim_lease);
    assert!(esc.escalation_lease > std::time::Duration::from_secs(60), "longer than the escalation function's timeout");
}
