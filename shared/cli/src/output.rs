//! Rendering: tables for people, one JSON document for scripts. Phone numbers only ever arrive
//! here masked, except from `suppressed --reveal`.

use std::io::Write;

use chrono::{DateTime, Utc};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// A table with a header row, wrapped to the terminal's width when there is one.
pub fn table<const N: usize>(header: [&str; N]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic).set_header(header);
    t
}

/// A two-column "field | value" table (one record).
pub fn fields(rows: &[(&str, String)]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
    for (k, v) in rows {
        t.add_row([(*k).to_owned(), v.clone()]);
    }
    t
}

/// Writes `text` and a newline to stdout; a closed pipe (`| head`) is not an error worth a trace.
pub fn line(text: impl std::fmt::Display) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| CliError::Output(e.to_string()))
}

/// Writes one pretty JSON document to stdout.
pub fn json<T: Serialize + ?Sized>(value: &T) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::Output(e.to_string()))?;
    line(text)
}

/// `2026-11-29 22:41:50 UTC`.
pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `time` plus how far it is from `now` ("in 12m", "3h ago").
pub fn time_relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = t.signed_duration_since(now);
    let secs = d.num_seconds().unsigned_abs();
    let span =
        humantime::format_duration(std::time::Duration::from_secs(if secs >= 60 { secs / 60 * 60 } else { secs }));
    if d.num_seconds() >= 0 { format!("{} (in {span})", time(t)) } else { format!("{} ({span} ago)", time(t)) }
}

/// "1 escalation", "2 escalations".
pub fn count(n: usize, singular: &str) -> String {
    if n == 1 { format!("1 {singular}") } else { format!("{n} {singular}s") }
}

pub fn opt_time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "—".to_owned(), time)
}

/// `text` with every run that may be a phone number masked: for messages from AWS, which name
/// the numbers they refuse in clear (the domain's one function, also used by the adapters).
pub use tocsin::domain::phone::mask_numbers_in;

pub fn opt(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).map_or_else(|| "—".to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    #[test]
    fn times_read_in_utc_with_their_distance_from_now() {
        let now = at("2026-11-29T22:00:00Z");
        assert_eq!(time(now), "2026-11-29 22:00:00 UTC");
        assert_eq!(time_relative(at("2026-11-29T22:12:30Z"), now), "2026-11-29 22:12:30 UTC (in 12m)");
        assert_eq!(time_relative(at("2026-11-29T19:00:00Z"), now), "2026-11-29 19:00:00 UTC (3h ago)");
        assert_eq!(opt_time(None), "—");
        assert_eq!((count(1, "escalation"), count(2, "escalation")), ("1 escalation".into(), "2 escalations".into()));
    }

    #[test]
    fn numbers_in_an_aws_message_are_masked_and_ids_and_prices_are_not() {
        assert_eq!(
            mask_numbers_in("+14155550100 is opted out in Default (phone-12ab, 0.00581 USD)"),
            "+1******0100 is opted out in Default (phone-12ab, 0.00581 USD)"
        );
        assert_eq!(mask_numbers_in("18335550001"), "1******0001");
    }
}
