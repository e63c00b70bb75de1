//! E.164 phone numbers. The type masks itself in `Debug` and `Display`, so a number can only reach
//! a log line in clear through [`PhoneNumber::expose`], which only the SNS adapter and the
//! registry key use.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A validated E.164 number: `+`, a non-zero first digit, 7 to 15 digits in all.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PhoneNumber(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PhoneError {
    #[error("must start with '+' followed by the country code (E.164, e.g. +14155550100)")]
    MissingPlus,
    #[error("may contain only digits after the '+' (no spaces, dashes or brackets)")]
    NotDigits,
    #[error("a country code never starts with 0")]
    LeadingZero,
    #[error("must have 7 to 15 digits after the '+', found {0}")]
    Length(usize),
}

impl PhoneNumber {
    pub const MIN_DIGITS: usize = 7;
    pub const MAX_DIGITS: usize = 15;

    pub fn parse(raw: &str) -> Result<Self, PhoneError> {
        let digits = raw.strip_prefix('+').ok_or(PhoneError::MissingPlus)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(PhoneError::NotDigits);
        }
        if digits.starts_with('0') {
            return Err(PhoneError::LeadingZero);
        }
        if !(Self::MIN_DIGITS..=Self::MAX_DIGITS).contains(&digits.len()) {
            return Err(PhoneError::Length(digits.len()));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The number in clear. Call sites: the SNS publish, the recipient registry key, storage.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `+1******0100`: the first digit and the last four stay, the rest is starred.
    pub fn masked(&self) -> String {
        mask_phone_like(&self.0)
    }
}

/// Masks every run of digits in free text that may be a phone number (seven digits or more, with
/// or without a leading `+`), as [`mask_phone_like`] does: a provider's error message may quote
/// the destination ("+14155550100 is opted out"), and such text travels into the ledger, the
/// escalation message and the logs.
pub fn mask_numbers_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        let digits = run.trim_start_matches('+').len();
        if digits >= 7 {
            out.push_str(&mask_phone_like(run));
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() || (c == '+' && run.is_empty()) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Masks anything that may be a phone number (also junk from a log record): keeps a leading `+`,
/// the first digit and the last four characters (two when the value is short); stars the rest.
pub fn mask_phone_like(raw: &str) -> String {
    let (plus, rest) = match raw.strip_prefix('+') {
        Some(rest) => ("+", rest),
        None => ("", raw),
    };
    let chars: Vec<char> = rest.chars().collect();
    let n = chars.len();
    let keep_tail = if n >= 10 {
        4
    } else if n >= 6 {
        2
    } else {
        0
    };
    let keep_head = usize::from(n > keep_tail + 2);
    let mut out = String::with_capacity(n + 1);
    out.push_str(plus);
    for (i, c) in chars.iter().enumerate() {
        if i < keep_head || i >= n - keep_tail {
            out.push(*c);
        } else {
            out.push('*');
        }
    }
    out
}

impl fmt::Debug for PhoneNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PhoneNumber({})", self.masked())
    }
}

impl fmt::Display for PhoneNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl TryFrom<String> for PhoneNumber {
    type Error = PhoneError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<PhoneNumber> for String {
    fn from(value: PhoneNumber) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_number_quoted_in_free_text_is_masked_and_short_numbers_are_kept() {
        assert_eq!(
            mask_numbers_in("+14155550216 is opted out in Default (code 409, 12345)"),
            "+1******0216 is opted out in Default (code 409, 12345)"
        );
        assert_eq!(mask_numbers_in("to 447700900123."), "to 4*******0123.");
        assert_eq!(mask_numbers_in("no number here"), "no number here");
    }

    use super::*;

    #[test]
    fn accepts_e164_numbers_of_every_legal_length() {
        for n in ["+1234567", "+14155550100", "+447911123456", "+123456789012345"] {
            assert!(PhoneNumber::parse(n).is_ok(), "{n}");
        }
    }

    #[test]
    fn rejects_what_is_not_e164_with_the_reason() {
        assert_eq!(PhoneNumber::parse("14155550100"), Err(PhoneError::MissingPlus));
        assert_eq!(PhoneNumber::parse("+1 415 555 0100"), Err(PhoneError::NotDigits));
        assert_eq!(PhoneNumber::parse("+0415550100"), Err(PhoneError::LeadingZero));
        assert_eq!(PhoneNumber::parse("+123456"), Err(PhoneError::Length(6)));
        assert_eq!(PhoneNumber::parse("+1234567890123456"), Err(PhoneError::Length(16)));
        assert_eq!(PhoneNumber::parse("+"), Err(PhoneError::Length(0)));
        assert_eq!(PhoneNumber::parse("+1XXX5550100"), Err(PhoneError::NotDigits));
    }

    #[test]
    fn masks_like_the_runbook_examples() {
        let n = PhoneNumber::parse("+12065550100").expect("valid");
        assert_eq!(n.masked(), "+1******0100");
        assert_eq!(format!("{n}"), "+1******0100");
        assert_eq!(format!("{n:?}"), "PhoneNumber(+1******0100)");
    }

    #[test]
    fn masking_never_reveals_more_than_five_digits_of_any_string() {
        for raw in ["+1XXX5550100", "5550100", "+44", "", "+123456789012345", "abc"] {
            let masked = mask_phone_like(raw);
            let visible = masked.chars().filter(|c| c.is_ascii_digit()).count();
            assert!(visible <= 5, "{raw} -> {masked}");
            assert_eq!(masked.chars().count(), raw.chars().count());
        }
    }
}
