//! Per-step sampling of one device: peak tracking and leak detection together.

use super::host::{process_memory, HostMemory};
use super::leak::LeakDetector;
use super::pool_health::PoolHealth;
use super::probe::{MemoryProbe, MemorySample};
use super::report::MemoryReport;
use super::tracker::PeakTracker;

/// Samples one device's pool, feeding a [`PeakTracker`], a [`LeakDetector`] and a
/// [`PoolHealth`] watcher.
///
/// Costs one host sync per sample on lazy backends; sample once per step, not per op.
pub struct MemoryMonitor<B: MemoryProbe> {
    device: B::Device,
    peak: PeakTracker,
    leak: LeakDetector,
    pool: PoolHealth,
    first: Option<MemorySample>,
    host: Option<HostMemory>,
}

impl<B: MemoryProbe> MemoryMonitor<B> {
    /// Monitors `device`, fitting leaks over the last `window` samples.
    pub fn new(device: B::Device, window: usize) -> Self {
        Self::with_detector(device, LeakDetector::new(window))
    }

    pub fn with_detector(device: B::Device, leak: LeakDetector) -> Self {
        Self { device, peak: PeakTracker::new(), leak, pool: PoolHealth::default(), first: None, host: None }
    }

    /// Reads the pool now and records it as `step`; `None` where memory cannot be read.
    /// Without a pool, the process's resident memory is read instead, for the report.
    pub fn sample(&mut self, step: u64) -> Option<MemorySample> {
        let sample = B::memory_sample(&self.device);
        let host = if sample.is_none() { process_memory() } else { None };
        self.observe(step, sample, host);
        sample
    }

    /// Records readings taken elsewhere (a [`StepReport`](crate::trainer::StepReport)'s
    /// `memory` and `host_memory`) as `step`, with no sync of its own. Returns `true` the
    /// first time the pool has been bloated for long ([`PoolHealth::observe`]).
    pub fn observe(&mut self, step: u64, sample: Option<MemorySample>, host: Option<HostMemory>) -> bool {
        if host.is_some() {
            self.host = host;
        }
        let Some(sample) = sample else {
            return false;
        };
        self.peak.observe(sample);
        self.leak.record(step, sample.bytes_in_use);
        self.first.get_or_insert(sample);
        self.pool.observe(sample)
    }

    /// Forgets the leak window (peaks are kept) and settles the pool-health watcher on the
    /// reserve as it is ([`PoolHealth::settle`]): call after a warm-up whose allocations
    /// (optimizer state, autotune, the steps' working set) are expected.
    pub fn restart_leak_window(&mut self) {
        self.leak.clear();
        self.pool.settle();
    }

    pub fn peak(&self) -> &PeakTracker {
        &self.peak
    }

    pub fn leak_detector(&self) -> &LeakDetector {
        &self.leak
    }

    /// Replaces the pool-health watcher (to change its thresholds).
    pub fn with_pool_health(mut self, pool: PoolHealth) -> Self {
        self.pool = pool;
        self
    }

    pub fn pool_health(&self) -> &PoolHealth {
        &self.pool
    }

    pub fn device(&self) -> &B::Device {
        &self.device
    }

    pub fn report(&self) -> MemoryReport {
        MemoryReport {
            backend: B::name(&self.device),
            first: self.first,
            current: self.peak.last(),
            peak_in_use: self.peak.peak_in_use(),
            peak_reserved: self.peak.peak_reserved(),
            leak: (self.first.is_some()).then(|| self.leak.report()),
            pool: self.pool.verdict(),
            host: self.host,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::flex::FlexDevice;
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn without_a_pool_the_report_shows_host_memory_only() {
        let mut monitor = MemoryMonitor::<Flex>::new(FlexDevice, 8);
        assert_eq!(monitor.report().host, None, "nothing read yet");
        assert_eq!(monitor.sample(0), None, "no device pool on the CPU");
        let report = monitor.report();
        assert_eq!(report.current, None);
        assert_eq!(report.host.is_some(), process_memory().is_some(), "{report:?}");
        if let Some(host) = report.host {
            assert!(host.resident > 0 && host.peak_resident >= host.resident, "{host:?}");
        }
    }
}
