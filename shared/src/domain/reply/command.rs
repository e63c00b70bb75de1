//! What a reply's words mean. People answer pages from a lock screen, half awake: "7", "ack 7",
//! "7a", "#7", "Ack.", "ACK ALL", "ok". The grammar is small, forgiving of case, spacing and
//! punctuation, and strict about everything else — a reply we do not understand acknowledges
//! nothing (and is answered with how to acknowledge).
//!
//! **Opt-out words come first, whatever else the message says.** End User Messaging opts a number
//! out when a message *begins* with one of its opt-out keywords (ARRET, CANCEL, END, OPT-OUT,
//! OPTOUT, QUIT, REMOVE, STOP, TD, UNSUBSCRIBE), and on US toll-free numbers the carrier does so on
//! STOP itself: after "end 7" or "cancel" the phone receives no more SMS from the account, so
//! tocsin must read it as an opt-out (and page on-call that this person can no longer be reached),
//! never as a command. The SMS text therefore never suggests such a word.
//!
//! A tapback ("Liked “db-disk-full …”", "👍 to “…”") quotes the SMS instead of answering it: it
//! is no command (an accidental tap must not tell on-call that someone has the alert).

use super::code::ReplyCode;

/// What a reply asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Acknowledge alerts this phone was sent.
    Ack(AckTarget),
    /// The number opted out (AWS's or the carrier's keyword): no SMS reaches it any more.
    OptOut,
    /// The number opted back in (START, UNSTOP: the toll-free carriers' re-subscribe words).
    OptIn,
    /// HELP / INFO: End User Messaging answers these itself with the number's HELP response.
    Help,
    /// Nothing tocsin understands.
    Unrecognized,
}

/// Which alerts an acknowledgement reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckTarget {
    /// The alert (or digest) whose SMS showed this code.
    Code(ReplyCode),
    /// The phone's most recent open alert: a bare "ack".
    Latest,
    /// Every open alert this phone was sent: "ack all", "aa".
    All,
}

/// End User Messaging's required opt-out keywords, and CTIA's STOPALL and REVOKE that carriers
/// honour too (lowercase).
pub const OPT_OUT_WORDS: [&str; 12] =
    ["arret", "cancel", "end", "opt-out", "optout", "quit", "remove", "stop", "td", "unsubscribe", "stopall", "revoke"];

/// Re-subscribe words (a US toll-free number re-subscribes on START and UNSTOP).
pub const OPT_IN_WORDS: [&str; 2] = ["start", "unstop"];

/// Help words (End User Messaging answers HELP itself; carriers treat INFO alike).
pub const HELP_WORDS: [&str; 2] = ["help", "info"];

/// A bare acknowledgement of the most recent open alert.
const ACK_WORDS: [&str; 6] = ["ack", "acked", "acknowledge", "acknowledged", "ok", "okay"];

/// Characters people put around a word that change nothing: punctuation and quotes, typographic
/// ones included.
fn is_decoration(c: char) -> bool {
    matches!(
        c,
        '.' | ','
            | '!'
            | '?'
            | ';'
            | ':'
            | '"'
            | '\''
            | '('
            | ')'
            | '['
            | ']'
            | '*'
            | '“'
            | '”'
            | '‘'
            | '’'
            | '«'
            | '»'
    )
}

/// Reads a reply's text. `keyword` is the keyword End User Messaging says it matched, if any.
pub fn parse_command(body: Option<&str>, keyword: Option<&str>) -> Command {
    let text = body.unwrap_or_default().to_lowercase();
    let words: Vec<&str> =
        text.split_whitespace().map(|w| w.trim_matches(is_decoration)).filter(|w| !w.is_empty()).collect();
    let first = words.first().copied().or_else(|| keyword.map(str::trim)).unwrap_or_default().to_lowercase();
    let keyword = keyword.map(|k| k.trim().to_lowercase());
    let opts_out = |w: &str| OPT_OUT_WORDS.contains(&w);
    if opts_out(&first) || keyword.as_deref().is_some_and(opts_out) {
        return Command::OptOut;
    }
    if OPT_IN_WORDS.contains(&first.as_str()) {
        return Command::OptIn;
    }
    if HELP_WORDS.contains(&first.as_str()) {
        return Command::Help;
    }
    ack(&words).map_or(Command::Unrecognized, Command::Ack)
}

