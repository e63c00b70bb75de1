//! The SAM-translated template resolved for one local stack: parameters (defaults, or
//! overrides), conditions, and the intrinsics policies use — `Ref`, `Fn::GetAtt`, `Fn::Sub`,
//! `Fn::If` (with `AWS::NoValue`), `Fn::Join`, `Fn::Split`, `Fn::Select` — turned into the concrete names and
//! ARNs of that stack (region us-east-1, account 123456789012, as the harness provisions it).
//!
//! Physical names come from the resource's own name property (`TableName`, `QueueName`,
//! `FunctionName`, `LogGroupName`, `TopicName`, `AliasName`, `RoleName`) — every tocsin resource
//! that the functions touch names itself after the stack — and are `<stack>-<LogicalId>` for
//! resources that do not (roles, the KMS key).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::stack::{ACCOUNT, REGION};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("translated template: {0}")]
    Unresolvable(String),
}

fn err(m: impl Into<String>) -> TemplateError {
    TemplateError::Unresolvable(m.into())
}

/// A translated template with the values of one stack.
#[derive(Debug, Clone)]
pub struct Resolved {
    template: Value,
    pub stack: String,
    parameters: BTreeMap<String, String>,
}

impl Resolved {
    /// `translated` for stack `stack`, with parameter `overrides` (the rest take their defaults).
    pub fn new(translated: Value, stack: &str, overrides: &[(&str, &str)]) -> Resolved {
        let mut parameters = BTreeMap::new();
        for (k, p) in translated["Parameters"].as_object().into_iter().flatten() {
            let value = match &p["Default"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
                Value::Bool(b) => b.to_string(),
                _ => continue,
            };
            parameters.insert(k.clone(), value);
        }
        for (k, v) in overrides {
            parameters.insert((*k).to_owned(), (*v).to_owned());
        }
        Resolved { template: translated, stack: stack.to_owned(), parameters }
    }

    pub fn template(&self) -> &Value {
        &self.template
    }

    /// The resources of type `ty` that exist for these parameters, by logical id.
    pub fn resources_of(&self, ty: &str) -> Result<Vec<(String, Value)>, TemplateError> {
        let mut out = Vec::new();
        for (id, r) in self.template["Resources"].as_object().into_iter().flatten() {
            if r["Type"] == ty && self.exists(id)? {
                out.push((id.clone(), r.clone()));
            }
        }
        Ok(out)
    }

    /// Whether resource `id` exists: it is in the template and its `Condition`, if any, holds.
    pub fn exists(&self, id: &str) -> Result<bool, TemplateError> {
        let r = &self.template["Resources"][id];
        if r.is_null() {
            return Ok(false);
        }
        match r["Condition"].as_str() {
            Some(c) => self.condition(c),
            None => Ok(true),
        }
    }

    pub fn condition(&self, name: &str) -> Result<bool, TemplateError> {
        let c = &self.template["Conditions"][name];
        if c.is_null() {
            return Err(err(format!("no condition {name}")));
        }
        self.truth(c)
    }

    fn truth(&self, v: &Value) -> Result<bool, TemplateError> {
        let Some((f, arg)) = v.as_object().filter(|o| o.len() == 1).and_then(|o| o.iter().next()) else {
            return v.as_bool().ok_or_else(|| err(format!("condition {v}")));
        };
        let args = arg.as_array().cloned().unwrap_or_default();
        match f.as_str() {
            "Fn::Equals" if args.len() == 2 => Ok(self.string(&args[0])? == self.string(&args[1])?),
            "Fn::Not" if args.len() == 1 => Ok(!self.truth(&args[0])?),
            "Fn::And" => args.iter().try_fold(true, |acc, c| Ok(acc && self.truth(c)?)),
            "Fn::Or" => args.iter().try_fold(false, |acc, c| Ok(acc || self.truth(c)?)),
            "Condition" => self.condition(arg.as_str().unwrap_or_default()),
            other => Err(err(format!("condition function {other}"))),
        }
    }

