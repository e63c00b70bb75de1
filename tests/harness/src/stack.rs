//! Creates the stack's resources on the emulator from `template.yaml` itself: the DynamoDB
//! tables (keys, attribute definitions, GSIs, TTL), the SQS queues (visibility, retention,
//! redrive), the log groups and the SNS topics, and resolves every function's environment
//! variables (Globals merged with the function's own). One definition, two targets.
//! Resources whose `Condition` is false for the parameters' defaults are not created, as on AWS.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_yaml_ng::Value;

use crate::{HarnessError, Result, aws_err, workspace_root};

pub const REGION: &str = "us-east-1";
pub const ACCOUNT: &str = "123456789012";

#[derive(Debug, Clone)]
pub struct Queue {
    pub name: String,
    pub url: String,
    pub arn: String,
}

/// What was created, by logical id.
#[derive(Debug, Clone)]
pub struct Stack {
    pub name: String,
    pub tables: BTreeMap<String, String>,
    pub queues: BTreeMap<String, Queue>,
    pub log_groups: BTreeMap<String, String>,
    pub topics: BTreeMap<String, String>,
    /// End User Messaging configuration sets (created in the stand-in), by logical id: their names.
    pub configuration_sets: BTreeMap<String, String>,
    /// End User Messaging protect configurations (created in the stand-in), by logical id: their
    /// ids. Their country rules are the template's; the `Custom::SmsCountryRules` resource that
    /// blocks every country but `SmsAllowedCountries` is not run here (no custom resource is): a
    /// test that needs it runs the function as CloudFormation would.
    pub protect_configurations: BTreeMap<String, String>,
    template: Value,
    parameters: HashMap<String, String>,
}

fn tmpl_err(m: impl Into<String>) -> HarnessError {
    HarnessError::Template(m.into())
}

/// Reads `template.yaml` at the workspace root.
pub fn load_template() -> Result<Value> {
    load_template_from(&workspace_root().join("template.yaml"))
}

pub fn load_template_from(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)?;
    serde_yaml_ng::from_str(&text).map_err(|e| tmpl_err(format!("{}: {e}", path.display())))
}

/// The producer the sample events (`events/intake/`) and the harness's requests come from: an
/// IAM user named `monitoring` (its events carry `source: monitoring`).
pub const LOCAL_PRODUCER: &str = "arn:aws:iam::123456789012:user/monitoring";
/// The operator's role, a producer too (`tocsin send`); the CLI's sessions are of this role.
pub const LOCAL_OPERATOR_ROLE: &str = "arn:aws:iam::123456789012:role/tocsin-operator";

/// The local stack's recipients roster, added after the deploy (as `tocsin recipients allow`):
/// the North American and UK numbers the tests, the samples and the local run text.
pub const LOCAL_ROSTER: &[&str] = &["+1", "+44"];

/// What the local stack is deployed with besides the template's defaults (as a samconfig would
/// give them): its producers. A caller's overrides win.
pub const LOCAL_DEPLOYMENT: &[(&str, &str)] =
    &[("Producers", "arn:aws:iam::123456789012:user/monitoring,arn:aws:iam::123456789012:role/tocsin-operator")];

fn tag_name(t: &serde_yaml_ng::value::TaggedValue) -> String {
    t.tag.to_string().trim_start_matches('!').to_owned()
}

fn as_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub fn resources(t: &Value) -> Vec<(String, Value)> {
    t.get("Resources")
        .and_then(Value::as_mapping)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.clone()))).collect())
        .unwrap_or_default()
}

pub fn resource_type(r: &Value) -> &str {
    r.get("Type").and_then(Value::as_str).unwrap_or_default()
}

impl Stack {
    /// Provisions every supported resource of `template.yaml` on the emulator.
    pub async fn provision(sdk: &SdkConfig, stack_name: &str) -> Result<Stack> {
        Self::provision_with(sdk, stack_name, &[]).await
    }

