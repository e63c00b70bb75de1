//! The deployment's SMS policy at send time: a request's price cap never above the ceiling, its
//! sender id and origination number only from the allow-lists. Intake refused what the policy
//! refuses when the alert came in; this applies the policy as it is *now*, so an intent written
//! before the deployment tightened it goes out within the new one (the deployment's own settings
//! in place of what is no longer allowed).

use crate::{Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::IdempotencyKey;
use tocsin::domain::intent::SmsOptions;
use tocsin::ports::{RecipientRegistry, RecipientRoster, SmsGateway};

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// The settings an intent's SMS goes out with.
    pub(crate) fn within_policy(&self, key: &IdempotencyKey, requested: &SmsOptions) -> SmsOptions {
        let effective = self.config.sms_policy.effective(requested);
        for refusal in &effective.overruled {
            tracing::warn!(
                key = key.short(),
                field = refusal.field(),
                why = %refusal,
                "the intent's own SMS setting is outside the deployment's policy now; sent with the deployment's"
            );
        }
        effective.options
    }
}
