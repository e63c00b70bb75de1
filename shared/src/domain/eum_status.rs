//! What an End User Messaging SMS event says about an SMS: a versioned table of its `eventType`
//! values, beside SNS's `providerResponse` table ([`super::provider`]).
//!
//! AWS documents the event types ("Event types for SMS, MMS, and voice", AWS End User Messaging
//! SMS User Guide) and that each event carries `isFinal`: a non-final event is progress (queued,
//! pending, the carrier's acceptance), never an outcome. `TEXT_DELIVERED` is the handset's
//! receipt; `TEXT_SUCCESSFUL` is the carrier's acceptance, and "depending on the destination
//! country the two may be used interchangeably" — so a `TEXT_SUCCESSFUL` counts as delivered only
//! when it says it is final. After 72 hours without a final event AWS reports `UNKNOWN`.
//!
//! Which failures are the recipient's, the message's, the account's or passing is tocsin's
//! judgement, with the reasoning next to each entry, as for SNS. A `messageStatus` that names a
//! cause more precisely than its event type (an opted-out number, the spend limit, the price cap)
//! overrides the event type's class. An event type this version does not know is never success,
//! never failure and never suppression: it is recorded and counted, and changes nothing.
//!
//! Change the table only by bumping [`TABLE_VERSION`]; the version is stored with every
//! classification so past decisions stay explainable.

use super::provider::{Classification, FailureClass};

pub const TABLE_VERSION: &str = "eum-2026-12-02.1";

/// What one event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// The handset (or, where that is all a country reports, the carrier with a final event) has
    /// the SMS.
    Delivered,
    /// Not an outcome yet: queued, pending, or the carrier's non-final acceptance.
    Progress,
    /// A final failure of this class.
    Failed(FailureClass),
    /// An event type this version does not know: recorded and counted, never read as an outcome
    /// (it may be a new kind of success as well as a failure).
    Unrecognised,
}

pub struct EventEntry {
    pub event_type: &'static str,
    /// What the event means when it is final (a non-final event is always progress).
    pub when_final: Meaning,
    pub why: &'static str,
}

/// Every SMS event type AWS documents.
pub const EVENT_TYPES: &[EventEntry] = &[
    EventEntry {
        event_type: "TEXT_DELIVERED",
        when_final: Meaning::Delivered,
        why: "The handset received the SMS (the carrier's delivery receipt).",
    },
    EventEntry {
        event_type: "TEXT_SUCCESSFUL",
        when_final: Meaning::Delivered,
        why: "The carrier accepted it; final only where the country reports nothing after acceptance. A non-final one is acceptance, not delivery.",
    },
    EventEntry {
        event_type: "TEXT_QUEUED",
        when_final: Meaning::Progress,
        why: "Queued for delivery: nothing is known yet.",
    },
    EventEntry {
        event_type: "TEXT_PENDING",
        when_final: Meaning::Progress,
        why: "Being delivered: nothing is known yet.",
    },
    EventEntry {
        event_type: "TEXT_BLOCKED",
        when_final: Meaning::Failed(FailureClass::PermanentRecipient),
        why: "The recipient's device or carrier blocks messages to this recipient: every later alert would be blocked the same way until its owner acts.",
    },
    EventEntry {
        event_type: "TEXT_INVALID",
        when_final: Meaning::Failed(FailureClass::PermanentRecipient),
        why: "The destination number is not valid: no later alert to it can arrive.",
    },
    EventEntry {
        event_type: "TEXT_INVALID_MESSAGE",
        when_final: Meaning::Failed(FailureClass::PermanentMessage),
        why: "The body cannot be delivered as written; the number is fine for other alerts.",
    },
    EventEntry {
        event_type: "TEXT_CARRIER_BLOCKED",
        when_final: Meaning::Failed(FailureClass::PermanentMessage),
        why: "The carrier blocked this message (judged malicious or abusive): the content or sender must change, not the number.",
    },
    EventEntry {
        event_type: "TEXT_SPAM",
        when_final: Meaning::Failed(FailureClass::PermanentMessage),
        why: "The carrier judged the content unsolicited commercial traffic: the text or sender must change, not the number.",
    },
    EventEntry {
        event_type: "TEXT_PROTECT_BLOCKED",
        when_final: Meaning::Failed(FailureClass::PermanentMessage),
        why: "The account's own protect configuration blocked it (a country or number rule): configuration, not the number.",
    },
    EventEntry {
        event_type: "TEXT_UNREACHABLE",
        when_final: Meaning::Failed(FailureClass::Transient),
        why: "The handset is off or out of coverage: the number stays valid; reach the person another way now.",
    },
    EventEntry {
        event_type: "TEXT_CARRIER_UNREACHABLE",
        when_final: Meaning::Failed(FailureClass::Transient),
        why: "A temporary error in the carrier's network: nothing is wrong with the number.",
    },
    EventEntry {
        event_type: "TEXT_TTL_EXPIRED",
        when_final: Meaning::Failed(FailureClass::Transient),
        why: "End User Messaging could not hand the SMS to a carrier before its TimeToLive ended (the alert's deadline): it never left, and was no longer worth sending; the number is fine.",
    },
    EventEntry {
        event_type: "TEXT_UNKNOWN",
        when_final: Meaning::Failed(FailureClass::Unknown),
        why: "Undeliverable for a reason no other type covers, or no final event within 72 hours: may be passing or permanent, so never suppresses.",
    },
];

