//! The recipients roster: the numbers tocsin may text. An on-call tool knows whom it pages, so
//! a deployment lists them — whole numbers (`+14155550100`), or prefixes of numbers (`+1206555`,
//! a country's calling code such as `+44`) — and intake refuses a request to anyone else before
//! any write. A deployment may instead be deployed open (`RecipientPolicy=open`): any valid
//! number, with the risk docs/security.md states.

use std::fmt;

use super::phone::PhoneNumber;

/// One roster entry: `+` and 1 to 15 digits, a whole E.164 number or a prefix of numbers.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RosterEntry(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a roster entry: '+' and 1 to 15 digits (a whole number, or a prefix such as +44 or +1206555)")]
pub struct RosterEntryError(pub String);

impl RosterEntry {
    pub fn parse(raw: &str) -> Result<Self, RosterEntryError> {
        let digits = raw.strip_prefix('+').unwrap_or_default();
        if (1..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0') {
            Ok(RosterEntry(raw.to_owned()))
        } else {
            Err(RosterEntryError(raw.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn covers(&self, number: &PhoneNumber) -> bool {
        number.expose().starts_with(&self.0)
    }

    /// A whole number, which is personal data: shown masked like a phone number. A prefix is not.
    pub fn masked(&self) -> String {
        match PhoneNumber::parse(&self.0) {
            Ok(n) if self.0.len() >= 11 => n.masked(),
            _ => self.0.clone(),
        }
    }
}

impl fmt::Debug for RosterEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RosterEntry({})", self.masked())
    }
}

/// Whom a deployment may text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecipientPolicy {
    /// Only numbers a roster entry covers (the default).
    Roster,
    /// Any valid number (`RecipientPolicy=open`).
    Open,
}

/// The roster as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roster {
    pub entries: Vec<RosterEntry>,
}

impl Roster {
    /// The entry that lets tocsin text `number` (the longest, the most specific), if any.
    pub fn entry_for(&self, number: &PhoneNumber) -> Option<&RosterEntry> {
        self.entries.iter().filter(|e| e.covers(number)).max_by_key(|e| e.0.len())
    }
}

impl RecipientPolicy {
    pub fn allows(self, roster: &Roster, number: &PhoneNumber) -> bool {
        match self {
            RecipientPolicy::Open => true,
            RecipientPolicy::Roster => roster.entry_for(number).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> PhoneNumber {
        PhoneNumber::parse(s).expect("number")
    }

    fn roster(entries: &[&str]) -> Roster {
        Roster { entries: entries.iter().map(|e| RosterEntry::parse(e).expect("entry")).collect() }
    }

    #[test]
    fn a_number_is_allowed_by_its_own_entry_or_a_prefix_of_it_and_nothing_else() {
        let r = roster(&["+14155550100", "+1206555", "+44"]);
        let policy = RecipientPolicy::Roster;
        assert!(policy.allows(&r, &n("+14155550100")));
        assert!(policy.allows(&r, &n("+12065550142")));
        assert!(policy.allows(&r, &n("+447700900123")));
        assert!(!policy.allows(&r, &n("+14155550101")), "a neighbour of a listed number");
        assert!(!policy.allows(&r, &n("+12125550100")));
        assert!(!policy.allows(&r, &n("+881234567890")), "a premium destination nobody listed");
        assert!(!policy.allows(&Roster::default(), &n("+14155550100")), "an empty roster allows nobody");
        assert!(RecipientPolicy::Open.allows(&Roster::default(), &n("+881234567890")));
        assert_eq!(r.entry_for(&n("+14155550100")).map(RosterEntry::as_str), Some("+14155550100"));
    }

    #[test]
    fn entries_are_plus_and_digits_and_whole_numbers_are_masked() {
        for bad in ["", "+", "44", "+0", "+44 20", "+1234567890123456", "+1-206"] {
            assert!(RosterEntry::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(RosterEntry::parse("+44").expect("prefix").masked(), "+44");
        let whole = RosterEntry::parse("+14155550100").expect("number").masked();
        assert!(!whole.contains("5550100"), "{whole}");
    }
}
