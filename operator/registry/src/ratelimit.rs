//! Scan step, politeness: a request-rate limit per registry host, pauses after HTTP 429,
//! bounded retries with backoff, and warnings that do not flood the log.
//!
//! Every request the client makes for a registry (tag-list pages, manifest `HEAD`/`GET`,
//! blob `GET`, token fetches) first takes a token from that registry's `Bucket`. The
//! bucket is a GCRA ("virtual scheduling") limiter: each caller reserves the next free slot
//! and sleeps until it, so waiting costs one timer per request and no polling, and callers are
//! served in arrival order. The schedule itself (`Bucket::reserve`) takes the current
//! instant as an argument, so tests check it deterministically with made-up instants.
//!
//! Kept rather than `governor`: governor's GCRA admits or rejects (`check` returns the
//! earliest time to try again) and its `until_ready` re-checks after sleeping, so it has no
//! reservation of a future slot (arrival order), no refund for a waiter that is cancelled,
//! and no pause after a 429 that also holds callers already waiting — the behaviours the
//! tests below pin down.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Requests per second allowed to one registry host when its settings do not say. Registries
/// built for machine pulls (ECR, GHCR, Harbor, distribution, Artifact Registry) take far
/// more; a registry that throttles below it answers 429, which pauses the host for its
/// `Retry-After`.
pub const DEFAULT_RATE_PER_SECOND: f64 = 100.0;
/// Requests allowed at once, before the rate applies, when the settings do not say.
pub const DEFAULT_BURST: u32 = 200;
/// The same for Docker Hub, which limits API requests per client address and counts manifest
/// reads as pulls.
pub const DEFAULT_DOCKER_HUB_RATE_PER_SECOND: f64 = 10.0;
/// Docker Hub's burst when the settings do not say.
pub const DEFAULT_DOCKER_HUB_BURST: u32 = 20;

/// How long a host stays paused after a 429 that had no usable `Retry-After`.
pub const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(10);
/// A paused host makes callers wait at most this long; a longer pause fails the call at once
/// with `RateLimited` (and the remaining pause), so controller workers are not held for
/// minutes and the reconcile is requeued for when the registry accepts requests again.
pub const MAX_PAUSE_WAIT: Duration = Duration::from_secs(10);

/// A token bucket for one registry host.
#[derive(Debug)]
pub struct Bucket {
    /// Time between two requests at the steady rate.
    interval: Duration,
    /// How far ahead of the steady schedule requests may run: `(burst - 1) * interval`.
    tolerance: Duration,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Theoretical arrival time: when the next request would be due at the steady rate.
    tat: Instant,
    /// No request goes out before this instant (set after a 429).
    paused_until: Option<Instant>,
}

