//! What an SMS says about itself to a provider that echoes it back: the deployment that sent it,
//! and the alert and attempt it carries (or the storm-mode digest) — **the key, never a guess**.
//!
//! End User Messaging's `SendTextMessage` takes a `Context` map (at most 5 entries; keys 1–100
//! characters without white space, values 1–800 characters) and returns it verbatim in every event
//! of that message. A delivery event that names an intent's key and the attempt that sent it is
//! that attempt's, whatever other SMS the same phone receives. SNS has no such field: under SNS
//! the context travels nowhere and only the message id ties a record to its alert.
//!
//! The entries are namespaced (`tocsin-…`) so another application's context in the same event
//! stream is never read as ours, and carry the stack's name so a second stack's events (if a
//! configuration set were ever shared) are never applied here.

use std::fmt;

use super::digest_id::DigestId;
use super::key::IdempotencyKey;

/// The deployment (CloudFormation stack) that sent the SMS.
pub const STACK: &str = "tocsin-stack";
/// The alert (its idempotency key) an SMS sent alone carries.
pub const KEY: &str = "tocsin-key";
/// The attempt (claim) that sent it: an operator's resend is another attempt of the same alert.
pub const ATTEMPT: &str = "tocsin-attempt";
/// The storm-mode digest an SMS covering several alerts is (its members are on the digest item).
pub const DIGEST: &str = "tocsin-digest";
/// The reply (its `inboundMessageId`) a confirmation SMS answers: it carries no alert.
pub const REPLY: &str = "tocsin-reply";

/// The provider's limits on a context map (End User Messaging's API model).
pub const MAX_ENTRIES: usize = 5;
pub const MAX_KEY_CHARS: usize = 100;
pub const MAX_VALUE_CHARS: usize = 800;

/// What one SMS carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// One alert, sent alone by one attempt.
    Alert { key: IdempotencyKey, attempt: String },
    /// A storm-mode digest: one SMS for every member the digest item lists.
    Digest { id: DigestId },
    /// The confirmation answering a person's reply (its `inboundMessageId`): no alert's fate.
    Reply { inbound: String },
}

/// The context of one SMS: which stack sent it and what it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendContext {
    pub stack: String,
    pub subject: Subject,
}

/// Why an event's context is not a tocsin context this version can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("the context names no tocsin stack")]
    NoStack,
    #[error("the context names neither an alert key nor a digest")]
    NoSubject,
    #[error("the context's {0} is malformed")]
    Malformed(&'static str),
    #[error("the context names more than one of an alert, a digest and a reply")]
    Both,
}

impl SendContext {
    pub fn alert(stack: impl Into<String>, key: IdempotencyKey, attempt: impl Into<String>) -> Self {
        SendContext { stack: stack.into(), subject: Subject::Alert { key, attempt: attempt.into() } }
    }

    pub fn digest(stack: impl Into<String>, id: DigestId) -> Self {
        SendContext { stack: stack.into(), subject: Subject::Digest { id } }
    }

    pub fn reply(stack: impl Into<String>, inbound: impl Into<String>) -> Self {
        SendContext { stack: stack.into(), subject: Subject::Reply { inbound: inbound.into() } }
    }

    /// The entries of the provider's context map (at most [`MAX_ENTRIES`], each within the limits).
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![(STACK, self.stack.clone())];
        match &self.subject {
            Subject::Alert { key, attempt } => {
                out.push((KEY, key.as_str().to_owned()));
                out.push((ATTEMPT, attempt.clone()));
            }
            Subject::Digest { id } => out.push((DIGEST, id.as_str().to_owned())),
            Subject::Reply { inbound } => out.push((REPLY, inbound.clone())),
        }
        out
    }

    /// Reads a context map as an event echoes it. `Ok(None)`: no tocsin entry at all (another
    /// application's message, or one sent without a context); an error: tocsin entries that do not
    /// make a context (never guessed into one).
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Option<Self>, ContextError> {
        let (mut stack, mut key, mut attempt, mut digest, mut reply) = (None, None, None, None, None);
        let mut any = false;
        for (k, v) in entries {
            let slot = match k {
                STACK => &mut stack,
                KEY => &mut key,
                ATTEMPT => &mut attempt,
                DIGEST => &mut digest,
                REPLY => &mut reply,
                _ => continue,
            };
            any = true;
            *slot = Some(v);
        }
        if !any {
            return Ok(None);
        }
        let stack = stack.filter(|s| !s.is_empty()).ok_or(ContextError::NoStack)?;
        if let Some(inbound) = reply {
            return match (key, digest) {
                (None, None) if !inbound.is_empty() && inbound.len() <= MAX_VALUE_CHARS => Ok(Some(SendContext {
                    stack: stack.to_owned(),
                    subject: Subject::Reply { inbound: inbound.to_owned() },
                })),
                (None, None) => Err(ContextError::Malformed(REPLY)),
                _ => Err(ContextError::Both),
            };
        }
        let subject = match (key, attempt, digest) {
            (Some(_), _, Some(_)) => return Err(ContextError::Both),
            (Some(key), Some(attempt), None) if !attempt.is_empty() => Subject::Alert {
                key: IdempotencyKey::parse(key).map_err(|_| ContextError::Malformed(KEY))?,
                attempt: attempt.to_owned(),
            },
            (Some(_), _, None) => return Err(ContextError::Malformed(ATTEMPT)),
            (None, _, Some(id)) => Subject::Digest { id: DigestId::parse(id).ok_or(ContextError::Malformed(DIGEST))? },
            (None, _, None) => return Err(ContextError::NoSubject),
        };
        Ok(Some(SendContext { stack: stack.to_owned(), subject }))
    }

    /// The text a log search looks for to find this SMS's events: the key or the digest id.
    pub fn search_term(&self) -> &str {
        match &self.subject {
            Subject::Alert { key, .. } => key.as_str(),
            Subject::Digest { id } => id.as_str(),
            Subject::Reply { inbound } => inbound,
        }
    }
}

