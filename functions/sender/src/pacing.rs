//! Pacing: the send rate (this instance's share of the account's parts per second) and, in storm
//! mode, the recipient's send budget (its send log). Publishes nothing; what it cannot pace goes back.

use std::time::Duration;

use chrono::{DateTime, Utc};
use governor::RateLimiter;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};

use crate::claiming::Claimed;
use crate::retries::RECORD_RESERVE;
use crate::storm::Slot;
use crate::{Outcome, Sender, SenderClock, SenderQueue, SenderStore};
use tocsin::domain::PhoneNumber;
use tocsin::ports::{Clock, RecipientRegistry, RecipientRoster, SendLog, SmsGateway, after, time_left};

/// The send-rate limiter on the handler's own [`Clock`] (time since the epoch): the same limiter
/// runs on the wall clock in Lambda and on simulated time in the simulation. (governor's default
/// clock, quanta, also calibrates itself at start-up by spinning the CPU, ~0.6 ms measured.)
pub(crate) type PartLimiter<C> = RateLimiter<NotKeyed, InMemoryState, RateClock<C>, NoOpMiddleware<Duration>>;

/// A [`Clock`] as governor reads one: the time since the Unix epoch.
pub struct RateClock<C>(pub(crate) C);

impl<C: Clock> governor::clock::Clock for RateClock<C> {
    type Instant = Duration;
    fn now(&self) -> Duration {
        since_epoch(self.0.now())
    }
}

fn since_epoch(t: DateTime<Utc>) -> Duration {
    t.signed_duration_since(DateTime::UNIX_EPOCH).to_std().unwrap_or_default()
}

pub(crate) const NON_ZERO_ONE: std::num::NonZeroU32 = std::num::NonZeroU32::MIN;

impl<S: SenderStore, R: RecipientRegistry + RecipientRoster, G: SmsGateway, Q: SenderQueue, C: SenderClock>
    Sender<S, R, G, Q, C>
{
    /// Waits for the send rate to allow `parts` SMS parts, unless that would take longer than
    /// `budget`. False: out of time (the parts taken so far are simply not used).
    pub(crate) async fn wait_for_rate(&self, parts: u32, budget: Duration) -> bool {
        let give_up_at = after(self.clock.now(), budget);
        for _ in 0..parts.max(1) {
            loop {
                let not_until = match self.limiter.check() {
                    Ok(()) => break,
                    Err(not_until) => not_until,
                };
                let free_at = after(self.clock.now(), not_until.wait_time_from(since_epoch(self.clock.now())));
                if free_at > give_up_at {
                    return false;
                }
                self.clock.sleep_until(free_at).await;
            }
        }
        true
    }

    /// How long a rate wait may last: what leaves time to publish and record before `deadline`.
    pub(crate) fn rate_budget(&self, deadline: DateTime<Utc>) -> Duration {
        time_left(&self.clock, deadline).saturating_sub(self.config.publish_timeout + RECORD_RESERVE)
    }

    /// Appends this send to the recipient's send log, conditioned on the log read: of two senders
    /// for the same person, one sends. `Err`: not appended, and `members` went back unsent.
    pub(crate) async fn spend_budget(
        &self,
        recipient: &PhoneNumber,
        log: &SendLog,
        members: &[&(Slot, Claimed<'_>)],
        now: DateTime<Utc>,
    ) -> Result<(), Vec<(Slot, Outcome)>> {
        let mut out = Vec::new();
        let window = chrono::Duration::from_std(self.config.storm.window).unwrap_or(chrono::Duration::minutes(5));
        let keep = usize::try_from(self.config.storm.max_sms_per_window).unwrap_or(usize::MAX);
        match self.store.record_send(recipient, log, now, keep, now + window).await {
            Ok(true) => {}
            Ok(false) => {
                // Another sender is sending to this person at this moment: its SMS covers what
                // it holds; these go back unsent and come round again shortly.
                for (i, c) in members.iter().copied() {
                    let why = "another sender is sending to this recipient right now".to_owned();
                    out.push((
                        *i,
                        self.hand_back(&c.record, &c.attempt_id, why, self.config.retry_base_delay, c.msg).await,
                    ));
                }
                return Err(out);
            }
            Err(e) => {
                tracing::warn!(recipient = %recipient.masked(), error = %e, "send log not written; releasing the claims");
                out.extend(self.release_each(members.iter().copied(), &e.to_string(), now).await);
                return Err(out);
            }
        }
        Ok(())
    }
}
