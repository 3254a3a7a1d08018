//! Pool health: a caching pool that keeps far more than is live, for long, is holding
//! memory other allocations (and other processes) cannot use: after a transient peak, or
//! from fragmentation across size classes.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::format_bytes;
use super::probe::MemorySample;

/// Watches `bytes_reserved` against what the steps need, sample by sample, and says when
/// the pool has been bloated for `patience` samples in a row: reserved above `ratio` × the
/// need *and* more than `min_excess` bytes above it (a small pool at 3× is no problem).
///
/// The need is what is in use at the sample, or, once [`settle`](Self::settle) has been
/// called after the warm-up steps, the reserve the pool had then if that is larger: a
/// training step's activations are freed by the time the step's sample is read, so a
/// reserve its steps fill at their in-step peak looks many times what is in use, and is
/// not bloat (trimming it would only make the next step allocate it again). A reserve that
/// grows past the settled one and stays there idle (a large buffer released) still is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolHealth {
    ratio: f64,
    min_excess: u64,
    patience: usize,
    /// Consecutive bloated samples up to now.
    run: usize,
    /// Samples seen.
    samples: usize,
    last: Option<MemorySample>,
    warned: bool,
    /// The reserve at [`settle`](Self::settle): what the steps fill at their peak.
    #[serde(default)]
    working_set: Option<u64>,
}

/// The thresholds [`PoolHealth::default`] uses.
pub const DEFAULT_BLOAT_RATIO: f64 = 2.0;
/// At least this much reserved beyond what is live before a pool counts as bloated.
pub const DEFAULT_MIN_EXCESS: u64 = 64 << 20;
/// Samples in a row before a bloated pool is reported.
pub const DEFAULT_PATIENCE: usize = 50;

impl Default for PoolHealth {
    fn default() -> Self {
        Self::new(DEFAULT_BLOAT_RATIO, DEFAULT_MIN_EXCESS, DEFAULT_PATIENCE)
    }
}

/// What [`PoolHealth`] concludes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum PoolVerdict {
    /// Nothing sampled yet.
    Unknown,
    /// Reserved stays near what is live (or the excess is short-lived or small).
    Healthy,
    /// Reserved has exceeded the thresholds for `samples` samples in a row.
    Bloated {
        /// Consecutive bloated samples.
        samples: usize,
        /// `bytes_reserved` over what the steps need at the last sample.
        ratio: f64,
        /// Reserved bytes beyond what the steps need at the last sample.
        excess: u64,
    },
}

impl PoolHealth {
    /// A watcher with the given thresholds (`patience` of at least 1).
    pub fn new(ratio: f64, min_excess: u64, patience: usize) -> Self {
        Self {
            ratio,
            min_excess,
            patience: patience.max(1),
            run: 0,
            samples: 0,
            last: None,
            warned: false,
            working_set: None,
        }
    }

    /// Takes the reserve at the last sample as what the steps need at their peak, from now
    /// on, and judges afresh: call it once the warm-up steps (autotuning, the optimizer's
    /// state, the pool's first pages) are done. Nothing sampled yet: nothing changes.
    pub fn settle(&mut self) {
        if let Some(last) = self.last {
            self.working_set = Some(last.bytes_reserved);
            self.run = 0;
            self.warned = false;
        }
    }

    /// What the steps need at `sample`: what is in use, or the settled reserve if larger.
    fn need(&self, sample: MemorySample) -> u64 {
        sample.bytes_in_use.max(self.working_set.unwrap_or(0))
    }

    fn bloated(&self, sample: MemorySample) -> bool {
        let need = self.need(sample);
        let excess = sample.bytes_reserved.saturating_sub(need);
        excess > self.min_excess && sample.bytes_reserved as f64 > self.ratio * need as f64
    }

    /// Adds a sample. Returns `true` the first time the pool has been bloated for
    /// `patience` samples in a row (and logs a warning through `tracing`); the caller may
    /// warn its user or [`trim`](super::trim).
    pub fn observe(&mut self, sample: MemorySample) -> bool {
        self.samples += 1;
        self.last = Some(sample);
        self.run = if self.bloated(sample) { self.run + 1 } else { 0 };
        if self.run >= self.patience && !self.warned {
            self.warned = true;
            tracing::warn!(verdict = %self.verdict(), "device memory pool bloated");
            return true;
        }
        false
    }

