//! Specifications on the CloudFormation AWS would deploy: `template.yaml` translated by the SAM
//! translator itself (pinned, offline, installed by the harness), so that every resource SAM
//! generates implicitly — roles, permissions, event source mappings, dead-letter queues — is held
//! to the same rules as the ones written by hand. The translator keeps `Condition`s, so one
//! translation holds every optional resource too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::{Value, json};
use tocsin_harness::workspace_root;

fn translated() -> &'static Value {
    static T: OnceLock<Value> = OnceLock::new();
    T.get_or_init(|| tocsin_harness::sam::translate_template_yaml(&[]).expect("template.yaml translates"))
}

fn resources_of<'a>(t: &'a Value, ty: &str) -> Vec<(&'a str, &'a Value)> {
    t["Resources"]
        .as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| r["Type"] == ty)
        .map(|(id, r)| (id.as_str(), r))
        .collect()
}

fn get_att(id: &str, attr: &str) -> Value {
    json!({ "Fn::GetAtt": [id, attr] })
}

fn reference(id: &str) -> Value {
    json!({ "Ref": id })
}

/// (namespace, metric name, dimensions as (name, value)) of a metric an alarm reads.
type MetricSpec = (String, String, Vec<(String, Value)>);

/// Every metric an alarm reads.
/// A string, or each branch of an `Fn::If` whose branches are strings.
fn branches(v: &Value) -> Vec<String> {
    match v.get("Fn::If").and_then(Value::as_array) {
        Some(ifs) => ifs.iter().skip(1).map(|b| b.as_str().unwrap_or_default().to_owned()).collect(),
        None => vec![v.as_str().unwrap_or_default().to_owned()],
    }
}

fn alarm_metrics(alarm: &Value) -> Vec<MetricSpec> {
    let dims = |d: &Value| -> Vec<(String, Value)> {
        d.as_array()
            .map(|a| {
                a.iter().map(|x| (x["Name"].as_str().unwrap_or_default().to_owned(), x["Value"].clone())).collect()
            })
            .unwrap_or_default()
    };
    let p = &alarm["Properties"];
    if let Some(metrics) = p["Metrics"].as_array() {
        let insights = metrics.iter().filter_map(|m| m["Expression"].as_str()).filter_map(insights_metric);
        metrics
            .iter()
            .filter_map(|m| m.get("MetricStat"))
            .flat_map(|s| {
                let m = &s["Metric"];
                // A metric chosen by a condition (`Fn::If`, as the SMS provider's spend metric):
                // each branch is a metric the alarm may read.
                let (namespaces, names) = (branches(&m["Namespace"]), branches(&m["MetricName"]));
                assert_eq!(namespaces.len(), names.len(), "a namespace per metric name: {m}");
                let dims = dims(&m["Dimensions"]);
                namespaces.into_iter().zip(names).map(move |(ns, name)| (ns, name, dims.clone()))
            })
            .chain(insights)
            .collect()
    } else {
        vec![(
            p["Namespace"].as_str().unwrap_or_default().to_owned(),
            p["MetricName"].as_str().unwrap_or_default().to_owned(),
            dims(&p["Dimensions"]),
        )]
    }
}

/// The metric a Metrics Insights query reads: `SELECT STAT(metric) FROM SCHEMA(ns, dim, ...)
/// WHERE "function" = 'f' GROUP BY ...`, its dimensions as the schema names them (the `function`
/// one with the value the WHERE clause pins, the others with no value).
fn insights_metric(query: &str) -> Option<MetricSpec> {
    let metric = query.split_once("SELECT ")?.1.split_once('(')?.1.split_once(')')?.0.trim();
    let schema = query.split_once("FROM SCHEMA(")?.1.split_once(')')?.0;
    let mut parts = schema.split(',').map(|p| p.trim().trim_matches('"').to_owned());
    let namespace = parts.next()?;
    let function = query.split_once("WHERE \"function\" = '")?.1.split_once('\'')?.0;
    let dims = parts.map(|d| if d == "function" { (d, json!(function)) } else { (d, Value::Null) }).collect();
    Some((namespace, metric.to_owned(), dims))
}

/// The metric names function `function`'s code emits with EMF (`Metrics::new("<function>")`,
/// namespace `tocsin`): the string literals passed to `count`/`add` in `functions/<function>/src`.
fn emf_metrics_emitted_by(function: &str) -> BTreeSet<String> {
    let dir = workspace_root().join("functions").join(function).join("src");
    let mut names = BTreeSet::new();
    let mut files = vec![dir];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).expect("src dir").filter_map(|e| e.ok().map(|e| e.path())));
            continue;
        }
        let Ok(src) = std::fs::read_to_string(&path) else { continue };
        if !src.contains(&format!("Metrics::new(\"{function}\")")) {
            continue;
        }
        for call in [".count(\"", ".add(\""] {
            for (i, _) in src.match_indices(call) {
                let rest = &src[i + call.len()..];
                if let Some(end) = rest.find('"') {
                    names.insert(rest[..end].to_owned());
                }
            }
        }
        // Names listed as (name, value) pairs and counted in a loop.
        for (i, _) in src.match_indices("(\"") {
            let rest = &src[i + 2..];
            if let Some(end) = rest.find("\", summary.") {
                names.insert(rest[..end].to_owned());
            }
        }
    }
    // Only identifiers: a literal that spans code is not a metric name.
    names.retain(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
    names
}

#[test]
fn every_queue_is_encrypted_with_the_stack_key_and_is_consumed_or_has_a_depth_alarm() {
    let t = translated();
    let queues = resources_of(t, "AWS::SQS::Queue");
    assert!(queues.len() >= 5, "the stack's queues: {:?}", queues.iter().map(|q| q.0).collect::<Vec<_>>());
    let mappings = resources_of(t, "AWS::Lambda::EventSourceMapping");
    let alarms = resources_of(t, "AWS::CloudWatch::Alarm");
    for (id, q) in queues {
        assert_eq!(q["Properties"]["KmsMasterKeyId"], reference("DataKey"), "{id} is encrypted with the stack's key");
        let by_mapping = mappings.iter().any(|(_, m)| m["Properties"]["EventSourceArn"] == get_att(id, "Arn"));
        // Or drained by a function itself (the urgent lane): a role that may receive and delete.
        let drained = resources_of(t, "AWS::IAM::Role").iter().any(|(_, role)| {
            let may = |action: &str| {
                statements(role).iter().any(|s| {
                    s["Effect"] == "Allow"
                        && actions(s).iter().any(|a| a == action)
                        && (s["Resource"] == get_att(id, "Arn")
                            || s["Resource"].as_array().is_some_and(|r| r.contains(&get_att(id, "Arn"))))
                })
            };
            may("sqs:ReceiveMessage") && may("sqs:DeleteMessage")
        });
        let consumed = by_mapping || drained;
        let depth_alarmed = alarms.iter().any(|(_, a)| {
            alarm_metrics(a).iter().any(|(ns, name, dims)| {
                ns == "AWS/SQS"
                    && name == "ApproximateNumberOfMessagesVisible"
                    && dims == &vec![("QueueName".to_owned(), get_att(id, "QueueName"))]
            })
        });
        assert!(
            consumed || depth_alarmed,
            "{id} is consumed by a function (event source mapping, or drained by its role) or has a depth alarm"
        );
    }
}

/// The adapters give every item they mean to expire an `expires_at` (epoch seconds); an item
/// without one (a suppressed number's state) is kept. A table without TTL on that attribute keeps
/// phone numbers, carriers and audit trails forever, whatever docs/data-model.md promises.
#[test]
fn every_table_expires_its_items_by_the_attribute_the_adapters_write() {
    let tables = resources_of(translated(), "AWS::DynamoDB::Table");
    assert!(tables.len() >= 2, "{} tables", tables.len());
    for (id, table) in tables {
        let ttl = &table["Properties"]["TimeToLiveSpecification"];
        assert_eq!(
            (ttl["AttributeName"].as_str(), ttl["Enabled"].as_bool()),
            (Some("expires_at"), Some(true)),
            "{id}: TTL on expires_at"
        );
    }
}

#[test]
fn eventbridge_failures_dead_letter_into_the_stacks_own_encrypted_alarmed_queue() {
    let t = translated();
    let rules = resources_of(t, "AWS::Events::Rule");
    assert!(!rules.is_empty(), "the AlertRequested rule");
    for (id, rule) in &rules {
        for target in rule["Properties"]["Targets"].as_array().expect("targets") {
            assert_eq!(
                target["DeadLetterConfig"]["Arn"],
                get_att("IntakeRejectsQueue", "Arn"),
                "{id}: undeliverable events go to the rejects queue"
            );
        }
        // The queue's policy lets exactly this rule write to it.
        let name = rule["Properties"]["Name"]["Fn::Sub"].as_str().expect("rule name");
        let policies = resources_of(t, "AWS::SQS::QueuePolicy");
        let allowed = policies.iter().any(|(_, p)| {
            p["Properties"]["Queues"].as_array().is_some_and(|q| q.contains(&reference("IntakeRejectsQueue")))
                && p["Properties"]["PolicyDocument"]["Statement"].as_array().into_iter().flatten().any(|s| {
                    s["Effect"] == "Allow"
                        && s["Principal"]["Service"] == "events.amazonaws.com"
                        && s["Action"] == "sqs:SendMessage"
                        && match &s["Condition"]["ArnEquals"]["aws:SourceArn"] {
                            Value::Array(arns) => arns.clone(),
                            one => vec![one.clone()],
                        }
                        .iter()
                        .any(|a| a["Fn::Sub"].as_str().is_some_and(|arn| arn.ends_with(&format!(":rule/{name}"))))
                })
        });
        assert!(allowed, "{id}: the rejects queue's policy lets the rule {name} send");
    }
}

