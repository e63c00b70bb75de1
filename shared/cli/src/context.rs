//! What every command shares: the stack's resources, read from its CloudFormation outputs, and the
//! AWS clients, built once from the standard AWS environment (credentials chain, `--profile` /
//! `AWS_PROFILE`, `--region` / `AWS_REGION`, `AWS_ENDPOINT_URL` for an emulator).

use std::collections::BTreeMap;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use tocsin::adapters::ledger::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;
use tocsin::config::{DeliveryLogs, EumSettings, SendingProvider};

use crate::error::{CliError, CliResult};

/// How to reach the stack: its name and, as the AWS CLI takes them, a profile and a region.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    pub stack: String,
    pub profile: Option<String>,
    pub region: Option<String>,
}

/// The outputs of one deployed stack (CloudFormation DescribeStacks), by output key, and the
/// parameter values it was deployed with (what no output states, e.g. `SmsOriginationNumber`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackOutputs {
    pub stack: String,
    values: BTreeMap<String, String>,
    parameters: BTreeMap<String, String>,
}

impl StackOutputs {
    pub fn new(stack: &str, values: BTreeMap<String, String>) -> Self {
        StackOutputs { stack: stack.to_owned(), values, parameters: BTreeMap::new() }
    }

    /// The same outputs, with the parameter values the stack was deployed with.
    pub fn with_parameters(mut self, parameters: BTreeMap<String, String>) -> Self {
        self.parameters = parameters;
        self
    }

    /// A parameter's value as deployed; `None` when empty or unknown (a stack registered without
    /// parameters says nothing about them).
    pub fn parameter(&self, key: &str) -> Option<&str> {
        self.parameters.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// A parameter's value as deployed, empty included; `None` when the stack does not name it.
    pub fn parameter_as_deployed(&self, key: &str) -> Option<&str> {
        self.parameters.get(key).map(String::as_str)
    }

    /// Reads the stack's outputs; a stack that does not exist is a clear error, never a guess.
    pub async fn describe(cfn: &aws_sdk_cloudformation::Client, stack: &str) -> CliResult<Self> {
        let out = cfn.describe_stacks().stack_name(stack).send().await.map_err(|e| {
            let text = crate::error::describe(&e);
            if text.contains("does not exist") {
                CliError::Usage(format!(
                    "no CloudFormation stack named {stack} in this account and region (check --stack, --region, --profile)"
                ))
            } else {
                CliError::Aws { operation: "CloudFormation DescribeStacks", message: format!("stack {stack}: {text}") }
            }
        })?;
        let found = out.stacks().iter().find(|s| s.stack_name() == Some(stack)).ok_or_else(|| {
            CliError::Usage(format!("no CloudFormation stack named {stack} in this account and region"))
        })?;
        let values = found
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
            .collect();
        let parameters = found
            .parameters()
            .iter()
            .filter_map(|p| Some((p.parameter_key()?.to_owned(), p.parameter_value()?.to_owned())))
            .collect();
        Ok(StackOutputs::new(stack, values).with_parameters(parameters))
    }

    /// An output the command cannot do without.
    pub fn require(&self, key: &str) -> CliResult<&str> {
        self.values.get(key).map(String::as_str).filter(|v| !v.is_empty()).ok_or_else(|| {
            CliError::Usage(format!(
                "stack {} has no output {key}: it was deployed from an older template.yaml, or is not a tocsin \
                 stack. Deploy this version (sam deploy) and try again",
                self.stack
            ))
        })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
}

/// The stack's resources the CLI always needs, from its outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackNames {
    pub stack: String,
    pub ledger_table: String,
    pub recipients_table: String,
    pub send_queue_url: String,
    pub escalation_queue_url: String,
}

impl StackNames {
    pub fn from_outputs(o: &StackOutputs) -> CliResult<Self> {
        Ok(StackNames {
            stack: o.stack.clone(),
            ledger_table: o.require("LedgerTableName")?.to_owned(),
            recipients_table: o.require("RecipientsTableName")?.to_owned(),
            send_queue_url: o.require("SendQueueUrl")?.to_owned(),
            escalation_queue_url: o.require("EscalationQueueUrl")?.to_owned(),
        })
    }
}

/// A queue's depth — (visible, in flight) — by GetQueueAttributes, which receives nothing and so
/// counts nothing against any message.
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<(Option<u64>, Option<u64>), CliError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(CliError::aws("SQS GetQueueAttributes"))?;
    let attrs = out.attributes.unwrap_or_default();
    let get = |a: &A| attrs.get(a).and_then(|v| v.parse::<u64>().ok());
    Ok((get(&A::ApproximateNumberOfMessages), get(&A::ApproximateNumberOfMessagesNotVisible)))
}