impl fmt::Display for SendContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::Alert { key, attempt } => write!(f, "{}: alert {} attempt {attempt}", self.stack, key.short()),
            Subject::Digest { id } => write!(f, "{}: digest {}", self.stack, id.short()),
            Subject::Reply { inbound } => write!(f, "{}: confirmation of reply {inbound}", self.stack),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> IdempotencyKey {
        IdempotencyKey::parse(&"ab".repeat(32)).expect("key")
    }

    #[test]
    fn a_confirmations_context_names_the_reply_it_answers_and_no_alert() {
        let c = SendContext::reply("tocsin-dev", "cae173d2-66b9-564c-8309-21f858e9fb84");
        let entries = c.entries();
        let back = SendContext::from_entries(entries.iter().map(|(k, v)| (*k, v.as_str()))).expect("readable");
        assert_eq!(back, Some(c));
        let k = key();
        let both = [(STACK, "tocsin-dev"), (REPLY, "in-1"), (KEY, k.as_str())];
        assert_eq!(SendContext::from_entries(both), Err(ContextError::Both));
        assert_eq!(
            SendContext::from_entries([(STACK, "tocsin-dev"), (REPLY, "")]),
            Err(ContextError::Malformed(REPLY))
        );
    }

    #[test]
    fn an_alerts_context_reads_back_as_itself_and_fits_the_providers_limits() {
        let c = SendContext::alert("tocsin-dev", key(), "7f1c0b9e-1f2a-4c4d-9a1e-0e4c8b1d2a3f");
        let entries = c.entries();
        assert!(entries.len() <= MAX_ENTRIES);
        for (k, v) in &entries {
            assert!(!k.is_empty() && k.chars().count() <= MAX_KEY_CHARS && !k.contains(char::is_whitespace));
            assert!(!v.is_empty() && v.chars().count() <= MAX_VALUE_CHARS);
        }
        let back = SendContext::from_entries(entries.iter().map(|(k, v)| (*k, v.as_str()))).expect("reads");
        assert_eq!(back, Some(c));
    }

    #[test]
    fn a_digests_context_names_the_digest_not_a_member() {
        let id = DigestId::derive([&key()]);
        let c = SendContext::digest("tocsin-dev", id.clone());
        assert_eq!(c.search_term(), id.as_str());
        let back = SendContext::from_entries(c.entries().iter().map(|(k, v)| (*k, v.as_str()))).expect("reads");
        assert_eq!(back.map(|c| c.subject), Some(Subject::Digest { id }));
    }

    #[test]
    fn another_applications_context_is_none_and_never_ours() {
        assert_eq!(SendContext::from_entries([("account", "bar"), ("tenant", "7")]), Ok(None));
        assert_eq!(SendContext::from_entries([]), Ok(None));
    }

    #[test]
    fn half_a_tocsin_context_is_an_error_never_a_guess() {
        let k = key();
        assert_eq!(SendContext::from_entries([(KEY, k.as_str()), (ATTEMPT, "a")]), Err(ContextError::NoStack));
        assert_eq!(SendContext::from_entries([(STACK, "s"), (KEY, k.as_str())]), Err(ContextError::Malformed(ATTEMPT)));
        assert_eq!(
            SendContext::from_entries([(STACK, "s"), (KEY, "not-a-key"), (ATTEMPT, "a")]),
            Err(ContextError::Malformed(KEY))
        );
        assert_eq!(SendContext::from_entries([(STACK, "s")]), Err(ContextError::NoSubject));
        assert_eq!(
            SendContext::from_entries([(STACK, "s"), (KEY, k.as_str()), (ATTEMPT, "a"), (DIGEST, k.as_str())]),
            Err(ContextError::Both)
        );
    }
}