    /// As [`Stack::provision`], with these template parameters instead of their defaults (as
    /// `sam deploy --parameter-overrides` gives them).
    pub async fn provision_with(sdk: &SdkConfig, stack_name: &str, overrides: &[(&str, &str)]) -> Result<Stack> {
        let template = load_template()?;
        let mut parameters = HashMap::new();
        if let Some(params) = template.get("Parameters").and_then(Value::as_mapping) {
            for (k, v) in params {
                if let (Some(k), Some(d)) = (k.as_str(), v.get("Default")) {
                    let value = match d {
                        Value::Sequence(s) => s.iter().filter_map(as_str).collect::<Vec<_>>().join(","),
                        other => as_str(other).unwrap_or_default(),
                    };
                    parameters.insert(k.to_owned(), value);
                }
            }
        }
        for (k, v) in LOCAL_DEPLOYMENT.iter().chain(overrides) {
            if !parameters.contains_key(*k) {
                return Err(tmpl_err(format!("template.yaml has no parameter {k}")));
            }
            parameters.insert((*k).to_owned(), (*v).to_owned());
        }
        let mut stack = Stack {
            name: stack_name.to_owned(),
            tables: BTreeMap::new(),
            queues: BTreeMap::new(),
            log_groups: BTreeMap::new(),
            topics: BTreeMap::new(),
            configuration_sets: BTreeMap::new(),
            protect_configurations: BTreeMap::new(),
            template,
            parameters,
        };
        let ddb = aws_sdk_dynamodb::Client::new(sdk);
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let logs = aws_sdk_cloudwatchlogs::Client::new(sdk);
        let sns = aws_sdk_sns::Client::new(sdk);
        let mut res = Vec::new();
        for (id, r) in resources(&stack.template) {
            if stack.is_created(&r)? {
                res.push((id, r));
            }
        }

        for (id, r) in &res {
            let p = r.get("Properties").cloned().unwrap_or(Value::Null);
            match resource_type(r) {
                "AWS::DynamoDB::Table" => {
                    let name =
                        stack.resolve(p.get("TableName").ok_or_else(|| tmpl_err(format!("{id}: no TableName")))?)?;
                    create_table(&ddb, &name, &p).await?;
                    stack.tables.insert(id.clone(), name);
                }
                "AWS::Logs::LogGroup" => {
                    let name = match p.get("LogGroupName") {
                        Some(v) => stack.resolve(v)?,
                        None => format!("/aws/{stack_name}/{id}"),
                    };
                    logs.create_log_group()
                        .log_group_name(&name)
                        .send()
                        .await
                        .map_err(|e| aws_err("CreateLogGroup", e))?;
                    stack.log_groups.insert(id.clone(), name);
                }
                "AWS::SNS::Topic" => {
                    let name = match p.get("TopicName") {
                        Some(v) => stack.resolve(v)?,
                        None => format!("{stack_name}-{id}"),
                    };
                    let out = sns.create_topic().name(&name).send().await.map_err(|e| aws_err("CreateTopic", e))?;
                    stack.topics.insert(id.clone(), out.topic_arn.unwrap_or_default());
                }
                _ => {}
            }
        }
        // Queues: dead-letter targets before the queues that redrive into them.
        let mut pending: Vec<(String, Value)> =
            res.iter().filter(|(_, r)| resource_type(r) == "AWS::SQS::Queue").cloned().collect();
        while !pending.is_empty() {
            let before = pending.len();
            let mut rest = Vec::new();
            for (id, r) in pending {
                let p = r.get("Properties").cloned().unwrap_or(Value::Null);
                let ready = match p.get("RedrivePolicy").and_then(|rp| rp.get("deadLetterTargetArn")) {
                    Some(target) => stack.resolve(target).is_ok(),
                    None => true,
                };
                if !ready {
                    rest.push((id, r));
                    continue;
                }
                let q = create_queue(&sqs, &stack, &p, &id).await?;
                stack.queues.insert(id, q);
            }
            if rest.len() == before {
                return Err(tmpl_err("queues with unresolvable redrive targets"));
            }
            pending = rest;
        }
        // Topic subscriptions, once their topics and queues exist (moto delivers to SQS in-process).
        for (id, r) in res.iter().filter(|(_, r)| resource_type(r) == "AWS::SNS::Subscription") {
            let p = r.get("Properties").cloned().unwrap_or(Value::Null);
            let field = |name: &str| {
                p.get(name).ok_or_else(|| tmpl_err(format!("{id}: no {name}"))).and_then(|v| stack.resolve(v))
            };
            let (topic, protocol, endpoint) = (field("TopicArn")?, field("Protocol")?, field("Endpoint")?);
            let raw = p.get("RawMessageDelivery").map(|v| stack.resolve(v)).transpose()?;
            let mut req = sns.subscribe().topic_arn(&topic).protocol(&protocol).endpoint(&endpoint);
            if let Some(raw) = raw {
                req = req.attributes("RawMessageDelivery", raw);
            }
            req.send().await.map_err(|e| aws_err("Subscribe", e))?;
        }
        // End User Messaging protect configurations, before the configuration sets that name them.
        for (id, r) in res.iter().filter(|(_, r)| resource_type(r) == "AWS::SMSVOICE::ProtectConfiguration") {
            let p = r.get("Properties").cloned().unwrap_or(Value::Null);
            let pid = create_protect_configuration(sdk, &stack, &p).await?;
            stack.protect_configurations.insert(id.clone(), pid);
        }
        // End User Messaging configuration sets, once the log groups their destinations name exist:
        // created in the stand-in through its API, as CloudFormation would.
        for (id, r) in res.iter().filter(|(_, r)| resource_type(r) == "AWS::SMSVOICE::ConfigurationSet") {
            let p = r.get("Properties").cloned().unwrap_or(Value::Null);
            let name =
                stack.resolve(p.get("ConfigurationSetName").ok_or_else(|| tmpl_err(format!("{id}: no name")))?)?;
            create_configuration_set(sdk, &stack, &name, &p).await?;
            stack.configuration_sets.insert(id.clone(), name);
        }
        // What an operator does after the deploy: the roster of numbers the stack may text.
        if let Some(table) = stack.tables.get("RecipientsTable") {
            let registry = tocsin::adapters::registry::DynamoRegistry::new(ddb.clone(), table);
            for raw in LOCAL_ROSTER {
                let entry = tocsin::domain::roster::RosterEntry::parse(raw).map_err(|e| tmpl_err(e.to_string()))?;
                registry
                    .allow(&entry, "tocsin-local", "the local stack's roster", chrono::Utc::now())
                    .await
                    .map_err(|e| tmpl_err(format!("seeding the roster: {e}")))?;
            }
        }
        // DescribeStacks answers with template.yaml's outputs, as for a deployed stack.
        if let Some(endpoint) = sdk.endpoint_url() {
            crate::stack_outputs::publish(endpoint, &stack, stack_name, &[]).await?;
        }
        Ok(stack)
    }

