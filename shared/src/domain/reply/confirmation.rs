//! The SMS that answers a reply (docs/acknowledgement.md): "[tocsin] Acked: disk_full - you have
//! it", or why nothing was acknowledged. One part of plain GSM-7, whatever it names (an alert's
//! template name, an operator's name): a confirmation never costs more than one part, never turns
//! into UCS-2, and never suggests a word that opts the number out.
//!
//! It names alerts by their template, never by their text: the text may hold what the alert
//! is about, and the confirmation goes back over the same channel, so it adds nothing the person
//! does not have, but a short name is what fits on a lock screen.

use chrono::{DateTime, Utc};

use super::code::ReplyCode;
use crate::domain::segments::measure;

/// What the confirmation says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// These alerts (their template names) are now acknowledged by this person.
    Acked { names: Vec<String> },
    /// Someone acknowledged it before: who, and when.
    AlreadyAcked { name: String, by: String, at: DateTime<Utc> },
    /// The code's alert is closed (acknowledged, or a day old): nothing to do.
    Closed { code: ReplyCode },
    /// No alert this phone was sent shows the code.
    UnknownCode { code: ReplyCode },
    /// "ack" or "ack all" with nothing open.
    NothingOpen,
    /// "ack" or "ack all" while the open alerts (these codes) are not known to have reached the
    /// phone: which one, by its code.
    AskForCode { codes: Vec<ReplyCode> },
    /// Not understood: how to acknowledge.
    NotUnderstood,
}

/// The SMS text of `c`: one GSM-7 part.
pub fn confirmation_text(c: &Confirmation) -> String {
    let text = match c {
        Confirmation::Acked { names } => match names.as_slice() {
            [one] => format!("Acked: {} - you have it", gsm(one)),
            many => format!("Acked {}: {} - you have them", many.len(), listed(many)),
        },
        Confirmation::AlreadyAcked { name, by, at } => {
            format!("Already acked by {} at {} UTC: {}", gsm(by), at.format("%H:%M"), gsm(name))
        }
        Confirmation::Closed { code } => format!("Code {code} is closed - nothing to do"),
        Confirmation::UnknownCode { code } => {
            format!("No open alert has code {code}. Reply the code an alert shows, or ACK for the latest")
        }
        Confirmation::NothingOpen => "No open alert to ack".to_owned(),
        Confirmation::AskForCode { codes } => {
            let listed: Vec<String> = codes.iter().take(12).map(ToString::to_string).collect();
            let more = if codes.len() > 12 { format!(" (+{} more)", codes.len() - 12) } else { String::new() };
            format!("Which alert? Reply the code it shows: {}{more}", listed.join(", "))
        }
        Confirmation::NotUnderstood => {
            "Not understood. Reply the code an alert shows (e.g. 7), ACK for the latest, ACK ALL for all".to_owned()
        }
    };
    fit(format!("[tocsin] {text}"))
}

/// `s` in GSM-7's basic set (anything else becomes `?`), so the SMS stays GSM-7.
fn gsm(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || " _-.:/+*@()#".contains(c) { c } else { '?' }).collect()
}

/// Names, comma-separated, as many as keep the text short; the rest counted.
fn listed(names: &[String]) -> String {
    let mut out = String::new();
    for (i, n) in names.iter().enumerate() {
        let next = if out.is_empty() { gsm(n) } else { format!("{out}, {}", gsm(n)) };
        if next.chars().count() > 90 {
            return format!("{out}, +{} more", names.len() - i);
        }
        out = next;
    }
    out
}

/// Cut to one part (160 GSM-7 septets: `[` and `]` cost two each), on a character boundary.
fn fit(text: String) -> String {
    if measure(&text).segments <= 1 {
        return text;
    }
    let mut cut: String = text.chars().take(157).collect();
    while measure(&format!("{cut}...")).segments > 1 {
        cut.pop();
    }
    cut.push_str("...");
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::reply::command::OPT_OUT_WORDS;
    use crate::domain::segments::Encoding;
    use chrono::TimeZone;

    fn all() -> Vec<Confirmation> {
        let code = ReplyCode::new(7).expect("code");
        let at = Utc.with_ymd_and_hms(2026, 12, 5, 3, 12, 0).single().expect("time");
        vec![
            Confirmation::Acked { names: vec!["disk_full".into()] },
            Confirmation::Acked { names: (0..40).map(|i| format!("template_{i}")).collect() },
            Confirmation::AlreadyAcked { name: "disk_full".into(), by: "Dana Ødegård 🚨".into(), at },
            Confirmation::AlreadyAcked { name: "x".repeat(300), by: "y".repeat(300), at },
            Confirmation::Closed { code },
            Confirmation::UnknownCode { code },
            Confirmation::NothingOpen,
            Confirmation::NotUnderstood,
            Confirmation::AskForCode { codes: vec![code, ReplyCode::new(12).expect("code")] },
            Confirmation::AskForCode { codes: (1..=ReplyCode::MAX).filter_map(ReplyCode::new).collect() },
        ]
    }

    #[test]
    fn every_confirmation_is_one_gsm7_part_whatever_it_names() {
        for c in all() {
            let text = confirmation_text(&c);
            let m = measure(&text);
            assert_eq!((m.encoding, m.segments), (Encoding::Gsm7, 1), "{c:?}: {text:?}");
        }
    }

    #[test]
    fn a_confirmation_says_what_happened_and_suggests_no_opt_out_word() {
        let texts: Vec<String> = all().iter().map(confirmation_text).collect();
        assert_eq!(texts[0], "[tocsin] Acked: disk_full - you have it");
        assert!(texts[1].starts_with("[tocsin] Acked 40: template_0, template_1,"), "{}", texts[1]);
        assert!(texts[1].contains("more - you have them"), "{}", texts[1]);
        assert_eq!(texts[2], "[tocsin] Already acked by Dana ?deg?rd ? at 03:12 UTC: disk_full");
        assert_eq!(texts[8], "[tocsin] Which alert? Reply the code it shows: 7, 12");
        for t in &texts {
            for word in t.to_lowercase().split(|c: char| !c.is_alphanumeric() && c != '-').filter(|w| !w.is_empty()) {
                assert!(!OPT_OUT_WORDS.contains(&word), "{t:?} suggests {word:?}");
            }
        }
    }
}
