//! A provider's refusal of a send, by whose problem it is, and what it does to the alert: the
//! same whoever sent (the sender, an operator's resend) and whichever provider refused.
//!
//! SNS accepts a publish to an opted-out number and reports the failure later in its logs; End
//! User Messaging refuses the send itself (`ConflictException` `DESTINATION_PHONE_NUMBER_OPTED_OUT`)
//! and its spend limit (`ServiceQuotaExceededException` `MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT`).
//! Either way the number, the alert and on-call learn the same thing a delivery record would
//! have told them.

use super::State;
use super::storm::AccountSpendExhausted;

/// Whose problem a provider's refusal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This message cannot go as it is (a parameter, the price cap): the alert fails.
    Message,
    /// The recipient has opted out: the number is suppressed at once and the alert escalated, as
    /// a permanent failure record would.
    Recipient,
    /// The account's monthly SMS spend limit is reached: no SMS goes out for anyone. The number is
    /// fine; the alert fails and on-call is paged through a channel that is not SMS.
    SpendLimit,
    /// The account or the deployment cannot send at all now (the sandbox, an origination identity
    /// that is missing or inactive, access denied): the alert fails and on-call is paged.
    Account,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Message => "message",
            Refusal::Recipient => "recipient",
            Refusal::SpendLimit => "spend_limit",
            Refusal::Account => "account",
        }
    }

    /// The state the alert moves to.
    pub fn state(self) -> State {
        match self {
            Refusal::Recipient => State::Suppressed,
            Refusal::Message | Refusal::SpendLimit | Refusal::Account => State::Failed,
        }
    }

    /// What the alert records as its error (and its escalation repeats to on-call).
    pub fn reason(self, error: &str) -> String {
        match self {
            Refusal::Message => format!("the provider refused this message: {error}"),
            Refusal::Recipient => {
                format!("the number has opted out at the provider (the person replied STOP): {error}")
            }
            Refusal::SpendLimit => format!(
                "{} ({error}); no SMS goes out until the limit is raised, and the number stays enabled",
                AccountSpendExhausted::REASON
            ),
            Refusal::Account => {
                format!("the account cannot send SMS now (sandbox, origination identity, access): {error}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_opted_out_recipient_suppresses_and_every_other_refusal_fails_the_alert() {
        assert_eq!(Refusal::Recipient.state(), State::Suppressed);
        for r in [Refusal::Message, Refusal::SpendLimit, Refusal::Account] {
            assert_eq!(r.state(), State::Failed, "{r:?}");
        }
        assert!(Refusal::SpendLimit.reason("x").contains("number stays enabled"));
    }
}
