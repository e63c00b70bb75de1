//! Giving a reply code (issue 37): read what the phone holds, pick the code
//! ([`next_code`]), take it with the store's conditional write; when another sender took it
//! first, read again and take the next. The subject that already holds an open code keeps it and
//! nothing is written (a retried send shows the code its first attempt gave).

use chrono::{DateTime, Utc};

use crate::domain::PhoneNumber;
use crate::domain::reply::code::next_code;
use crate::domain::reply::{AckSubject, ReplyCode};
use crate::ports::{PortError, ReplyCodes};

/// Reads and conditional writes before giving up. Each lost race means another sender took a code
/// for the same phone in between, so with N senders at once on one phone the last loses at most
/// N - 1 times: a sender's batch of ten to one person on each of a few instances stays well
/// within this (found by CI: 8 was too few for twelve at once).
pub const GIVE_ATTEMPTS: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum GiveError {
    #[error("every reply code 1–{} of the phone belongs to an open alert", ReplyCode::MAX)]
    Exhausted,
    #[error("another sender took the chosen reply code {GIVE_ATTEMPTS} times in a row")]
    Contended,
    #[error(transparent)]
    Port(#[from] PortError),
}

/// The code `subject` shows on `phone`, given at `now` if it holds none; the phone's codes are
/// kept until `expires_at`.
pub async fn give_code<R: ReplyCodes>(
    store: &R,
    phone: &PhoneNumber,
    subject: &AckSubject,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<ReplyCode, GiveError> {
    for _ in 0..GIVE_ATTEMPTS {
        let held = store.held_codes(phone).await?;
        let code = next_code(&held, subject, now).ok_or(GiveError::Exhausted)?;
        if held.iter().any(|h| h.is_open() && h.code == code && &h.subject == subject) {
            return Ok(code);
        }
        if store.give_code(phone, code, subject, now, expires_at).await? {
            return Ok(code);
        }
    }
    Err(GiveError::Contended)
}
