//! Reply codes: the number an SMS asks its reader to text back ("Reply 7 to ack"), one per open
//! alert (or digest: one code acknowledges everything the SMS carried) per phone.
//!
//! - **Never two open alerts with one code on one phone.** The adapter gives a code with a
//!   conditional write on the phone's codes item, so two senders (digest members, concurrent
//!   batches) cannot both take it; this module says which code to try.
//! - **Small.** Codes start at 1 and a phone rarely holds more than a few: typed on a lock screen.
//! - **Given again only after its alert closed, and not soon after.** A code stays out of use for
//!   [`REUSE_AFTER`] once its alert closed, so a late or repeated reply "7" meant for yesterday's
//!   alert cannot acknowledge tonight's; only a phone holding [`COMMON_CODES`] codes at once
//!   goes to three digits, and only when even those are taken does a recently closed code come
//!   back (the longest-closed first).
//! - **A reply reaches only what its phone received before it replied.** A code reaches its alert
//!   if the code was given before the reply arrived (the SMS showing it can have been read; a reply
//!   naming it proves the SMS arrived even when the send's outcome is unknown). A bare "ack" or
//!   "ack all" names nothing, so it reaches only alerts whose SMS is *known* to have reached the
//!   phone before the reply arrived (its delivery receipt says so): "ack" the most recently sent
//!   open alert, and only when that one is known delivered — else the person is asked for the code
//!   rather than tocsin guessing which alert was read (a guess could silence one nobody saw).

use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::command::AckTarget;
use crate::domain::digest_id::DigestId;
use crate::domain::key::IdempotencyKey;

/// A reply code: 1 to [`ReplyCode::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct ReplyCode(u16);

impl ReplyCode {
    pub const MAX: u16 = 999;
    /// The highest code (the longest prompt).
    pub const HIGHEST: ReplyCode = ReplyCode(Self::MAX);

    pub fn new(n: u16) -> Option<Self> {
        (1..=Self::MAX).contains(&n).then_some(Self(n))
    }

    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for ReplyCode {
    type Error = String;
    fn try_from(n: u16) -> Result<Self, String> {
        Self::new(n).ok_or_else(|| format!("a reply code is 1 to {}, not {n}", Self::MAX))
    }
}

impl From<ReplyCode> for u16 {
    fn from(c: ReplyCode) -> u16 {
        c.0
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The codes tried before three digits: a phone holding this many open codes is in a storm.
pub const COMMON_CODES: u16 = 99;

/// How long a closed alert's code stays out of use.
pub const REUSE_AFTER: Duration = Duration::hours(24);

/// How long before a reply's arrival its SMS must have been delivered for a bare "ack" to reach
/// it: a person reads an SMS and types an answer, and the answer crosses the carrier and AWS,
/// before tocsin sees it. An SMS delivered in the seconds before the reply arrived was most
/// likely not the one answered (the person was already typing): it is not guessed into one.
pub const READ_AND_REPLY: Duration = Duration::seconds(10);

/// Whether an SMS delivered at `delivered_at` was on the phone, readable, before a reply that
/// arrived at `received_at` was written ([`READ_AND_REPLY`]).
pub fn read_before(delivered_at: DateTime<Utc>, received_at: DateTime<Utc>) -> bool {
    delivered_at + READ_AND_REPLY <= received_at
}

/// How long a code answers at most: a day after it was given it closes by itself (an alert a day
/// old is no longer paging anyone, and a phone that is never answered must not run out of small
/// codes), then stays out of use [`REUSE_AFTER`] like any closed code.
pub const OPEN_FOR: Duration = Duration::hours(24);

/// What a code acknowledges: one alert, or every member of the digest whose SMS showed it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckSubject {
    Alert(IdempotencyKey),
    Digest(DigestId),
}

/// One code a phone holds, or held until recently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCode {
    pub code: ReplyCode,
    pub subject: AckSubject,
    /// When the sender gave it (before the SMS showing it was sent).
    pub given_at: DateTime<Utc>,
    /// When the provider accepted the SMS showing it; `None` while that is not known.
    pub sent_at: Option<DateTime<Utc>>,
    /// When its alert closed (acknowledged, or its chain ended); `None` while open.
    pub closed_at: Option<DateTime<Utc>>,
}

impl HeldCode {
    /// Not closed in the store (it may still have lapsed: see [`Self::answers_at`]).
    pub fn is_open(&self) -> bool {
        self.closed_at.is_none()
    }

    /// When the code stopped answering: when its alert closed, or [`OPEN_FOR`] after it was
    /// given, whichever came first.
    pub fn ended_at(&self) -> DateTime<Utc> {
        let lapses = self.given_at + OPEN_FOR;
        self.closed_at.map_or(lapses, |closed| closed.min(lapses))
    }