    /// The verdict as of the last sample.
    pub fn verdict(&self) -> PoolVerdict {
        let Some(last) = self.last else {
            return PoolVerdict::Unknown;
        };
        if self.run < self.patience {
            return PoolVerdict::Healthy;
        }
        let need = self.need(last);
        PoolVerdict::Bloated {
            samples: self.run,
            ratio: last.bytes_reserved as f64 / need.max(1) as f64,
            excess: last.bytes_reserved.saturating_sub(need),
        }
    }

    /// Whether the pool was ever reported bloated.
    pub fn ever_bloated(&self) -> bool {
        self.warned
    }
}

impl fmt::Display for PoolVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolVerdict::Unknown => f.write_str("not sampled"),
            PoolVerdict::Healthy => f.write_str("healthy"),
            PoolVerdict::Bloated { samples, ratio, excess } => write!(
                f,
                "bloated: reserved {ratio:.1}× what the steps use ({} idle) for {samples} samples; \
                 trim() it, or set a trim policy",
                format_bytes(*excess as f64)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn sample(in_use: u64, reserved: u64) -> MemorySample {
        MemorySample { bytes_in_use: in_use, bytes_reserved: reserved, allocations: 1 }
    }

    #[test]
    fn a_long_bloated_stretch_is_reported_once() {
        let mut health = PoolHealth::new(2.0, 64 * MIB, 3);
        assert_eq!(health.verdict(), PoolVerdict::Unknown);
        assert!(!health.observe(sample(100 * MIB, 120 * MIB)));
        assert_eq!(health.verdict(), PoolVerdict::Healthy);
        assert!(!health.observe(sample(100 * MIB, 400 * MIB)));
        assert!(!health.observe(sample(100 * MIB, 400 * MIB)));
        assert!(health.observe(sample(100 * MIB, 400 * MIB)), "third bloated sample in a row");
        assert!(!health.observe(sample(100 * MIB, 400 * MIB)), "reported once");
        match health.verdict() {
            PoolVerdict::Bloated { samples: 4, ratio, excess } => {
                assert!((ratio - 4.0).abs() < 1e-9);
                assert_eq!(excess, 300 * MIB);
            }
            other => panic!("expected bloated, got {other:?}"),
        }
        assert!(health.verdict().to_string().contains("300.00 MiB idle"));
        // A trim ends the stretch.
        health.observe(sample(100 * MIB, 110 * MIB));
        assert_eq!(health.verdict(), PoolVerdict::Healthy);
        assert!(health.ever_bloated());
    }

    /// A training run's pool: 1 GiB in use when each step's sample is read, 6.4 GiB reserved
    /// (the steps' in-step peak). Settled, it is healthy; the control, never settled, is
    /// what used to be reported; and a buffer released after settling still warns.
    #[test]
    fn a_reserve_the_steps_fill_is_not_bloat_but_a_released_buffer_is() {
        let step = sample(1024 * MIB, 6554 * MIB);
        let mut settled = PoolHealth::new(2.0, 64 * MIB, 3);
        settled.settle();
        assert_eq!(settled.working_set, None, "nothing sampled: nothing to settle on");
        settled.observe(step);
        settled.settle();
        let mut unsettled = PoolHealth::new(2.0, 64 * MIB, 3);
        for _ in 0..10 {
            assert!(!settled.observe(step));
            unsettled.observe(step);
        }
        assert_eq!(settled.verdict(), PoolVerdict::Healthy);
        assert!(matches!(unsettled.verdict(), PoolVerdict::Bloated { .. }), "the old reading warned");
        // 20 GiB reserved after a large buffer came and went: three samples, then the warning.
        let inflated = sample(1024 * MIB, 20480 * MIB);
        assert!(!settled.observe(inflated) && !settled.observe(inflated));
        assert!(settled.observe(inflated));
        match settled.verdict() {
            PoolVerdict::Bloated { ratio, excess, .. } => {
                assert!((ratio - 20480.0 / 6554.0).abs() < 1e-9, "judged against the settled reserve: {ratio}");
                assert_eq!(excess, (20480 - 6554) * MIB);
            }
            other => panic!("expected bloated, got {other:?}"),
        }
    }

    #[test]
    fn short_or_small_excess_is_healthy() {
        let mut health = PoolHealth::new(2.0, 64 * MIB, 3);
        // Interrupted stretches never reach the patience.
        for _ in 0..10 {
            health.observe(sample(MIB, 500 * MIB));
            health.observe(sample(MIB, MIB));
        }
        // A small pool at 10× is not worth a warning.
        for _ in 0..10 {
            health.observe(sample(MIB, 10 * MIB));
        }
        assert_eq!(health.verdict(), PoolVerdict::Healthy);
        assert!(!health.ever_bloated());
    }
}
