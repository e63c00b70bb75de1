//! From one signed HTTP request to what AWS authorizes for it: the IAM action(s) and resource
//! ARN(s), as each service checks them — not the API operation's name.
//!
//! - DynamoDB: `TableName` → `table/T`; a Query or Scan with `IndexName` → `table/T/index/I`;
//!   `BatchGetItem`/`BatchWriteItem` → that action on every table of `RequestItems`;
//!   `TransactWriteItems` → per item `PutItem`/`UpdateItem`/`DeleteItem`/`ConditionCheckItem` on
//!   its own table (there is no `TransactWriteItems` action); `TransactGetItems` → `GetItem`. A
//!   table encrypted with a customer managed key also needs `kms:Decrypt` on it: DynamoDB
//!   decrypts the table key on behalf of each caller (and caches it per caller for minutes);
//!   generating the table key is DynamoDB's own work at creation, not the caller's.
//! - SQS (JSON protocol): `QueueUrl` → the queue's ARN; the batch operations are authorized as
//!   their single forms (`SendMessageBatch` → `sqs:SendMessage`, …). A queue encrypted with a
//!   customer managed key also needs, with no request showing it, `kms:GenerateDataKey` and
//!   `kms:Decrypt` on that key to send and `kms:Decrypt` to receive (SQS calls KMS as the caller).
//! - SNS (query protocol): `Publish` with `PhoneNumber` → `*` (no ARN), with `TopicArn` /
//!   `TargetArn` → that ARN; the account-level SMS operations → `*`; `SetSMSAttributes` naming a
//!   `DeliveryStatusIAMRole` also needs `iam:PassRole` on that role.
//! - CloudWatch Logs: the group-level operations → `log-group:NAME:*` (the form AWS checks
//!   `FilterLogEvents` against), stream writes → `log-group:NAME:log-stream:S`, `DescribeLogGroups`
//!   → `log-group:*`.
//! - CloudFormation: `DescribeStacks` of a stack → `stack/NAME/*`. STS `GetCallerIdentity` needs
//!   no permission.
//! - End User Messaging SMS (`sms-voice`, AWS JSON 1.0, `X-Amz-Target: PinpointSMSVoiceV2.<Op>`):
//!   action `sms-voice:<Op>`, on the resources the request names, as the Service Authorization
//!   Reference lists them ("Actions, resources, and condition keys for AWS End User Messaging SMS
//!   and Voice V2", https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsendusermessagingsmsandvoicev2.html):
//!   - `SendTextMessage`: resource types ConfigurationSet, PhoneNumber, Pool, ProtectConfiguration,
//!     SenderId, none of them required — so the action on each one the request names: the
//!     configuration set (`configuration-set/NAME`), the origination identity (`phone-number/ID`,
//!     `pool/ID` or `sender-id/SENDERID/COUNTRY`), the protect configuration
//!     (`protect-configuration/ID`); a request naming none is authorized on `*`. An identity given
//!     as an E.164 number or a bare sender ID is named by the ARN of the resource it is: the gate
//!     asks the stand-in (`Facts::sms_identities`); one the account does not have keeps the form
//!     given (`phone-number/+1…`), and the stand-in then answers ResourceNotFoundException.
//!   - `CreateEventDestination`, `UpdateEventDestination`: `configuration-set/NAME` (required), and
//!     `iam:PassRole` on the destination's `IamRoleArn` with `iam:PassedToService` =
//!     `sms-voice.amazonaws.com` (the operations table's dependent action). `DeleteEventDestination`,
//!     `DeleteConfigurationSet`: `configuration-set/NAME`.
//!   - `PutOptedOutNumber`, `DeleteOptedOutNumber`, `DescribeOptedOutNumbers`:
//!     `opt-out-list/NAME` (required).
//!   - `GetProtectConfigurationCountryRuleSet`, `UpdateProtectConfigurationCountryRuleSet`,
//!     `DeleteProtectConfiguration`: `protect-configuration/ID` (required);
//!     `AssociateProtectConfiguration`, `DisassociateProtectConfiguration`: that and
//!     `configuration-set/NAME`; `CreateProtectConfiguration`: `*`.
//!   - `RequestPhoneNumber`: the opt-out list, pool and registration it names (none required: `*`
//!     when it names none), plus `sms-voice:AssociateOriginationIdentity` on the pool it names;
//!     `CreatePool`: the phone number or sender ID it starts with; any create with `Tags` also needs
//!     `sms-voice:TagResource`.
//!   - `DescribeConfigurationSets`, `DescribeOptOutLists`, `DescribePhoneNumbers`, `DescribePools`,
//!     `DescribeSenderIds`, `DescribeVerifiedDestinationNumbers`: each resource named, or `*`.
//!   - `CreateConfigurationSet`, `CreateOptOutList`, `RequestSenderId`, `DescribeAccountAttributes`,
//!     `DescribeSpendLimits`: no resource type: `*`.
//!
//! An operation this module does not know is an error, never a silent pass.

use std::collections::BTreeMap;

use serde_json::Value;

use super::policy::Context;

/// One thing AWS checks for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub action: String,
    pub resource: String,
    pub context: Context,
    /// Why, when it is not simply the operation itself (a transaction's item, an implicit KMS use).
    pub because: Option<String>,
}

impl Requirement {
    pub fn plain(action: impl Into<String>, resource: impl Into<String>) -> Requirement {
        Requirement { action: action.into(), resource: resource.into(), context: Context::new(), because: None }
    }

    pub fn because(mut self, why: impl Into<String>) -> Requirement {
        self.because = Some(why.into());
        self
    }
}

/// A customer managed KMS key: its ARN and the aliases that name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub arn: String,
    pub aliases: Vec<String>,
}

