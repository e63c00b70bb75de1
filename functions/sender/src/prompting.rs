//! The reply code an SMS shows (issue 37). When the stack takes replies (`TOCSIN_REPLIES=on`),
//! the alert — or the digest, one code for everything it carries — is given a code on its phone
//! before its SMS goes out, the SMS ends with " - Reply 7 to ack", and once the provider accepted
//! it the code is marked sent (a bare "ack" reaches only an SMS that went out).
//!
//! A code that cannot be shown never stops an alert: a phone whose every code is taken, or a text
//! with no room left for the prompt (an intent accepted before replies were on), goes out without
//! the prompt — the code, when given, still answers a bare "ack". Only a ledger that cannot be
//! reached stops the send: the claim goes back unsent, as for the spend meter.

use chrono::{DateTime, Utc};

use crate::{Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::PhoneNumber;
use tocsin::domain::reply::code::{OPEN_FOR, REUSE_AFTER};
use tocsin::domain::reply::{AckSubject, ReplyCode};
use tocsin::domain::segments::measure;
use tocsin::ports::{PortError, PublishOutcome, RecipientRegistry, RecipientRoster, SmsGateway};
use tocsin::services::reply_codes::{GiveError, give_code};

/// An SMS's text as sent, and the code it shows (if any).
pub(crate) struct Prompted {
    pub text: String,
    pub code: Option<ReplyCode>,
}

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// `body` with its reply prompt (`prompt(code)`) when the stack takes replies and the text
    /// still fits the `parts` already counted for it.
    pub(crate) async fn prompted(
        &self,
        to: &PhoneNumber,
        subject: &AckSubject,
        body: &str,
        prompt: impl Fn(ReplyCode) -> String,
        parts: u32,
        now: DateTime<Utc>,
    ) -> Result<Prompted, PortError> {
        let plain = || Prompted { text: body.to_owned(), code: None };
        if !self.config.replies {
            return Ok(plain());
        }
        // The phone's codes outlive the longest any of them answers and stays out of use.
        let keep_until = now + OPEN_FOR + REUSE_AFTER + chrono::Duration::days(1);
        let code = match give_code(&self.store, to, subject, now, keep_until).await {
            Ok(code) => code,
            Err(GiveError::Port(e)) => return Err(e),
            Err(e @ (GiveError::Exhausted | GiveError::Contended)) => {
                tracing::warn!(recipient = %to.masked(), error = %e, "no reply code for this SMS; sent without the prompt");
                return Ok(plain());
            }
        };
        let text = format!("{body}{}", prompt(code));
        if measure(&text).segments > parts {
            tracing::warn!(recipient = %to.masked(), code = code.get(), parts, "no room for the reply prompt; sent without it (a bare \"ack\" still reaches it)");
            return Ok(Prompted { text: body.to_owned(), code: Some(code) });
        }
        Ok(Prompted { text, code: Some(code) })
    }

    /// Marks `code` sent once the provider accepted its SMS. A failure only costs a bare "ack"
    /// this SMS (the code typed still reaches it), so it is logged, never retried at the send's
    /// expense.
    pub(crate) async fn code_went_out(
        &self,
        to: &PhoneNumber,
        subject: &AckSubject,
        code: Option<ReplyCode>,
        outcome: &PublishOutcome,
    ) {
        let (Some(code), PublishOutcome::Accepted { .. }) = (code, outcome) else {
            return;
        };
        match self.store.code_sent(to, code, subject, self.clock.now()).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(recipient = %to.masked(), code = code.get(), "reply code closed before its SMS was marked sent")
            }
            Err(e) => {
                tracing::warn!(recipient = %to.masked(), code = code.get(), error = %e, "reply code not marked sent; a bare \"ack\" will not reach this SMS")
            }
        }
    }
}