#[test]
fn replies_flow_from_the_two_way_topic_to_the_replies_function_and_nothing_else_can_feed_it() {
    let t = translated();
    let r = &t["Resources"];
    for id in [
        "RepliesTopic",
        "RepliesTopicPolicy",
        "RepliesQueue",
        "RepliesDeadLetterQueue",
        "RepliesQueuePolicy",
        "RepliesSubscription",
        "RepliesLogGroup",
        "RepliesFunction",
        "RecipientOptedOutAlarm",
        "RepliesDeadLetterAlarm",
    ] {
        assert_eq!(r[id]["Condition"], "TakesReplies", "{id} exists only when the stack takes replies");
    }
    assert_eq!(
        t["Conditions"]["TakesReplies"],
        json!({"Fn::And": [{"Condition": "UsesEndUserMessaging"}, {"Fn::Equals": [reference("Replies"), "on"]}]})
    );
    // End User Messaging, for this account only, may publish to the topic; the topic is encrypted.
    assert_eq!(r["RepliesTopic"]["Properties"]["KmsMasterKeyId"], reference("DataKey"));
    let topic_statements =
        r["RepliesTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"].as_array().expect("statements");
    assert_eq!(topic_statements.len(), 1);
    let st = &topic_statements[0];
    assert_eq!(
        (&st["Principal"]["Service"], &st["Action"]),
        (&json!("sms-voice.amazonaws.com"), &json!("sns:Publish"))
    );
    assert_eq!(st["Condition"]["StringEquals"]["aws:SourceAccount"], reference("AWS::AccountId"));
    // Only the replies topic may send to the queue; the subscription ties them.
    let queue_statements =
        r["RepliesQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"].as_array().expect("statements");
    assert_eq!(queue_statements.len(), 1);
    assert_eq!(queue_statements[0]["Principal"]["Service"], "sns.amazonaws.com");
    assert_eq!(queue_statements[0]["Condition"]["ArnEquals"]["aws:SourceArn"], reference("RepliesTopic"));
    let sub = &r["RepliesSubscription"]["Properties"];
    assert_eq!(
        (&sub["TopicArn"], &sub["Protocol"], &sub["Endpoint"]),
        (&reference("RepliesTopic"), &json!("sqs"), &get_att("RepliesQueue", "Arn"))
    );
    // The key lets both services use it on this account's behalf only.
    let key = r["DataKey"]["Properties"]["KeyPolicy"]["Statement"].as_array().expect("key statements");
    for service in ["sms-voice.amazonaws.com", "sns.amazonaws.com"] {
        let s = key
            .iter()
            .find(|s| s["Principal"]["Service"] == service)
            .unwrap_or_else(|| panic!("{service} in the key policy"));
        assert_eq!(s["Condition"]["StringEquals"]["aws:SourceAccount"], reference("AWS::AccountId"), "{service}");
    }
    // The function reads the queue, a failed record alone; the queue dead-letters after 5 tries.
    let mapping = resources_of(t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .find(|(_, m)| m["Properties"]["EventSourceArn"] == get_att("RepliesQueue", "Arn"))
        .expect("the replies queue's mapping")
        .1;
    assert_eq!(mapping["Properties"]["FunctionResponseTypes"], json!(["ReportBatchItemFailures"]));
    assert_eq!(mapping["Condition"], "TakesReplies");
    assert_eq!(
        r["RepliesQueue"]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"],
        get_att("RepliesDeadLetterQueue", "Arn")
    );
    // STOP pages: the metric the function emits, to the on-call topic.
    let alarm = &r["RecipientOptedOutAlarm"]["Properties"];
    assert_eq!((&alarm["Namespace"], &alarm["MetricName"]), (&json!("tocsin"), &json!("recipient_opted_out")));
    assert_eq!(alarm["Dimensions"], json!([{"Name": "function", "Value": "replies"}]));
    assert_eq!(alarm["AlarmActions"], json!([reference("AlarmTopic")]));
    assert_eq!(t["Outputs"]["RepliesTopicArn"]["Value"], reference("RepliesTopic"));
}

#[test]
fn every_log_group_has_retention_and_the_stack_key_and_every_function_logs_to_its_own() {
    let t = translated();
    let groups: BTreeMap<&str, &Value> = resources_of(t, "AWS::Logs::LogGroup").into_iter().collect();
    for (id, g) in &groups {
        assert_eq!(g["Properties"]["RetentionInDays"], reference("LogRetentionDays"), "{id} retention");
        assert_eq!(g["Properties"]["KmsKeyId"], get_att("DataKey", "Arn"), "{id} key");
    }
    let functions = resources_of(t, "AWS::Lambda::Function");
    assert_eq!(functions.len(), 7, "intake, sender, status, escalation, replies, sms-preferences, sms-country-rules");
    for (id, f) in functions {
        let group_id = f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{id} names its log group"));
        let group = groups.get(group_id).unwrap_or_else(|| panic!("{id}: {group_id} is a declared log group"));
        let function_name = f["Properties"]["FunctionName"]["Fn::Sub"].as_str().expect("function name");
        assert_eq!(
            group["Properties"]["LogGroupName"]["Fn::Sub"],
            json!(format!("/aws/lambda/{function_name}")),
            "{id}: the group Lambda would otherwise create"
        );
        assert_eq!(group.get("Condition"), f.get("Condition"), "{id}: the group exists exactly when the function does");
    }
}

#[test]
fn every_alarm_reads_a_metric_this_stack_produces_and_pages_the_alarm_topic() {
    let t = translated();
    let queues: BTreeSet<&str> = resources_of(t, "AWS::SQS::Queue").into_iter().map(|(id, _)| id).collect();
    let functions: BTreeSet<&str> = resources_of(t, "AWS::Lambda::Function").into_iter().map(|(id, _)| id).collect();
    let alarms = resources_of(t, "AWS::CloudWatch::Alarm");
    assert!(alarms.len() >= 13, "{} alarms", alarms.len());
    let mut emitted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (id, alarm) in alarms {
        assert!(
            alarm["Properties"]["AlarmActions"].as_array().is_some_and(|a| a.contains(&reference("AlarmTopic"))),
            "{id} pages the alarm topic"
        );
        let metrics = alarm_metrics(alarm);
        assert!(!metrics.is_empty(), "{id} reads a metric");
        for (ns, name, dims) in metrics {
            let dim_names: Vec<&str> = dims.iter().map(|(n, _)| n.as_str()).collect();
            match ns.as_str() {
                "AWS/SQS" => {
                    assert!(
                        ["ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"]
                            .contains(&name.as_str())
                    );
                    assert_eq!(dim_names, ["QueueName"], "{id}");
                    let q = dims[0].1["Fn::GetAtt"][0].as_str().unwrap_or_default();
                    assert!(queues.contains(q) && dims[0].1 == get_att(q, "QueueName"), "{id}: a queue of this stack");
                }
                "AWS/Lambda" => {
                    assert!(["Errors", "Invocations", "Throttles"].contains(&name.as_str()), "{id}: {name}");
                    assert_eq!(dim_names, ["FunctionName"], "{id}");
                    let f = dims[0].1["Ref"].as_str().unwrap_or_default();
                    assert!(functions.contains(f), "{id}: a function of this stack ({f})");
                }
                "AWS/SNS" => {
                    // Account-level SMS metric: no dimensions.
                    assert_eq!((name.as_str(), dim_names.len()), ("SMSMonthToDateSpentUSD", 0), "{id}");
                }
                "AWS/SMSVoice" => {
                    // End User Messaging's account-level spend this month: no dimensions.
                    assert_eq!((name.as_str(), dim_names.len()), ("TextMessageMonthlySpend", 0), "{id}");
                }
                "tocsin" => {
                    // EMF: every document carries the `function` dimension; the metrics alarmed on
                    // are emitted with no other dimension, but for a Metrics Insights query's
                    // GROUP BY carrier (one contributor per carrier).
                    let function = dims.iter().find(|(n, _)| n == "function").and_then(|(_, v)| v.as_str());
                    let function = function.unwrap_or_else(|| panic!("{id}: no function dimension")).to_owned();
                    assert!(dim_names == ["function"] || dim_names == ["carrier", "function"], "{id}: {dim_names:?}");
                    let names = emitted.entry(function.clone()).or_insert_with(|| emf_metrics_emitted_by(&function));
                    assert!(names.contains(&name), "{id}: functions/{function} emits {name} (it emits {names:?})");
                }
                other => panic!("{id}: unknown metric source {other}/{name}"),
            }
        }
    }
}

fn alarm(id: &str) -> &'static Value {
    let t = translated();
    let a = &t["Resources"][id];
    assert_eq!(a["Type"], "AWS::CloudWatch::Alarm", "{id} exists");
    a
}

