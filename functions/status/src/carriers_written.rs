//! The carriers this instance has written for numbers: a delivery record that names the carrier
//! already written for its number, within [`CARRIER_REWRITE_AFTER`], writes nothing — the
//! registry's `CARRIER` item would only have its time moved. An on-call phone gets many alerts,
//! so this saves one `UpdateItem` (one call, one write unit) on nearly every delivery record; a
//! number's first record in an instance, a carrier change and the hourly rewrite still write.
//!
//! What is remembered is what a write answered for: a refused write (a later sighting already
//! kept) is remembered too, since the registry then holds at least as recent a sighting. Only
//! in memory, for the instance's life; a number is never logged from here.
//!
//! [`CARRIER_REWRITE_AFTER`]: tocsin::domain::carrier::CARRIER_REWRITE_AFTER

use std::collections::HashMap;
use std::sync::Mutex;

use tocsin::domain::PhoneNumber;
use tocsin::domain::carrier::CarrierSeen;

/// The most numbers remembered; past it the memory starts again (each number then costs one
/// write more). About 100 bytes a number: 1 MB at most.
const MAX_NUMBERS: usize = 10_000;

/// The last sighting written per number (E.164), by this instance.
#[derive(Debug, Default)]
pub struct CarriersWritten {
    written: Mutex<HashMap<String, CarrierSeen>>,
}

impl CarriersWritten {
    /// Whether `seen` must be written for `number`: nothing written for it yet, or it is news
    /// after what was ([`CarrierSeen::is_news_after`]).
    pub(crate) fn needs_writing(&self, number: &PhoneNumber, seen: &CarrierSeen) -> bool {
        self.lock().get(number.expose()).is_none_or(|written| seen.is_news_after(written))
    }

    /// `seen` was written for `number` (the registry kept it, or a later sighting it already had).
    pub(crate) fn written(&self, number: &PhoneNumber, seen: &CarrierSeen) {
        let mut written = self.lock();
        if written.len() >= MAX_NUMBERS && !written.contains_key(number.expose()) {
            written.clear();
        }
        match written.get_mut(number.expose()) {
            Some(kept) if kept.at >= seen.at => {}
            Some(kept) => *kept = seen.clone(),
            None => {
                written.insert(number.expose().to_owned(), seen.clone());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CarrierSeen>> {
        // Never held across an await, and a panic while holding it leaves a map that is still
        // only an optimisation: use it as it is.
        self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, Utc};

    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + Duration::days(20_000) + Duration::minutes(minutes)
    }

    fn seen(carrier: &str, minutes: i64) -> CarrierSeen {
        CarrierSeen { carrier: carrier.into(), mcc: Some("310".into()), mnc: Some("004".into()), at: at(minutes) }
    }

    fn number(n: usize) -> PhoneNumber {
        PhoneNumber::parse(&format!("+4479{n:08}")).expect("a valid number")
    }

    #[test]
    fn a_number_never_written_needs_writing() {
        assert!(CarriersWritten::default().needs_writing(&number(1), &seen("Verizon Wireless", 0)));
    }

    #[test]
    fn the_same_carrier_after_a_write_needs_none_until_the_rewrite() {
        let memory = CarriersWritten::default();
        memory.written(&number(1), &seen("Verizon Wireless", 0));
        assert!(!memory.needs_writing(&number(1), &seen("Verizon Wireless", 30)));
        assert!(memory.needs_writing(&number(1), &seen("Verizon Wireless", 60)));
        assert!(memory.needs_writing(&number(1), &seen("T-Mobile USA", 1)));
        assert!(memory.needs_writing(&number(2), &seen("Verizon Wireless", 1)));
    }

    #[test]
    fn an_older_write_never_replaces_a_later_one() {
        let memory = CarriersWritten::default();
        memory.written(&number(1), &seen("Verizon Wireless", 50));
        memory.written(&number(1), &seen("T-Mobile USA", 10));
        assert!(!memory.needs_writing(&number(1), &seen("Verizon Wireless", 70)));
    }

    #[test]
    fn a_full_memory_starts_again_rather_than_grow() {
        let memory = CarriersWritten::default();
        for n in 0..MAX_NUMBERS {
            memory.written(&number(n), &seen("Verizon Wireless", 0));
        }
        memory.written(&number(MAX_NUMBERS), &seen("Verizon Wireless", 0));
        assert_eq!(memory.lock().len(), 1);
        assert!(memory.needs_writing(&number(0), &seen("Verizon Wireless", 1)));
    }
}