/// What the mapping needs to know about the account and the stack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Facts {
    pub region: String,
    pub account: String,
    /// Queue ARN → the customer managed key it is encrypted with (queues absent: none, or SQS's own).
    pub queue_keys: BTreeMap<String, Key>,
    /// Table ARN → the customer managed key it is encrypted with.
    pub table_keys: BTreeMap<String, Key>,
    /// End User Messaging origination identities as a request may name them (E.164 number, id,
    /// bare sender ID) → the identity's ARN: filled per request from the stand-in's state.
    pub sms_identities: BTreeMap<String, String>,
}

/// One request as the gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The service of the SigV4 credential scope (`dynamodb`, `sqs`, `sns`, `logs`, …).
    pub service: &'a str,
    /// The region of the credential scope: the region of every ARN the request names.
    pub region: &'a str,
    /// `X-Amz-Target` (JSON protocols).
    pub target: Option<&'a str>,
    /// The HTTP method (the REST protocols name the operation by method and path).
    pub method: &'a str,
    pub path: &'a str,
    pub body: &'a [u8],
}

impl Call<'_> {
    /// `DynamoDB_20120810.UpdateItem`, `SNS.Publish`, … (the fault proxy's names).
    pub fn operation(&self) -> String {
        if let Some(t) = self.target {
            return t.to_owned();
        }
        match form(self.body).get("Action") {
            Some(a) => format!("{}.{a}", self.service.to_uppercase()),
            None => format!("{} {}", self.service, self.path),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("the IAM gate does not know how AWS authorizes {0}; teach tests/harness/src/iam/request.rs")]
    Unknown(String),
    #[error("{operation}: {message}")]
    Malformed { operation: String, message: String },
}

/// What AWS checks for `call` (empty: nothing, e.g. `sts:GetCallerIdentity`).
pub fn requirements(call: &Call<'_>, facts: &Facts) -> Result<Vec<Requirement>, MapError> {
    let op = call.operation();
    let in_region;
    let facts = if call.region.is_empty() || call.region == facts.region {
        facts
    } else {
        in_region = Facts { region: call.region.to_owned(), ..facts.clone() };
        &in_region
    };
    let json = || -> Result<Value, MapError> {
        serde_json::from_slice(call.body)
            .map_err(|e| MapError::Malformed { operation: op.clone(), message: format!("body is not JSON: {e}") })
    };
    let short = op.rsplit('.').next().unwrap_or_default().to_owned();
    match call.service {
        "dynamodb" => dynamodb(&short, &json()?, facts).map(|r| with_table_keys(&short, r, facts)),
        "sqs" if call.target.is_some() => sqs(&short, &json()?, facts),
        "sns" => Ok(sns(&short, &form(call.body), facts)),
        "logs" => logs(&short, &json()?, facts),
        "sts" if short == "GetCallerIdentity" => Ok(Vec::new()),
        "cloudformation" => Ok(cloudformation(&short, &form(call.body), facts)),
        "monitoring" => cloudwatch(call.path, facts),
        "lambda" => lambda(call.method, call.path, facts),
        "sms-voice" if call.target.is_some() => sms_voice(&short, &json()?, facts),
        _ => Err(MapError::Unknown(op.clone())),
    }
    .map_err(|e| match e {
        MapError::Malformed { message, .. } => MapError::Malformed { operation: op.clone(), message },
        other => other,
    })
}

fn malformed(message: impl Into<String>) -> MapError {
    MapError::Malformed { operation: String::new(), message: message.into() }
}

fn str_field<'v>(v: &'v Value, field: &str) -> Result<&'v str, MapError> {
    v[field].as_str().ok_or_else(|| malformed(format!("no {field}")))
}

fn table_arn(name: &str, f: &Facts) -> String {
    if name.starts_with("arn:") {
        name.to_owned()
    } else {
        format!("arn:aws:dynamodb:{}:{}:table/{name}", f.region, f.account)
    }
}

fn dynamodb(op: &str, body: &Value, f: &Facts) -> Result<Vec<Requirement>, MapError> {
    let action = |a: &str| format!("dynamodb:{a}");
    match op {
        "BatchGetItem" | "BatchWriteItem" => {
            let tables = body["RequestItems"].as_object().ok_or_else(|| malformed("no RequestItems"))?;
            Ok(tables.keys().map(|t| Requirement::plain(action(op), table_arn(t, f))).collect())
        }
        "TransactWriteItems" | "TransactGetItems" => {
            let items = body["TransactItems"].as_array().ok_or_else(|| malformed("no TransactItems"))?;
            let n = items.len();
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let (kind, inner) = item
                        .as_object()
                        .and_then(|o| o.iter().next())
                        .ok_or_else(|| malformed(format!("TransactItems[{i}] is empty")))?;
                    let checked = match kind.as_str() {
                        "Put" => "PutItem",
                        "Update" => "UpdateItem",
                        "Delete" => "DeleteItem",
                        "ConditionCheck" => "ConditionCheckItem",
                        "Get" => "GetItem",
                        other => return Err(malformed(format!("TransactItems[{i}]: unknown kind {other}"))),
                    };
                    Ok(Requirement::plain(action(checked), table_arn(str_field(inner, "TableName")?, f))
                        .because(format!("item {} of {n} of the transaction ({kind})", i + 1)))
                })
                .collect()
        }
        "ListTables" => Ok(vec![Requirement::plain(action(op), "*")]),
        "Query" | "Scan" => {
            let table = table_arn(str_field(body, "TableName")?, f);
            let resource = match body["IndexName"].as_str() {
                Some(index) => format!("{table}/index/{index}"),
                None => table,
            };
            Ok(vec![Requirement::plain(action(op), resource)])
        }
        "GetItem" | "PutItem" | "UpdateItem" | "DeleteItem" | "DescribeTable" | "CreateTable" | "DeleteTable"
        | "UpdateTable" | "DescribeTimeToLive" | "UpdateTimeToLive" => {
            Ok(vec![Requirement::plain(action(op), table_arn(str_field(body, "TableName")?, f))])
        }
        other => Err(MapError::Unknown(format!("DynamoDB_20120810.{other}"))),
    }
}

