//! How much memory the chosen device has, where that can be known before allocating.
//!
//! - CUDA: the driver's `cuDeviceTotalMem` (loaded by hand, as the probe does).
//! - CPU, and wgpu on a software adapter (llvmpipe): the host's `MemTotal`.
//! - wgpu on a hardware adapter: unknown (wgpu reports buffer limits, not memory).

use burn::backend::wgpu::WgpuRuntime;
use cubecl::Runtime;

use super::{Chosen, DeviceChoice, PoolLayout};

/// Bytes of memory the device has, or `None` where it cannot be known.
pub fn device_memory(selection: &DeviceChoice) -> Option<u64> {
    match &selection.chosen {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { ordinal } => cuda_total_memory(*ordinal),
        Chosen::Wgpu { adapter, .. } if adapter.kind.is_hardware() => None,
        Chosen::Wgpu { .. } | Chosen::Cpu => total_host_memory(),
    }
}

/// The largest page of the chosen device's pool where its pages follow CubeCL's default
/// layout (sub-slices): CUDA's runtime makes it a quarter of the device's memory, wgpu's
/// reports it (llvmpipe: 128 MiB). `None` on the CPU, which has no pool, and with
/// exclusive pages, which are sized to their tensors. Reading it on wgpu starts the
/// device's runtime, so call it after [`select`](super::select) has laid out the pool.
pub fn largest_pool_page(selection: &DeviceChoice) -> Option<u64> {
    if selection.pool == Some(PoolLayout::ExclusivePages) {
        return None;
    }
    match &selection.chosen {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { ordinal } => cuda_total_memory(*ordinal).map(|bytes| bytes / 4),
        Chosen::Wgpu { device, .. } => Some(WgpuRuntime::client(device).properties().memory.max_page_size),
        Chosen::Cpu => None,
    }
}

/// The machine's total RAM, `MemTotal` from `/proc/meminfo` (Linux), in bytes (not this
/// process's use: that is [`memory::process_memory`](crate::memory::process_memory)).
pub fn total_host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&info)
}

fn parse_mem_total(info: &str) -> Option<u64> {
    let line = info.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Total memory of CUDA device `ordinal`, from the driver.
#[cfg(feature = "cuda")]
pub fn cuda_total_memory(ordinal: usize) -> Option<u64> {
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuDeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type CuDeviceTotalMem = unsafe extern "C" fn(*mut usize, i32) -> i32;
    // SAFETY: the driver API's documented C signatures; the library outlives the calls.
    unsafe {
        let lib = libloading::Library::new(super::probe::LIBCUDA).ok()?;
        let init = lib.get::<CuInit>(b"cuInit\0").ok()?;
        let device_get = lib.get::<CuDeviceGet>(b"cuDeviceGet\0").ok()?;
        let total_mem = lib.get::<CuDeviceTotalMem>(b"cuDeviceTotalMem_v2\0").ok()?;
        if init(0) != 0 {
            return None;
        }
        let mut device = 0i32;
        if device_get(&mut device, i32::try_from(ordinal).ok()?) != 0 {
            return None;
        }
        let mut bytes = 0usize;
        (total_mem(&mut bytes, device) == 0).then_some(bytes as u64)
    }
}

/// The attention workspace ([`crate::backend::set_attention_workspace`]) a run gets by
/// default on the chosen device, for attention over `batch × heads` rows of `keys` keys:
/// where `Lean` runs the attention in blocks on cuBLASLt's GEMMs
/// ([`DeviceChoice::attention_path`]), one block per layer (four `[batch, heads, keys,
/// keys]` f32 buffers), within a 32nd of the device's memory; elsewhere the library's
/// default. Few large GEMMs beat many small ones: on an H200 (2026-11-28) gpt2-small at
/// 8 × 1024 trained at 93,652 tokens/s with one 1.5 GiB block a layer, while 64 MiB blocks
/// (25 a layer, each of its own shape) had not finished their first step after 60 s; on
/// 2026-11-30 the attention alone took 21.8 ms a step in one block a layer, 31.1 in two
/// (768 MiB), 36.5 in three and 51.6 in six, though the splits compute fewer scores.
pub fn default_attention_workspace(selection: &DeviceChoice, batch: usize, heads: usize, keys: usize) -> usize {
    let default = crate::backend::DEFAULT_ATTENTION_WORKSPACE_BYTES;
    if selection.attention_path() != crate::backend::AttentionPath::Gemm || selection.kind() == super::BackendKind::Cpu
    {
        return default;
    }
    blocks_workspace(batch, heads, keys, device_memory(selection))
}

/// One block a layer's workspace within a 32nd of `capacity`, the library's default at least.
fn blocks_workspace(batch: usize, heads: usize, keys: usize, capacity: Option<u64>) -> usize {
    let one_block = 4 * batch * heads * keys * keys * core::mem::size_of::<f32>();
    let share = capacity.map_or(one_block as u64, |capacity| capacity / 32);
    one_block.min(usize::try_from(share).unwrap_or(usize::MAX)).max(crate::backend::DEFAULT_ATTENTION_WORKSPACE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocks_workspace_is_one_block_a_layer_within_a_32nd_of_the_device() {
        const MIB: usize = 1 << 20;
        let h200 = Some(143_771 * MIB as u64);
        // gpt2-small 8 × 1024: four [8, 12, 1024, 1024] f32 buffers, 1,536 MiB.
        assert_eq!(blocks_workspace(8, 12, 1024, h200), 1536 * MIB);
        // A 24 GiB device: its 32nd, 768 MiB (two blocks a layer).
        assert_eq!(blocks_workspace(8, 12, 1024, Some(24 << 30)), 768 * MIB);
        // Small runs keep the library's default (control: one block would be 24 MiB).
        assert_eq!(blocks_workspace(2, 12, 256, h200), 64 * MIB);
        assert_eq!(blocks_workspace(8, 12, 1024, None), 1536 * MIB);
    }

    #[test]
    fn mem_total_is_read_in_kib() {
        let info = "MemFree:  10 kB\nMemTotal:       24576000 kB\nSwapTotal: 0 kB\n";
        assert_eq!(parse_mem_total(info), Some(24_576_000 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn pages_are_known_for_paged_pools_only() {
        use crate::device::BackendKind;
        let cpu = DeviceChoice { requested: BackendKind::Cpu, chosen: Chosen::Cpu, reason: String::new(), pool: None };
        assert_eq!(largest_pool_page(&cpu), None);
        // Exclusive pages are sized to their tensors: no page layout to round to. (The
        // control, sub-slices on wgpu, is read by the GPT-2 example's test.)
        let device = burn::backend::wgpu::WgpuDevice::DefaultDevice;
        let adapter = crate::device::AdapterSummary {
            name: "llvmpipe".into(),
            kind: crate::device::AdapterKind::Software,
            index_in_kind: 0,
            api: "Vulkan".into(),
            driver: String::new(),
        };
        let exclusive = DeviceChoice {
            requested: BackendKind::Wgpu,
            chosen: Chosen::Wgpu { device, adapter },
            reason: String::new(),
            pool: Some(PoolLayout::ExclusivePages),
        };
        assert_eq!(largest_pool_page(&exclusive), None);
    }

    #[test]
    fn this_host_reports_its_memory() {
        if cfg!(target_os = "linux") {
            assert!(total_host_memory().unwrap() > 64 << 20);
        }
    }
}
