//! The per-producer escalation cap: one producer's flood of undelivered alerts must not bury
//! everyone else's. Each producer's escalations are counted per UTC hour; the first
//! `ProducerEscalationsPerHour` are paged one message each, as always. The next one is paged
//! too, carrying a **notice**: this producer reached its cap, and its further escalations this
//! hour are recorded, not paged one by one. Those are **folded**: escalated all the same (marked
//! on the intent, on the open list `tocsin escalations` reads, in the escalation age alarm) but
//! sent to the escalation queue as no message of their own.
//!
//! A fold needs the notice first: an escalation is folded only once the notice for its producer
//! and hour was sent and recorded. A crash after counting may count an escalation twice (the
//! count reads high, so an escalation may be folded a little early); never is one folded
//! without on-call having been told that folding began.

use chrono::{DateTime, Utc};

use crate::domain::spend::hour_of;

/// `ProducerEscalationsPerHour` (`TOCSIN_PRODUCER_ESCALATIONS_PER_HOUR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscalationCap {
    pub per_hour: u32,
}

/// A producer's escalations in one UTC hour, as counted with this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscalationCount {
    /// This escalation's number in the hour (1 for the first).
    pub n: u32,
    /// The notice for this producer and hour was sent and recorded.
    pub notice_sent: bool,
}

/// How one escalation reaches on-call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paging {
    /// A message of its own, as always.
    Page,
    /// A message of its own that also tells on-call the producer reached its cap.
    PageWithNotice,
    /// No message of its own: recorded, listed, not paged.
    Fold,
}

impl EscalationCap {
    pub fn paging(&self, count: EscalationCount) -> Paging {
        match count {
            EscalationCount { n, .. } if n <= self.per_hour => Paging::Page,
            EscalationCount { notice_sent: false, .. } => Paging::PageWithNotice,
            EscalationCount { notice_sent: true, .. } => Paging::Fold,
        }
    }

    /// The notice's words, appended to the reason of the escalation that carries it.
    pub fn notice(&self, producer: &str, now: DateTime<Utc>) -> String {
        let until = hour_of(now) + chrono::Duration::hours(1);
        format!(
            "producer {producer} reached its cap of {} escalations this hour (ProducerEscalationsPerHour): its further \
             escalations until {} are recorded, not paged one by one - tocsin escalations lists them",
            self.per_hour,
            until.format("%H:%M UTC")
        )
    }

    /// The reason recorded on a folded escalation.
    pub fn folded(&self, reason: &str, producer: &str) -> String {
        format!("{reason} [folded: producer {producer} is over its cap of {} escalations this hour]", self.per_hour)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_producer_is_paged_up_to_its_cap_then_once_with_the_notice_then_folded() {
        let cap = EscalationCap { per_hour: 2 };
        let at = |n, notice_sent| cap.paging(EscalationCount { n, notice_sent });
        assert_eq!((at(1, false), at(2, false)), (Paging::Page, Paging::Page));
        assert_eq!(at(3, false), Paging::PageWithNotice, "the first past the cap tells on-call");
        assert_eq!(at(4, false), Paging::PageWithNotice, "no fold before the notice is recorded");
        assert_eq!(at(4, true), Paging::Fold);
        assert_eq!(at(2, true), Paging::Page, "within the cap, always paged");
    }

    #[test]
    fn the_notice_names_the_producer_the_cap_and_when_folding_ends() {
        let cap = EscalationCap { per_hour: 20 };
        let now = Utc.with_ymd_and_hms(2026, 12, 3, 14, 25, 0).single().expect("instant");
        let notice = cap.notice("billing", now);
        assert!(notice.contains("producer billing reached its cap of 20"), "{notice}");
        assert!(notice.contains("until 15:00 UTC") && notice.contains("tocsin escalations"), "{notice}");
        assert!(cap.folded("stale", "billing").starts_with("stale [folded: producer billing"));
    }
}
