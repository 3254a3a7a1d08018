//! A readable summary of a device pool, in the spirit of `torch.cuda.memory_summary()`.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::format_bytes;
use super::host::HostMemory;
use super::leak::LeakReport;
use super::pool_health::PoolVerdict;
use super::probe::MemorySample;

/// A summary of what a [`MemoryMonitor`](super::MemoryMonitor) saw. `Display` prints it
/// as a table; it also serialises for JSON logs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryReport {
    pub backend: String,
    /// The first sample taken (the baseline).
    pub first: Option<MemorySample>,
    /// The last sample taken.
    pub current: Option<MemorySample>,
    pub peak_in_use: Option<u64>,
    pub peak_reserved: Option<u64>,
    /// The leak fit over the detector's window, once anything was sampled.
    pub leak: Option<LeakReport>,
    /// Whether the pool has kept far more reserved than in use for long (fragmentation,
    /// or a past peak never trimmed).
    pub pool: PoolVerdict,
    /// The process's resident memory at the last sample, where the backend has no device
    /// pool (host RAM: shown apart, never as device memory).
    #[serde(default)]
    pub host: Option<HostMemory>,
}

impl MemoryReport {
    /// `bytes_reserved / bytes_in_use` now: how much the pool keeps beyond what is live.
    pub fn reserved_ratio(&self) -> Option<f64> {
        self.current.filter(|c| c.bytes_in_use > 0).map(|c| c.bytes_reserved as f64 / c.bytes_in_use as f64)
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "memory report: {}", self.backend)?;
        let Some(current) = self.current else {
            writeln!(f, "  device memory: not available on this backend")?;
            if let Some(host) = self.host {
                writeln!(
                    f,
                    "  host memory (process resident): current {}, peak {}",
                    format_bytes(host.resident as f64),
                    format_bytes(host.peak_resident as f64)
                )?;
            }
            return Ok(());
        };
        let bytes = |b: Option<u64>| b.map_or_else(|| "-".to_string(), |b| format_bytes(b as f64));
        writeln!(f, "  {:<20}{:>14}{:>14}{:>14}", "", "first", "current", "peak")?;
        writeln!(
            f,
            "  {:<20}{:>14}{:>14}{:>14}",
            "in use",
            bytes(self.first.map(|s| s.bytes_in_use)),
            bytes(Some(current.bytes_in_use)),
            bytes(self.peak_in_use),
        )?;
        writeln!(
            f,
            "  {:<20}{:>14}{:>14}{:>14}",
            "reserved",
            bytes(self.first.map(|s| s.bytes_reserved)),
            bytes(Some(current.bytes_reserved)),
            bytes(self.peak_reserved),
        )?;
        writeln!(
            f,
            "  {:<20}{:>14}{:>14}",
            "allocations",
            self.first.map_or_else(|| "-".to_string(), |s| s.allocations.to_string()),
            current.allocations,
        )?;
        if let Some(ratio) = self.reserved_ratio() {
            writeln!(f, "  {:<20}{:>28}", "reserved / in use", format!("{ratio:.2}x"))?;
        }
        if let Some(leak) = &self.leak {
            writeln!(f, "  growth / step       {leak}")?;
        }
        if self.pool != PoolVerdict::Unknown {
            writeln!(f, "  pool                {}", self.pool)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::LeakVerdict;

    #[test]
    fn unavailable_memory_is_said_not_zeroed() {
        let report = MemoryReport {
            backend: "flex".into(),
            first: None,
            current: None,
            peak_in_use: None,
            peak_reserved: None,
            leak: None,
            pool: PoolVerdict::Unknown,
            host: None,
        };
        let text = report.to_string();
        assert!(text.contains("not available"), "{text}");
        assert!(!text.contains(" 0 B"), "{text}");
        assert!(!text.contains("host memory"), "{text}");

        let host = Some(HostMemory { resident: 3 << 20, peak_resident: 5 << 20 });
        let text = MemoryReport { host, ..report }.to_string();
        assert!(text.contains("device memory: not available"), "{text}");
        assert!(text.contains("host memory (process resident): current 3.00 MiB, peak 5.00 MiB"), "{text}");
    }

    #[test]
    fn table_shows_current_peak_ratio_and_verdict() {
        let sample = |u, r| MemorySample { bytes_in_use: u, bytes_reserved: r, allocations: 3 };
        let report = MemoryReport {
            backend: "wgpu".into(),
            first: Some(sample(1024, 4096)),
            current: Some(sample(2048, 8192)),
            peak_in_use: Some(4096),
            peak_reserved: Some(8192),
            leak: Some(LeakReport {
                growth_per_step: 0.0,
                growth_over_window: 0,
                samples: 30,
                tolerance_per_step: 1024.0,
                verdict: LeakVerdict::Flat,
            }),
            pool: PoolVerdict::Healthy,
            host: None,
        };
        let text = report.to_string();
        assert!(text.contains("2.00 KiB"), "{text}");
        assert!(text.contains("8.00 KiB"), "{text}");
        assert!(text.contains("4.00x"), "{text}");
        assert!(text.contains("flat over 30 samples"), "{text}");
        assert!(text.contains("pool                healthy"), "{text}");
    }
}