/// Adds, once per table of a data-plane request, `kms:Decrypt` on the table's customer managed key.
fn with_table_keys(op: &str, mut r: Vec<Requirement>, f: &Facts) -> Vec<Requirement> {
    if matches!(
        op,
        "ListTables"
            | "DescribeTable"
            | "CreateTable"
            | "DeleteTable"
            | "UpdateTable"
            | "DescribeTimeToLive"
            | "UpdateTimeToLive"
    ) {
        return r;
    }
    let mut tables: Vec<String> =
        r.iter().map(|x| x.resource.split("/index/").next().unwrap_or_default().to_owned()).collect();
    tables.sort();
    tables.dedup();
    for table in tables {
        if let Some(key) = f.table_keys.get(&table) {
            r.push(Requirement {
                action: "kms:Decrypt".into(),
                resource: key.arn.clone(),
                context: kms_context(f, key, "dynamodb", None),
                because: Some(format!(
                    "DynamoDB decrypts the table key of {table} (customer managed key {}) on behalf of the caller",
                    key.arn
                )),
            });
        }
    }
    r
}

/// `https://sqs.../ACCOUNT/NAME` or `http://127.0.0.1:PORT/ACCOUNT/NAME` → the queue's ARN.
pub fn queue_arn(url: &str, f: &Facts) -> Result<String, MapError> {
    let mut parts = url.trim_end_matches('/').rsplit('/');
    match (parts.next(), parts.next()) {
        (Some(name), Some(account)) if !name.is_empty() && account.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(format!("arn:aws:sqs:{}:{account}:{name}", f.region))
        }
        _ => Err(malformed(format!("QueueUrl {url} names no queue"))),
    }
}

fn kms_context(f: &Facts, key: &Key, service: &str, encryption_context: Option<(&str, &str)>) -> Context {
    let mut c = Context::new();
    c.insert("kms:ViaService".into(), vec![format!("{service}.{}.amazonaws.com", f.region)]);
    c.insert("kms:CallerAccount".into(), vec![f.account.clone()]);
    c.insert("kms:ResourceAliases".into(), key.aliases.clone());
    if let Some((k, v)) = encryption_context {
        c.insert(format!("kms:EncryptionContext:{k}"), vec![v.to_owned()]);
    }
    c
}

fn sqs(op: &str, body: &Value, f: &Facts) -> Result<Vec<Requirement>, MapError> {
    let checked = match op {
        "SendMessageBatch" => "SendMessage",
        "DeleteMessageBatch" => "DeleteMessage",
        "ChangeMessageVisibilityBatch" => "ChangeMessageVisibility",
        "ListQueues" => return Ok(vec![Requirement::plain("sqs:ListQueues", "*")]),
        "GetQueueUrl" => {
            let account = body["QueueOwnerAWSAccountId"].as_str().unwrap_or(&f.account);
            let name = str_field(body, "QueueName")?;
            return Ok(vec![Requirement::plain(
                "sqs:GetQueueUrl",
                format!("arn:aws:sqs:{}:{account}:{name}", f.region),
            )]);
        }
        "SendMessage"
        | "ReceiveMessage"
        | "DeleteMessage"
        | "ChangeMessageVisibility"
        | "GetQueueAttributes"
        | "SetQueueAttributes"
        | "PurgeQueue"
        | "DeleteQueue"
        | "ListQueueTags" => op,
        other => return Err(MapError::Unknown(format!("AmazonSQS.{other}"))),
    };
    let queue = queue_arn(str_field(body, "QueueUrl")?, f)?;
    let mut out = vec![Requirement::plain(format!("sqs:{checked}"), queue.clone())];
    if let Some(key) = f.queue_keys.get(&queue) {
        let kms = |action: &str, why: &str| Requirement {
            action: action.to_owned(),
            resource: key.arn.clone(),
            context: kms_context(f, key, "sqs", Some(("aws:sqs:arn", &queue))),
            because: Some(format!("{why} {queue}, encrypted with the customer managed key {}", key.arn)),
        };
        match checked {
            "SendMessage" => {
                out.push(kms("kms:GenerateDataKey", "sending to"));
                out.push(kms("kms:Decrypt", "sending to"));
            }
            "ReceiveMessage" => out.push(kms("kms:Decrypt", "receiving from")),
            _ => {}
        }
    }
    Ok(out)
}

/// The query protocol's form body, decoded.
pub fn form(body: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = || s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex()) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(x)) => {
                out.push(x);
                i += 2;
            }
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn sns(op: &str, form: &BTreeMap<String, String>, f: &Facts) -> Vec<Requirement> {
    let action = format!("sns:{op}");
    let target = form.get("TopicArn").or_else(|| form.get("TargetArn")).or_else(|| form.get("ResourceArn"));
    let mut out = vec![Requirement::plain(action, target.map_or("*", String::as_str))];
    if op == "SetSMSAttributes" {
        // attributes.entry.N.key / attributes.entry.N.value
        for (k, v) in form {
            if v == "DeliveryStatusIAMRole"
                && let Some(prefix) = k.strip_suffix(".key")
                && let Some(role) = form.get(&format!("{prefix}.value"))
                && !role.is_empty()
            {
                let mut context = Context::new();
                context.insert("iam:PassedToService".into(), vec!["sns.amazonaws.com".into()]);
                out.push(Requirement {
                    action: "iam:PassRole".into(),
                    resource: role.clone(),
                    context,
                    because: Some("SetSMSAttributes hands this role to SNS (DeliveryStatusIAMRole)".into()),
                });
            }
        }
    }
    let _ = f;
    out
}

