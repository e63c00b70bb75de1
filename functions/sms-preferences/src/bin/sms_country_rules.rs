//! The country allow-list custom resource (`Custom::SmsCountryRules`): configuration, clients,
//! adapters, then the runtime loop.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use sms_preferences::adapters::{EumProtectConfigurations, HttpResponder};
use sms_preferences::country_rules::{CountryRules, SmsCountryRules};
use sms_preferences::{Config, Invocation, RetryPolicy};
use tocsin::config::Env;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tocsin::telemetry::init();
    let config = Config::from_env(&mut Env::from_process())?;
    // Kept, not raised: a misconfigured function still answers CloudFormation (FAILED, naming it).
    let rules = CountryRules::from_env(&mut Env::from_process())
        .inspect_err(|e| tracing::error!(error = %e, "the stack's country rules are misconfigured"));
    let aws = tocsin::adapters::sdk::config().await?;
    let resource = SmsCountryRules {
        protect: EumProtectConfigurations::new(&aws),
        responder: HttpResponder::new()?,
        rules,
        physical_id: SmsCountryRules::<EumProtectConfigurations, HttpResponder>::physical_id_in(&config.region),
        retry: RetryPolicy::default(),
    };
    let resource = &resource;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let invocation = Invocation::from_context(&event.context);
        resource.handle(event.payload, &invocation).await
    }))
    .await
}