    /// Resolves every intrinsic in `v`; `None` for `AWS::NoValue` (and lists drop such items).
    pub fn resolve(&self, v: &Value) -> Result<Option<Value>, TemplateError> {
        match v {
            Value::Object(o) if o.len() == 1 && o.keys().all(|k| k == "Ref" || k.starts_with("Fn::")) => {
                let (f, arg) = o.iter().next().ok_or_else(|| err("empty intrinsic"))?;
                if f == "Ref" && arg == "AWS::NoValue" {
                    return Ok(None);
                }
                if f == "Fn::If" {
                    let a = arg.as_array().filter(|a| a.len() == 3).ok_or_else(|| err("Fn::If takes three values"))?;
                    let branch = if self.condition(a[0].as_str().unwrap_or_default())? { &a[1] } else { &a[2] };
                    return self.resolve(branch);
                }
                if f == "Fn::Split" {
                    let a = arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| err("Fn::Split takes two values"))?;
                    let sep = a[0].as_str().filter(|s| !s.is_empty()).ok_or_else(|| err("Fn::Split separator"))?;
                    let text = self.string(&a[1])?;
                    return Ok(Some(Value::Array(text.split(sep).map(|x| Value::String(x.to_owned())).collect())));
                }
                self.string(v).map(|s| Some(Value::String(s)))
            }
            Value::Object(o) => {
                let mut out = serde_json::Map::new();
                for (k, x) in o {
                    if let Some(x) = self.resolve(x)? {
                        out.insert(k.clone(), x);
                    }
                }
                Ok(Some(Value::Object(out)))
            }
            Value::Array(a) => {
                let mut out = Vec::new();
                for x in a {
                    if let Some(x) = self.resolve(x)? {
                        out.push(x);
                    }
                }
                Ok(Some(Value::Array(out)))
            }
            other => Ok(Some(other.clone())),
        }
    }

    /// Resolves `v` to one string.
    pub fn string(&self, v: &Value) -> Result<String, TemplateError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Object(o) if o.len() == 1 => {
                let (f, arg) = o.iter().next().ok_or_else(|| err("empty intrinsic"))?;
                match f.as_str() {
                    "Ref" => self.reference(arg.as_str().ok_or_else(|| err("Ref needs a name"))?),
                    "Fn::GetAtt" => {
                        let (id, attr) = match arg {
                            Value::Array(a) if a.len() == 2 => {
                                (a[0].as_str().unwrap_or_default(), a[1].as_str().unwrap_or_default())
                            }
                            Value::String(s) => s.split_once('.').ok_or_else(|| err(format!("Fn::GetAtt {s}")))?,
                            other => return Err(err(format!("Fn::GetAtt {other}"))),
                        };
                        self.get_att(id, attr)
                    }
                    "Fn::Sub" => match arg {
                        Value::String(s) => self.sub(s, &BTreeMap::new()),
                        Value::Array(a) if a.len() == 2 => {
                            let mut vars = BTreeMap::new();
                            for (k, x) in a[1].as_object().into_iter().flatten() {
                                vars.insert(k.clone(), self.string(x)?);
                            }
                            self.sub(a[0].as_str().unwrap_or_default(), &vars)
                        }
                        other => Err(err(format!("Fn::Sub {other}"))),
                    },
                    "Fn::Join" => {
                        let a = arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| err("Fn::Join"))?;
                        let sep = a[0].as_str().unwrap_or_default();
                        let items = self.resolve(&a[1])?.unwrap_or(Value::Array(vec![]));
                        let parts: Vec<String> =
                            items.as_array().into_iter().flatten().map(|x| self.string(x)).collect::<Result<_, _>>()?;
                        Ok(parts.join(sep))
                    }
                    "Fn::Select" => {
                        let a = arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| err("Fn::Select"))?;
                        let i: usize = self.string(&a[0])?.parse().map_err(|_| err("Fn::Select index"))?;
                        let items = self.resolve(&a[1])?.unwrap_or(Value::Array(vec![]));
                        let item = items.get(i).cloned().ok_or_else(|| err("Fn::Select out of range"))?;
                        self.string(&item)
                    }
                    "Fn::If" => match self.resolve(v)? {
                        Some(x) => self.string(&x),
                        None => Err(err("AWS::NoValue where a string is needed")),
                    },
                    other => Err(err(format!("intrinsic {other} is not resolved by the IAM gate"))),
                }
            }
            other => Err(err(format!("cannot resolve {other} to a string"))),
        }
    }

    fn sub(&self, text: &str, vars: &BTreeMap<String, String>) -> Result<String, TemplateError> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').ok_or_else(|| err(format!("unclosed ${{ in {text}")))? + start;
            let var = &rest[start + 2..end];
            if let Some(literal) = var.strip_prefix('!') {
                out.push_str(&format!("${{{literal}}}"));
            } else if let Some(v) = vars.get(var) {
                out.push_str(v);
            } else {
                out.push_str(&match var.split_once('.') {
                    Some((id, attr)) => self.get_att(id, attr)?,
                    None => self.reference(var)?,
                });
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn resource(&self, id: &str) -> Result<&Value, TemplateError> {
        let r = &self.template["Resources"][id];
        if r.is_null() { Err(err(format!("no resource {id}"))) } else { Ok(r) }
    }

    /// The resource's physical name (see the module comment).
    pub fn physical_name(&self, id: &str) -> Result<String, TemplateError> {
        let r = self.resource(id)?;
        let p = &r["Properties"];
        let field = match r["Type"].as_str().unwrap_or_default() {
            "AWS::DynamoDB::Table" => "TableName",
            "AWS::SQS::Queue" => "QueueName",
            "AWS::Lambda::Function" => "FunctionName",
            "AWS::Logs::LogGroup" => "LogGroupName",
            "AWS::SNS::Topic" => "TopicName",
            "AWS::KMS::Alias" => "AliasName",
            "AWS::IAM::Role" => "RoleName",
            "AWS::SMSVOICE::ConfigurationSet" => "ConfigurationSetName",
            _ => "",
        };
        match p.get(field) {
            Some(v) if !field.is_empty() => self.string(v),
            _ => Ok(format!("{}-{id}", self.stack)),
        }
    }

    fn reference(&self, name: &str) -> Result<String, TemplateError> {
        match name {
            "AWS::StackName" => return Ok(self.stack.clone()),
            "AWS::Region" => return Ok(REGION.into()),
            "AWS::AccountId" => return Ok(ACCOUNT.into()),
            "AWS::Partition" => return Ok("aws".into()),
            "AWS::URLSuffix" => return Ok("amazonaws.com".into()),
            "AWS::StackId" => {
                return Ok(format!("arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{}/local", self.stack));
            }
            _ => {}
        }
        if let Some(p) = self.parameters.get(name) {
            return Ok(p.clone());
        }
        let r = self.resource(name)?;
        let physical = self.physical_name(name)?;
        Ok(match r["Type"].as_str().unwrap_or_default() {
            "AWS::SQS::Queue" => format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{physical}"),
            "AWS::SNS::Topic" => format!("arn:aws:sns:{REGION}:{ACCOUNT}:{physical}"),
            _ => physical,
        })
    }

    /// `Fn::GetAtt [id, attr]` for this stack.
    pub fn get_att(&self, id: &str, attr: &str) -> Result<String, TemplateError> {
        let r = self.resource(id)?;
        let name = self.physical_name(id)?;
        let ty = r["Type"].as_str().unwrap_or_default();
        Ok(match (ty, attr) {
            ("AWS::DynamoDB::Table", "Arn") => format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"),
            ("AWS::SQS::Queue", "Arn") => format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"),
            ("AWS::SQS::Queue", "QueueName") => name,
            ("AWS::SQS::Queue", "QueueUrl") => self.reference(id)?,
            ("AWS::IAM::Role", "Arn") => format!("arn:aws:iam::{ACCOUNT}:role/{name}"),
            ("AWS::KMS::Key", "Arn") => format!("arn:aws:kms:{REGION}:{ACCOUNT}:key/{name}"),
            ("AWS::Lambda::Function", "Arn") => format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"),
            // A log group's Arn attribute ends with ":*" (its streams), as CloudFormation returns it.
            ("AWS::Logs::LogGroup", "Arn") => format!("arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"),
            ("AWS::SNS::Topic", "TopicArn") => format!("arn:aws:sns:{REGION}:{ACCOUNT}:{name}"),
            // AWS assigns a protect configuration its id when it is made, after the gate read the
            // template: the gate grants the account's protect configurations where the template
            // names the stack's one. That the sender names the stack's own is proved by the
            // country-rules tests (a send to a blocked country is refused by AWS's rules).
            ("AWS::SMSVOICE::ProtectConfiguration", "Arn") => {
                format!("arn:aws:sms-voice:{REGION}:{ACCOUNT}:protect-configuration/*")
            }
            ("AWS::SMSVOICE::ProtectConfiguration", "ProtectConfigurationId") => "*".to_owned(),
            (ty, attr) => return Err(err(format!("Fn::GetAtt {id}.{attr} ({ty}) is not resolved by the IAM gate"))),
        })
    }

    /// The ARN of the KMS key that `value` (a key id, key ARN or alias name, as templates name
    /// keys) resolves to, with every alias of it; `None` for an AWS managed key (`alias/aws/...`).
    pub fn kms_key(&self, value: &str) -> Result<Option<super::request::Key>, TemplateError> {
        if value.starts_with("alias/aws/") {
            return Ok(None);
        }
        let aliases = self.resources_of("AWS::KMS::Alias")?;
        let key_arn = |target: &str| -> Result<String, TemplateError> {
            Ok(if target.starts_with("arn:") {
                target.to_owned()
            } else {
                format!("arn:aws:kms:{REGION}:{ACCOUNT}:key/{target}")
            })
        };
        let arn = if value.starts_with("alias/") {
            let target = aliases
                .iter()
                .find(|(id, _)| self.physical_name(id).is_ok_and(|n| n == value))
                .map(|(_, a)| self.string(&a["Properties"]["TargetKeyId"]))
                .transpose()?
                .ok_or_else(|| err(format!("alias {value} is not in the template")))?;
            key_arn(&target)?
        } else {
            key_arn(value)?
        };
        let mut names = Vec::new();
        for (id, a) in &aliases {
            if key_arn(&self.string(&a["Properties"]["TargetKeyId"])?)? == arn {
                names.push(self.physical_name(id)?);
            }
        }
        Ok(Some(super::request::Key { arn, aliases: names }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t() -> Resolved {
        let template = json!({
            "Parameters": { "Mode": { "Type": "String", "Default": "on" }, "Sources": { "Type": "CommaDelimitedList", "Default": "a,b" } },
            "Conditions": { "IsOn": { "Fn::Equals": [{ "Ref": "Mode" }, "on"] }, "IsOff": { "Fn::Not": [{ "Condition": "IsOn" }] } },
            "Resources": {
                "Ledger": { "Type": "AWS::DynamoDB::Table", "Properties": { "TableName": { "Fn::Sub": "${AWS::StackName}-ledger" } } },
                "Queue": { "Type": "AWS::SQS::Queue", "Properties": { "QueueName": { "Fn::Sub": "${AWS::StackName}-send" } } },
                "Key": { "Type": "AWS::KMS::Key", "Properties": {} },
                "KeyAlias": { "Type": "AWS::KMS::Alias", "Properties": { "AliasName": { "Fn::Sub": "alias/${AWS::StackName}-data" }, "TargetKeyId": { "Ref": "Key" } } },
                "Role": { "Type": "AWS::IAM::Role", "Condition": "IsOff", "Properties": {} }
            }
        });
        Resolved::new(template, "tocsin-local", &[])
    }

    #[test]
    fn getatt_sub_and_if_resolve_to_the_local_stacks_arns() {
        let t = t();
        let v = json!([
            { "Fn::GetAtt": ["Ledger", "Arn"] },
            { "Fn::Sub": "${Ledger.Arn}/index/due-index" },
            { "Fn::If": ["IsOn", { "Fn::GetAtt": ["Queue", "Arn"] }, { "Ref": "AWS::NoValue" }] },
            { "Fn::If": ["IsOff", "never", { "Ref": "AWS::NoValue" }] },
            { "Fn::Sub": ["arn:${AWS::Partition}:sns:*:${A}:*", { "A": { "Ref": "AWS::AccountId" } }] },
            { "Fn::Sub": "${!Literal}" }
        ]);
        assert_eq!(
            t.resolve(&v).expect("resolves"),
            Some(json!([
                "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-ledger",
                "arn:aws:dynamodb:us-east-1:123456789012:table/tocsin-local-ledger/index/due-index",
                "arn:aws:sqs:us-east-1:123456789012:tocsin-local-send",
                "arn:aws:sns:*:123456789012:*",
                "${Literal}"
            ]))
        );
    }

    #[test]
    fn a_resource_whose_condition_is_false_does_not_exist_and_overrides_change_that() {
        assert!(!t().exists("Role").expect("evaluates"));
        let off = Resolved::new(t().template().clone(), "s", &[("Mode", "off")]);
        assert!(off.exists("Role").expect("evaluates"));
    }

    #[test]
    fn a_key_is_found_by_reference_or_alias_with_all_its_aliases() {
        let t = t();
        let by_ref = t.kms_key(&t.string(&json!({ "Ref": "Key" })).expect("ref")).expect("key").expect("cmk");
        assert_eq!(by_ref.arn, "arn:aws:kms:us-east-1:123456789012:key/tocsin-local-Key");
        assert_eq!(by_ref.aliases, ["alias/tocsin-local-data"]);
        assert_eq!(t.kms_key("alias/tocsin-local-data").expect("alias"), Some(by_ref));
        assert_eq!(t.kms_key("alias/aws/sqs").expect("aws managed"), None);
    }

    #[test]
    fn an_intrinsic_the_gate_cannot_resolve_is_an_error() {
        assert!(t().string(&json!({ "Fn::ImportValue": "x" })).is_err());
        assert!(t().string(&json!({ "Fn::GetAtt": ["Ledger", "StreamArn"] })).is_err());
    }
}