    /// Whether a reply arriving at `now` can still reach the code's alert.
    pub fn answers_at(&self, now: DateTime<Utc>) -> bool {
        now < self.ended_at()
    }

    /// Whether the code is still out of use at `now`: answering, or ended less than
    /// [`REUSE_AFTER`] ago.
    fn blocks(&self, now: DateTime<Utc>) -> bool {
        now < self.ended_at() + REUSE_AFTER
    }
}

/// The code for a new alert to a phone holding `held`, at `now`; `None` when every code
/// 1–[`ReplyCode::MAX`] belongs to an open alert. A subject that already holds an open code keeps
/// it (a retried send shows the same code).
pub fn next_code(held: &[HeldCode], subject: &AckSubject, now: DateTime<Utc>) -> Option<ReplyCode> {
    if let Some(mine) = held.iter().find(|h| h.answers_at(now) && &h.subject == subject) {
        return Some(mine.code);
    }
    let blocked = |n: u16| held.iter().any(|h| h.code.get() == n && h.blocks(now));
    let open = |n: u16| held.iter().any(|h| h.code.get() == n && h.answers_at(now));
    if let Some(n) = (1..=ReplyCode::MAX).find(|&n| !blocked(n)) {
        return ReplyCode::new(n);
    }
    // Every code is open or recently closed: the longest-closed comes back first.
    held.iter().filter(|h| !open(h.code.get())).min_by_key(|h| (h.ended_at(), h.code)).map(|h| h.code)
}

/// What a reply reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// These subjects, each once (a digest and one of its members' own code are both possible).
    Acknowledge(Vec<AckSubject>),
    /// The code's alert had already closed: nothing to do but say so.
    AlreadyClosed(AckSubject),
    /// No alert this phone was sent before replying holds the code.
    UnknownCode(ReplyCode),
    /// A bare "ack" or "ack all" with no open alert this phone was sent.
    NothingOpen,
    /// A bare "ack" or "ack all" while the phone's open alerts (these codes, lowest first) are
    /// not known to have reached it: which one was read is not guessed.
    AskForCode(Vec<ReplyCode>),
}

/// Which of a phone's held codes a reply arriving at `received_at` reaches. `arrived`: whether a
/// subject's SMS is known to have reached the phone by then (its delivery receipt); asked only of
/// open codes whose SMS was sent before the reply arrived ([`awaiting_arrival`]), and only for a
/// bare "ack" or "ack all".
pub fn resolve(
    target: AckTarget,
    held: &[HeldCode],
    received_at: DateTime<Utc>,
    arrived: impl Fn(&AckSubject) -> bool,
) -> Resolution {
    let answering = |h: &&HeldCode| h.answers_at(received_at);
    let sent_before = |h: &&HeldCode| answering(h) && h.sent_at.is_some_and(|sent| sent <= received_at);
    let ask = |open: Vec<&HeldCode>| {
        let mut codes: Vec<ReplyCode> = open.into_iter().map(|h| h.code).collect();
        codes.sort();
        codes.dedup();
        if codes.is_empty() { Resolution::NothingOpen } else { Resolution::AskForCode(codes) }
    };
    match target {
        AckTarget::Code(code) => {
            let given = |h: &&HeldCode| h.code == code && h.given_at <= received_at;
            if let Some(open) = held.iter().filter(answering).find(given) {
                return Resolution::Acknowledge(vec![open.subject.clone()]);
            }
            held.iter()
                .filter(given)
                .max_by_key(|h| h.ended_at())
                .map_or(Resolution::UnknownCode(code), |closed| Resolution::AlreadyClosed(closed.subject.clone()))
        }
        AckTarget::Latest => match held.iter().filter(sent_before).max_by_key(|h| (h.sent_at, h.given_at, h.code)) {
            Some(latest) if arrived(&latest.subject) => Resolution::Acknowledge(vec![latest.subject.clone()]),
            _ => ask(held.iter().filter(sent_before).collect()),
        },
        AckTarget::All => {
            let mut all: Vec<&HeldCode> = held.iter().filter(sent_before).collect();
            all.sort_by_key(|h| h.code);
            let subjects: Vec<AckSubject> =
                all.iter().filter(|h| arrived(&h.subject)).map(|h| h.subject.clone()).collect();
            if subjects.is_empty() { ask(all) } else { Resolution::Acknowledge(subjects) }
        }
    }
}