    /// Whether a resource exists for these parameters: its `Condition`, if any, holds.
    pub fn is_created(&self, resource: &Value) -> Result<bool> {
        match resource.get("Condition").and_then(Value::as_str) {
            Some(name) => self.condition(name),
            None => Ok(true),
        }
    }

    /// The value of the template's condition `name`.
    pub fn condition(&self, name: &str) -> Result<bool> {
        let c = self
            .template
            .get("Conditions")
            .and_then(|c| c.get(name))
            .ok_or_else(|| tmpl_err(format!("no condition {name}")))?
            .clone();
        self.evaluate(&c)
    }

    /// `!Equals`, `!Not`, `!And`, `!Or` and `!Condition` (short and long forms).
    fn evaluate(&self, v: &Value) -> Result<bool> {
        let (name, arg) = match v {
            Value::Tagged(t) => (tag_name(t), t.value.clone()),
            Value::Mapping(m) if m.len() == 1 => {
                let (k, inner) = m.iter().next().ok_or_else(|| tmpl_err("empty condition"))?;
                (k.as_str().unwrap_or_default().trim_start_matches("Fn::").to_owned(), inner.clone())
            }
            Value::Bool(b) => return Ok(*b),
            other => return Err(tmpl_err(format!("cannot evaluate condition {other:?}"))),
        };
        let args = || arg.as_sequence().cloned().unwrap_or_default();
        match name.as_str() {
            "Equals" => {
                let a = args();
                if a.len() != 2 {
                    return Err(tmpl_err("!Equals takes two values"));
                }
                Ok(self.resolve(&a[0])? == self.resolve(&a[1])?)
            }
            "Not" => Ok(!self.evaluate(args().first().ok_or_else(|| tmpl_err("!Not takes one condition"))?)?),
            "And" => args().iter().try_fold(true, |acc, c| Ok(acc && self.evaluate(c)?)),
            "Or" => args().iter().try_fold(false, |acc, c| Ok(acc || self.evaluate(c)?)),
            "Condition" => self.condition(&as_str(&arg).ok_or_else(|| tmpl_err("!Condition needs a name"))?),
            other => Err(tmpl_err(format!("condition function {other} is not supported"))),
        }
    }