/// `messageStatus` values that say more than their event type, and the class they mean.
pub const STATUS_OVERRIDES: &[(&str, FailureClass, &str)] = &[
    (
        "OPTED_OUT",
        FailureClass::PermanentRecipient,
        "The person opted out (STOP): only they can opt back in; sending again may breach consent rules.",
    ),
    (
        "NO_QUOTA_LEFT_ON_ACCOUNT",
        FailureClass::AccountLimit,
        "The account's monthly SMS spend limit is reached: no SMS goes out for anyone; the number is fine.",
    ),
    (
        "MAX_PRICE_EXCEEDED",
        FailureClass::PermanentMessage,
        "The configured MaxPrice is below the route's price: configuration, not the number.",
    ),
];

/// How an event of `event_type` (final or not) with `message_status` is read.
pub fn meaning(event_type: &str, is_final: bool, message_status: Option<&str>) -> (Meaning, Classification) {
    let known = EVENT_TYPES.iter().find(|e| e.event_type.eq_ignore_ascii_case(event_type.trim()));
    let recognised = Classification { class: FailureClass::Unknown, recognised: true, table_version: TABLE_VERSION };
    let Some(entry) = known else {
        let unknown = Classification { recognised: false, ..recognised };
        return (if is_final { Meaning::Unrecognised } else { Meaning::Progress }, unknown);
    };
    if !is_final {
        return (Meaning::Progress, recognised);
    }
    match entry.when_final {
        Meaning::Failed(class) => {
            let class = message_status
                .and_then(|s| STATUS_OVERRIDES.iter().find(|(status, _, _)| status.eq_ignore_ascii_case(s.trim())))
                .map_or(class, |(_, c, _)| *c);
            (Meaning::Failed(class), Classification { class, ..recognised })
        }
        other => (other, recognised),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_sms_event_type_is_in_the_table_with_a_reason() {
        let documented = [
            "TEXT_DELIVERED",
            "TEXT_SUCCESSFUL",
            "TEXT_QUEUED",
            "TEXT_PENDING",
            "TEXT_BLOCKED",
            "TEXT_TTL_EXPIRED",
            "TEXT_CARRIER_UNREACHABLE",
            "TEXT_INVALID",
            "TEXT_INVALID_MESSAGE",
            "TEXT_CARRIER_BLOCKED",
            "TEXT_UNREACHABLE",
            "TEXT_SPAM",
            "TEXT_UNKNOWN",
            "TEXT_PROTECT_BLOCKED",
        ];
        for t in documented {
            let e = EVENT_TYPES.iter().find(|e| e.event_type == t).unwrap_or_else(|| panic!("{t} missing"));
            assert!(e.why.len() > 20, "{t}");
        }
        assert_eq!(EVENT_TYPES.len(), documented.len());
    }

    #[test]
    fn a_carriers_acceptance_is_delivery_only_when_it_says_it_is_final() {
        assert_eq!(meaning("TEXT_SUCCESSFUL", false, Some("SUCCESSFUL")).0, Meaning::Progress);
        assert_eq!(meaning("TEXT_SUCCESSFUL", true, Some("SUCCESSFUL")).0, Meaning::Delivered);
        assert_eq!(meaning("TEXT_DELIVERED", true, None).0, Meaning::Delivered);
    }

    #[test]
    fn no_non_final_event_is_an_outcome() {
        for e in EVENT_TYPES {
            assert_eq!(meaning(e.event_type, false, None).0, Meaning::Progress, "{}", e.event_type);
        }
    }

    #[test]
    fn a_blocked_or_invalid_number_is_the_recipients_failure_and_an_unreachable_one_passes() {
        assert_eq!(meaning("TEXT_BLOCKED", true, None).0, Meaning::Failed(FailureClass::PermanentRecipient));
        assert_eq!(meaning("TEXT_INVALID", true, None).0, Meaning::Failed(FailureClass::PermanentRecipient));
        assert_eq!(meaning("TEXT_UNREACHABLE", true, None).0, Meaning::Failed(FailureClass::Transient));
        assert_eq!(meaning("TEXT_TTL_EXPIRED", true, None).0, Meaning::Failed(FailureClass::Transient));
        assert_eq!(meaning("TEXT_SPAM", true, None).0, Meaning::Failed(FailureClass::PermanentMessage));
    }

    #[test]
    fn a_status_naming_the_cause_overrides_its_event_types_class() {
        assert_eq!(
            meaning("TEXT_UNKNOWN", true, Some("OPTED_OUT")).0,
            Meaning::Failed(FailureClass::PermanentRecipient)
        );
        assert_eq!(
            meaning("TEXT_UNKNOWN", true, Some("NO_QUOTA_LEFT_ON_ACCOUNT")).0,
            Meaning::Failed(FailureClass::AccountLimit)
        );
        // A success stays a success whatever its status text.
        assert_eq!(meaning("TEXT_DELIVERED", true, Some("OPTED_OUT")).0, Meaning::Delivered);
    }

    #[test]
    fn an_unknown_event_type_is_never_an_outcome_and_is_counted() {
        let (m, c) = meaning("TEXT_SOMETHING_NEW", true, Some("DELIVERED"));
        assert_eq!(m, Meaning::Unrecognised);
        assert!(!c.recognised);
        assert_eq!(meaning("TEXT_SOMETHING_NEW", false, None).0, Meaning::Progress);
    }
}
