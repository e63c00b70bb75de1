//! Retries after a publish: the writes whose loss would turn an SMS that went out into an
//! "unknown", tried again with jittered backoff while the invocation has time. Knows no port.

use std::time::Duration;

use chrono::{DateTime, Utc};

use tocsin::ports::{Clock, Entropy, PortError, after, between};

/// Kept back from the invocation's deadline, after the publish itself, for recording its outcome.
pub(crate) const RECORD_RESERVE: Duration = Duration::from_secs(3);
/// First wait before retrying a failed write of a publish's outcome (doubles, with jitter).
pub(crate) const RECORD_RETRY_BASE: Duration = Duration::from_millis(100);
pub(crate) const RECORD_RETRY_MAX: Duration = Duration::from_secs(4);

/// `op`, tried again on failure with backoff while `deadline` leaves time (never without one):
/// for the writes after a publish, whose loss would turn an SMS that went out into an unknown.
pub(crate) async fn retry_until<C, T, F, Fut>(
    clock: &C,
    deadline: Option<DateTime<Utc>>,
    subject: &str,
    what: &str,
    mut op: F,
) -> Result<T, PortError>
where
    C: Clock + Entropy,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, PortError>>,
{
    let mut failures = 0u32;
    loop {
        let error = match op().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        failures += 1;
        let wait = backoff(clock, failures, RECORD_RETRY_BASE, RECORD_RETRY_MAX);
        match deadline {
            Some(d) if after(clock.now(), wait + RECORD_RESERVE / 3) < d => {
                tracing::warn!(subject, failures, wait_ms = wait.as_millis() as u64, error = %error, "{what} failed; trying again");
                tocsin::ports::sleep(clock, wait).await;
            }
            _ => return Err(error),
        }
    }
}

/// Exponential backoff with full jitter: uniform in [base, min(max, base·2^(attempt-1))].
pub fn backoff<E: Entropy + ?Sized>(entropy: &E, attempt: u32, base: Duration, max: Duration) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
    let cap = exp.min(max).max(base);
    Duration::from_millis(between(entropy, base.as_millis() as u64, cap.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_within_its_bounds() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(60);
        let entropy = tocsin::ports::System;
        for attempt in 1..12 {
            let d = backoff(&entropy, attempt, base, max);
            let cap = (base * 2u32.pow(attempt - 1)).min(max);
            assert!(d >= base && d <= cap, "attempt {attempt}: {d:?}");
        }
        assert_eq!(backoff(&entropy, 1, base, max), base);
    }
}