    /// Resolves `!Ref`, `!Sub`, `!GetAtt`, `!If` (short and long forms) to a string.
    pub fn resolve(&self, v: &Value) -> Result<String> {
        match v {
            Value::Tagged(t) => self.intrinsic(&tag_name(t), &t.value),
            Value::Mapping(m) if m.len() == 1 => {
                let (k, inner) = m.iter().next().ok_or_else(|| tmpl_err("empty mapping"))?;
                let k = k.as_str().unwrap_or_default();
                let name = if k == "Ref" { "Ref".to_owned() } else { k.trim_start_matches("Fn::").to_owned() };
                self.intrinsic(&name, inner)
            }
            other => as_str(other).ok_or_else(|| tmpl_err(format!("cannot resolve {other:?}"))),
        }
    }

    fn intrinsic(&self, name: &str, arg: &Value) -> Result<String> {
        match name {
            "Ref" => self.reference(&as_str(arg).ok_or_else(|| tmpl_err("!Ref needs a name"))?),
            "GetAtt" => {
                let (res, attr) = match arg {
                    Value::String(s) => s.split_once('.').map(|(a, b)| (a.to_owned(), b.to_owned())),
                    Value::Sequence(s) if s.len() == 2 => {
                        Some((as_str(&s[0]).unwrap_or_default(), as_str(&s[1]).unwrap_or_default()))
                    }
                    _ => None,
                }
                .ok_or_else(|| tmpl_err("bad !GetAtt"))?;
                self.get_att(&res, &attr)
            }
            "Sub" => {
                let text = match arg {
                    Value::String(s) => s.clone(),
                    Value::Sequence(s) => s.first().and_then(as_str).unwrap_or_default(),
                    _ => return Err(tmpl_err("bad !Sub")),
                };
                let mut out = String::new();
                let mut rest = text.as_str();
                while let Some(start) = rest.find("${") {
                    out.push_str(&rest[..start]);
                    let end = rest[start..].find('}').ok_or_else(|| tmpl_err("unclosed ${ in !Sub"))? + start;
                    let var = &rest[start + 2..end];
                    let value = match var.split_once('.') {
                        Some((r, a)) => self.get_att(r, a)?,
                        None => self.reference(var)?,
                    };
                    out.push_str(&value);
                    rest = &rest[end + 1..];
                }
                out.push_str(rest);
                Ok(out)
            }
            "If" => {
                let a = arg.as_sequence().filter(|a| a.len() == 3).ok_or_else(|| tmpl_err("!If takes three values"))?;
                let cond = as_str(&a[0]).ok_or_else(|| tmpl_err("!If needs a condition name"))?;
                self.resolve(if self.condition(&cond)? { &a[1] } else { &a[2] })
            }
            other => Err(tmpl_err(format!("intrinsic {other} is not supported by the local provisioner"))),
        }
    }

    fn reference(&self, name: &str) -> Result<String> {
        match name {
            "AWS::StackName" => return Ok(self.name.clone()),
            "AWS::Region" => return Ok(REGION.into()),
            "AWS::AccountId" => return Ok(ACCOUNT.into()),
            "AWS::Partition" => return Ok("aws".into()),
            "AWS::URLSuffix" => return Ok("amazonaws.com".into()),
            _ => {}
        }
        if let Some(p) = self.parameters.get(name) {
            return Ok(p.clone());
        }
        if let Some(t) = self.tables.get(name) {
            return Ok(t.clone());
        }
        if let Some(q) = self.queues.get(name) {
            return Ok(q.url.clone());
        }
        if let Some(g) = self.log_groups.get(name) {
            return Ok(g.clone());
        }
        if let Some(t) = self.topics.get(name) {
            return Ok(t.clone());
        }
        if let Some(c) = self.configuration_sets.get(name) {
            return Ok(c.clone());
        }
        if let Some(p) = self.protect_configurations.get(name) {
            return Ok(p.clone());
        }
        Err(tmpl_err(format!("!Ref {name}: not provisioned locally")))
    }