fn ack(words: &[&str]) -> Option<AckTarget> {
    match words {
        [w] if ACK_WORDS.contains(w) => Some(AckTarget::Latest),
        [w] if *w == "aa" => Some(AckTarget::All),
        ["ack", "all"] | ["all", "ack"] => Some(AckTarget::All),
        [w] => code_word(w).map(AckTarget::Code),
        ["ack" | "a", code] | [code, "ack" | "a"] => bare_code(code).map(AckTarget::Code),
        _ => None,
    }
}

/// One word that is a code, possibly glued to "ack"/"a" or behind a '#': "7", "#7", "a7", "ack7",
/// "7a", "7ack".
fn code_word(word: &str) -> Option<ReplyCode> {
    let w = word.strip_prefix('#').unwrap_or(word);
    let w = w.strip_prefix("ack").or_else(|| w.strip_prefix('a')).unwrap_or(w);
    let w = w.strip_suffix("ack").or_else(|| w.strip_suffix('a')).unwrap_or(w);
    bare_code(w)
}

fn bare_code(word: &str) -> Option<ReplyCode> {
    let w = word.strip_prefix('#').unwrap_or(word);
    if w.is_empty() || w.len() > 4 || !w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    w.parse::<u16>().ok().and_then(ReplyCode::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(body: &str) -> Command {
        parse_command(Some(body), None)
    }

    fn code(n: u16) -> Command {
        Command::Ack(AckTarget::Code(ReplyCode::new(n).expect("a valid code")))
    }

    #[test]
    fn a_code_is_read_however_a_thumb_types_it() {
        for body in
            ["7", " 7 ", "#7", "07", "ack 7", "Ack 7", "ACK7", "a7", "7a", "7 ack", "7ack", "a 7", "7.", "ack #7"]
        {
            assert_eq!(cmd(body), code(7), "{body:?}");
        }
        assert_eq!(cmd("123"), code(123));
    }

    #[test]
    fn a_bare_acknowledgement_reaches_the_latest_alert_and_ack_all_every_one() {
        for body in ["ack", "ACK", "Ack.", "ack!", "acked", "Acknowledged", "ok", "OK", "okay"] {
            assert_eq!(cmd(body), Command::Ack(AckTarget::Latest), "{body:?}");
        }
        for body in ["ack all", "ACK ALL", "all ack", "aa", "AA"] {
            assert_eq!(cmd(body), Command::Ack(AckTarget::All), "{body:?}");
        }
    }

    #[test]
    fn every_word_aws_or_a_carrier_opts_out_on_is_an_opt_out_whatever_follows() {
        for w in OPT_OUT_WORDS {
            assert_eq!(cmd(w), Command::OptOut, "{w}");
            assert_eq!(cmd(&w.to_uppercase()), Command::OptOut, "{w}");
            assert_eq!(cmd(&format!("{w} 7")), Command::OptOut, "{w} 7");
            assert_eq!(cmd(&format!("{w}.")), Command::OptOut, "{w}.");
        }
        assert_eq!(cmd("Stop texting me"), Command::OptOut);
        assert_eq!(cmd("end 7"), Command::OptOut);
    }

    #[test]
    fn the_keyword_aws_matched_counts_even_when_the_body_is_missing() {
        assert_eq!(parse_command(None, Some("STOP")), Command::OptOut);
        assert_eq!(parse_command(Some("7"), Some("STOP")), Command::OptOut);
        assert_eq!(parse_command(Some("7"), Some("KEYWORD_123456789012")), code(7));
        assert_eq!(parse_command(None, None), Command::Unrecognized);
    }

    #[test]
    fn opting_back_in_and_asking_for_help_are_their_own_commands() {
        assert_eq!(cmd("START"), Command::OptIn);
        assert_eq!(cmd("unstop"), Command::OptIn);
        assert_eq!(cmd("HELP"), Command::Help);
        assert_eq!(cmd("info"), Command::Help);
        assert_eq!(cmd("help me"), Command::Help, "AWS answers a message that begins with HELP");
    }

    #[test]
    fn what_is_not_a_command_acknowledges_nothing() {
        for body in [
            "",
            "   ",
            "0",
            "00",
            "10000",
            "7 8",
            "ack 7 8",
            "yes",
            "on it",
            "who is this?",
            "call me",
            "+14255550182",
            "Liked “[tocsin] db-disk-full: disk 95% — Reply 7 to ack”",
            "👍 to “[tocsin] db-disk-full”",
            "ackk",
            "a",
            "#",
            "７",
        ] {
            assert_eq!(cmd(body), Command::Unrecognized, "{body:?}");
        }
    }
}
