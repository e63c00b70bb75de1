//! Where a person's STOP is kept, per SMS provider, for `re-enable`: SNS's account-wide opt-out
//! list (CheckIfPhoneNumberIsOptedOut), or the stack's End User Messaging
//! opt-out list (DescribeOptedOutNumbers); only the sender takes a number off either (OptInPhoneNumber /
//! DeleteOptedOutNumber), when an operator's audited re-enable asked it to. Either provider drops or refuses
//! every SMS to a number on its list, whatever tocsin's registry says; both let an account take a
//! number off its list only once per 30 days, so the person replying START is the usual way back.

use aws_sdk_pinpointsmsvoicev2 as sms;
use tocsin::adapters::eum::is_in_opt_out_list;
use tocsin::config::SendingProvider;
use tocsin::domain::PhoneNumber;

use crate::context::Context;
use crate::error::{CliError, CliResult};

/// The opt-out list the stack's SMS provider consults before each send.
pub enum OptOutList {
    /// SNS's, one per account and region.
    Sns(aws_sdk_sns::Client),
    /// The stack's End User Messaging list (`SmsOptOutListName`), shared with its origination
    /// identities: a STOP to any of them lands here.
    EndUserMessaging { client: sms::Client, name: String },
}

impl OptOutList {
    pub fn of(ctx: &Context) -> CliResult<Self> {
        Ok(match ctx.sending_provider()? {
            SendingProvider::Sns => OptOutList::Sns(aws_sdk_sns::Client::new(&ctx.sdk)),
            SendingProvider::EndUserMessaging(eum) => {
                OptOutList::EndUserMessaging { client: sms::Client::new(&ctx.sdk), name: eum.opt_out_list }
            }
        })
    }

    /// How the list is named to a person: "SNS" or "End User Messaging opt-out list NAME".
    pub fn describe(&self) -> String {
        match self {
            OptOutList::Sns(_) => "SNS".to_owned(),
            OptOutList::EndUserMessaging { name, .. } => format!("End User Messaging opt-out list {name}"),
        }
    }

    /// The call that takes a number off the list, for messages.
    pub fn opt_in_call(&self) -> &'static str {
        match self {
            OptOutList::Sns(_) => "SNS OptInPhoneNumber",
            OptOutList::EndUserMessaging { .. } => "End User Messaging DeleteOptedOutNumber",
        }
    }

    pub async fn holds(&self, phone: &PhoneNumber) -> CliResult<bool> {
        match self {
            OptOutList::Sns(sns) => Ok(sns
                .check_if_phone_number_is_opted_out()
                .phone_number(phone.expose())
                .send()
                .await
                .map_err(CliError::aws("SNS CheckIfPhoneNumberIsOptedOut"))?
                .is_opted_out),
            OptOutList::EndUserMessaging { client, name } => is_in_opt_out_list(client, name, phone)
                .await
                .map_err(CliError::port(format!("reading opt-out list {name}"))),
        }
    }
}
