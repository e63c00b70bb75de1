//! What every command shares: the stack's resource names and the AWS clients, built once from the
//! standard AWS environment (credentials chain, AWS_REGION, AWS_ENDPOINT_URL for an emulator).

use aws_config::SdkConfig;
use tocsin::adapters::dynamodb::DynamoLedger;
use tocsin::adapters::registry::DynamoRegistry;

use crate::error::{CliError, CliResult};

/// The stack's resource names, as `template.yaml` derives them from the stack name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackNames {
    pub stack: String,
    pub ledger_table: String,
    pub recipients_table: String,
    pub send_queue: String,
    pub escalation_queue: String,
}

impl StackNames {
    pub fn of(stack: &str) -> Self {
        StackNames {
            stack: stack.to_owned(),
            ledger_table: format!("{stack}-ledger"),
            recipients_table: format!("{stack}-recipients"),
            send_queue: format!("{stack}-send"),
            escalation_queue: format!("{stack}-escalations"),
        }
    }
}

pub struct Context {
    pub names: StackNames,
    pub json: bool,
    /// Kept for the one client built per command (SNS, whose timeout is a resend option).
    pub sdk: SdkConfig,
    pub ledger: DynamoLedger,
    pub registry: DynamoRegistry,
    pub sqs: aws_sdk_sqs::Client,
    pub sts: aws_sdk_sts::Client,
}

impl Context {
    /// Loads the AWS configuration from the environment and builds the clients.
    pub async fn connect(stack: &str, json: bool) -> CliResult<Self> {
        let sdk = aws_config::load_from_env().await;
        if sdk.region().is_none() {
            return Err(CliError::Usage(
                "no AWS region: set AWS_REGION (or use a profile that has one, via AWS_PROFILE)".into(),
            ));
        }
        let names = StackNames::of(stack);
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        Ok(Context {
            ledger: DynamoLedger::new(dynamodb.clone(), &names.ledger_table),
            registry: DynamoRegistry::new(dynamodb, &names.recipients_table),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            sts: aws_sdk_sts::Client::new(&sdk),
            names,
            json,
            sdk,
        })
    }

    /// A queue's URL from its name (SQS GetQueueUrl).
    pub async fn queue_url(&self, name: &str) -> CliResult<String> {
        let out = self.sqs.get_queue_url().queue_name(name).send().await.map_err(|e| CliError::Aws {
            operation: "SQS GetQueueUrl",
            message: format!("queue {name}: {}", crate::error::describe(&e)),
        })?;
        out.queue_url
            .ok_or_else(|| CliError::Aws { operation: "SQS GetQueueUrl", message: format!("no URL for {name}") })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_follow_the_template() {
        let n = StackNames::of("tocsin-prod");
        assert_eq!(
            (n.ledger_table.as_str(), n.recipients_table.as_str(), n.send_queue.as_str(), n.escalation_queue.as_str()),
            ("tocsin-prod-ledger", "tocsin-prod-recipients", "tocsin-prod-send", "tocsin-prod-escalations")
        );
    }
}
