//! Fitting the trend of `bytes_in_use` over recent steps to tell a leak from noise.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::format_bytes;

/// What the detector concluded from its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeakVerdict {
    /// Fewer samples than needed for a fit.
    NotEnoughSamples { have: usize, need: usize },
    /// The fitted growth per step is within the tolerance.
    Flat,
    /// Live memory grows step after step by more than the tolerance.
    Growing,
    /// Live memory falls by more than the tolerance per step (a warm-up being undone).
    Shrinking,
}

impl fmt::Display for LeakVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotEnoughSamples { have, need } => {
                write!(f, "not enough samples ({have} of {need})")
            }
            Self::Flat => f.write_str("flat"),
            Self::Growing => f.write_str("GROWING (leak)"),
            Self::Shrinking => f.write_str("shrinking"),
        }
    }
}

/// The fit over the detector's window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeakReport {
    /// Least-squares slope of `bytes_in_use` against step, in bytes per step.
    pub growth_per_step: f64,
    /// `bytes_in_use` at the last sample minus at the first sample of the window.
    pub growth_over_window: i64,
    /// Samples in the window.
    pub samples: usize,
    /// Tolerance the slope was judged against, in bytes per step.
    pub tolerance_per_step: f64,
    pub verdict: LeakVerdict,
}

impl LeakReport {
    pub fn is_growing(&self) -> bool {
        self.verdict == LeakVerdict::Growing
    }
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} over {} samples: {}/step (tolerance {}/step), {} over the window",
            self.verdict,
            self.samples,
            format_bytes(self.growth_per_step),
            format_bytes(self.tolerance_per_step),
            format_bytes(self.growth_over_window as f64),
        )
    }
}

/// Fits the slope of `bytes_in_use` over the last `window` samples.
///
/// A step is whatever the caller feeds between two samples. The tolerance is the larger of
/// an absolute number of bytes per step and a fraction of the mean live memory per step, so
/// that a 1-byte jitter on a 10 GB model is not a leak and neither is a 4 KiB one on a
/// 100 KiB test model.
#[derive(Clone, Debug)]
pub struct LeakDetector {
    window: usize,
    min_samples: usize,
    absolute_tolerance: f64,
    relative_tolerance: f64,
    samples: VecDeque<(u64, u64)>,
}

impl LeakDetector {
    /// Default absolute tolerance: 1 KiB per step.
    pub const DEFAULT_ABSOLUTE_TOLERANCE: f64 = 1024.0;
    /// Default relative tolerance: 0.01% of live memory per step (1% over 100 steps).
    pub const DEFAULT_RELATIVE_TOLERANCE: f64 = 1e-4;

    /// A detector over the last `window` samples (at least 3 are needed for a verdict).
    pub fn new(window: usize) -> Self {
        let window = window.max(3);
        Self {
            window,
            min_samples: 3,
            absolute_tolerance: Self::DEFAULT_ABSOLUTE_TOLERANCE,
            relative_tolerance: Self::DEFAULT_RELATIVE_TOLERANCE,
            samples: VecDeque::with_capacity(window),
        }
    }

    /// Sets the absolute tolerance in bytes per step.
    pub fn with_absolute_tolerance(mut self, bytes_per_step: f64) -> Self {
        self.absolute_tolerance = bytes_per_step.max(0.0);
        self
    }

    /// Sets the tolerance as a fraction of mean live memory per step.
    pub fn with_relative_tolerance(mut self, fraction_per_step: f64) -> Self {
        self.relative_tolerance = fraction_per_step.max(0.0);
        self
    }

    /// Records `bytes_in_use` at `step`. Steps must increase; the oldest sample falls out.
    pub fn record(&mut self, step: u64, bytes_in_use: u64) {
        if self.samples.len() == self.window {
            self.samples.pop_front();
        }
        self.samples.push_back((step, bytes_in_use));
    }

    pub fn clear(&mut self) {
        self.samples.clear();
    }

    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    pub fn report(&self) -> LeakReport {
        let n = self.samples.len();
        let growth_over_window = match (self.samples.front(), self.samples.back()) {
            (Some(first), Some(last)) => last.1 as i64 - first.1 as i64,
            _ => 0,
        };
        if n < self.min_samples {
            return LeakReport {
                growth_per_step: 0.0,
                growth_over_window,
                samples: n,
                tolerance_per_step: self.absolute_tolerance,
                verdict: LeakVerdict::NotEnoughSamples { have: n, need: self.min_samples },
            };
        }
        let mean_x = self.samples.iter().map(|s| s.0 as f64).sum::<f64>() / n as f64;
        let mean_y = self.samples.iter().map(|s| s.1 as f64).sum::<f64>() / n as f64;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(x, y) in &self.samples {
            let dx = x as f64 - mean_x;
            sxy += dx * (y as f64 - mean_y);
            sxx += dx * dx;
        }
        let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        let tolerance = self.absolute_tolerance.max(self.relative_tolerance * mean_y);
        let verdict = if slope > tolerance {
            LeakVerdict::Growing
        } else if slope < -tolerance {
            LeakVerdict::Shrinking
        } else {
            LeakVerdict::Flat
        };
        LeakReport { growth_per_step: slope, growth_over_window, samples: n, tolerance_per_step: tolerance, verdict }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_memory_is_flat() {
        let mut detector = LeakDetector::new(30);
        for step in 0..30 {
            detector.record(step, 1_000_000);
        }
        let report = detector.report();
        assert_eq!(report.verdict, LeakVerdict::Flat);
        assert_eq!(report.growth_per_step, 0.0);
    }

    #[test]
    fn steady_growth_is_measured_exactly() {
        let mut detector = LeakDetector::new(16);
        for step in 0..16 {
            detector.record(step, 500_000 + 131_072 * step);
        }
        let report = detector.report();
        assert_eq!(report.verdict, LeakVerdict::Growing);
        assert!((report.growth_per_step - 131_072.0).abs() < 1e-6);
        assert_eq!(report.growth_over_window, 15 * 131_072);
    }

    #[test]
    fn jitter_below_tolerance_is_not_a_leak() {
        let mut detector = LeakDetector::new(20);
        for step in 0..20 {
            let jitter = if step % 2 == 0 { 512 } else { 0 };
            detector.record(step, 10_000_000 + jitter);
        }
        assert_eq!(detector.report().verdict, LeakVerdict::Flat);
    }

    #[test]
    fn a_single_late_jump_in_a_long_window_is_growth_only_if_large() {
        let mut detector = LeakDetector::new(10).with_absolute_tolerance(0.0).with_relative_tolerance(0.0);
        for step in 0..10 {
            detector.record(step, if step < 9 { 100 } else { 200 });
        }
        assert_eq!(detector.report().verdict, LeakVerdict::Growing);
    }

    #[test]
    fn window_forgets_old_samples() {
        let mut detector = LeakDetector::new(5);
        for step in 0..5 {
            detector.record(step, step * 1_000_000);
        }
        for step in 5..10 {
            detector.record(step, 9_000_000);
        }
        let report = detector.report();
        assert_eq!(report.samples, 5);
        assert_eq!(report.verdict, LeakVerdict::Flat);
    }

    #[test]
    fn too_few_samples_give_no_verdict() {
        let mut detector = LeakDetector::new(10);
        detector.record(0, 1);
        detector.record(1, 1_000_000_000);
        assert_eq!(detector.report().verdict, LeakVerdict::NotEnoughSamples { have: 2, need: 3 });
    }
}