/// The subjects whose arrival [`resolve`] may ask about for a reply arriving at `received_at`:
/// open, and sent before it arrived. What the caller looks up (a delivery receipt each), no more.
pub fn awaiting_arrival(held: &[HeldCode], received_at: DateTime<Utc>) -> Vec<&AckSubject> {
    held.iter()
        .filter(|h| h.answers_at(received_at) && h.sent_at.is_some_and(|sent| sent <= received_at))
        .map(|h| &h.subject)
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use proptest::prelude::*;

    use super::*;

    fn t(minute: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 5, 3, 0, 0).single().expect("a valid time") + Duration::minutes(minute)
    }

    fn alert(n: u8) -> AckSubject {
        AckSubject::Alert(IdempotencyKey::parse(&format!("{n:02x}").repeat(32)).expect("a key"))
    }

    fn held(code: u16, subject: AckSubject, given: i64, sent: Option<i64>, closed: Option<i64>) -> HeldCode {
        HeldCode {
            code: ReplyCode::new(code).expect("a code"),
            subject,
            given_at: t(given),
            sent_at: sent.map(t),
            closed_at: closed.map(t),
        }
    }

    /// Every SMS known to have reached the phone; none known to.
    fn all(_: &AckSubject) -> bool {
        true
    }
    fn none(_: &AckSubject) -> bool {
        false
    }

    fn code(n: u16) -> ReplyCode {
        ReplyCode::new(n).expect("a code")
    }

    #[test]
    fn a_phone_with_no_codes_starts_at_one_and_the_next_alert_takes_the_next_free_code() {
        assert_eq!(next_code(&[], &alert(1), t(0)), Some(code(1)));
        let h = [held(1, alert(1), 0, Some(0), None), held(3, alert(3), 0, Some(0), None)];
        assert_eq!(next_code(&h, &alert(2), t(1)), Some(code(2)));
    }

    #[test]
    fn an_alert_that_already_holds_a_code_keeps_it_when_its_send_is_retried() {
        let h = [held(1, alert(1), 0, None, None), held(2, alert(2), 0, None, None)];
        assert_eq!(next_code(&h, &alert(2), t(1)), Some(code(2)));
    }

    #[test]
    fn a_closed_alerts_code_is_given_again_only_a_day_after_it_closed() {
        let h = [held(1, alert(1), 0, Some(0), Some(10))];
        assert_eq!(next_code(&h, &alert(2), t(11)), Some(code(2)), "closed a minute ago: not yet");
        assert_eq!(next_code(&h, &alert(2), t(10) + REUSE_AFTER), Some(code(1)), "a day later: again");
    }

    #[test]
    fn only_when_every_code_is_taken_does_a_recently_closed_one_come_back_the_longest_closed_first() {
        let mut h: Vec<HeldCode> =
            (1..=ReplyCode::MAX).map(|n| held(n, alert((n % 250) as u8), 0, Some(0), None)).collect();
        assert_eq!(next_code(&h, &alert(251), t(5)), None, "all open: no code");
        h[40].closed_at = Some(t(3));
        h[7].closed_at = Some(t(2));
        assert_eq!(next_code(&h, &alert(251), t(5)), Some(code(8)));
    }

    #[test]
    fn a_code_reaches_its_open_alert_even_when_the_sends_outcome_is_unknown() {
        let h = [held(7, alert(7), 0, None, None)];
        assert_eq!(resolve(AckTarget::Code(code(7)), &h, t(1), none), Resolution::Acknowledge(vec![alert(7)]));
    }

    #[test]
    fn a_code_given_after_the_reply_arrived_is_not_reached_by_it() {
        let h = [held(7, alert(7), 5, Some(5), None)];
        assert_eq!(resolve(AckTarget::Code(code(7)), &h, t(4), none), Resolution::UnknownCode(code(7)));
    }

    #[test]
    fn a_code_whose_alert_closed_says_so_and_acknowledges_nothing() {
        let h = [held(7, alert(7), 0, Some(0), Some(3))];
        assert_eq!(resolve(AckTarget::Code(code(7)), &h, t(9), none), Resolution::AlreadyClosed(alert(7)));
        assert_eq!(resolve(AckTarget::Code(code(8)), &h, t(9), none), Resolution::UnknownCode(code(8)));
    }

    #[test]
    fn a_bare_ack_reaches_the_most_recently_sent_open_alert_and_never_an_unsent_one() {
        let h = [
            held(1, alert(1), 0, Some(1), None),
            held(2, alert(2), 2, Some(4), None),
            held(3, alert(3), 3, None, None),
            held(4, alert(4), 5, Some(6), Some(7)),
            held(5, alert(5), 8, Some(9), None),
        ];
        assert_eq!(resolve(AckTarget::Latest, &h, t(8), all), Resolution::Acknowledge(vec![alert(2)]));
        assert_eq!(resolve(AckTarget::Latest, &h, t(0), all), Resolution::NothingOpen);
    }

    #[test]
    fn a_bare_ack_never_guesses_an_alert_not_known_to_have_reached_the_phone_it_asks_for_the_code() {
        let h = [held(1, alert(1), 0, Some(1), None), held(2, alert(2), 2, Some(4), None)];
        // Alert 2, the latest, has no delivery receipt yet: not alert 1 (maybe not the one read),
        // not alert 2 (maybe not received): the code, please.
        let only_1 = |s: &AckSubject| *s == alert(1);
        assert_eq!(resolve(AckTarget::Latest, &h, t(8), only_1), Resolution::AskForCode(vec![code(1), code(2)]));
        assert_eq!(resolve(AckTarget::Latest, &h, t(8), none), Resolution::AskForCode(vec![code(1), code(2)]));
        // "ack all": what is known to have arrived, nothing else.
        assert_eq!(resolve(AckTarget::All, &h, t(8), only_1), Resolution::Acknowledge(vec![alert(1)]));
        assert_eq!(resolve(AckTarget::All, &h, t(8), none), Resolution::AskForCode(vec![code(1), code(2)]));
        // A code needs no receipt: typing it proves the SMS was read.
        assert_eq!(resolve(AckTarget::Code(code(2)), &h, t(8), none), Resolution::Acknowledge(vec![alert(2)]));
        assert_eq!(awaiting_arrival(&h, t(3)), vec![&alert(1)], "only what was sent before the reply arrived");
    }

    #[test]
    fn an_sms_delivered_in_the_seconds_before_a_reply_arrived_was_not_the_one_answered() {
        assert!(read_before(t(0), t(0) + READ_AND_REPLY));
        assert!(!read_before(t(0), t(0) + READ_AND_REPLY - Duration::milliseconds(1)));
    }

    #[test]
    fn ack_all_reaches_every_open_alert_sent_before_the_reply_and_nothing_else() {
        let digest = AckSubject::Digest(DigestId::derive([&IdempotencyKey::parse(&"ab".repeat(32)).expect("key")]));
        let h = [
            held(1, alert(1), 0, Some(1), None),
            held(2, digest.clone(), 2, Some(4), None),
            held(3, alert(3), 3, None, None),
            held(4, alert(4), 5, Some(6), Some(7)),
            held(5, alert(5), 8, Some(9), None),
        ];
        assert_eq!(resolve(AckTarget::All, &h, t(8), all), Resolution::Acknowledge(vec![alert(1), digest]));
        assert_eq!(resolve(AckTarget::All, &[], t(8), all), Resolution::NothingOpen);
    }

    #[test]
    fn a_code_nobody_answered_lapses_a_day_after_it_was_given_and_is_reused_a_day_later() {
        let h = [held(1, alert(1), 0, Some(0), None)];
        let lapsed = t(0) + OPEN_FOR;
        assert_eq!(
            resolve(AckTarget::Code(code(1)), &h, lapsed - Duration::minutes(1), none),
            Resolution::Acknowledge(vec![alert(1)])
        );
        assert_eq!(resolve(AckTarget::Code(code(1)), &h, lapsed, none), Resolution::AlreadyClosed(alert(1)));
        assert_eq!(resolve(AckTarget::Latest, &h, lapsed, all), Resolution::NothingOpen);
        assert_eq!(next_code(&h, &alert(2), lapsed), Some(code(2)), "lapsed, not yet reusable");
        assert_eq!(next_code(&h, &alert(2), lapsed + REUSE_AFTER), Some(code(1)));
        assert_eq!(next_code(&h, &alert(1), lapsed), Some(code(2)), "a lapsed alert's retry gets a new code");
    }

    proptest! {
        /// Whatever a phone holds, a new alert never gets a code an open alert of that phone holds.
        #[test]
        fn a_new_alert_never_shares_a_code_with_an_open_one(
            entries in proptest::collection::vec((1u16..=12, any::<bool>(), 0i64..3000), 0..40),
            now in 0i64..4000,
        ) {
            let h: Vec<HeldCode> = entries
                .iter()
                .enumerate()
                .map(|(i, &(c, closed, at))| held(c, alert(i as u8), 0, Some(0), closed.then_some(at)))
                .collect();
            // Keep the phone's state possible: one open alert per code.
            let mut seen = std::collections::BTreeSet::new();
            let h: Vec<HeldCode> = h.into_iter().filter(|e| !e.is_open() || seen.insert(e.code)).collect();
            let fresh = alert(200);
            let got = next_code(&h, &fresh, t(now)).expect("codes beyond 12 are free");
            prop_assert!(!h.iter().any(|e| e.answers_at(t(now)) && e.code == got));
            prop_assert!(!h.iter().any(|e| e.code == got && e.blocks(t(now))), "a blocked code while free ones exist");
        }
    }
}
