//! The SMS preferences custom resource: configuration, clients, adapters, then the runtime loop.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use sms_preferences::adapters::{HttpResponder, SnsSmsAttributes};
use sms_preferences::{Config, Invocation, Preferences, RetryPolicy, SmsPreferences};
use tocsin::config::Env;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = Config::from_env(&mut Env::from_process())?;
    // Kept, not raised: a misconfigured function still answers CloudFormation (FAILED, naming it).
    let preferences = Preferences::from_env(&mut Env::from_process())
        .inspect_err(|e| tracing::error!(error = %e, "the stack's SMS preferences are misconfigured"));
    let aws = tocsin::adapters::sdk::config().await?;
    let preferences = SmsPreferences {
        sns: SnsSmsAttributes::new(&aws),
        responder: HttpResponder::new()?,
        preferences,
        physical_id: config.physical_id(),
        retry: RetryPolicy::default(),
    };
    let preferences = &preferences;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let invocation = Invocation::from_context(&event.context);
        preferences.handle(event.payload, &invocation).await
    }))
    .await
}