fn log_group_arn(body: &Value, f: &Facts) -> Result<String, MapError> {
    if let Some(id) = body["logGroupIdentifier"].as_str().filter(|i| i.starts_with("arn:")) {
        return Ok(format!("{}:*", id.trim_end_matches(":*")));
    }
    let name = body["logGroupName"]
        .as_str()
        .or_else(|| body["logGroupIdentifier"].as_str())
        .ok_or_else(|| malformed("no logGroupName"))?;
    Ok(format!("arn:aws:logs:{}:{}:log-group:{name}:*", f.region, f.account))
}

fn logs(op: &str, body: &Value, f: &Facts) -> Result<Vec<Requirement>, MapError> {
    let action = format!("logs:{op}");
    match op {
        "DescribeLogGroups" => {
            Ok(vec![Requirement::plain(action, format!("arn:aws:logs:{}:{}:log-group:*", f.region, f.account))])
        }
        "CreateLogStream" | "PutLogEvents" => {
            let group = log_group_arn(body, f)?;
            let stream = str_field(body, "logStreamName")?;
            Ok(vec![Requirement::plain(action, format!("{}:log-stream:{stream}", group.trim_end_matches(":*")))])
        }
        "FilterLogEvents"
        | "GetLogEvents"
        | "DescribeLogStreams"
        | "DescribeSubscriptionFilters"
        | "PutSubscriptionFilter"
        | "DeleteSubscriptionFilter"
        | "PutRetentionPolicy"
        | "CreateLogGroup"
        | "DeleteLogGroup" => Ok(vec![Requirement::plain(action, log_group_arn(body, f)?)]),
        other => Err(MapError::Unknown(format!("Logs_20140328.{other}"))),
    }
}

/// CloudWatch (Smithy RPC v2 CBOR: the operation is in the path, the body is CBOR).
fn cloudwatch(path: &str, f: &Facts) -> Result<Vec<Requirement>, MapError> {
    let op = path.rsplit_once("/operation/").map(|(_, op)| op).unwrap_or_default();
    match op {
        "GetMetricData" | "ListMetrics" => Ok(vec![Requirement::plain(format!("cloudwatch:{op}"), "*")]),
        "DescribeAlarms" => Ok(vec![Requirement::plain(
            "cloudwatch:DescribeAlarms",
            format!("arn:aws:cloudwatch:{}:{}:alarm:*", f.region, f.account),
        )]),
        other => Err(MapError::Unknown(format!("CloudWatch {other}"))),
    }
}

/// Lambda's REST API: the operations the CLI makes (doctor's reservation check, preflight's
/// account quota); any other is unknown to the gate, so a new call cannot pass unchecked.
fn lambda(method: &str, path: &str, f: &Facts) -> Result<Vec<Requirement>, MapError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("GET", [_, "functions", name, "concurrency"]) => {
            let arn = if name.starts_with("arn:") {
                (*name).to_owned()
            } else {
                format!("arn:aws:lambda:{}:{}:function:{name}", f.region, f.account)
            };
            Ok(vec![Requirement::plain("lambda:GetFunctionConcurrency", arn)])
        }
        ("GET", [_, "account-settings"]) => Ok(vec![Requirement::plain("lambda:GetAccountSettings", "*")]),
        _ => Err(MapError::Unknown(format!("Lambda {method} {path}"))),
    }
}

fn sms_arn(f: &Facts, resource: &str) -> String {
    format!("arn:aws:sms-voice:{}:{}:{resource}", f.region, f.account)
}

/// A name or ARN (the API takes either) → the ARN of `kind/NAME`.
fn sms_named(f: &Facts, kind: &str, name_or_arn: &str) -> String {
    if name_or_arn.starts_with("arn:") { name_or_arn.to_owned() } else { sms_arn(f, &format!("{kind}/{name_or_arn}")) }
}

/// An origination identity as a request names it → the ARN AWS authorizes.
fn origination_identity(f: &Facts, identity: &str) -> String {
    if identity.starts_with("arn:") {
        return identity.to_owned();
    }
    if let Some(arn) = f.sms_identities.get(identity) {
        return arn.clone();
    }
    if identity.starts_with("pool-") {
        sms_arn(f, &format!("pool/{identity}"))
    } else if identity.starts_with("phone-") || identity.starts_with('+') {
        sms_arn(f, &format!("phone-number/{identity}"))
    } else {
        // A bare sender ID the stand-in could not tie to one country.
        sms_arn(f, &format!("sender-id/{identity}/*"))
    }
}