/// A queue's name: the last segment of its URL.
pub fn queue_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

pub struct Context {
    pub names: StackNames,
    pub outputs: StackOutputs,
    pub json: bool,
    /// Kept for the clients built per command (SNS, whose timeout is a resend option; doctor's).
    pub sdk: SdkConfig,
    pub ledger: DynamoLedger,
    pub registry: DynamoRegistry,
    pub sqs: aws_sdk_sqs::Client,
    pub sts: aws_sdk_sts::Client,
}

/// The AWS configuration as the AWS CLI would resolve it, with `--profile` / `--region` on top.
pub async fn load_sdk(profile: Option<&str>, region: Option<&str>) -> CliResult<SdkConfig> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(p) = profile {
        loader = loader.profile_name(p);
    }
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_owned()));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(CliError::Usage(
            "no AWS region: pass --region, set AWS_REGION, or use a profile that has one (--profile / AWS_PROFILE)"
                .into(),
        ));
    }
    Ok(sdk)
}

impl Context {
    /// Loads the AWS configuration, reads the stack's outputs and builds the clients.
    pub async fn connect(connection: &Connection, json: bool) -> CliResult<Self> {
        let sdk = load_sdk(connection.profile.as_deref(), connection.region.as_deref()).await?;
        let cfn = aws_sdk_cloudformation::Client::new(&sdk);
        let outputs = StackOutputs::describe(&cfn, &connection.stack).await?;
        let names = StackNames::from_outputs(&outputs)?;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        Ok(Context {
            ledger: DynamoLedger::new(dynamodb.clone(), &names.ledger_table),
            registry: DynamoRegistry::new(dynamodb, &names.recipients_table),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            sts: aws_sdk_sts::Client::new(&sdk),
            names,
            outputs,
            json,
            sdk,
        })
    }

    /// The SMS provider the stack sends through, from its outputs (`SmsProvider`, and under End
    /// User Messaging `SmsConfigurationSetName`, `SmsOriginationIdentity`, `SmsOptOutListName`). A
    /// stack with no `SmsProvider` output was deployed before the choice existed: it sent through
    /// SNS, the only provider then.
    pub fn sending_provider(&self) -> CliResult<SendingProvider> {
        sending_provider(&self.outputs)
    }

    /// Where the stack's delivery records are: its End User Messaging event group, or the
    /// account's two SNS delivery-status groups in this region.
    pub async fn delivery_logs(&self) -> CliResult<DeliveryLogs> {
        if let SendingProvider::EndUserMessaging(_) = self.sending_provider()? {
            return Ok(DeliveryLogs::EndUserMessaging {
                event_group: self.outputs.require("SmsEventLogGroupName")?.to_owned(),
                stack: self.names.stack.clone(),
            });
        }
        let region = self.sdk.region().map(|r| r.to_string()).unwrap_or_default();
        let identity = self.sts.get_caller_identity().send().await.map_err(CliError::aws("STS GetCallerIdentity"))?;
        let account = identity.account.unwrap_or_default();
        let base = format!("sns/{region}/{account}/DirectPublishToPhoneNumber");
        Ok(DeliveryLogs::Sns { success_group: base.clone(), failure_group: format!("{base}/Failure") })
    }

