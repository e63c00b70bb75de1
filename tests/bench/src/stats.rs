//! Order statistics over repeated measurements.

use std::time::Duration;

/// Median and 90th percentile (nearest rank) of a set of durations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: Duration,
    pub p90: Duration,
    pub runs: usize,
}

/// `None` for an empty set.
pub fn summarise(samples: &[Duration]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort();
    let n = s.len();
    let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2 };
    let rank = (n * 9).div_ceil(10).max(1);
    Some(Summary { median, p90: s[rank - 1], runs: n })
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p90_by_nearest_rank() {
        let s: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let r = summarise(&s).expect("non-empty");
        assert_eq!(r.median, Duration::from_micros(5500));
        assert_eq!(r.p90, Duration::from_millis(9));
        assert_eq!(summarise(&[]), None);
    }
}