fn str_list<'v>(v: &'v Value, field: &str) -> Vec<&'v str> {
    v[field].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn sms_voice(op: &str, body: &Value, f: &Facts) -> Result<Vec<Requirement>, MapError> {
    let action = format!("sms-voice:{op}");
    let on = |resources: Vec<String>| -> Vec<Requirement> {
        if resources.is_empty() {
            vec![Requirement::plain(action.clone(), "*")]
        } else {
            resources.into_iter().map(|r| Requirement::plain(action.clone(), r)).collect()
        }
    };
    let configuration_set = || -> Result<String, MapError> {
        Ok(sms_named(f, "configuration-set", str_field(body, "ConfigurationSetName")?))
    };
    let tagged = |mut out: Vec<Requirement>, resource: &str| {
        if body["Tags"].as_array().is_some_and(|t| !t.is_empty()) {
            out.push(Requirement::plain("sms-voice:TagResource", resource).because(format!("{op} with Tags")));
        }
        out
    };
    Ok(match op {
        "SendTextMessage" => {
            let mut named = Vec::new();
            if let Some(cs) = body["ConfigurationSetName"].as_str() {
                named.push(sms_named(f, "configuration-set", cs));
            }
            if let Some(identity) = body["OriginationIdentity"].as_str() {
                named.push(origination_identity(f, identity));
            }
            if let Some(protect) = body["ProtectConfigurationId"].as_str() {
                named.push(sms_named(f, "protect-configuration", protect));
            }
            on(named)
        }
        "CreateEventDestination" | "UpdateEventDestination" => {
            let mut out = on(vec![configuration_set()?]);
            for destination in ["CloudWatchLogsDestination", "KinesisFirehoseDestination"] {
                if let Some(role) = body[destination]["IamRoleArn"].as_str() {
                    let mut context = Context::new();
                    context.insert("iam:PassedToService".into(), vec!["sms-voice.amazonaws.com".into()]);
                    out.push(Requirement {
                        action: "iam:PassRole".into(),
                        resource: role.to_owned(),
                        context,
                        because: Some(format!("{op} hands this role to End User Messaging ({destination})")),
                    });
                }
            }
            out
        }
        "DeleteEventDestination" | "DeleteConfigurationSet" => on(vec![configuration_set()?]),
        "PutOptedOutNumber" | "DeleteOptedOutNumber" | "DescribeOptedOutNumbers" => {
            on(vec![sms_named(f, "opt-out-list", str_field(body, "OptOutListName")?)])
        }
        "RequestPhoneNumber" => {
            let mut named = Vec::new();
            if let Some(list) = body["OptOutListName"].as_str() {
                named.push(sms_named(f, "opt-out-list", list));
            }
            let pool = body["PoolId"].as_str().filter(|p| !p.is_empty()).map(|p| sms_named(f, "pool", p));
            named.extend(pool.clone());
            if let Some(registration) = body["RegistrationId"].as_str() {
                named.push(sms_named(f, "registration", registration));
            }
            let mut out = on(named);
            if let Some(pool) = pool {
                out.push(
                    Requirement::plain("sms-voice:AssociateOriginationIdentity", pool)
                        .because("RequestPhoneNumber puts the new number in this pool"),
                );
            }
            tagged(out, "*")
        }
        "CreatePool" => {
            let identity = origination_identity(f, str_field(body, "OriginationIdentity")?);
            tagged(on(vec![identity]), "*")
        }
        "CreateConfigurationSet" => {
            let cs = sms_named(f, "configuration-set", str_field(body, "ConfigurationSetName")?);
            tagged(on(Vec::new()), &cs)
        }
        "CreateOptOutList" => {
            let list = sms_named(f, "opt-out-list", str_field(body, "OptOutListName")?);
            tagged(on(Vec::new()), &list)
        }
        "RequestSenderId" => {
            let sid = format!("sender-id/{}/{}", str_field(body, "SenderId")?, str_field(body, "IsoCountryCode")?);
            tagged(on(Vec::new()), &sms_arn(f, &sid))
        }
        "DescribeConfigurationSets" => on(str_list(body, "ConfigurationSetNames")
            .into_iter()
            .map(|n| sms_named(f, "configuration-set", n))
            .collect()),
        "DescribeOptOutLists" => {
            on(str_list(body, "OptOutListNames").into_iter().map(|n| sms_named(f, "opt-out-list", n)).collect())
        }
        "DescribePhoneNumbers" => {
            on(str_list(body, "PhoneNumberIds").into_iter().map(|n| origination_identity(f, n)).collect())
        }
        "DescribePools" => on(str_list(body, "PoolIds").into_iter().map(|n| sms_named(f, "pool", n)).collect()),
        "DescribeSenderIds" => {
            let wanted = body["SenderIds"].as_array().map(Vec::as_slice).unwrap_or_default();
            on(wanted
                .iter()
                .map(|w| {
                    let sid = w["SenderId"].as_str().unwrap_or_default();
                    if sid.starts_with("arn:") {
                        sid.to_owned()
                    } else {
                        sms_arn(f, &format!("sender-id/{sid}/{}", w["IsoCountryCode"].as_str().unwrap_or_default()))
                    }
                })
                .collect())
        }
        "DescribeVerifiedDestinationNumbers" => on(str_list(body, "VerifiedDestinationNumberIds")
            .into_iter()
            .map(|n| sms_named(f, "verified-destination-number", n))
            .collect()),
        "DescribeAccountAttributes" | "DescribeSpendLimits" => on(Vec::new()),
        "GetProtectConfigurationCountryRuleSet"
        | "UpdateProtectConfigurationCountryRuleSet"
        | "DeleteProtectConfiguration" => {
            on(vec![sms_named(f, "protect-configuration", str_field(body, "ProtectConfigurationId")?)])
        }
        "AssociateProtectConfiguration" | "DisassociateProtectConfiguration" => on(vec![
            configuration_set()?,
            sms_named(f, "protect-configuration", str_field(body, "ProtectConfigurationId")?),
        ]),
        "CreateProtectConfiguration" => tagged(on(Vec::new()), "*"),
        "DescribeProtectConfigurations" => on(str_list(body, "ProtectConfigurationIds")
            .into_iter()
            .map(|n| sms_named(f, "protect-configuration", n))
            .collect()),
        other => return Err(MapError::Unknown(format!("PinpointSMSVoiceV2.{other}"))),
    })
}

