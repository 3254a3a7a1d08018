//! Pool health: a caching pool that keeps far more than is live, for long, is holding
//! memory other allocations (and other processes) cannot use: after a transient peak, or
//! from fragmentation across size classes.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::format_bytes;
use super::probe::MemorySample;

/// Watches `bytes_reserved / bytes_in_use` sample by sample and says when the pool has
/// been bloated for `patience` samples in a row: reserved above `ratio` × in use *and*
/// more than `min_excess` bytes above it (a small pool at 3× is no problem).
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
        /// `bytes_reserved / bytes_in_use` at the last sample.
        ratio: f64,
        /// Reserved bytes not in use at the last sample.
        excess: u64,
    },
}

impl PoolHealth {
    /// A watcher with the given thresholds (`patience` of at least 1).
    pub fn new(ratio: f64, min_excess: u64, patience: usize) -> Self {
        Self { ratio, min_excess, patience: patience.max(1), run: 0, samples: 0, last: None, warned: false }
    }

    fn bloated(&self, sample: MemorySample) -> bool {
        let excess = sample.bytes_reserved.saturating_sub(sample.bytes_in_use);
        excess > self.min_excess && sample.bytes_reserved as f64 > self.ratio * sample.bytes_in_use as f64
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
        PoolVerdict::Bloated {
            samples: self.run,
            ratio: last.bytes_reserved as f64 / last.bytes_in_use.max(1) as f64,
            excess: last.bytes_reserved.saturating_sub(last.bytes_in_use),
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
                "bloated: reserved {ratio:.1}× what is in use ({} idle) for {samples} samples; \
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
