//! The words an SMS adds to ask for a reply: `" - Reply 7 to ack"`, or for a digest
//! `" - Reply 3 to ack all 4"`. Plain GSM-7 (an em dash or a curly quote would turn the whole SMS
//! into UCS-2, 70 characters a part instead of 160), and never a word that opts a number out
//! (`command::OPT_OUT_WORDS`): the prompt says "ack", never "end", "cancel" or "stop".

use super::code::ReplyCode;

/// The prompt for one alert's SMS.
pub fn prompt(code: ReplyCode) -> String {
    format!(" - Reply {code} to ack")
}

/// The longest prompt of one alert's SMS: intake leaves room for it when the stack takes replies.
pub fn longest_prompt() -> String {
    prompt(ReplyCode::HIGHEST)
}

/// The prompt for a digest's SMS carrying `members` alerts.
pub fn digest_prompt(code: ReplyCode, members: usize) -> String {
    format!(" - Reply {code} to ack all {members}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::reply::command::{AckTarget, Command, OPT_OUT_WORDS, parse_command};
    use crate::domain::segments::{Encoding, measure};

    fn code(n: u16) -> ReplyCode {
        ReplyCode::new(n).expect("a code")
    }

    #[test]
    fn the_prompt_keeps_a_gsm7_sms_gsm7_and_costs_its_length_only() {
        for p in [prompt(code(7)), prompt(code(999)), digest_prompt(code(3), 12)] {
            let m = measure(&p);
            assert_eq!(m.encoding, Encoding::Gsm7, "{p:?}");
            assert_eq!(m.units, p.len(), "{p:?}: one septet a character");
        }
        let text = format!("[tocsin] db-disk-full: /var/lib/pg at 95% on db-3{}", prompt(code(7)));
        assert_eq!(measure(&text).segments, 1, "{text:?}");
    }

    #[test]
    fn the_prompt_suggests_no_opt_out_word() {
        for p in [prompt(code(7)), digest_prompt(code(3), 4)] {
            let lower = p.to_lowercase();
            for word in lower.split(|c: char| !c.is_alphanumeric() && c != '-').filter(|w| !w.is_empty()) {
                assert!(!OPT_OUT_WORDS.contains(&word), "{p:?} suggests {word:?}");
            }
        }
    }

    #[test]
    fn what_the_prompt_asks_for_is_what_the_grammar_reads() {
        // A person who types exactly what the prompt names acknowledges that code.
        assert_eq!(parse_command(Some("7"), None), Command::Ack(AckTarget::Code(code(7))));
        assert_eq!(parse_command(Some("ack 7"), None), Command::Ack(AckTarget::Code(code(7))));
    }
}