    /// Who is acting: the caller's ARN (STS GetCallerIdentity), recorded with audited actions.
    pub async fn operator(&self) -> CliResult<String> {
        let out = self.sts.get_caller_identity().send().await.map_err(CliError::aws("STS GetCallerIdentity"))?;
        out.arn.filter(|a| !a.is_empty()).ok_or_else(|| CliError::Aws {
            operation: "STS GetCallerIdentity",
            message: "the answer names no ARN".into(),
        })
    }
}

/// [`Context::sending_provider`], from the outputs alone.
pub fn sending_provider(o: &StackOutputs) -> CliResult<SendingProvider> {
    match o.get("SmsProvider") {
        None | Some("sns") => Ok(SendingProvider::Sns),
        Some("end-user-messaging") => Ok(SendingProvider::EndUserMessaging(EumSettings {
            configuration_set: o.require("SmsConfigurationSetName")?.to_owned(),
            origination_identity: o.get("SmsOriginationIdentity").map(str::to_owned),
            opt_out_list: o.require("SmsOptOutListName")?.to_owned(),
            // A stack older than its country rules has none.
            protect_configuration: o.get("SmsProtectConfigurationId").map(str::to_owned),
        })),
        Some(other) => Err(CliError::Usage(format!(
            "stack {} names an SMS provider this CLI does not know ({other}): use the CLI of its version",
            o.stack
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_comes_from_the_outputs_and_an_older_stack_sent_through_sns() {
        assert_eq!(sending_provider(&outputs(&[])).expect("older"), SendingProvider::Sns);
        let eum = outputs(&[
            ("SmsProvider", "end-user-messaging"),
            ("SmsConfigurationSetName", "tocsin-prod"),
            ("SmsOptOutListName", "Default"),
            ("SmsOriginationIdentity", ""),
        ]);
        assert_eq!(
            sending_provider(&eum).expect("eum"),
            SendingProvider::EndUserMessaging(EumSettings {
                configuration_set: "tocsin-prod".into(),
                origination_identity: None,
                opt_out_list: "Default".into(),
                protect_configuration: None,
            })
        );
        let half = outputs(&[("SmsProvider", "end-user-messaging")]);
        assert!(sending_provider(&half).expect_err("incomplete").to_string().contains("SmsConfigurationSetName"));
        assert!(sending_provider(&outputs(&[("SmsProvider", "carrier-pigeon")])).is_err());
    }

    fn outputs(pairs: &[(&str, &str)]) -> StackOutputs {
        StackOutputs::new("tocsin-prod", pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn resources_come_from_the_stack_outputs() {
        let o = outputs(&[
            ("LedgerTableName", "tocsin-prod-ledger"),
            ("RecipientsTableName", "tocsin-prod-recipients"),
            ("SendQueueUrl", "https://sqs.eu-west-1.amazonaws.com/1/tocsin-prod-send"),
            ("EscalationQueueUrl", "https://sqs.eu-west-1.amazonaws.com/1/tocsin-prod-escalations"),
        ]);
        let n = StackNames::from_outputs(&o).expect("complete");
        assert_eq!(
            (n.ledger_table.as_str(), n.recipients_table.as_str()),
            ("tocsin-prod-ledger", "tocsin-prod-recipients")
        );
        assert_eq!(queue_name(&n.escalation_queue_url), "tocsin-prod-escalations");
    }

    #[test]
    fn a_missing_output_is_named_never_guessed() {
        let o = outputs(&[("LedgerTableName", "t")]);
        let e = StackNames::from_outputs(&o).expect_err("incomplete");
        assert!(e.to_string().contains("stack tocsin-prod has no output RecipientsTableName"), "{e}");
        assert!(outputs(&[("AlertApiUrl", "")]).require("AlertApiUrl").is_err(), "empty is missing");
    }
}