fn cloudformation(op: &str, form: &BTreeMap<String, String>, f: &Facts) -> Vec<Requirement> {
    let resource = match form.get("StackName") {
        Some(arn) if arn.starts_with("arn:") => arn.clone(),
        Some(name) => format!("arn:aws:cloudformation:{}:{}:stack/{name}/*", f.region, f.account),
        None => "*".to_owned(),
    };
    vec![Requirement::plain(format!("cloudformation:{op}"), resource)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts() -> Facts {
        let send = "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send".to_owned();
        let key = Key {
            arn: "arn:aws:kms:us-east-1:123456789012:key/tocsin-local-DataKey".into(),
            aliases: vec!["alias/tocsin-local-data".into()],
        };
        Facts {
            region: "us-east-1".into(),
            account: "123456789012".into(),
            queue_keys: [(send, key.clone())].into(),
            table_keys: [("arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-encrypted".to_owned(), key)]
                .into(),
            sms_identities: BTreeMap::new(),
        }
    }

    fn json_call<'a>(service: &'a str, target: &'a str, body: &'a [u8]) -> Call<'a> {
        Call { service, region: "us-east-1", target: Some(target), method: "POST", path: "/", body }
    }

    fn asked(r: &[Requirement]) -> Vec<(&str, &str)> {
        r.iter().map(|r| (r.action.as_str(), r.resource.as_str())).collect()
    }

    const LEDGER: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-ledger";

    #[test]
    fn a_transaction_is_authorized_item_by_item_and_a_condition_check_needs_condition_check_item() {
        let body = json!({ "TransactItems": [
            { "ConditionCheck": { "TableName": "tocsin-local-ledger", "Key": {}, "ConditionExpression": "x" } },
            { "Put": { "TableName": "tocsin-local-ledger", "Item": {} } },
            { "Update": { "TableName": "tocsin-local-recipients", "Key": {} } },
            { "Delete": { "TableName": "tocsin-local-ledger", "Key": {} } }
        ]})
        .to_string();
        let r = requirements(&json_call("dynamodb", "DynamoDB_20120810.TransactWriteItems", body.as_bytes()), &facts())
            .expect("maps");
        assert_eq!(
            asked(&r),
            [
                ("dynamodb:ConditionCheckItem", LEDGER),
                ("dynamodb:PutItem", LEDGER),
                ("dynamodb:UpdateItem", "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-recipients"),
                ("dynamodb:DeleteItem", LEDGER),
            ]
        );
        assert_eq!(r[0].because.as_deref(), Some("item 1 of 4 of the transaction (ConditionCheck)"));
    }

    #[test]
    fn a_table_with_a_customer_managed_key_needs_decrypt_on_it_once_per_request() {
        let body = json!({ "TransactItems": [
            { "Update": { "TableName": "tocsin-local-encrypted", "Key": {} } },
            { "Put": { "TableName": "tocsin-local-encrypted", "Item": {} } }
        ]})
        .to_string();
        let r = requirements(&json_call("dynamodb", "DynamoDB_20120810.TransactWriteItems", body.as_bytes()), &facts())
            .expect("maps");
        let encrypted = "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-encrypted";
        assert_eq!(
            asked(&r),
            [
                ("dynamodb:UpdateItem", encrypted),
                ("dynamodb:PutItem", encrypted),
                ("kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:key/tocsin-local-DataKey")
            ]
        );
        assert_eq!(r[2].context["kms:ViaService"], ["dynamodb.us-east-1.amazonaws.com"]);
    }

    #[test]
    fn a_query_on_an_index_is_authorized_against_the_index_arn() {
        let body = json!({ "TableName": "tocsin-local-ledger", "IndexName": "due-index" }).to_string();
        let r =
            requirements(&json_call("dynamodb", "DynamoDB_20120810.Query", body.as_bytes()), &facts()).expect("maps");
        assert_eq!(asked(&r), [("dynamodb:Query", format!("{LEDGER}/index/due-index").as_str())]);
        let body = json!({ "TableName": "tocsin-local-ledger" }).to_string();
        let r =
            requirements(&json_call("dynamodb", "DynamoDB_20120810.Query", body.as_bytes()), &facts()).expect("maps");
        assert_eq!(asked(&r), [("dynamodb:Query", LEDGER)]);
    }

    #[test]
    fn a_batch_needs_its_action_on_every_table_it_names() {
        let body = json!({ "RequestItems": { "tocsin-local-ledger": {}, "tocsin-local-recipients": {} } }).to_string();
        let r = requirements(&json_call("dynamodb", "DynamoDB_20120810.BatchGetItem", body.as_bytes()), &facts())
            .expect("maps");
        assert_eq!(
            asked(&r),
            [
                ("dynamodb:BatchGetItem", LEDGER),
                ("dynamodb:BatchGetItem", "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-recipients")
            ]
        );
    }

    #[test]
    fn sending_to_a_queue_with_a_customer_managed_key_needs_generate_data_key_and_decrypt_on_it() {
        let body =
            json!({ "QueueUrl": "http://127.0.0.1:4566/123456789012/tocsin-local-send", "Entries": [] }).to_string();
        let r = requirements(&json_call("sqs", "AmazonSQS.SendMessageBatch", body.as_bytes()), &facts()).expect("maps");
        let key = "arn:aws:kms:us-east-1:123456789012:key/tocsin-local-DataKey";
        let queue = "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send";
        assert_eq!(asked(&r), [("sqs:SendMessage", queue), ("kms:GenerateDataKey", key), ("kms:Decrypt", key)]);
        assert_eq!(r[1].context["kms:ViaService"], ["sqs.us-east-1.amazonaws.com"]);
        assert_eq!(r[1].context["kms:ResourceAliases"], ["alias/tocsin-local-data"]);
        let body = json!({ "QueueUrl": "http://127.0.0.1:4566/123456789012/tocsin-local-send" }).to_string();
        let r = requirements(&json_call("sqs", "AmazonSQS.ReceiveMessage", body.as_bytes()), &facts()).expect("maps");
        assert_eq!(asked(&r), [("sqs:ReceiveMessage", queue), ("kms:Decrypt", key)]);
        let r =
            requirements(&json_call("sqs", "AmazonSQS.DeleteMessageBatch", body.as_bytes()), &facts()).expect("maps");
        assert_eq!(asked(&r), [("sqs:DeleteMessage", queue)], "deleting decrypts nothing");
        let r = requirements(&json_call("sqs", "AmazonSQS.ChangeMessageVisibilityBatch", body.as_bytes()), &facts())
            .expect("maps");
        assert_eq!(asked(&r), [("sqs:ChangeMessageVisibility", queue)]);
    }

    #[test]
    fn a_queue_without_a_customer_managed_key_needs_no_kms_permission() {
        let body = json!({ "QueueUrl": "http://127.0.0.1:4566/123456789012/plain" }).to_string();
        let r = requirements(&json_call("sqs", "AmazonSQS.SendMessage", body.as_bytes()), &facts()).expect("maps");
        assert_eq!(asked(&r), [("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:plain")]);
    }

    #[test]
    fn an_sms_publish_is_on_resource_star_and_a_topic_publish_on_the_topic() {
        let sms = Call {
            service: "sns",
            region: "us-east-1",
            target: None,
            method: "POST",
            path: "/",
            body: b"Action=Publish&PhoneNumber=%2B14155550100&Message=x",
        };
        assert_eq!(asked(&requirements(&sms, &facts()).expect("maps")), [("sns:Publish", "*")]);
        let topic = Call {
            service: "sns",
            region: "us-east-1",
            target: None,
            method: "POST",
            path: "/",
            body: b"Action=Publish&TopicArn=arn%3Aaws%3Asns%3Aus-east-1%3A123456789012%3Aoncall&Message=x",
        };
        assert_eq!(
            asked(&requirements(&topic, &facts()).expect("maps")),
            [("sns:Publish", "arn:aws:sns:us-east-1:123456789012:oncall")]
        );
    }

    #[test]
    fn setting_the_delivery_status_role_passes_it_to_sns() {
        let body = b"Action=SetSMSAttributes&attributes.entry.1.key=DeliveryStatusIAMRole&attributes.entry.1.value=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fr&attributes.entry.2.key=DefaultSMSType&attributes.entry.2.value=Transactional";
        let r = requirements(
            &Call { service: "sns", region: "us-east-1", target: None, method: "POST", path: "/", body },
            &facts(),
        )
        .expect("maps");
        assert_eq!(asked(&r), [("sns:SetSMSAttributes", "*"), ("iam:PassRole", "arn:aws:iam::123456789012:role/r")]);
    }

    #[test]
    fn filter_log_events_is_checked_against_the_group_arn_with_its_streams() {
        let body = json!({ "logGroupName": "sns/us-east-1/123456789012/DirectPublishToPhoneNumber" }).to_string();
        let r =
            requirements(&json_call("logs", "Logs_20140328.FilterLogEvents", body.as_bytes()), &facts()).expect("maps");
        assert_eq!(
            asked(&r),
            [(
                "logs:FilterLogEvents",
                "arn:aws:logs:us-east-1:123456789012:log-group:sns/us-east-1/123456789012/DirectPublishToPhoneNumber:*"
            )]
        );
    }

    #[test]
    fn an_operation_the_gate_does_not_know_is_an_error() {
        let body = b"{}";
        assert!(matches!(
            requirements(&json_call("dynamodb", "DynamoDB_20120810.ExecuteStatement", body), &facts()),
            Err(MapError::Unknown(_))
        ));
        assert!(matches!(
            requirements(
                &Call {
                    service: "lambda",
                    region: "us-east-1",
                    target: None,
                    method: "POST",
                    path: "/2015-03-31/functions",
                    body
                },
                &facts()
            ),
            Err(MapError::Unknown(_))
        ));
    }

    #[test]
    fn lambda_reads_are_authorized_on_the_function_and_the_account() {
        let get = |path| Call { service: "lambda", region: "us-east-1", target: None, method: "GET", path, body: b"" };
        assert_eq!(
            asked(&requirements(&get("/2019-09-30/functions/tocsin-sender/concurrency"), &facts()).expect("maps")),
            [("lambda:GetFunctionConcurrency", "arn:aws:lambda:us-east-1:123456789012:function:tocsin-sender")]
        );
        assert_eq!(
            asked(&requirements(&get("/2016-08-19/account-settings"), &facts()).expect("maps")),
            [("lambda:GetAccountSettings", "*")]
        );
        let put = Call { method: "PUT", ..get("/2019-09-30/functions/tocsin-sender/concurrency") };
        assert!(matches!(requirements(&put, &facts()), Err(MapError::Unknown(_))), "a write is not a read");
    }

    const SMS: &str = "arn:aws:sms-voice:us-east-1:123456789012";

    fn sms_call(op: &str, body: &Value, facts: &Facts) -> Vec<(String, String)> {
        let target = format!("PinpointSMSVoiceV2.{op}");
        let body = body.to_string();
        requirements(&json_call("sms-voice", &target, body.as_bytes()), facts)
            .expect("maps")
            .into_iter()
            .map(|r| (r.action, r.resource))
            .collect()
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, r)| ((*a).to_owned(), (*r).to_owned())).collect()
    }

    #[test]
    fn a_text_is_authorized_on_its_configuration_set_and_the_identity_it_leaves_from() {
        let mut f = facts();
        let phone = format!("{SMS}:phone-number/phone-0123abcd");
        f.sms_identities.insert("+18335550001".into(), phone.clone());
        let sent = sms_call(
            "SendTextMessage",
            &json!({"DestinationPhoneNumber": "+14255550100", "OriginationIdentity": "+18335550001", "ConfigurationSetName": "tocsin-local"}),
            &f,
        );
        let cs = format!("{SMS}:configuration-set/tocsin-local");
        assert_eq!(sent, owned(&[("sms-voice:SendTextMessage", &cs), ("sms-voice:SendTextMessage", &phone)]));
        let by_pool = sms_call(
            "SendTextMessage",
            &json!({"DestinationPhoneNumber": "+14255550100", "OriginationIdentity": "pool-9f", "ProtectConfigurationId": "protect-1"}),
            &f,
        );
        assert_eq!(
            by_pool,
            owned(&[
                ("sms-voice:SendTextMessage", &format!("{SMS}:pool/pool-9f")),
                ("sms-voice:SendTextMessage", &format!("{SMS}:protect-configuration/protect-1")),
            ])
        );
        let nothing_named = sms_call("SendTextMessage", &json!({"DestinationPhoneNumber": "+14255550100"}), &f);
        assert_eq!(nothing_named, owned(&[("sms-voice:SendTextMessage", "*")]));
        let unknown_number = sms_call(
            "SendTextMessage",
            &json!({"DestinationPhoneNumber": "+14255550100", "OriginationIdentity": "+12065550199"}),
            &f,
        );
        assert_eq!(
            unknown_number,
            owned(&[("sms-voice:SendTextMessage", &format!("{SMS}:phone-number/+12065550199"))])
        );
    }

    #[test]
    fn an_event_destination_passes_its_role_to_end_user_messaging() {
        let body = json!({
            "ConfigurationSetName": "tocsin-local", "EventDestinationName": "logs", "MatchingEventTypes": ["TEXT_ALL"],
            "CloudWatchLogsDestination": {"IamRoleArn": "arn:aws:iam::123456789012:role/eum-events", "LogGroupArn": "arn:aws:logs:us-east-1:123456789012:log-group:g"}
        });
        let r = requirements(
            &json_call("sms-voice", "PinpointSMSVoiceV2.CreateEventDestination", body.to_string().as_bytes()),
            &facts(),
        )
        .expect("maps");
        assert_eq!(
            asked(&r),
            [
                ("sms-voice:CreateEventDestination", format!("{SMS}:configuration-set/tocsin-local").as_str()),
                ("iam:PassRole", "arn:aws:iam::123456789012:role/eum-events")
            ]
        );
        assert_eq!(r[1].context["iam:PassedToService"], ["sms-voice.amazonaws.com"]);
    }

    #[test]
    fn opt_outs_are_authorized_on_their_list_and_describes_on_what_they_name_or_star() {
        let f = facts();
        let list = format!("{SMS}:opt-out-list/Default");
        for op in ["DescribeOptedOutNumbers", "PutOptedOutNumber", "DeleteOptedOutNumber"] {
            let r = sms_call(op, &json!({"OptOutListName": "Default", "OptedOutNumber": "+14255550100"}), &f);
            assert_eq!(r, owned(&[(&format!("sms-voice:{op}"), &list)]));
        }
        let by_arn = sms_call("DescribeOptedOutNumbers", &json!({"OptOutListName": list}), &f);
        assert_eq!(by_arn, owned(&[("sms-voice:DescribeOptedOutNumbers", &list)]));
        assert_eq!(sms_call("DescribePhoneNumbers", &json!({}), &f), owned(&[("sms-voice:DescribePhoneNumbers", "*")]));
        assert_eq!(
            sms_call("DescribePhoneNumbers", &json!({"PhoneNumberIds": ["phone-1"]}), &f),
            owned(&[("sms-voice:DescribePhoneNumbers", &format!("{SMS}:phone-number/phone-1"))])
        );
        assert_eq!(
            sms_call("DescribeSenderIds", &json!({"SenderIds": [{"SenderId": "TOCSIN", "IsoCountryCode": "GB"}]}), &f),
            owned(&[("sms-voice:DescribeSenderIds", &format!("{SMS}:sender-id/TOCSIN/GB"))])
        );
        assert_eq!(sms_call("DescribeSpendLimits", &json!({}), &f), owned(&[("sms-voice:DescribeSpendLimits", "*")]));
    }

    #[test]
    fn a_phone_number_requested_into_a_pool_also_associates_it_and_tags_need_tag_resource() {
        let r = sms_call(
            "RequestPhoneNumber",
            &json!({"IsoCountryCode": "US", "MessageType": "TRANSACTIONAL", "NumberCapabilities": ["SMS"], "NumberType": "TOLL_FREE",
                    "OptOutListName": "alerts", "PoolId": "pool-1", "Tags": [{"Key": "k", "Value": "v"}]}),
            &facts(),
        );
        assert_eq!(
            r,
            owned(&[
                ("sms-voice:RequestPhoneNumber", &format!("{SMS}:opt-out-list/alerts")),
                ("sms-voice:RequestPhoneNumber", &format!("{SMS}:pool/pool-1")),
                ("sms-voice:AssociateOriginationIdentity", &format!("{SMS}:pool/pool-1")),
                ("sms-voice:TagResource", "*"),
            ])
        );
        let plain = sms_call(
            "RequestPhoneNumber",
            &json!({"IsoCountryCode": "US", "MessageType": "TRANSACTIONAL", "NumberCapabilities": ["SMS"], "NumberType": "TOLL_FREE"}),
            &facts(),
        );
        assert_eq!(plain, owned(&[("sms-voice:RequestPhoneNumber", "*")]));
    }

    #[test]
    fn an_end_user_messaging_operation_the_gate_does_not_know_is_an_error() {
        let body = json!({"DestinationPhoneNumber": "+14255550100"}).to_string();
        assert!(matches!(
            requirements(&json_call("sms-voice", "PinpointSMSVoiceV2.SendVoiceMessage", body.as_bytes()), &facts()),
            Err(MapError::Unknown(_))
        ));
    }

    #[test]
    fn the_callers_identity_needs_no_permission() {
        let call = Call {
            service: "sts",
            region: "us-east-1",
            target: None,
            method: "POST",
            path: "/",
            body: b"Action=GetCallerIdentity&Version=2011-06-15",
        };
        assert!(requirements(&call, &facts()).expect("maps").is_empty());
    }
}
