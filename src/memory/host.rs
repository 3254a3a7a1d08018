//! The process's resident memory: what a backend without a device pool (the CPU backends)
//! has to show instead of pool counters.

use serde::{Deserialize, Serialize};

/// One reading of the process's resident memory (host RAM, not device memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMemory {
    /// Resident set size now (`VmRSS`).
    pub resident: u64,
    /// The largest resident set size the process has had (`VmHWM`).
    pub peak_resident: u64,
}

/// This process's resident memory (not the machine's total: that is
/// [`device::total_host_memory`](crate::device::total_host_memory)). Reads
/// `/proc/self/status`; `None` where it does not exist (not Linux) or cannot be
/// parsed.
pub fn process_memory() -> Option<HostMemory> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status(&status)
}

fn parse_status(status: &str) -> Option<HostMemory> {
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(name))?;
        let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    };
    Some(HostMemory { resident: field("VmRSS:")?, peak_resident: field("VmHWM:")? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tx\nVmPeak:\t  900 kB\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(parse_status(status), Some(HostMemory { resident: 1024 * 1024, peak_resident: 2048 * 1024 }));
        assert_eq!(parse_status("VmRSS:\t1 kB\n"), None, "no peak, no reading");
    }

    /// The process's resident memory is shared with every test running beside this one,
    /// which may free as much between the two readings: three tries, one must see the
    /// 64 MiB (the last one's readings are reported).
    #[test]
    fn resident_memory_follows_an_allocation() {
        let mut seen = Vec::new();
        for _ in 0..3 {
            let Some(before) = process_memory() else { return }; // not Linux
            let block = vec![1u8; 64 << 20];
            let during = process_memory().expect("read before, so readable now");
            assert!(during.peak_resident >= during.resident);
            drop(std::hint::black_box(block));
            if during.resident >= before.resident + (48 << 20) {
                return;
            }
            seen.push((before, during));
        }
        panic!("resident memory did not follow a 64 MiB allocation in three tries: {seen:?}");
    }
}