    fn get_att(&self, res: &str, attr: &str) -> Result<String> {
        if let Some(q) = self.queues.get(res) {
            return match attr {
                "Arn" => Ok(q.arn.clone()),
                "QueueName" => Ok(q.name.clone()),
                "QueueUrl" => Ok(q.url.clone()),
                _ => Err(tmpl_err(format!("{res}.{attr}"))),
            };
        }
        if let Some(t) = self.tables.get(res) {
            return Ok(format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{t}"));
        }
        if let Some(g) = self.log_groups.get(res) {
            return Ok(format!("arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{g}"));
        }
        if let Some(p) = self.protect_configurations.get(res) {
            return match attr {
                "ProtectConfigurationId" => Ok(p.clone()),
                "Arn" => Ok(format!("arn:aws:sms-voice:{REGION}:{ACCOUNT}:protect-configuration/{p}")),
                _ => Err(tmpl_err(format!("{res}.{attr}"))),
            };
        }
        // Roles are not provisioned (the IAM gate plays IAM): named as the gate names them.
        let role = self.template.get("Resources").and_then(|r| r.get(res));
        if attr == "Arn" && role.is_some_and(|r| resource_type(r) == "AWS::IAM::Role") {
            let name = match role.and_then(|r| r.get("Properties")).and_then(|p| p.get("RoleName")) {
                Some(v) => self.resolve(v)?,
                None => format!("{}-{res}", self.name),
            };
            return Ok(format!("arn:aws:iam::{ACCOUNT}:role/{name}"));
        }
        Err(tmpl_err(format!("!GetAtt {res}.{attr}: not provisioned locally")))
    }

    /// The environment of function `logical_id`: Globals merged with its own, resolved.
    pub fn function_env(&self, logical_id: &str) -> Result<HashMap<String, String>> {
        let mut env = HashMap::new();
        let sources = [
            self.template.get("Globals").and_then(|g| g.get("Function")),
            self.template.get("Resources").and_then(|r| r.get(logical_id)).and_then(|r| r.get("Properties")),
        ];
        for vars in sources.into_iter().flatten().filter_map(|s| s.get("Environment")?.get("Variables")?.as_mapping()) {
            for (k, v) in vars {
                let k = k.as_str().ok_or_else(|| tmpl_err("env name"))?;
                env.insert(k.to_owned(), self.resolve(v)?);
            }
        }
        Ok(env)
    }

    pub fn table(&self, logical_id: &str) -> &str {
        self.tables.get(logical_id).map(String::as_str).unwrap_or_default()
    }

    pub fn queue(&self, logical_id: &str) -> &Queue {
        static EMPTY: std::sync::OnceLock<Queue> = std::sync::OnceLock::new();
        self.queues.get(logical_id).unwrap_or_else(|| {
            EMPTY.get_or_init(|| Queue { name: String::new(), url: String::new(), arn: String::new() })
        })
    }

    /// The End User Messaging configuration set `logical_id` (its name; empty when not created).
    pub fn configuration_set(&self, logical_id: &str) -> &str {
        self.configuration_sets.get(logical_id).map(String::as_str).unwrap_or_default()
    }

    /// The ARN of topic `logical_id`, when this stack created it.
    pub fn topic(&self, logical_id: &str) -> Option<&str> {
        self.topics.get(logical_id).map(String::as_str)
    }

    pub fn log_group(&self, logical_id: &str) -> &str {
        self.log_groups.get(logical_id).map(String::as_str).unwrap_or_default()
    }

    pub fn template(&self) -> &Value {
        &self.template
    }
}

async fn create_table(ddb: &aws_sdk_dynamodb::Client, name: &str, p: &Value) -> Result<()> {
    let key_schema = |v: Option<&Value>| -> Result<Vec<KeySchemaElement>> {
        v.and_then(Value::as_sequence)
            .ok_or_else(|| tmpl_err(format!("{name}: KeySchema")))?
            .iter()
            .map(|k| {
                KeySchemaElement::builder()
                    .attribute_name(k.get("AttributeName").and_then(as_str_ref).unwrap_or_default())
                    .key_type(KeyType::from(k.get("KeyType").and_then(as_str_ref).unwrap_or_default()))
                    .build()
                    .map_err(|e| tmpl_err(e.to_string()))
            })
            .collect()
    };
    let attrs = p
        .get("AttributeDefinitions")
        .and_then(Value::as_sequence)
        .ok_or_else(|| tmpl_err(format!("{name}: AttributeDefinitions")))?
        .iter()
        .map(|a| {
            AttributeDefinition::builder()
                .attribute_name(a.get("AttributeName").and_then(as_str_ref).unwrap_or_default())
                .attribute_type(ScalarAttributeType::from(
                    a.get("AttributeType").and_then(as_str_ref).unwrap_or_default(),
                ))
                .build()
                .map_err(|e| tmpl_err(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut req = ddb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(attrs))
        .set_key_schema(Some(key_schema(p.get("KeySchema"))?));
    for g in p.get("GlobalSecondaryIndexes").and_then(Value::as_sequence).into_iter().flatten() {
        let projection =
            g.get("Projection").and_then(|p| p.get("ProjectionType")).and_then(as_str_ref).unwrap_or("ALL");
        req = req.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(g.get("IndexName").and_then(as_str_ref).unwrap_or_default())
                .set_key_schema(Some(key_schema(g.get("KeySchema"))?))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::from(projection))
                        // INCLUDE's attributes, as the template lists them.
                        .set_non_key_attributes(
                            g.get("Projection")
                                .and_then(|p| p.get("NonKeyAttributes"))
                                .and_then(Value::as_sequence)
                                .map(|a| a.iter().filter_map(as_str_ref).map(str::to_owned).collect()),
                        )
                        .build(),
                )
                .build()
                .map_err(|e| tmpl_err(e.to_string()))?,
        );
    }
    req.send().await.map_err(|e| aws_err("CreateTable", e))?;
    if let Some(ttl) = p.get("TimeToLiveSpecification") {
        let attr = ttl.get("AttributeName").and_then(as_str_ref).unwrap_or_default();
        ddb.update_time_to_live()
            .table_name(name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name(attr)
                    .enabled(true)
                    .build()
                    .map_err(|e| tmpl_err(e.to_string()))?,
            )
            .send()
            .await
            .map_err(|e| aws_err("UpdateTimeToLive", e))?;
    }
    Ok(())
}

fn as_str_ref(v: &Value) -> Option<&str> {
    v.as_str()
}

async fn create_queue(sqs: &aws_sdk_sqs::Client, stack: &Stack, p: &Value, id: &str) -> Result<Queue> {
    let name = match p.get("QueueName") {
        Some(v) => stack.resolve(v)?,
        None => format!("{}-{id}", stack.name),
    };
    let mut req = sqs.create_queue().queue_name(&name);
    for (prop, attr) in [
        ("VisibilityTimeout", QueueAttributeName::VisibilityTimeout),
        ("MessageRetentionPeriod", QueueAttributeName::MessageRetentionPeriod),
        ("DelaySeconds", QueueAttributeName::DelaySeconds),
    ] {
        if let Some(v) = p.get(prop) {
            req = req.attributes(attr, stack.resolve(v)?);
        }
    }
    if let Some(rp) = p.get("RedrivePolicy") {
        let target = stack.resolve(rp.get("deadLetterTargetArn").ok_or_else(|| tmpl_err("redrive target"))?)?;
        let max = rp.get("maxReceiveCount").map(|v| stack.resolve(v)).transpose()?.unwrap_or_else(|| "5".into());
        let policy =
            serde_json::json!({"deadLetterTargetArn": target, "maxReceiveCount": max.parse::<u32>().unwrap_or(5)});
        req = req.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
    }
    let out = req.send().await.map_err(|e| aws_err("CreateQueue", e))?;
    let url = out.queue_url.unwrap_or_default();
    Ok(Queue { arn: format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"), name, url })
}

/// An `AWS::SMSVOICE::ProtectConfiguration` with the country rules the template lists (every
/// other country stays ALLOW, as on AWS): its id.
async fn create_protect_configuration(sdk: &SdkConfig, stack: &Stack, p: &Value) -> Result<String> {
    use aws_sdk_pinpointsmsvoicev2::types::{
        NumberCapability, ProtectConfigurationCountryRuleSetInformation, ProtectStatus,
    };
    let client = aws_sdk_pinpointsmsvoicev2::Client::new(sdk);
    let protected = match p.get("DeletionProtectionEnabled") {
        Some(v) => stack.resolve(v)? == "true",
        None => false,
    };
    let out = client
        .create_protect_configuration()
        .deletion_protection_enabled(protected)
        .send()
        .await
        .map_err(|e| aws_err("CreateProtectConfiguration", e))?;
    let id = out.protect_configuration_id;
    for (capability, rules) in p.get("CountryRuleSet").and_then(Value::as_mapping).into_iter().flatten() {
        let capability = as_str(capability).unwrap_or_default();
        let mut req = client
            .update_protect_configuration_country_rule_set()
            .protect_configuration_id(&id)
            .number_capability(NumberCapability::from(capability.as_str()));
        for rule in rules.as_sequence().into_iter().flatten() {
            let get =
                |k: &str| -> Result<String> { stack.resolve(rule.get(k).ok_or_else(|| tmpl_err(format!("no {k}")))?) };
            let info = ProtectConfigurationCountryRuleSetInformation::builder()
                .protect_status(ProtectStatus::from(get("ProtectStatus")?.as_str()))
                .build()
                .map_err(|e| tmpl_err(e.to_string()))?;
            req = req.country_rule_set_updates(get("CountryCode")?, info);
        }
        req.send().await.map_err(|e| aws_err("UpdateProtectConfigurationCountryRuleSet", e))?;
    }
    Ok(id)
}

/// An `AWS::SMSVOICE::ConfigurationSet` with its event destinations and its protect
/// configuration, through the End User Messaging API (the stand-in validates each call against
/// the service's model).
async fn create_configuration_set(sdk: &SdkConfig, stack: &Stack, name: &str, p: &Value) -> Result<()> {
    use aws_sdk_pinpointsmsvoicev2::types::{CloudWatchLogsDestination, EventType};
    let client = aws_sdk_pinpointsmsvoicev2::Client::new(sdk);
    client
        .create_configuration_set()
        .configuration_set_name(name)
        .send()
        .await
        .map_err(|e| aws_err("CreateConfigurationSet", e))?;
    if let Some(protect) = p.get("ProtectConfigurationId") {
        client
            .associate_protect_configuration()
            .configuration_set_name(name)
            .protect_configuration_id(stack.resolve(protect)?)
            .send()
            .await
            .map_err(|e| aws_err("AssociateProtectConfiguration", e))?;
    }
    for d in p.get("EventDestinations").and_then(Value::as_sequence).into_iter().flatten() {
        let dest_name =
            stack.resolve(d.get("EventDestinationName").ok_or_else(|| tmpl_err("no EventDestinationName"))?)?;
        let mut req = client.create_event_destination().configuration_set_name(name).event_destination_name(&dest_name);
        for t in d.get("MatchingEventTypes").and_then(Value::as_sequence).into_iter().flatten() {
            req = req.matching_event_types(EventType::from(stack.resolve(t)?.as_str()));
        }
        let cw = d
            .get("CloudWatchLogsDestination")
            .ok_or_else(|| tmpl_err(format!("{name}: only CloudWatch Logs destinations are provisioned locally")))?;
        let get = |k: &str| -> Result<String> { stack.resolve(cw.get(k).ok_or_else(|| tmpl_err(format!("no {k}")))?) };
        let destination = CloudWatchLogsDestination::builder()
            .iam_role_arn(get("IamRoleArn")?)
            .log_group_arn(get("LogGroupArn")?)
            .build()
            .map_err(|e| tmpl_err(e.to_string()))?;
        req.cloud_watch_logs_destination(destination).send().await.map_err(|e| aws_err("CreateEventDestination", e))?;
    }
    Ok(())
}
