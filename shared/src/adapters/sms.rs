//! The deployment's SMS provider, chosen once in `main.rs` from its configuration: one type for
//! the handlers (generic over [`SmsGateway`] and [`DeliveryLogSearch`]) whichever provider is
//! deployed. The handlers never ask which: what differs between the providers is what their
//! records say (a key in End User Messaging's context, only a message id in SNS's logs), and the
//! records say it themselves.

use std::time::Duration;

use crate::adapters::eum::{EumEventSearch, EumGateway};
use crate::adapters::sns::{CloudWatchLogsSearch, SnsGateway};
use crate::config::{DeliveryLogs, SendingProvider};
use crate::domain::PhoneNumber;
use crate::domain::reconcile::{Found, Window};
use crate::ports::{
    DeliveryLogSearch, OptIn, PortResult, PublishOutcome, SearchError, SearchFor, SmsGateway, SmsMessage,
};

/// Sends through the deployed provider.
#[derive(Clone, Debug)]
pub enum SmsProvider {
    Sns(SnsGateway),
    EndUserMessaging(EumGateway),
}

impl SmsProvider {
    pub fn new(sdk: &aws_config::SdkConfig, provider: &SendingProvider, send_timeout: Duration) -> Self {
        match provider {
            SendingProvider::Sns => SmsProvider::Sns(SnsGateway::new(sdk, send_timeout)),
            SendingProvider::EndUserMessaging(settings) => {
                SmsProvider::EndUserMessaging(EumGateway::new(sdk, send_timeout, settings.clone()))
            }
        }
    }
}

impl SmsGateway for SmsProvider {
    fn records_name_their_alert(&self) -> bool {
        match self {
            SmsProvider::Sns(g) => g.records_name_their_alert(),
            SmsProvider::EndUserMessaging(g) => g.records_name_their_alert(),
        }
    }

    async fn publish(&self, message: SmsMessage<'_>) -> PublishOutcome {
        match self {
            SmsProvider::Sns(g) => g.publish(message).await,
            SmsProvider::EndUserMessaging(g) => g.publish(message).await,
        }
    }

    async fn is_opted_out(&self, recipient: &PhoneNumber) -> PortResult<bool> {
        match self {
            SmsProvider::Sns(g) => g.is_opted_out(recipient).await,
            SmsProvider::EndUserMessaging(g) => g.is_opted_out(recipient).await,
        }
    }

    async fn opt_in(&self, recipient: &PhoneNumber) -> PortResult<OptIn> {
        match self {
            SmsProvider::Sns(g) => g.opt_in(recipient).await,
            SmsProvider::EndUserMessaging(g) => g.opt_in(recipient).await,
        }
    }
}

/// Searches the deployed provider's delivery logs.
#[derive(Clone, Debug)]
pub enum ProviderLogs {
    Sns(CloudWatchLogsSearch),
    EndUserMessaging(EumEventSearch),
}

impl ProviderLogs {
    pub fn new(client: aws_sdk_cloudwatchlogs::Client, logs: &DeliveryLogs) -> Self {
        match logs {
            DeliveryLogs::Sns { success_group, failure_group } => {
                ProviderLogs::Sns(CloudWatchLogsSearch::new(client, success_group, failure_group))
            }
            DeliveryLogs::EndUserMessaging { event_group, stack } => {
                ProviderLogs::EndUserMessaging(EumEventSearch::new(client, event_group, stack))
            }
        }
    }
}

impl DeliveryLogSearch for ProviderLogs {
    async fn records_for(&self, what: SearchFor<'_>, window: Window, max: usize) -> Result<Vec<Found>, SearchError> {
        match self {
            ProviderLogs::Sns(s) => s.records_for(what, window, max).await,
            ProviderLogs::EndUserMessaging(s) => s.records_for(what, window, max).await,
        }
    }
}
