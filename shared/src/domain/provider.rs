//! What a failed SNS delivery's `providerResponse` means for tocsin: a versioned table (End User
//! Messaging's event types have theirs in [`super::eum_status`]), and the failure classes both use.
//!
//! AWS does not say which responses are permanent, and public systems disagree, so this is
//! tocsin's own judgement, with the reasoning next to each entry. Permanent-for-recipient
//! suppresses the number at once (re-enable is an audited operator action); permanent-for-message
//! fails this alert but leaves the number usable; account-limit (the account's SMS spend is used
//! up) fails this alert, never the number, and tells on-call the account is not sending SMS at all;
//! transient and unknown fail this alert without suppressing. An unrecognised text is `Unknown` and counted — never success, never suppression.
//!
//! Change the table only by bumping [`TABLE_VERSION`]; the version is stored with every
//! classification so past decisions stay explainable.

use serde::{Deserialize, Serialize};

pub const TABLE_VERSION: &str = "2026-11-30.1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    PermanentRecipient,
    PermanentMessage,
    /// The account, not the number or the message: its monthly SMS spend limit is reached and SNS
    /// sends no SMS until it is raised or the month turns.
    AccountLimit,
    Transient,
    Unknown,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::PermanentRecipient => "permanent_recipient",
            FailureClass::PermanentMessage => "permanent_message",
            FailureClass::AccountLimit => "account_limit",
            FailureClass::Transient => "transient",
            FailureClass::Unknown => "unknown",
        }
    }
}

pub struct Entry {
    pub response: &'static str,
    pub class: FailureClass,
    pub why: &'static str,
}

