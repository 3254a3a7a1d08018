//! The highest readings seen so far.

use super::probe::MemorySample;

/// Keeps the peak of `bytes_in_use` and of `bytes_reserved` over the samples it is shown.
///
/// A peak between two samples (inside a step) is not seen: sample more often to catch it.
#[derive(Clone, Debug, Default)]
pub struct PeakTracker {
    peak_in_use: u64,
    peak_reserved: u64,
    samples: u64,
    last: Option<MemorySample>,
}

impl PeakTracker {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn observe(&mut self, sample: MemorySample) {
        self.peak_in_use = self.peak_in_use.max(sample.bytes_in_use);
        self.peak_reserved = self.peak_reserved.max(sample.bytes_reserved);
        self.samples += 1;
        self.last = Some(sample);
    }

    /// Highest `bytes_in_use` seen, `None` before the first sample.
    pub fn peak_in_use(&self) -> Option<u64> {
        (self.samples > 0).then_some(self.peak_in_use)
    }

    /// Highest `bytes_reserved` seen, `None` before the first sample.
    pub fn peak_reserved(&self) -> Option<u64> {
        (self.samples > 0).then_some(self.peak_reserved)
    }

    pub fn last(&self) -> Option<MemorySample> {
        self.last
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Starts over, e.g. to measure the peak of one phase alone.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(in_use: u64, reserved: u64) -> MemorySample {
        MemorySample { bytes_in_use: in_use, bytes_reserved: reserved, allocations: 1 }
    }

    #[test]
    fn peaks_are_kept_independently() {
        let mut tracker = PeakTracker::new();
        assert_eq!(tracker.peak_in_use(), None);
        tracker.observe(sample(10, 100));
        tracker.observe(sample(50, 80));
        tracker.observe(sample(20, 120));
        assert_eq!(tracker.peak_in_use(), Some(50));
        assert_eq!(tracker.peak_reserved(), Some(120));
        assert_eq!(tracker.last(), Some(sample(20, 120)));
        tracker.reset();
        assert_eq!(tracker.peak_reserved(), None);
    }
}