impl Bucket {
    /// `rate` requests per second (must be positive and finite; callers validate), with
    /// `burst` (at least 1) allowed at once.
    pub fn new(rate: f64, burst: u32) -> Bucket {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let tolerance = interval.saturating_mul(burst.max(1) - 1);
        Bucket {
            interval,
            tolerance,
            state: Mutex::new(BucketState {
                tat: Instant::now(),
                paused_until: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BucketState> {
        // Only plain arithmetic runs under the lock; a poisoned lock holds consistent data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the next request slot as of `now` and returns when it is due; fails with the
    /// remaining pause when the host is paused for longer than `max_pause`. Pure bookkeeping
    /// (no waiting), so the schedule can be checked with made-up instants.
    pub fn reserve(&self, now: Instant, max_pause: Duration) -> Result<Instant, Duration> {
        let mut state = self.lock();
        if let Some(until) = state.paused_until {
            if until <= now {
                state.paused_until = None;
            } else if until - now > max_pause {
                return Err(until - now);
            }
        }
        let earliest = state.tat.checked_sub(self.tolerance).unwrap_or(state.tat);
        state.tat = state.tat.max(now) + self.interval;
        Ok(earliest.max(now))
    }

    /// Gives back a slot taken by [`Self::reserve`] and not used.
    pub fn refund(&self) {
        let mut state = self.lock();
        if let Some(earlier) = state.tat.checked_sub(self.interval) {
            state.tat = earlier;
        }
    }

    /// Waits for this host's next request slot.
    ///
    /// Fails with the remaining pause when the host is paused for longer than `max_pause`.
    /// Cancel-safe: a caller dropped while waiting gives its slot back.
    pub async fn acquire(&self, max_pause: Duration) -> Result<(), Duration> {
        loop {
            let ready = self.reserve(Instant::now(), max_pause)?;
            let mut reservation = Reservation {
                bucket: self,
                done: false,
            };
            tokio::time::sleep_until(ready).await;
            reservation.done = true;
            // A 429 that arrived while this caller slept pauses it too.
            if self.paused_for_at(Instant::now()).is_none() {
                return Ok(());
            }
        }
    }

    /// Stops requests to this host until `until`. The steady rate resumes from there without
    /// a burst: a registry that just asked to slow down gets requests one by one.
    pub fn pause_until(&self, until: Instant) {
        let mut state = self.lock();
        if state.paused_until.is_none_or(|current| current < until) {
            state.paused_until = Some(until);
        }
        state.tat = state.tat.max(until + self.tolerance);
    }

    /// How long the host remains paused after `now`, if it is.
    pub fn paused_for_at(&self, now: Instant) -> Option<Duration> {
        let state = self.lock();
        state
            .paused_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }
}

/// A reserved slot; returned to the bucket if the waiter is dropped before its turn.
struct Reservation<'a> {
    bucket: &'a Bucket,
    done: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.bucket.refund();
        }
    }
}

/// Retries inside one call for 5xx answers and transport failures (timeouts, refused or
/// reset connections). All registry requests are `GET` or `HEAD`, so repeating them is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts after the first.
    pub retries: u32,
    /// Delay before the first retry; each further retry waits four times longer, up to `max`.
    pub base: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // 200 ms, then 800 ms (plus jitter): about a second in all, so a registry that is
        // restarting gets a chance without making a broken one hold a worker for long.
        RetryPolicy {
            retries: 2,
            base: Duration::from_millis(200),
            max: Duration::from_millis(800),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `retry` (1-based), with up to 25 % random jitter so that
    /// watches failing together do not retry in lockstep.
    pub fn delay(&self, retry: u32) -> Duration {
        use backon::{BackoffBuilder as _, ExponentialBuilder};
        let delay = ExponentialBuilder::new()
            .with_min_delay(self.base)
            .with_max_delay(self.max)
            .with_factor(4.0)
            .without_max_times()
            .build()
            .nth(retry.saturating_sub(1).min(16) as usize)
            .unwrap_or(self.max);
        // backon's own jitter adds up to 100 %; the spread here stays within 25 %.
        delay + delay.mul_f64(fastrand::f64() / 4.0)
    }
}

/// Whether an HTTP status is worth retrying within one call: server-side failures that may
/// be temporary (not 501/505, which will not change).
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 500 | 502 | 503 | 504) || (506..=599).contains(&status)
}

/// Decides whether a failure of one host is logged at `warn` (first time in a window) or
/// only at `debug`, so a registry that is down for an hour logs a handful of warnings, not
/// one per request.
#[derive(Debug)]
pub struct WarnThrottle {
    every: Duration,
    last: Mutex<HashMap<String, Instant>>,
}