/// Every `providerResponse` AWS documents for SMS delivery failures, including the pre-2020
/// wording. Matched case-insensitively, ignoring surrounding space and a trailing full stop.
pub const TABLE: &[Entry] = &[
    Entry {
        response: "Invalid phone number",
        class: FailureClass::PermanentRecipient,
        why: "The carrier says the number does not exist or cannot take SMS; every later alert to it would fail the same way.",
    },
    Entry {
        response: "Phone number is opted out",
        class: FailureClass::PermanentRecipient,
        why: "The person opted out (STOP). Sending again is ignored by SNS and may breach consent rules; only they can opt back in.",
    },
    Entry {
        response: "Phone has blocked SMS",
        class: FailureClass::PermanentRecipient,
        why: "The handset or subscription refuses SMS; nothing tocsin changes will get through until the owner acts.",
    },
    Entry {
        response: "Phone is on a blocked list",
        class: FailureClass::PermanentRecipient,
        why: "The number is on a block list (carrier or AWS); retries cannot succeed while it is listed.",
    },
    Entry {
        response: "Phone is blacklisted",
        class: FailureClass::PermanentRecipient,
        why: "Pre-2020 wording of 'Phone is on a blocked list'.",
    },
    Entry {
        response: "Destination is on a blocked list",
        class: FailureClass::PermanentRecipient,
        why: "The destination itself is blocked; same reasoning as a blocked phone.",
    },
    Entry {
        response: "Destination is blacklisted",
        class: FailureClass::PermanentRecipient,
        why: "Pre-2020 wording of 'Destination is on a blocked list'.",
    },
    Entry {
        response: "Blocked as spam by phone carrier",
        class: FailureClass::PermanentMessage,
        why: "The carrier judged this content as spam: the text or sender must change, but the number is fine for other alerts.",
    },
    Entry {
        response: "Phone carrier has blocked this message",
        class: FailureClass::PermanentMessage,
        why: "A carrier filter stopped this message, not the number; other messages can still arrive.",
    },
    Entry {
        response: "Message body is invalid",
        class: FailureClass::PermanentMessage,
        why: "The body cannot be delivered as written (encoding, content); resending the same body fails again.",
    },
    Entry {
        response: "This delivery would exceed max price",
        class: FailureClass::PermanentMessage,
        why: "The configured MaxPrice is below the route's price; the same settings fail again. Configuration, not the number.",
    },
    Entry {
        response: "No quota left for account",
        class: FailureClass::AccountLimit,
        why: "The account's monthly SMS spend limit is reached: SNS sends no SMS for anyone until it is raised or the month turns. The number is fine; suppressing it would silence on-call after the limit is raised.",
    },
    Entry {
        response: "Phone carrier is currently unreachable/unavailable",
        class: FailureClass::Transient,
        why: "A carrier outage: nothing is wrong with the number; a human should use another channel now.",
    },
    Entry {
        response: "Phone is currently unreachable/unavailable",
        class: FailureClass::Transient,
        why: "Handset off or out of coverage beyond the carrier's retry period; the number stays valid.",
    },
    Entry {
        response: "Unknown error attempting to reach phone",
        class: FailureClass::Unknown,
        why: "The carrier itself does not know why; suppressing on it would silence valid numbers.",
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub class: FailureClass,
    /// False when the response was not in the table (count it: the table may need an entry).
    pub recognised: bool,
    /// The table that decided it (this one's [`TABLE_VERSION`], or End User Messaging's).
    pub table_version: &'static str,
}

fn normalise(s: &str) -> String {
    let t = s.trim().trim_end_matches('.').trim();
    t.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

pub fn classify(provider_response: Option<&str>) -> Classification {
    let Some(resp) = provider_response else {
        return Classification { class: FailureClass::Unknown, recognised: false, table_version: TABLE_VERSION };
    };
    // The table's responses, normalised once per process.
    static NORMALISED: std::sync::LazyLock<Vec<(String, &'static Entry)>> =
        std::sync::LazyLock::new(|| TABLE.iter().map(|e| (normalise(e.response), e)).collect());
    let n = normalise(resp);
    // Variants seen with only one half of "unreachable/unavailable".
    let lookup = |needle: &str| NORMALISED.iter().find(|(response, _)| response == needle).map(|(_, e)| *e);
    let found = lookup(&n).or_else(|| {
        let alt = n
            .replace("currently unreachable", "currently unreachable/unavailable")
            .replace("currently unavailable", "currently unreachable/unavailable");
        lookup(&alt)
    });
    match found {
        Some(e) => Classification { class: e.class, recognised: true, table_version: TABLE_VERSION },
        None => Classification { class: FailureClass::Unknown, recognised: false, table_version: TABLE_VERSION },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_response_is_in_the_table_with_a_reason() {
        let documented = [
            "Blocked as spam by phone carrier",
            "Destination is on a blocked list",
            "Invalid phone number",
            "Message body is invalid",
            "Phone carrier has blocked this message",
            "Phone carrier is currently unreachable/unavailable",
            "Phone has blocked SMS",
            "Phone is on a blocked list",
            "Phone is currently unreachable/unavailable",
            "Phone number is opted out",
            "This delivery would exceed max price",
            "No quota left for account",
            "Unknown error attempting to reach phone",
            "Destination is blacklisted",
            "Phone is blacklisted",
        ];
        for d in documented {
            assert!(classify(Some(d)).recognised, "{d}");
        }
        assert!(TABLE.iter().all(|e| e.why.len() > 20));
    }

    #[test]
    fn numbers_that_cannot_receive_are_permanent_for_the_recipient() {
        for d in
            ["Phone number is opted out", "Invalid phone number", "Phone is on a blocked list", "Phone is blacklisted"]
        {
            assert_eq!(classify(Some(d)).class, FailureClass::PermanentRecipient, "{d}");
        }
    }

    #[test]
    fn content_and_carrier_problems_do_not_suppress_the_number() {
        assert_eq!(classify(Some("Blocked as spam by phone carrier")).class, FailureClass::PermanentMessage);
        assert_eq!(classify(Some("Phone carrier is currently unreachable/unavailable")).class, FailureClass::Transient);
        assert_eq!(classify(Some("Unknown error attempting to reach phone")).class, FailureClass::Unknown);
    }

    #[test]
    fn a_used_up_spend_limit_is_the_accounts_failure_never_the_numbers() {
        let c = classify(Some("No quota left for account."));
        assert_eq!(
            c,
            Classification { class: FailureClass::AccountLimit, recognised: true, table_version: TABLE_VERSION }
        );
        assert_ne!(c.class, FailureClass::PermanentRecipient);
    }

    #[test]
    fn matching_forgives_case_space_full_stops_and_half_variants() {
        assert_eq!(classify(Some("  phone NUMBER is opted out. ")).class, FailureClass::PermanentRecipient);
        assert_eq!(classify(Some("Phone is currently unreachable")).class, FailureClass::Transient);
        assert_eq!(classify(Some("Phone carrier is currently unavailable")).class, FailureClass::Transient);
    }

    #[test]
    fn an_unrecognised_response_is_unknown_and_flagged() {
        let c = classify(Some("Message has been accepted by phone carrier"));
        assert_eq!(c, Classification { class: FailureClass::Unknown, recognised: false, table_version: TABLE_VERSION });
        assert!(!classify(None).recognised);
    }
}
