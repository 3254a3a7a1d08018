//! Device-memory telemetry: what the pool holds now, the peak, whether it is leaking.
//! Where a backend has no pool (the CPU backends), [`process_memory`] reads the process's
//! resident memory instead, reported as host memory and never as a device figure.
//!
//! A caching pool never gives memory back on its own, so "reserved" only ever looks like
//! it grows. What tells a leak from a warm pool is `bytes_in_use` (live allocations),
//! sampled every step and fitted for a slope; that is what [`LeakDetector`] does.

mod host;
mod in_step;
mod leak;
mod monitor;
mod pool_health;
mod probe;
mod report;
mod tracker;

pub use host::{process_memory, HostMemory};
pub use in_step::{InStepPeak, InStepReading};
pub use leak::{LeakDetector, LeakReport, LeakVerdict};
pub use monitor::MemoryMonitor;
pub use pool_health::{PoolHealth, PoolVerdict, DEFAULT_BLOAT_RATIO, DEFAULT_MIN_EXCESS, DEFAULT_PATIENCE};
pub use probe::{trim, MemoryProbe, MemorySample, PoolReader, TrimReport};
pub use report::MemoryReport;
pub use tracker::PeakTracker;

/// Formats a byte count the way people read memory: binary units, three significant digits.
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let sign = if bytes < 0.0 { "-" } else { "" };
    let mut value = bytes.abs();
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{sign}{value:.0} {}", UNITS[unit])
    } else {
        format!("{sign}{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::format_bytes;

    #[test]
    fn bytes_are_formatted_in_binary_units() {
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(131_072.0), "128.00 KiB");
        assert_eq!(format_bytes(-3.0 * 1024.0 * 1024.0), "-3.00 MiB");
        assert_eq!(format_bytes(5.5 * 1024.0 * 1024.0 * 1024.0), "5.50 GiB");
    }
}