impl WarnThrottle {
    pub fn new(every: Duration) -> WarnThrottle {
        WarnThrottle {
            every,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// `true` at most once per window per host.
    pub fn should_warn(&self, host: &str) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match last.get(host) {
            Some(at) if now.saturating_duration_since(*at) < self.every => false,
            _ => {
                last.insert(host.to_string(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Ready times of `n` requests all asked for at `at`, relative to `at`.
    fn schedule(bucket: &Bucket, at: Instant, n: usize) -> Vec<Duration> {
        (0..n)
            .map(|_| bucket.reserve(at, MAX_PAUSE_WAIT).unwrap() - at)
            .collect()
    }

    #[test]
    fn burst_then_steady_rate() {
        // 50 requests at 10/s with a burst of 20: the first 20 go at once, then one every
        // 100 ms, so the last goes (50 - 20) / 10 = 3 s after the first.
        let bucket = Bucket::new(10.0, 20);
        let t0 = Instant::now();
        let times = schedule(&bucket, t0, 50);
        assert!(
            times[..20].iter().all(|t| *t == Duration::ZERO),
            "{times:?}"
        );
        assert_eq!(times[20], ms(100));
        assert_eq!(times[49], ms(3000));
        assert!(times.windows(2).all(|w| w[0] <= w[1]));

        // Requests spread out at the steady rate never wait.
        let later = t0 + Duration::from_secs(600);
        for i in 0..100 {
            let at = later + ms(100) * i;
            assert_eq!(bucket.reserve(at, MAX_PAUSE_WAIT).unwrap(), at);
        }
        // After a quiet period the full burst is back, but never more than it.
        let quiet = later + Duration::from_secs(700);
        let times = schedule(&bucket, quiet, 25);
        assert_eq!(times[19], Duration::ZERO);
        assert_eq!(times[24], ms(500));
    }

    #[test]
    fn n_requests_take_at_least_n_minus_burst_over_rate() {
        for (rate, burst, n) in [
            (1.0, 1u32, 5u32),
            (2.5, 3, 13),
            (3.0, 7, 40),
            (100.0, 50, 400),
        ] {
            let bucket = Bucket::new(rate, burst);
            let t0 = Instant::now();
            let last = *schedule(&bucket, t0, n as usize).last().unwrap();
            let minimum = f64::from(n - burst) / rate;
            let last = last.as_secs_f64();
            // Within a microsecond of the bound (the interval is rounded to nanoseconds).
            assert!(
                (last - minimum).abs() < 1e-6,
                "{rate}/{burst}/{n}: {last} vs {minimum}"
            );
        }
    }

    #[test]
    fn pause_blocks_short_waits_and_fails_long_ones() {
        let bucket = Bucket::new(10.0, 20);
        let t0 = Instant::now();
        bucket.pause_until(t0 + Duration::from_secs(3));
        assert_eq!(bucket.paused_for_at(t0), Some(Duration::from_secs(3)));
        assert_eq!(
            bucket.reserve(t0, MAX_PAUSE_WAIT).unwrap() - t0,
            Duration::from_secs(3)
        );
        // No burst right after a pause: the next request waits one interval more.
        assert_eq!(
            bucket.reserve(t0, MAX_PAUSE_WAIT).unwrap() - t0,
            Duration::from_secs(3) + ms(100)
        );

        let t1 = t0 + Duration::from_secs(10);
        bucket.pause_until(t1 + Duration::from_secs(120));
        assert_eq!(
            bucket.reserve(t1, MAX_PAUSE_WAIT).unwrap_err(),
            Duration::from_secs(120)
        );
        // A shorter pause never shortens a longer one.
        bucket.pause_until(t1 + Duration::from_secs(1));
        assert_eq!(bucket.paused_for_at(t1), Some(Duration::from_secs(120)));
        let t2 = t1 + Duration::from_secs(120);
        assert_eq!(bucket.paused_for_at(t2), None);
        assert_eq!(bucket.reserve(t2, MAX_PAUSE_WAIT).unwrap(), t2);
    }

    #[test]
    fn refunds_return_unused_slots() {
        let bucket = Bucket::new(1.0, 1);
        let t0 = Instant::now();
        assert_eq!(bucket.reserve(t0, MAX_PAUSE_WAIT).unwrap(), t0);
        // Ten callers reserve and give up; without refunds the next would wait 11 s.
        for _ in 0..10 {
            bucket.reserve(t0, MAX_PAUSE_WAIT).unwrap();
            bucket.refund();
        }
        assert_eq!(
            bucket.reserve(t0, MAX_PAUSE_WAIT).unwrap() - t0,
            Duration::from_secs(1)
        );
    }

    // The waiting itself, on the real clock: only lower bounds are asserted, since a sleep
    // never ends early but may end late on a busy machine.
    #[tokio::test]
    async fn acquire_waits_for_the_schedule_and_for_pauses() {
        let bucket = Arc::new(Bucket::new(50.0, 2));
        let start = Instant::now();
        for _ in 0..7 {
            bucket.acquire(MAX_PAUSE_WAIT).await.unwrap();
        }
        assert!(start.elapsed() >= ms(100), "{:?}", start.elapsed());

        // A caller already waiting when a 429 arrives waits for the pause too.
        let waiter = {
            let bucket = bucket.clone();
            tokio::spawn(async move {
                bucket.acquire(MAX_PAUSE_WAIT).await.unwrap();
                Instant::now()
            })
        };
        let paused_at = Instant::now();
        bucket.pause_until(paused_at + ms(300));
        assert!(waiter.await.unwrap() >= paused_at + ms(300));

        // Cancelled waiters give their slot back.
        let slow = Bucket::new(1.0, 1);
        slow.acquire(MAX_PAUSE_WAIT).await.unwrap();
        for _ in 0..5 {
            let r = tokio::time::timeout(ms(10), slow.acquire(MAX_PAUSE_WAIT)).await;
            assert!(r.is_err());
        }
        let t = Instant::now();
        assert!(slow.reserve(t, MAX_PAUSE_WAIT).unwrap() <= t + Duration::from_secs(1));
    }

    #[test]
    fn retry_delays_grow_and_stay_bounded() {
        let policy = RetryPolicy::default();
        for _ in 0..20 {
            let first = policy.delay(1);
            let second = policy.delay(2);
            let fifth = policy.delay(5);
            assert!(first >= ms(200) && first <= ms(250), "{first:?}");
            assert!(second >= ms(800) && second <= ms(1000), "{second:?}");
            assert!(fifth <= ms(1000), "{fifth:?}");
        }
        assert!(is_retryable_status(503));
        assert!(!is_retryable_status(501));
        assert!(!is_retryable_status(404));
        assert!(!is_retryable_status(429));
    }

    #[test]
    fn warnings_are_throttled_per_host() {
        let throttle = WarnThrottle::new(Duration::from_secs(60));
        assert!(throttle.should_warn("a"));
        assert!(!throttle.should_warn("a"));
        assert!(throttle.should_warn("b"));
        let zero = WarnThrottle::new(Duration::ZERO);
        assert!(zero.should_warn("a"));
        assert!(zero.should_warn("a"));
    }
}