#[test]
fn the_safety_net_pages_on_its_own_failures() {
    // The escalation sweep failing, or not running at all.
    let errors = &alarm("EscalationErrorsAlarm")["Properties"];
    assert_eq!(
        (&errors["MetricName"], &errors["Threshold"], &errors["ComparisonOperator"]),
        (&json!("Errors"), &json!(1), &json!("GreaterThanOrEqualToThreshold"))
    );
    let missing = &alarm("EscalationNotRunningAlarm")["Properties"];
    assert_eq!(missing["TreatMissingData"], "breaching", "no data = no run");
    assert_eq!((&missing["ComparisonOperator"], &missing["Threshold"]), (&json!("LessThanThreshold"), &json!(1)));
    let window = missing["Period"].as_i64().unwrap_or(0) * missing["EvaluationPeriods"].as_i64().unwrap_or(0);
    assert!(window > 0 && window <= 300, "pages within 5 minutes of the last run ({window} s)");
    // An escalation pages at once, without SQS's metric pause on idle queues.
    let escalated = &alarm("EscalatedAlarm")["Properties"];
    assert_eq!(
        (&escalated["Namespace"], &escalated["MetricName"], &escalated["Period"], &escalated["Threshold"]),
        (&json!("tocsin"), &json!("escalated"), &json!(60), &json!(1))
    );
    // Status errors, sender error rate, spend, delivery success.
    assert_eq!(alarm("StatusErrorsAlarm")["Properties"]["Dimensions"][0]["Value"], reference("StatusFunction"));
    let rate = &alarm("SenderErrorRateAlarm")["Properties"];
    let read: Vec<_> =
        alarm_metrics(alarm("SenderErrorRateAlarm")).into_iter().map(|(_, n, d)| (n, d[0].1.clone())).collect();
    assert_eq!(
        read,
        [("Errors".to_owned(), reference("SenderFunction")), ("Invocations".to_owned(), reference("SenderFunction"))]
    );
    assert!(rate["Metrics"].as_array().into_iter().flatten().any(|m| m["ReturnData"] == true
        && m["Expression"].as_str().is_some_and(|e| e.contains("errors") && e.contains("/ invocations"))));
    let spend = &alarm("SmsSpendAlarm")["Properties"];
    assert_eq!(
        (&spend["Threshold"], &spend["ComparisonOperator"]),
        (&json!(80), &json!("GreaterThanOrEqualToThreshold"))
    );
    // The limit reached, from SNS's own records (status) or End User Messaging's refusals
    // (sender): pages at the first one.
    let exhausted = &alarm("SmsSpendExhaustedAlarm")["Properties"];
    assert_eq!(
        (&exhausted["Threshold"], &exhausted["ComparisonOperator"]),
        (&json!(1), &json!("GreaterThanOrEqualToThreshold"))
    );
    let read: Vec<_> = alarm_metrics(alarm("SmsSpendExhaustedAlarm"))
        .into_iter()
        .map(|(_, n, d)| (n, d.into_iter().map(|(_, v)| v).collect::<Vec<_>>()))
        .collect();
    assert_eq!(
        read,
        [("spend_exhausted".to_owned(), vec![json!("status")]), ("spend_exhausted".to_owned(), vec![json!("sender")])]
    );
    assert!(exhausted["Metrics"].as_array().into_iter().flatten().any(|m| m["ReturnData"] == true
        && m["Expression"].as_str().is_some_and(|e| e.contains("records") && e.contains("refusals"))));
    let success = alarm_metrics(alarm("DeliverySuccessRateAlarm"));
    assert_eq!(success.iter().map(|(_, n, _)| n.as_str()).collect::<Vec<_>>(), ["delivered", "failed"]);
    assert!(
        alarm("DeliverySuccessRateAlarm")["Properties"]["Metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("MetricStat"))
            .all(|s| s["Period"] == 900),
        "over 15 minutes"
    );
}

#[test]
fn the_alarm_topic_reaches_on_call_by_email_and_https_not_only_by_sms() {
    let t = translated();
    let protocols: BTreeSet<&str> = resources_of(t, "AWS::SNS::Subscription")
        .into_iter()
        .filter(|(_, s)| s["Properties"]["TopicArn"] == reference("AlarmTopic"))
        .map(|(_, s)| s["Properties"]["Protocol"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(protocols, BTreeSet::from(["email", "https", "sms"]));
}

/// Every statement of a role's policies, those behind an `Fn::If` on a provider's condition
/// included (both branches; `AWS::NoValue` is none).
fn statements(role: &Value) -> Vec<Value> {
    fn unwrap(s: Value) -> Vec<Value> {
        match s.get("Fn::If").and_then(Value::as_array) {
            Some(branches) => branches.iter().skip(1).cloned().flat_map(unwrap).collect(),
            None if s.get("Ref") == Some(&json!("AWS::NoValue")) => vec![],
            None => vec![s],
        }
    }
    role["Properties"]["Policies"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default())
        .flat_map(unwrap)
        .collect()
}

fn actions(s: &Value) -> Vec<String> {
    match &s["Action"] {
        Value::String(a) => vec![a.clone()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => vec![],
    }
}

/// IAM's wildcard match (`*` any run, `?` one character), for ARNs with the partition filled in.
fn arn_matches(pattern: &str, arn: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), arn.as_bytes())
}

#[test]
fn the_sender_may_publish_sms_to_phone_numbers_only_and_no_other_role_may_publish() {
    let t = translated();
    for (id, role) in resources_of(t, "AWS::IAM::Role") {
        let publish: Vec<Value> =
            statements(role).into_iter().filter(|s| actions(s).iter().any(|a| a == "sns:Publish")).collect();
        if id != "SenderFunctionRole" {
            assert!(publish.is_empty(), "{id} may not publish");
            continue;
        }
        let denies: Vec<String> = publish
            .iter()
            .filter(|s| s["Effect"] == "Deny")
            .filter_map(|s| s["Resource"]["Fn::Sub"].as_str())
            .map(|r| r.replace("${AWS::Partition}", "aws"))
            .collect();
        assert!(publish.iter().any(|s| s["Effect"] == "Allow" && s["Resource"] == "*"), "publishing SMS has no ARN");
        for target in [
            "arn:aws:sns:us-east-1:123456789012:tocsin-prod-oncall",
            "arn:aws:sns:eu-west-1:999999999999:someone-elses-topic",
            "arn:aws:sns:us-east-1:123456789012:endpoint/GCM/app/0f1e2d3c",
        ] {
            assert!(denies.iter().any(|d| arn_matches(d, target)), "the sender is denied publishing to {target}");
        }
    }
}

/// SNS assumes the delivery-status role to write every delivery record: a trust condition on a key
/// SNS does not send (AWS documents no `aws:SourceAccount` / `aws:SourceArn` for SMS delivery
/// logging) would stop every record and make every alert escalate as silent. So the trust has no
/// condition, and what the role may do is bounded instead: the two delivery-status groups only.
#[test]
fn sns_assumes_the_delivery_status_role_without_undocumented_conditions_and_may_write_only_the_two_groups() {
    let role = &translated()["Resources"]["SmsDeliveryStatusRole"];
    let trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"].as_array().expect("trust policy");
    assert!(!trust.is_empty());
    for s in trust {
        assert_eq!(s["Principal"]["Service"], "sns.amazonaws.com");
        assert_eq!(s["Action"], "sts:AssumeRole");
        assert!(s.get("Condition").is_none(), "no condition key SNS is not documented to send: {s}");
    }
    let groups = [
        "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber",
        "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber/Failure",
    ];
    for s in statements(role) {
        assert_eq!(s["Effect"], "Allow");
        for r in s["Resource"].as_array().expect("resources") {
            let arn = r["Fn::Sub"].as_str().expect("an ARN");
            let group = arn
                .strip_prefix("arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:")
                .map(|g| g.trim_end_matches(":*"))
                .unwrap_or_default();
            assert!(groups.contains(&group), "the role may write only the delivery-status groups, not {arn}");
        }
    }
}

/// Every place a fragment mentions `target` outside the true branch of `Fn::If [condition, ..]`.
fn unguarded_references(v: &Value, target: &str, condition: &str, path: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(a)) = m.get("Fn::If")
                && a.len() == 3
                && a[0] == condition
            {
                unguarded_references(&a[2], target, condition, format!("{path}/If-false"), out);
                return;
            }
            for (k, x) in m {
                let mentions = match (k.as_str(), x) {
                    ("Ref", Value::String(s)) => s == target,
                    ("Fn::GetAtt", Value::Array(a)) => a.first().is_some_and(|s| s == target),
                    ("Fn::Sub", _) => x.to_string().contains(&format!("${{{target}")),
                    ("DependsOn", _) => x.to_string().contains(&format!("\"{target}\"")),
                    _ => false,
                };
                if mentions {
                    out.push(path.clone());
                }
                unguarded_references(x, target, condition, format!("{path}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                unguarded_references(x, target, condition, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_delivery_status_log_groups_are_created_only_on_request_and_retained_and_nothing_needs_them_otherwise() {
    let t = translated();
    for id in ["SmsSuccessLogGroup", "SmsFailureLogGroup"] {
        let g = &t["Resources"][id];
        assert_eq!(g["Condition"], "CreatesSmsLogGroups", "{id}: adopted when it already exists");
        assert_eq!(
            (&g["DeletionPolicy"], &g["UpdateReplacePolicy"]),
            (&json!("RetainExceptOnCreate"), &json!("Retain")),
            "{id}: kept when the stack goes, deleted when its first create rolls back"
        );
        // With CreateSmsLogGroups=false the group is not in the stack: any reference to it outside
        // an Fn::If on that condition would make CloudFormation refuse the template.
        let mut found = Vec::new();
        for (rid, r) in t["Resources"].as_object().expect("resources") {
            if rid != id {
                unguarded_references(r, id, "CreatesSmsLogGroups", rid.clone(), &mut found);
            }
        }
        for (oid, o) in t["Outputs"].as_object().into_iter().flatten() {
            unguarded_references(o, id, "CreatesSmsLogGroups", format!("Outputs/{oid}"), &mut found);
        }
        assert!(found.is_empty(), "{id} is referenced where it may not exist: {found:?}");
    }
    // Under SNS both groups carry the status function's subscription either way; under End User
    // Messaging the stack's own event group does, and no account-wide group.
    let filters = resources_of(t, "AWS::Logs::SubscriptionFilter");
    let subscribed = |condition: &str| -> Vec<Value> {
        filters
            .iter()
            .filter(|(_, f)| f["Properties"]["DestinationArn"] == get_att("StatusFunction", "Arn"))
            .filter(|(_, f)| f["Condition"] == json!(condition))
            .map(|(_, f)| f["Properties"]["LogGroupName"].clone())
            .collect()
    };
    assert_eq!(subscribed("UsesEndUserMessaging"), [reference("SmsEventLogGroup")]);
    let groups: BTreeSet<String> = subscribed("UsesSns")
        .iter()
        .map(|g| g["Fn::If"][2]["Fn::Sub"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        groups,
        BTreeSet::from([
            "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber".to_owned(),
            "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber/Failure".to_owned()
        ])
    );
}

#[test]
fn the_intake_edge_and_the_ledger_burst_capacity_are_set_by_parameters() {
    let stages = resources_of(translated(), "AWS::ApiGatewayV2::Stage");
    assert_eq!(stages.len(), 1, "{stages:?}");
    let route = &stages[0].1["Properties"]["DefaultRouteSettings"];
    assert_eq!(route["ThrottlingRateLimit"], reference("AlertApiRateLimit"));
    assert_eq!(route["ThrottlingBurstLimit"], reference("AlertApiBurstLimit"));
    let ledger = &translated()["Resources"]["LedgerTable"]["Properties"];
    assert_eq!(ledger["WarmThroughput"]["Fn::If"][0], json!("WarmsLedger"));
    assert_eq!(ledger["WarmThroughput"]["Fn::If"][1]["WriteUnitsPerSecond"], reference("LedgerWarmWritesPerSecond"));
    assert_eq!(ledger["WarmThroughput"]["Fn::If"][2], reference("AWS::NoValue"), "off unless asked for");
}

#[test]
fn every_function_takes_its_log_level_from_the_console_setting() {
    for (id, f) in resources_of(translated(), "AWS::Lambda::Function") {
        let p = &f["Properties"];
        assert_eq!(p["LoggingConfig"]["ApplicationLogLevel"], json!("INFO"), "{id}");
        assert_eq!(p["LoggingConfig"]["LogFormat"], json!("JSON"), "{id}");
        // RUST_LOG would override AWS_LAMBDA_LOG_LEVEL, which is how Lambda passes the console's level.
        assert!(p["Environment"]["Variables"].get("RUST_LOG").is_none(), "{id}");
    }
}

/// A full subscription batch (~1 MB, ~20,000 records at ~0.4 ms of CPU each: BENCHMARKS.md
/// section 8) must fit one status invocation at the memory's CPU share, with room for latency.
#[test]
fn the_status_function_can_finish_a_full_subscription_batch_within_its_timeout() {
    let t = translated();
    let status = &t["Resources"]["StatusFunction"]["Properties"];
    let memory = status["MemorySize"].as_f64().unwrap_or(0.0);
    let timeout = status["Timeout"].as_f64().unwrap_or(0.0);
    let cpu_seconds = 20_000.0 * 0.000_4;
    let vcpu = memory / 1769.0;
    assert!(cpu_seconds / vcpu * 2.0 <= timeout, "{memory} MB, {timeout} s: {:.0} s of CPU time", cpu_seconds / vcpu);
}

/// Every ledger index projects keys only (an index write then weighs ~250 B, 1 write unit; a
/// projection of whole intents costs 2 per write), except the retired `open-index`, which nothing
/// writes any more; the status role queries no index (a record is applied only through the message
/// index, read by key), and the sender only the pending-index.
#[test]
fn the_ledger_indexes_project_keys_only_status_queries_no_index_and_the_sender_only_the_pending_index() {
    let t = translated();
    let table = &t["Resources"]["LedgerTable"]["Properties"];
    let indexes: BTreeMap<&str, &str> = table["GlobalSecondaryIndexes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            (
                g["IndexName"].as_str().unwrap_or_default(),
                g["Projection"]["ProjectionType"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(indexes.get("pending-index"), Some(&"KEYS_ONLY"), "{indexes:?}");
    for (name, projection) in &indexes {
        assert!(
            *projection == "KEYS_ONLY" || *name == "open-index" || *name == "inflight-index",
            "{name} projects {projection}"
        );
    }
    // The carrier view's index projects what the sweep slices by, and no message or number beyond
    // the recipient it looks the carrier up with.
    let inflight = table["GlobalSecondaryIndexes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["IndexName"] == "inflight-index")
        .map(|g| g["Projection"].clone())
        .unwrap_or_default();
    assert_eq!(
        inflight,
        json!({"ProjectionType": "INCLUDE", "NonKeyAttributes": ["state", "pending_to", "escalated_at"]})
    );
    let pending = table["GlobalSecondaryIndexes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["IndexName"] == "pending-index")
        .map(|g| g["KeySchema"].clone())
        .unwrap_or_default();
    assert_eq!(pending[0]["AttributeName"], "pending_to");
    assert_eq!(pending[1]["AttributeName"], "pending_by");
    let role = &t["Resources"]["StatusFunctionRole"];
    let queried: Vec<String> = statements(role)
        .iter()
        .filter(|s| actions(s).iter().any(|a| a == "dynamodb:Query"))
        .map(|s| s["Resource"].to_string())
        .collect();
    // None: the status function applies a record only through the message index (GetItem and
    // BatchGetItem by message id) and never searches for an alert a record might belong to.
    assert!(queried.is_empty(), "{queried:?}");
    // The sender queries it too (storm mode's backlog), and the recipients table (the roster's
    // partition, at send time), and nothing else; it scans nothing.
    let sender: Vec<String> = statements(&t["Resources"]["SenderFunctionRole"])
        .iter()
        .filter(|s| actions(s).iter().any(|a| a.starts_with("dynamodb:Query") || a == "dynamodb:Scan"))
        .map(|s| s["Resource"].to_string())
        .collect();
    assert_eq!(sender.len(), 2, "{sender:?}");
    assert!(sender[0].contains("/index/pending-index"), "{sender:?}");
    assert_eq!(sender[1], get_att("RecipientsTable", "Arn").to_string(), "{sender:?}");
}

/// The properties that give a resource a fixed name (one a second create of the stack would
/// collide with while the first one's resource exists).
const NAME_PROPERTIES: [&str; 8] =
    ["TableName", "LogGroupName", "AliasName", "RoleName", "QueueName", "TopicName", "Name", "FunctionName"];

/// A failed first create rolls back; a retained resource with a fixed name would survive it and
/// make the retry fail on "already exists" (and an orphaned key would cost a dollar a month).
/// RetainExceptOnCreate deletes on that rollback and keeps on every other deletion. Plain Retain
/// is left only for what has no fixed name.
#[test]
fn a_retained_resource_with_a_fixed_name_is_deleted_when_the_first_create_rolls_back() {
    let t = translated();
    let mut retained = Vec::new();
    for (id, r) in t["Resources"].as_object().expect("resources") {
        let policy = r["DeletionPolicy"].as_str().unwrap_or("Delete");
        if policy == "Delete" {
            continue;
        }
        retained.push(id.as_str());
        let named: Vec<&str> = NAME_PROPERTIES.iter().copied().filter(|p| r["Properties"].get(*p).is_some()).collect();
        let key = r["Type"] == "AWS::KMS::Key";
        if !named.is_empty() || key {
            assert_eq!(policy, "RetainExceptOnCreate", "{id} ({named:?}) survives a failed first create");
        } else {
            assert!(["Retain", "RetainExceptOnCreate"].contains(&policy), "{id}: {policy}");
        }
    }
    for id in [
        "DataKey",
        "LedgerTable",
        "RecipientsTable",
        "SmsSuccessLogGroup",
        "SmsFailureLogGroup",
        "SmsDeliveryStatusRole",
    ] {
        assert!(retained.contains(&id), "{id} is retained when the stack is deleted: {retained:?}");
    }
}

/// A Rules assertion evaluated for the given parameter values (the functions Rules allow that the
/// template uses).
fn rule_holds(v: &Value, parameters: &BTreeMap<&str, &str>) -> bool {
    fn value(v: &Value, p: &BTreeMap<&str, &str>) -> Value {
        match v {
            Value::Object(m) if m.len() == 1 => {
                let (f, arg) = m.iter().next().expect("one function");
                let args = || arg.as_array().cloned().unwrap_or_default();
                match f.as_str() {
                    "Ref" => json!(p.get(arg.as_str().unwrap_or_default()).copied().unwrap_or_default()),
                    "Fn::Equals" => json!(value(&args()[0], p) == value(&args()[1], p)),
                    "Fn::Not" => json!(value(&args()[0], p) != json!(true)),
                    "Fn::Or" => json!(args().iter().any(|a| value(a, p) == json!(true))),
                    "Fn::And" => json!(args().iter().all(|a| value(a, p) == json!(true))),
                    other => panic!("a Rules function this test does not evaluate: {other}"),
                }
            }
            other => other.clone(),
        }
    }
    value(v, parameters) == json!(true)
}

#[test]
fn a_deploy_that_pages_nobody_is_refused_before_anything_is_created() {
    let t = translated();
    let rules = t["Rules"].as_object().expect("the template has Rules (and the translator keeps them)");
    // Each rule whose RuleCondition holds (or that has none) must have every assertion hold.
    let deployable = |p: &[(&str, &str)]| {
        let mut all: BTreeMap<&str, &str> = [
            ("AlarmEmail", ""),
            ("AlarmWebhookUrl", ""),
            ("OnCallSmsNumber", ""),
            ("SmsProvider", "end-user-messaging"),
            ("Replies", "off"),
        ]
        .into();
        all.extend(p.iter().copied());
        rules.values().all(|r| {
            r.get("RuleCondition").is_some_and(|c| !rule_holds(c, &all))
                || r["Assertions"].as_array().into_iter().flatten().all(|a| rule_holds(&a["Assert"], &all))
        })
    };
    assert!(!deployable(&[]), "no e-mail, webhook or SMS: refused");
    assert!(deployable(&[("AlarmEmail", "oncall@example.com")]));
    assert!(deployable(&[("AlarmWebhookUrl", "https://events.example.com/sns")]));
    assert!(deployable(&[("OnCallSmsNumber", "+14155550100")]));
    // Replies need End User Messaging: SNS has no inbound SMS.
    let mail = ("AlarmEmail", "oncall@example.com");
    assert!(deployable(&[mail, ("Replies", "on")]));
    assert!(!deployable(&[mail, ("Replies", "on"), ("SmsProvider", "sns")]), "replies under SNS: refused");
    assert!(deployable(&[mail, ("Replies", "off"), ("SmsProvider", "sns")]));
    let why = |rule: &str| {
        rules[rule]["Assertions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a["AssertDescription"].as_str().unwrap_or_default().to_owned())
            .collect::<String>()
    };
    assert!(
        why("SomeonePaged").contains("AlarmEmail") && why("SomeonePaged").contains("--parameter-overrides"),
        "says what to do"
    );
    assert!(why("RepliesNeedEndUserMessaging").contains("SmsProvider=end-user-messaging"), "says what to do");
}

#[test]
fn every_duration_parameter_takes_only_what_the_functions_parse() {
    let t = translated();
    let mut durations = Vec::new();
    for (name, p) in t["Parameters"].as_object().expect("parameters") {
        let Some(default) = p["Default"].as_str() else { continue };
        if p["Type"] != "String" || humantime::parse_duration(default).is_err() {
            continue;
        }
        durations.push(name.as_str());
        match (p["AllowedPattern"].as_str(), p["AllowedValues"].as_array()) {
            (Some(pattern), _) => {
                assert_eq!(pattern, "^[0-9]+(s|m|h|d)$", "{name}");
                // Everything the pattern admits, the functions' parser reads.
                for n in ["1", "15", "72", "90"] {
                    for unit in ["s", "m", "h", "d"] {
                        assert!(humantime::parse_duration(&format!("{n}{unit}")).is_ok(), "{name}: {n}{unit}");
                    }
                }
            }
            (None, Some(values)) => {
                for v in values {
                    assert!(humantime::parse_duration(v.as_str().unwrap_or_default()).is_ok(), "{name}: {v}");
                }
            }
            (None, None) => panic!("{name} (default {default}) is a duration without AllowedPattern"),
        }
    }
    for d in ["DefaultDeadline", "MaxDeadline", "StormWindow", "DelaySuspectedAfter", "CanarySchedule"] {
        assert!(durations.contains(&d), "{d} is checked: {durations:?}");
    }
}

/// New accounts have a Lambda concurrency quota of 10 and CloudFormation refuses any reservation
/// there: the sender reserves only when asked; its event source mapping caps it either way.
#[test]
fn the_sender_reserves_concurrency_only_when_asked_and_its_event_source_mapping_caps_it_always() {
    let t = translated();
    assert_eq!(t["Parameters"]["ReserveSenderConcurrency"]["Default"], "false");
    let sender = &t["Resources"]["SenderFunction"]["Properties"];
    assert_eq!(
        sender["ReservedConcurrentExecutions"],
        json!({"Fn::If": ["ReservesSenderConcurrency", {"Ref": "SenderMaxConcurrency"}, {"Ref": "AWS::NoValue"}]})
    );
    let capped = resources_of(t, "AWS::Lambda::EventSourceMapping").iter().any(|(_, m)| {
        m["Properties"]["FunctionName"] == reference("SenderFunction")
            && m["Properties"]["ScalingConfig"]["MaximumConcurrency"] == reference("SenderMaxConcurrency")
    });
    assert!(capped, "the send queue's mapping caps the sender at SenderMaxConcurrency");
}

/// ReserveFunctionConcurrency isolates tocsin from a flood: intake reserved and capped, status
/// and escalation with instances nothing else in the account can take. Off by default (a new
/// account's quota refuses any reservation); the SMS-preferences resource never reserves.
#[test]
fn a_flood_can_be_kept_from_starving_status_and_escalation_by_reserved_concurrency() {
    let t = translated();
    assert_eq!(t["Parameters"]["ReserveFunctionConcurrency"]["Default"], "false");
    let mut reserved = std::collections::BTreeMap::new();
    for (id, f) in resources_of(t, "AWS::Lambda::Function") {
        if let Some(r) = f["Properties"].get("ReservedConcurrentExecutions") {
            reserved.insert(id.to_owned(), r.clone());
        }
    }
    let when = |n: u64| json!({"Fn::If": ["ReservesFunctionConcurrency", n, {"Ref": "AWS::NoValue"}]});
    assert_eq!(reserved.remove("IntakeFunction"), Some(when(10)));
    assert_eq!(reserved.remove("StatusFunction"), Some(when(5)));
    assert_eq!(reserved.remove("EscalationFunction"), Some(when(2)));
    assert!(reserved.remove("SenderFunction").is_some(), "the sender's own switch");
    assert!(reserved.is_empty(), "no other function reserves: {reserved:?}");
}

/// Intake refuses a request outside the SMS policy and the sender applies it again: both read it
/// from the same parameters, so they cannot disagree.
#[test]
fn intake_and_the_sender_take_the_sms_policy_from_the_same_parameters() {
    for function in ["IntakeFunction", "SenderFunction"] {
        let vars = &translated()["Resources"][function]["Properties"]["Environment"]["Variables"];
        for (var, parameter) in [
            ("TOCSIN_SMS_ORIGINATION_NUMBER", "SmsOriginationNumber"),
            ("TOCSIN_SMS_SENDER_ID", "SmsSenderId"),
            ("TOCSIN_SMS_MAX_PRICE_USD", "SmsMaxPriceUsd"),
            ("TOCSIN_SMS_ALLOWED_SENDER_IDS", "SmsAllowedSenderIds"),
            ("TOCSIN_SMS_ALLOWED_ORIGINATION_NUMBERS", "SmsAllowedOriginationNumbers"),
        ] {
            assert_eq!(vars[var], reference(parameter), "{function} {var}");
        }
    }
    let parameters = &translated()["Parameters"];
    for p in ["SmsAllowedSenderIds", "SmsAllowedOriginationNumbers"] {
        assert_eq!(parameters[p]["Default"], "", "{p}: a request names no identity of its own unless allowed");
    }
}

/// The stack's SMS breaker is a ceiling of the deployment's own: the sender's, from a parameter no
/// request reaches, below the sender's own pace, and an alert it withholds pages within a minute.
#[test]
fn the_sms_breaker_takes_its_ceiling_from_a_parameter_and_what_it_withholds_pages_at_once() {
    let t = translated();
    let vars = &t["Resources"]["SenderFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(vars["TOCSIN_SMS_PARTS_PER_HOUR"], reference("SmsPartsPerHour"));
    let parameter = &t["Parameters"]["SmsPartsPerHour"];
    let default = parameter["Default"].as_u64().or_else(|| parameter["Default"].as_str()?.parse().ok());
    let pace = t["Parameters"]["SmsRatePerSecond"]["Default"].as_u64().unwrap_or(20) * 3600;
    assert!(default.is_some_and(|d| d > 0 && d < pace / 10), "a ceiling well below the pace's {pace}: {parameter}");
    let max_segments = t["Parameters"]["MaxSegments"]["MaxValue"].as_u64().unwrap_or(10);
    assert!(parameter["MinValue"].as_u64().is_some_and(|m| m >= max_segments), "one alert never opens it alone");
    let a = &alarm("SpendBreakerAlarm")["Properties"];
    assert_eq!((a["MetricName"].as_str(), a["Statistic"].as_str()), (Some("breaker_withheld"), Some("Sum")));
    assert_eq!((a["Period"].as_u64(), a["Threshold"].as_u64()), (Some(60), Some(1)), "{a}");
    assert_eq!(a["Dimensions"][0]["Value"], "sender");
    // The functions that send SMS count against it: the sender, and the replies function's
    // confirmations; no other function reads it.
    for (id, f) in resources_of(t, "AWS::Lambda::Function") {
        let ceiling = f["Properties"]["Environment"]["Variables"].get("TOCSIN_SMS_PARTS_PER_HOUR");
        if id == "SenderFunction" || id == "RepliesFunction" {
            assert_eq!(ceiling, Some(&reference("SmsPartsPerHour")), "{id}");
        } else {
            assert!(ceiling.is_none(), "{id}");
        }
    }
}

/// End User Messaging: the stack's country allow-list is AWS's to enforce. The protect
/// configuration is the configuration set's and named on every send; the custom resource that
/// blocks every country but `SmsAllowedCountries` takes both values from its own environment
/// (the properties mirror them, as change triggers), and its role may read and change that
/// protect configuration's rules and nothing else.
#[test]
fn the_stacks_protect_configuration_guards_every_send_and_only_its_own_function_sets_its_country_rules() {
    let t = translated();
    let r = &t["Resources"];
    let id = get_att("SmsProtectConfiguration", "ProtectConfigurationId");
    assert_eq!(r["SmsProtectConfiguration"]["Type"], "AWS::SMSVOICE::ProtectConfiguration");
    assert_eq!(r["SmsConfigurationSet"]["Properties"]["ProtectConfigurationId"], id);
    let sender = &r["SenderFunction"]["Properties"]["Environment"]["Variables"]["TOCSIN_EUM_PROTECT_CONFIGURATION"];
    assert_eq!(sender["Fn::If"][1], id, "the sender names it on every send: {sender}");
    let send = statements(&r["SenderFunctionRole"])
        .into_iter()
        .find(|s| s["Sid"] == "SendThroughTheStacksConfigurationSet")
        .expect("the send grant");
    assert!(
        send["Resource"].as_array().is_some_and(|a| a.contains(&get_att("SmsProtectConfiguration", "Arn"))),
        "the send is granted on the stack's protect configuration: {send}"
    );
    let vars = &r["SmsCountryRulesFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(vars["TOCSIN_PROTECT_CONFIGURATION_ID"], id);
    assert_eq!(vars["TOCSIN_SMS_ALLOWED_COUNTRIES"], reference("SmsAllowedCountries"));
    let props = &r["SmsCountryRules"]["Properties"];
    assert_eq!(r["SmsCountryRules"]["Type"], "Custom::SmsCountryRules");
    assert_eq!(props["ProtectConfigurationId"], id);
    assert_eq!(props["AllowedCountries"], reference("SmsAllowedCountries"));
    assert_eq!(props["ServiceToken"], get_att("SmsCountryRulesFunction", "Arn"));
    assert_eq!(t["Parameters"]["SmsAllowedCountries"]["Default"], "US");
    let granted: Vec<(Vec<String>, Value)> =
        statements(&r["SmsCountryRulesFunctionRole"]).iter().map(|s| (actions(s), s["Resource"].clone())).collect();
    assert_eq!(
        granted,
        [
            (
                vec![
                    "sms-voice:GetProtectConfigurationCountryRuleSet".to_owned(),
                    "sms-voice:UpdateProtectConfigurationCountryRuleSet".to_owned()
                ],
                get_att("SmsProtectConfiguration", "Arn")
            ),
            (vec!["kms:Decrypt".to_owned()], get_att("DataKey", "Arn")),
        ],
        "nothing else: not the account default, no other protect configuration, no send"
    );
    for (name, role) in resources_of(t, "AWS::IAM::Role") {
        if name != "SmsCountryRulesFunctionRole" {
            let changes = statements(role).iter().any(|s| {
                actions(s).iter().any(|a| a.contains("ProtectConfiguration") && !a.starts_with("sms-voice:Get"))
            });
            assert!(!changes, "{name} may change protect configurations");
        }
    }
}

/// Each producer's escalation cap is the escalation function's, from a parameter of its own.
#[test]
fn the_escalation_function_takes_each_producers_escalation_cap_from_a_parameter() {
    let t = translated();
    let vars = &t["Resources"]["EscalationFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(vars["TOCSIN_PRODUCER_ESCALATIONS_PER_HOUR"], reference("ProducerEscalationsPerHour"));
    let parameter = &t["Parameters"]["ProducerEscalationsPerHour"];
    assert!(parameter["MinValue"].as_u64().is_some_and(|m| m >= 1), "a cap of zero would page nothing: {parameter}");
}

/// Two tocsin stacks may share an account and region (README): every schedule carries the stack's
/// name, since a schedule name is unique per account, region and schedule group (SAM would name
/// one after its logical id).
#[test]
fn every_schedule_is_named_after_its_stack() {
    for (id, s) in resources_of(translated(), "AWS::Scheduler::Schedule") {
        let name = s["Properties"]["Name"]["Fn::Sub"].as_str().unwrap_or_default();
        assert!(name.starts_with("${AWS::StackName}-"), "{id}: {}", s["Properties"]["Name"]);
    }
}

/// The canary (CanaryNumber, CanarySchedule): a schedule hands intake an "Alert Requested" event
/// whose event id is the scheduled time (Scheduler's retries of a run are replays of one intent),
/// through a role that may invoke intake and nothing else; the alarm pages when no canary was
/// delivered for a whole window, which is longer than the interval plus the canary's deadline for
/// every schedule allowed, and counts silence as failure.
#[test]
fn the_canary_is_a_scheduled_alert_whose_missing_delivery_pages() {
    let t = translated();
    assert_eq!(t["Parameters"]["CanaryNumber"]["Default"], "", "off unless a number is given");
    let schedule = &t["Resources"]["CanaryRun"];
    assert_eq!(schedule["Condition"], "HasCanary");
    let target = &schedule["Properties"]["Target"];
    assert_eq!(target["Arn"], get_att("IntakeFunction", "Arn"));
    assert_eq!(target["RoleArn"], get_att("CanaryScheduleRole", "Arn"));
    let input = target["Input"]["Fn::Sub"].as_str().expect("an input with the number");
    let filled = input
        .replace("${AWS::AccountId}", "123456789012")
        .replace("${AWS::Region}", "us-east-1")
        .replace("${CanaryNumber}", "+14155550199")
        .replace("<aws.scheduler.scheduled-time>", "2026-12-01T10:00:00Z")
        .replace("<aws.scheduler.execution-id>", "e-1")
        .replace("<aws.scheduler.schedule-arn>", "arn:aws:scheduler:us-east-1:123456789012:schedule/default/x");
    let event: Value = serde_json::from_str(&filled).expect("the input is JSON once Scheduler fills it in");
    assert_eq!(
        (event["detail-type"].as_str(), event["source"].as_str()),
        (Some("Alert Requested"), Some("tocsin.canary"))
    );
    assert_eq!(event["detail"]["event_id"], "canary-2026-12-01T10:00:00Z", "one intent per scheduled run");
    assert_eq!(event["detail"]["template"], json!({"name": "tocsin_canary", "version": 1}));
    assert_eq!(event["detail"]["recipient"], "+14155550199");
    let deadline =
        humantime::parse_duration(event["detail"]["deadline"].as_str().unwrap_or_default()).expect("deadline");
    let role = &t["Resources"]["CanaryScheduleRole"];
    assert_eq!(role["Condition"], "HasCanary");
    let allowed: Vec<(Vec<String>, Value)> =
        statements(role).iter().map(|s| (actions(s), s["Resource"].clone())).collect();
    assert_eq!(allowed, [(vec!["lambda:InvokeFunction".to_owned()], get_att("IntakeFunction", "Arn"))]);

    let alarm = alarm("CanaryAlarm");
    assert_eq!(alarm["Condition"], "HasCanary");
    let p = &alarm["Properties"];
    assert_eq!((&p["MetricName"], &p["TreatMissingData"]), (&json!("canary_delivered"), &json!("breaching")));
    assert_eq!((&p["ComparisonOperator"], &p["Threshold"]), (&json!("LessThanThreshold"), &json!(1)));
    assert_eq!(p["EvaluationPeriods"], p["DatapointsToAlarm"], "every period of the window is empty");
    let windows = t["Mappings"]["CanaryWindows"].as_object().expect("windows");
    let allowed_schedules = t["Parameters"]["CanarySchedule"]["AllowedValues"].as_array().expect("values");
    assert_eq!(windows.len(), allowed_schedules.len());
    for v in allowed_schedules {
        let name = v.as_str().unwrap_or_default();
        let w = &windows[name];
        let interval = humantime::parse_duration(name).expect("a duration").as_secs();
        let (period, periods) = (w["Period"].as_u64().unwrap_or(0), w["Periods"].as_u64().unwrap_or(0));
        // A healthy canary leaves at most floor((interval + deadline) / period) periods empty in a
        // row (delivered at the latest by its deadline): the window must be longer than that.
        let longest_gap = (interval + deadline.as_secs()) / period;
        assert!(periods > longest_gap, "{name}: {periods} periods of {period} s");
        assert!(period * periods <= 86_400, "{name}: CloudWatch evaluates at most a day");
        assert!(period % 60 == 0, "{name}");
        let every = w["Expression"].as_str().unwrap_or_default();
        assert!(every.starts_with("rate(") && every.ends_with(')'), "{name}: {every}");
    }
}

/// The dashboard's body as CloudWatch reads it: `${EscalationAgeAlarmSeconds}` as 300, every
/// other substitution (and every dynamic label) as `x`.
fn dashboard() -> Value {
    let t = translated();
    let body = t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"].as_str().expect("body");
    let body = body.replace("${EscalationAgeAlarmSeconds}", "300").replace("${!", "${");
    let body = body
        .split("${")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part.to_owned()
            } else {
                part.split_once('}').map_or(part.to_owned(), |(_, r)| format!("x{r}"))
            }
        })
        .collect::<String>();
    serde_json::from_str(&body).expect("the dashboard is JSON")
}

/// The per-carrier widgets of the escalation function's metrics: metric name → the widget whose
/// SEARCH draws it (one series per carrier).
fn per_carrier_widgets(dashboard: &Value) -> BTreeMap<String, Value> {
    let prefix = "SEARCH('{tocsin,carrier,function} function=\"escalation\" MetricName=\"";
    let mut out = BTreeMap::new();
    for w in dashboard["widgets"].as_array().expect("widgets") {
        for row in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let expression = row[0]["expression"].as_str().unwrap_or_default();
            if let Some(name) = expression.strip_prefix(prefix).and_then(|r| r.split_once('"')).map(|(n, _)| n) {
                assert!(out.insert(name.to_owned(), w.clone()).is_none(), "{name} drawn twice");
            }
        }
    }
    out
}

#[test]
fn the_dashboard_draws_each_carriers_account_traffic_verdict_in_the_row_under_its_sms_in_flight() {
    let d = dashboard();
    let carrier = per_carrier_widgets(&d);
    let emitted = emf_metrics_emitted_by("escalation");
    for name in carrier.keys() {
        assert!(emitted.contains(name), "the dashboard draws {name}, which the sweep never emits");
    }
    let at = |w: &Value, k: &str| w[k].as_u64().unwrap_or_else(|| panic!("{k} of {w}"));
    let in_flight = &carrier["carrier_in_flight"];
    let row_under = at(in_flight, "y") + at(in_flight, "height");
    let mut xs = Vec::new();
    for name in ["carrier_traffic_observed", "carrier_traffic_expected", "carrier_traffic_degraded"] {
        let w = carrier.get(name).unwrap_or_else(|| panic!("a per-carrier widget for {name}"));
        assert_eq!(at(w, "y"), row_under, "{name}: the row under the SMS in flight");
        let p = &w["properties"];
        assert_eq!(p["period"], 60, "{name}: one point per sweep");
        assert_eq!(p["metrics"][0][0]["label"], "x", "{name}: one series per carrier, labelled by it");
        xs.push((at(w, "x"), at(w, "width")));
    }
    xs.sort_unstable();
    assert_eq!(xs.iter().map(|(_, w)| w).sum::<u64>(), 24, "the three fill the row: {xs:?}");
    assert!(xs.windows(2).all(|p| p[0].0 + p[0].1 <= p[1].0), "side by side: {xs:?}");
    let degraded = &carrier["carrier_traffic_degraded"]["properties"];
    assert_eq!(degraded["annotations"]["horizontal"][0]["value"], 1, "where carrier-delayed pages");
    // No widget hides another.
    let boxes: Vec<(u64, u64, u64, u64)> = d["widgets"]
        .as_array()
        .expect("widgets")
        .iter()
        .map(|w| (at(w, "x"), at(w, "y"), at(w, "width"), at(w, "height")))
        .collect();
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            let apart = a.0 + a.2 <= b.0 || b.0 + b.2 <= a.0 || a.1 + a.3 <= b.1 || b.1 + b.3 <= a.1;
            assert!(apart, "widgets overlap: {a:?} {b:?}");
        }
    }
}

#[test]
fn the_dashboard_draws_the_paging_line_on_the_metric_the_escalation_age_alarm_reads() {
    let dashboard = dashboard();
    let age = &alarm("EscalationAgeAlarm")["Properties"];
    let paging: Vec<&Value> = dashboard["widgets"]
        .as_array()
        .expect("widgets")
        .iter()
        .filter(|w| {
            w["properties"]["annotations"]["horizontal"].as_array().is_some_and(|a| a.iter().any(|h| h["value"] == 300))
        })
        .collect();
    assert_eq!(paging.len(), 1, "one widget draws the paging threshold");
    let w = &paging[0]["properties"];
    let axis = w["annotations"]["horizontal"][0]["yAxis"].as_str().unwrap_or("left");
    let on_axis: Vec<&Value> = w["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter(|m| m.as_array().and_then(|a| a.last()).is_some_and(|o| o["yAxis"].as_str().unwrap_or("left") == axis))
        .collect();
    assert_eq!(on_axis.len(), 1, "one series on the threshold's axis: {on_axis:?}");
    let series = on_axis[0].as_array().expect("a metric row");
    assert_eq!(
        (&series[0], &series[1], &series[2], &series[3]),
        (&age["Namespace"], &age["MetricName"], &json!("function"), &json!("escalation")),
        "the line is drawn on what pages"
    );
}

#[test]
fn producers_find_the_apis_arn_for_their_invoke_policy_in_the_outputs() {
    let out = &translated()["Outputs"]["AlertApiArn"]["Value"]["Fn::Sub"];
    assert_eq!(out, "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${AlertApi}/*/POST/alerts");
}

#[test]
fn a_slow_carrier_pages_on_call_per_carrier_from_one_group_by_carrier_alarm() {
    let a = &alarm("CarrierDelayedAlarm")["Properties"];
    let query = a["Metrics"][0]["Expression"].as_str().expect("a Metrics Insights query");
    assert!(query.ends_with("GROUP BY carrier"), "{query}");
    assert_eq!(
        insights_metric(query),
        Some((
            "tocsin".to_owned(),
            "carrier_degraded".to_owned(),
            vec![("carrier".to_owned(), Value::Null), ("function".to_owned(), json!("escalation"))]
        ))
    );
    assert!(emf_metrics_emitted_by("escalation").contains("carrier_degraded"));
    // Within a minute of the sweep's measurement, and back to OK told too.
    assert_eq!((a["Metrics"][0]["Period"].as_u64(), a["EvaluationPeriods"].as_u64()), (Some(60), Some(1)));
    for actions in ["AlarmActions", "OKActions"] {
        assert!(a[actions].as_array().is_some_and(|x| x.contains(&reference("AlarmTopic"))), "{actions}");
    }
    // It says which case it is and where the runbook is; its sibling tells "all carriers" apart.
    let says = a["AlarmDescription"].as_str().unwrap_or_default();
    assert!(says.contains("ONE CARRIER SLOW") && says.contains("do NOT resend") && says.contains("Carrier incidents"));
    let all = &alarm("CarriersAllSlowAlarm")["Properties"];
    assert_eq!(all["MetricName"], "carriers_all_slow");
    assert!(all["AlarmDescription"].as_str().unwrap_or_default().contains("ALL CARRIERS SLOW"));
    let runbook = std::fs::read_to_string(workspace_root().join("docs/operations.md")).expect("runbook");
    for case in ["### One carrier slow", "### All carriers slow", "### Our side"] {
        assert!(runbook.contains(case), "docs/operations.md has {case}");
    }
}

/// The SMS preferences function may raise the account's spend limit: no resource policy lets
/// anyone invoke it (no `AWS::Lambda::Permission`, no function URL, no event source), so only a
/// principal of this account whose own IAM policy allows `lambda:InvokeFunction` on it can — the
/// deployer, through CloudFormation. And what such a caller hands it is not applied
/// (`functions/sms-preferences`: the values come from its environment, set here).
#[test]
fn no_resource_policy_lets_anyone_invoke_the_sms_preferences_function_and_it_sets_the_stacks_values() {
    let t = translated();
    let names_it = |v: &Value| v.to_string().contains("\"SmsPreferencesFunction\"");
    for ty in ["AWS::Lambda::Permission", "AWS::Lambda::Url", "AWS::Lambda::EventSourceMapping"] {
        let granting: Vec<&str> =
            resources_of(t, ty).into_iter().filter(|(_, r)| names_it(&r["Properties"])).map(|(id, _)| id).collect();
        assert!(granting.is_empty(), "{ty} for the SMS preferences function: {granting:?}");
    }
    let f = &t["Resources"]["SmsPreferencesFunction"]["Properties"];
    let vars = &f["Environment"]["Variables"];
    assert_eq!(vars["TOCSIN_DELIVERY_STATUS_ROLE_ARN"], get_att("SmsDeliveryStatusRole", "Arn"));
    assert_eq!(vars["TOCSIN_MONTHLY_SPEND_LIMIT_USD"], reference("MonthlySpendLimitUsd"));
}

// ---------------------------------------------------------------- the provider split, as deployed
//
// What each provider's stack may do, read from the translated template resolved for one stack
// (`tocsin-prod`, the harness's account and region) and its parameters, as CloudFormation would
// deploy it: conditions decided, `Fn::If` branches taken, intrinsics resolved to concrete ARNs.
// Permissions are asked the way AWS decides them (`tocsin_harness::iam::policy::evaluate`: a Deny
// wins, then an Allow), for the ARNs the promise is about and for its neighbours.

use tocsin_harness::iam::policy::{Ask, Context, Effect, Patterns, Policy, evaluate, glob};
use tocsin_harness::iam::template::Resolved;

const STACK: &str = "tocsin-prod";
const EUM: [(&str, &str); 1] = [("SmsProvider", "end-user-messaging")];
const SNS: [(&str, &str); 1] = [("SmsProvider", "sns")];
/// What ARNs in the account and region of the resolved stack begin with, per service.
const SMS_VOICE: &str = "arn:aws:sms-voice:us-east-1:123456789012:";

fn resolved(parameters: &[(&str, &str)]) -> Resolved {
    Resolved::new(translated().clone(), STACK, parameters)
}

/// Resource `id`'s properties, resolved.
fn properties(t: &Resolved, id: &str) -> Value {
    assert!(t.exists(id).expect("conditions evaluate"), "{id} exists for these parameters");
    t.resolve(&t.template()["Resources"][id]["Properties"]).expect("resolves").unwrap_or_default()
}

/// The stack's configuration set's ARN, from the name the template gives it.
fn configuration_set_arn(t: &Resolved) -> String {
    let name = properties(t, "SmsConfigurationSet")["ConfigurationSetName"].as_str().expect("named").to_owned();
    format!("{SMS_VOICE}configuration-set/{name}")
}

/// Every role the stack deploys with `parameters`, by logical id, with its policies: a function's
/// as the IAM gate loads it (SAM's managed policies included), any other's inline policies.
fn roles(parameters: &[(&str, &str)]) -> BTreeMap<String, Vec<Policy>> {
    let principals = tocsin_harness::iam::principals_with(STACK, parameters).expect("the roles load");
    let t = &principals.template;
    let mut out = BTreeMap::new();
    for (id, _) in t.resources_of("AWS::IAM::Role").expect("conditions evaluate") {
        if let Some(role) = principals.roles.get(&id) {
            out.insert(id, role.policies.clone());
            continue;
        }
        let p = properties(t, &id);
        assert!(p.get("ManagedPolicyArns").is_none(), "{id}: managed policies this test does not read");
        let inline = p["Policies"].as_array().cloned().unwrap_or_default();
        let policies = inline
            .iter()
            .map(|x| Policy::parse(x["PolicyName"].as_str().unwrap_or("inline"), &x["PolicyDocument"]).expect("parses"))
            .collect();
        out.insert(id, policies);
    }
    out
}

fn allows(policies: &[Policy], action: &str, resource: &str) -> bool {
    evaluate(policies, &Ask { action, resource, context: &Context::new() }).is_allowed()
}

/// The resource patterns of every Allow statement that grants `action` (a `NotResource` Allow
/// fails the test: it grants everything but a list).
fn allowed_resources(policies: &[Policy], action: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in policies {
        for s in p.statements.iter().filter(|s| s.effect == Effect::Allow) {
            let grants_action = match &s.actions {
                Patterns::Listed(a) => a.iter().any(|a| glob(a, action, true)),
                Patterns::AllBut(a) => !a.iter().any(|a| glob(a, action, true)),
            };
            if !grants_action {
                continue;
            }
            match &s.resources {
                Patterns::Listed(r) => out.extend(r.iter().cloned()),
                Patterns::AllBut(r) => panic!("{}: {action} on everything but {r:?}", p.name),
            }
        }
    }
    out
}

/// The values a condition operator gives a key (a string or a list of them).
fn condition_values(c: &Value, operator: &str, key: &str) -> Vec<String> {
    match &c[operator][key] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => vec![],
    }
}

#[test]
fn under_end_user_messaging_the_event_role_is_assumable_only_by_the_service_for_this_stacks_configuration_set() {
    let t = resolved(&EUM);
    let own = configuration_set_arn(&t);
    let trust = properties(&t, "SmsEventsRole")["AssumeRolePolicyDocument"]["Statement"].clone();
    let trust = trust.as_array().cloned().unwrap_or_default();
    assert!(!trust.is_empty(), "a trust policy");
    for s in &trust {
        assert_eq!(s["Effect"], "Allow", "{s}");
        assert_eq!(s["Principal"], json!({ "Service": "sms-voice.amazonaws.com" }), "End User Messaging alone");
        assert_eq!(s["Action"], "sts:AssumeRole", "{s}");
        let c = &s["Condition"];
        let operators: BTreeSet<&str> = c.as_object().into_iter().flatten().map(|(k, _)| k.as_str()).collect();
        assert!(operators.is_subset(&BTreeSet::from(["StringEquals", "ArnEquals", "ArnLike"])), "{operators:?}");
        assert_eq!(condition_values(c, "StringEquals", "aws:SourceAccount"), ["123456789012"], "this account: {s}");
        // aws:SourceArn: this stack's configuration set, and no other (a prefix would take in
        // `tocsin-prod2`'s, a wildcard every stack's).
        let exact = condition_values(c, "ArnEquals", "aws:SourceArn");
        let like = condition_values(c, "ArnLike", "aws:SourceArn");
        assert!(!exact.is_empty() || !like.is_empty(), "an aws:SourceArn condition: {s}");
        let admits = |arn: &str| exact.iter().all(|e| e == arn) && like.iter().all(|l| glob(l, arn, false));
        assert!(admits(&own), "the stack's own set ({own}) may use the role: {s}");
        for other in [
            format!("{SMS_VOICE}configuration-set/tocsin-dev"),
            format!("{own}2"),
            format!("{SMS_VOICE}configuration-set/{STACK}-other"),
            own.replace("123456789012", "999999999999"),
        ] {
            assert!(!admits(&other), "{other} may not use the role: {s}");
        }
    }
}

#[test]
fn under_end_user_messaging_the_event_role_may_write_only_the_stacks_event_group() {
    let t = resolved(&EUM);
    let group = t.physical_name("SmsEventLogGroup").expect("the event group's name");
    let group_arn = format!("arn:aws:logs:us-east-1:123456789012:log-group:{group}");
    let policies = &roles(&EUM)["SmsEventsRole"];
    // End User Messaging must be able to write there, or no event reaches the status function.
    for action in ["logs:CreateLogStream", "logs:PutLogEvents"] {
        assert!(allows(policies, action, &format!("{group_arn}:log-stream:tocsin-eum-status")), "{action}");
    }
    // And nowhere else: every resource any Allow names is that group (or its streams).
    let own = [group_arn.clone(), format!("{group_arn}:*"), format!("{group_arn}:log-stream:*")];
    for p in policies {
        for s in &p.statements {
            assert_eq!(s.effect, Effect::Allow, "{}: {s:?}", p.name);
            match &s.resources {
                Patterns::Listed(r) => assert!(r.iter().all(|r| own.contains(r)), "{}: writes {r:?}", p.name),
                Patterns::AllBut(r) => panic!("{}: everything but {r:?}", p.name),
            }
        }
    }
    for other in [
        "/tocsin/tocsin-dev/sms-events",
        "sns/us-east-1/123456789012/DirectPublishToPhoneNumber",
        "/aws/lambda/tocsin-prod-status",
        &format!("{group}-other"),
    ] {
        let stream = format!("arn:aws:logs:us-east-1:123456789012:log-group:{other}:log-stream:x");
        assert!(!allows(policies, "logs:PutLogEvents", &stream), "{other}");
    }
}

#[test]
fn under_end_user_messaging_the_sender_may_send_only_through_this_stacks_configuration_set_from_the_accounts_identities()
 {
    let t = resolved(&EUM);
    let own = configuration_set_arn(&t);
    let sender = &roles(&EUM)["SenderFunctionRole"];
    let send = "sms-voice:SendTextMessage";
    let identities = ["phone-number/*", "pool/*", "sender-id/*"].map(|r| format!("{SMS_VOICE}{r}"));
    // The stack's protect configuration (its id is AWS's, so the resolved template names it
    // `protect-configuration/*`; the raw template's `Fn::GetAtt` is pinned in
    // `the_stacks_protect_configuration_guards_every_send_…`).
    let protect = format!("{SMS_VOICE}protect-configuration/*");
    for r in allowed_resources(sender, send) {
        assert!(
            r == own || r == protect || identities.contains(&r),
            "{send} on {r}: not this stack's set, its protect configuration nor an origination identity"
        );
    }
    for may in [
        own.clone(),
        format!("{SMS_VOICE}phone-number/phone-0123456789abcdef"),
        format!("{SMS_VOICE}pool/pool-0123456789abcdef"),
        format!("{SMS_VOICE}sender-id/TOCSIN/GB"),
    ] {
        assert!(allows(sender, send, &may), "{send} on {may}");
    }
    for may_not in [
        format!("{SMS_VOICE}configuration-set/tocsin-dev"),
        format!("{own}2"),
        format!("{SMS_VOICE}opt-out-list/Default"),
        "arn:aws:sms-voice:eu-west-1:123456789012:phone-number/phone-1".to_owned(),
        "arn:aws:sms-voice:us-east-1:999999999999:pool/pool-1".to_owned(),
        "*".to_owned(),
    ] {
        assert!(!allows(sender, send, &may_not), "{send} on {may_not}");
    }
}

#[test]
fn under_end_user_messaging_the_sender_may_read_opt_outs_only_in_the_stacks_opt_out_list() {
    let read = "sms-voice:DescribeOptedOutNumbers";
    for (parameters, own, other) in [
        (vec![EUM[0]], "Default", "tocsin-alerts"),
        (vec![EUM[0], ("SmsOptOutListName", "tocsin-alerts")], "tocsin-alerts", "Default"),
    ] {
        let sender = &roles(&parameters)["SenderFunctionRole"];
        let own_arn = format!("{SMS_VOICE}opt-out-list/{own}");
        assert_eq!(allowed_resources(sender, read), std::slice::from_ref(&own_arn), "{parameters:?}");
        assert!(allows(sender, read, &own_arn), "{parameters:?}");
        assert!(!allows(sender, read, &format!("{SMS_VOICE}opt-out-list/{other}")), "{parameters:?}");
    }
}

#[test]
fn no_role_may_send_through_sns_under_end_user_messaging_nor_through_end_user_messaging_under_sns() {
    let own = configuration_set_arn(&resolved(&EUM));
    for (id, policies) in roles(&EUM) {
        // Publishing to a phone number is authorized on "*" (it has no ARN).
        assert!(!allows(&policies, "sns:Publish", "*"), "{id} may publish SMS through SNS under End User Messaging");
    }
    let targets = [
        own,
        format!("{SMS_VOICE}phone-number/phone-1"),
        format!("{SMS_VOICE}pool/pool-1"),
        format!("{SMS_VOICE}sender-id/TOCSIN/GB"),
        "*".to_owned(),
    ];
    for (id, policies) in roles(&SNS) {
        for action in ["sms-voice:SendTextMessage", "sms-voice:SendMediaMessage", "sms-voice:SendVoiceMessage"] {
            for r in &targets {
                assert!(!allows(&policies, action, r), "{id} may {action} on {r} under SNS");
            }
        }
    }
    // The sender still sends under each: the split takes nothing from the provider in use.
    assert!(allows(&roles(&SNS)["SenderFunctionRole"], "sns:Publish", "*"));
}

#[test]
fn under_end_user_messaging_the_status_functions_only_subscription_is_on_the_stacks_own_event_group() {
    let t = resolved(&EUM);
    let status = t.get_att("StatusFunction", "Arn").expect("the status function");
    let group = t.physical_name("SmsEventLogGroup").expect("the event group");
    let filters: Vec<Value> = t
        .resources_of("AWS::Logs::SubscriptionFilter")
        .expect("conditions evaluate")
        .into_iter()
        .map(|(id, _)| properties(&t, &id))
        .filter(|p| p["DestinationArn"] == json!(status))
        .collect();
    let groups: Vec<&str> = filters.iter().filter_map(|p| p["LogGroupName"].as_str()).collect();
    assert_eq!(groups, [group.as_str()], "one subscription, on the stack's own group");
    // Its one invoke permission for CloudWatch Logs is for that group, from this account.
    let permissions: Vec<Value> = t
        .resources_of("AWS::Lambda::Permission")
        .expect("conditions evaluate")
        .into_iter()
        .filter(|(_, r)| r["Properties"]["Principal"] == "logs.amazonaws.com")
        .map(|(id, _)| properties(&t, &id))
        .filter(|p| p["FunctionName"] == json!(format!("{STACK}-status")))
        .collect();
    assert_eq!(permissions.len(), 1, "{permissions:?}");
    assert_eq!(permissions[0]["SourceArn"], json!(t.get_att("SmsEventLogGroup", "Arn").expect("its ARN")));
    assert_eq!(permissions[0]["SourceAccount"], "123456789012");
}

#[test]
fn under_end_user_messaging_every_log_group_the_stack_creates_is_encrypted_with_its_key_and_has_retention() {
    let t = resolved(&EUM);
    let key = t.get_att("DataKey", "Arn").expect("the stack's key");
    let retention = t.string(&reference("LogRetentionDays")).expect("LogRetentionDays");
    // CloudWatch Logs may use the key only for the groups its key policy names.
    let key_policy = properties(&t, "DataKey")["KeyPolicy"]["Statement"].clone();
    let logs_may_use = |group_arn: &str| {
        key_policy.as_array().into_iter().flatten().any(|s| {
            s["Effect"] == "Allow"
                && s["Principal"]["Service"] == "logs.us-east-1.amazonaws.com"
                && condition_values(&s["Condition"], "ArnLike", "kms:EncryptionContext:aws:logs:arn")
                    .iter()
                    .any(|p| glob(p, group_arn, false))
        })
    };
    let groups = t.resources_of("AWS::Logs::LogGroup").expect("conditions evaluate");
    assert!(groups.iter().any(|(id, _)| id == "SmsEventLogGroup"), "the event group is one of them");
    for (id, _) in groups {
        let p = properties(&t, &id);
        assert_eq!(p["KmsKeyId"], json!(key), "{id}: the stack's key");
        assert_eq!(p["RetentionInDays"], json!(retention), "{id}: LogRetentionDays");
        let arn = t.get_att(&id, "Arn").expect("its ARN");
        assert!(logs_may_use(arn.trim_end_matches(":*")), "{id}: the key policy lets CloudWatch Logs use the key");
        let name = p["LogGroupName"].as_str().unwrap_or_default();
        assert!(!name.starts_with("sns/"), "{id}: no account-wide SNS group under End User Messaging");
    }
}

/// The alert bus's events hold a phone number and the alert's variables: they are encrypted with
/// the stack's key, which EventBridge may use under this bus's encryption context (and describe);
/// an event it cannot encrypt or decrypt is kept on the rejects queue, whose policy lets the bus
/// write, not lost.
#[test]
fn the_alert_bus_is_encrypted_with_the_stacks_key_bound_to_it_and_keeps_what_it_cannot_encrypt() {
    let t = resolved(&EUM);
    let bus = properties(&t, "AlertBus");
    assert_eq!(bus["KmsKeyIdentifier"], json!(t.get_att("DataKey", "Arn").expect("the key")));
    let rejects = t.get_att("IntakeRejectsQueue", "Arn").expect("the rejects queue");
    assert_eq!(bus["DeadLetterConfig"]["Arn"], json!(rejects));
    let bus_arn = format!("arn:aws:events:us-east-1:123456789012:event-bus/{}", bus["Name"].as_str().expect("named"));
    let key_policy = properties(&t, "DataKey")["KeyPolicy"]["Statement"].clone();
    let for_events: Vec<&Value> = key_policy
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["Effect"] == "Allow" && s["Principal"]["Service"] == "events.amazonaws.com")
        .collect();
    let bound = for_events.iter().any(|s| {
        actions(s).contains(&"kms:GenerateDataKey".to_owned())
            && actions(s).contains(&"kms:Decrypt".to_owned())
            && condition_values(&s["Condition"], "StringEquals", "kms:EncryptionContext:aws:events:event-bus:arn")
                == [bus_arn.clone()]
    });
    assert!(bound, "EventBridge may use the key under the bus's encryption context: {for_events:?}");
    assert!(for_events.iter().any(|s| actions(s).contains(&"kms:DescribeKey".to_owned())), "and check it");
    let queue_policy = properties(&t, "IntakeRejectsQueuePolicy")["PolicyDocument"]["Statement"].clone();
    let writers: Vec<String> = queue_policy
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["Principal"]["Service"] == "events.amazonaws.com" && actions(s).contains(&"sqs:SendMessage".to_owned())
        })
        .flat_map(|s| condition_values(&s["Condition"], "ArnEquals", "aws:SourceArn"))
        .collect();
    assert!(writers.contains(&bus_arn), "the bus may dead-letter into the rejects queue: {writers:?}");
    assert!(writers.iter().all(|w| w.contains(":rule/tocsin-prod-") || *w == bus_arn), "nothing else: {writers:?}");
}

const BILLING: &str = "arn:aws:iam::123456789012:role/services/billing";
const PAYMENTS: &str = "arn:aws:iam::210987654321:role/payments";

/// May `principal` (tagged `tocsin-producer=tag`, with `identity` policies of its own) put an
/// event with `source` on the stack's alert bus? As AWS decides within one account: the bus
/// policy and the caller's policies together, an explicit Deny in either winning.
fn may_put_alert(t: &Resolved, principal: &str, tag: Option<&str>, source: &str, identity: &[Policy]) -> bool {
    let bus = properties(t, "AlertBus");
    let name = bus["Name"].as_str().expect("the bus is named");
    let arn = format!("arn:aws:events:us-east-1:123456789012:event-bus/{name}");
    let mut policies = vec![Policy::parse("AlertBus", &bus["Policy"]).expect("the bus policy parses")];
    policies.extend(identity.iter().cloned());
    let mut context = Context::new();
    context.insert("aws:PrincipalArn".into(), vec![principal.into()]);
    context.insert("aws:PrincipalAccount".into(), vec![principal.split(':').nth(4).unwrap_or_default().into()]);
    context.insert("events:source".into(), vec![source.into()]);
    if let Some(tag) = tag {
        context.insert("aws:PrincipalTag/tocsin-producer".into(), vec![tag.into()]);
    }
    evaluate(&policies, &Ask { action: "events:PutEvents", resource: &arn, context: &context }).is_allowed()
}

/// Issue 36: alerts come in on the stack's own bus, and only from its producers, each under its
/// own name — whatever the rest of the account's principals may do elsewhere.
#[test]
fn only_producers_may_put_alerts_on_the_stacks_bus_each_under_its_own_name() {
    let producers = format!("{BILLING},{PAYMENTS}");
    let t = resolved(&[("Producers", &producers)]);
    let admin = Policy::parse(
        "AdministratorAccess",
        &json!({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}),
    )
    .expect("parses");

    assert!(may_put_alert(&t, BILLING, Some("billing"), "billing", &[]), "a producer, by the bus policy alone");
    assert!(may_put_alert(&t, PAYMENTS, Some("payments"), "payments", &[]), "a producer of another account");
    assert!(
        !may_put_alert(&t, BILLING, Some("billing"), "payments", std::slice::from_ref(&admin)),
        "a producer speaking for another"
    );
    assert!(
        !may_put_alert(&t, BILLING, None, "billing", std::slice::from_ref(&admin)),
        "a producer without its tag: nothing to hold its source to"
    );
    assert!(
        !may_put_alert(
            &t,
            "arn:aws:iam::123456789012:role/Admin",
            Some("billing"),
            "billing",
            std::slice::from_ref(&admin)
        ),
        "an administrator of the account who is no producer, even tagged as one"
    );
    let nobody = resolved(&[("Producers", "")]);
    assert!(!may_put_alert(&nobody, BILLING, Some("billing"), "billing", &[admin]), "no producers: nobody");

    // The rule that hands alerts to intake listens on that bus, not on the account's default one.
    let rules = resources_of(translated(), "AWS::Events::Rule");
    let alert_rules: Vec<_> = rules
        .iter()
        .filter(|(_, r)| r["Properties"]["EventPattern"]["detail-type"] == json!(["Alert Requested"]))
        .collect();
    assert_eq!(alert_rules.len(), 1, "one rule hands alerts to intake");
    assert_eq!(alert_rules[0].1["Properties"]["EventBusName"], reference("AlertBus"));
}
