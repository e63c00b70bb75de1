//! How one inbound reply ended: named for the metrics (`tocsin`/`function=replies`) and the log.

/// What became of one reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged these alerts now (a digest's code reaches every member).
    Acknowledged { alerts: usize },
    /// Everything it reached was acknowledged before (by this reply retried, or someone else).
    AlreadyAcknowledged,
    /// Its code's alert had closed (acknowledged, or the code lapsed): nothing to do.
    AlreadyClosed,
    /// No alert this phone was sent holds the code.
    UnknownCode,
    /// A bare "ack" or "ack all" with no open alert this phone was sent.
    NothingOpen,
    /// A bare "ack" or "ack all" while its open alerts are not known to have reached the phone:
    /// the person is asked for the code (no guess).
    AskedForCode,
    /// The number holds no reply code of this stack: not a recipient; nothing changes.
    NotARecipient,
    /// STOP and its kin: the number is suppressed; `paged` when it is someone tocsin pages (it
    /// holds a reply code, or the roster names it): on-call is told at once.
    OptedOut { paged: bool },
    /// START / UNSTOP: said in the log; re-enabling stays the audited `tocsin re-enable`.
    OptedIn,
    /// HELP / INFO: End User Messaging answers with the number's HELP response.
    Help,
    /// Nothing tocsin understands (a tapback, "on it", a picture).
    Unrecognized,
    /// Not a two-way payload (kept: the record fails and reaches the dead-letter queue).
    Malformed(String),
    /// A store was unavailable: the record is retried (every step is idempotent).
    Retry(String),
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Acknowledged { .. } => "reply_acknowledged",
            Outcome::AlreadyAcknowledged => "reply_already_acknowledged",
            Outcome::AlreadyClosed => "reply_already_closed",
            Outcome::UnknownCode => "reply_unknown_code",
            Outcome::NothingOpen => "reply_nothing_open",
            Outcome::AskedForCode => "reply_asked_for_code",
            Outcome::NotARecipient => "reply_not_a_recipient",
            Outcome::OptedOut { paged: true } => "reply_opted_out",
            Outcome::OptedOut { paged: false } => "reply_opted_out_not_a_recipient",
            Outcome::OptedIn => "reply_opted_in",
            Outcome::Help => "reply_help",
            Outcome::Unrecognized => "reply_unrecognized",
            Outcome::Malformed(_) => "reply_malformed",
            Outcome::Retry(_) => "reply_retry",
        }
    }

    /// Whether the record goes back to the queue (retried, then the dead-letter queue).
    pub fn unfinished(&self) -> bool {
        matches!(self, Outcome::Malformed(_) | Outcome::Retry(_))
    }
}
