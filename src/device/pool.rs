//! How a device's memory pool is laid out, where the runtime lets it be chosen.
//!
//! CubeCL takes device memory in pages and keeps them for reuse. Its two layouts:
//!
//! - **sub-slices** (its default): pools of pages of a quarter, a sixteenth, … of the
//!   largest buffer the device allows, each page cut into slices for many tensors; a page
//!   stays reserved while any slice of it lives, and free pages are kept until an explicit
//!   cleanup ([`trim`](crate::memory::trim)). A 20 MiB tensor takes room in a 128 MiB page.
//! - **exclusive pages**: one buffer per allocation, sized to it (or to the running mean of
//!   recent requests, when larger) and reused for any allocation it can hold; a buffer
//!   left unused for a while is handed back on its own.
//!
//! Which one reserves less depends on the workload: docs/memory.md, "The pool layout", has
//! the measurements. In CubeCL 0.10 only the wgpu runtime takes a configuration (through
//! `init_setup`, before the device's first use); CUDA's is fixed.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;

use burn::backend::wgpu::graphics::AutoGraphicsApi;
use burn::backend::wgpu::{init_setup, MemoryConfiguration, RuntimeOptions, WgpuDevice};
use serde::{Deserialize, Serialize};

use super::{BackendKind, Chosen, DeviceChoice};

/// The layout of a device's memory pool (CubeCL's `MemoryConfiguration`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum PoolLayout {
    /// Tensors share large pages (CubeCL's default).
    #[default]
    SubSlices,
    /// One buffer per allocation, handed back after a while unused.
    ExclusivePages,
}

impl PoolLayout {
    pub const NAMES: [&'static str; 2] = ["sub-slices", "exclusive-pages"];

    pub fn name(self) -> &'static str {
        match self {
            Self::SubSlices => "sub-slices",
            Self::ExclusivePages => "exclusive-pages",
        }
    }

    fn memory_configuration(self) -> MemoryConfiguration {
        match self {
            Self::SubSlices => MemoryConfiguration::SubSlices,
            Self::ExclusivePages => MemoryConfiguration::ExclusivePages,
        }
    }
}

impl fmt::Display for PoolLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PoolLayout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sub-slices" => Ok(Self::SubSlices),
            "exclusive-pages" => Ok(Self::ExclusivePages),
            other => Err(format!("unknown pool layout '{other}'; valid layouts are: {}", Self::NAMES.join(", "))),
        }
    }
}

/// Why a pool layout could not be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error(
        "--memory-pool {layout}: the {backend} backend takes no pool layout (in CubeCL 0.10 only wgpu does); \
         leave --memory-pool unset there"
    )]
    NotConfigurable { layout: PoolLayout, backend: BackendKind },
    #[error(
        "--memory-pool {layout}: the wgpu device {device} was already in use; its pool can only be laid out \
         before the first tensor is made on it"
    )]
    AlreadyInUse { layout: PoolLayout, device: String },
    #[error("--memory-pool {layout}: the wgpu device {device} could not be created: {reason}")]
    DeviceFailed { layout: PoolLayout, device: String, reason: String },
}

/// Lays out the memory pool of `selection`'s device as `layout`. Call it before anything
/// runs on the device; [`select`](super::select) does, for `BackendArgs::memory_pool`.
pub fn init_memory_pool(selection: &DeviceChoice, layout: PoolLayout) -> Result<(), PoolError> {
    match &selection.chosen {
        Chosen::Wgpu { device, .. } => init_wgpu_pool(device, layout),
        _ => Err(PoolError::NotConfigurable { layout, backend: selection.kind() }),
    }
}

/// Creates `device`'s wgpu runtime with `layout`, as Burn would on first use otherwise
/// (same graphics API, same options but the pool).
fn init_wgpu_pool(device: &WgpuDevice, layout: PoolLayout) -> Result<(), PoolError> {
    let options = RuntimeOptions { memory_config: layout.memory_configuration(), ..RuntimeOptions::default() };
    // CubeCL panics where it finds no adapter, and where the device already has a runtime
    // (it registers one per device); nothing outside this call is left half made then.
    catch_unwind(AssertUnwindSafe(|| init_setup::<AutoGraphicsApi>(device, options))).map(|_setup| ()).map_err(
        |panic| {
            let reason = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let device = format!("{device:?}");
            if reason.contains("already registered") {
                PoolError::AlreadyInUse { layout, device }
            } else {
                PoolError::DeviceFailed { layout, device, reason }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use burn::backend::Wgpu;
    use burn::tensor::{Distribution, Tensor};

    use super::*;
    use crate::memory::MemoryProbe;

    #[test]
    fn names_parse_and_print() {
        for name in PoolLayout::NAMES {
            assert_eq!(name.parse::<PoolLayout>().unwrap().name(), name);
        }
        assert_eq!(" Exclusive-Pages".parse::<PoolLayout>(), Ok(PoolLayout::ExclusivePages));
        let err = "paged".parse::<PoolLayout>().unwrap_err();
        assert!(err.contains("sub-slices") && err.contains("exclusive-pages"), "{err}");
    }

    #[test]
    fn only_wgpu_takes_a_layout() {
        let cpu = DeviceChoice { requested: BackendKind::Cpu, chosen: Chosen::Cpu, reason: String::new(), pool: None };
        let err = init_memory_pool(&cpu, PoolLayout::ExclusivePages).unwrap_err();
        assert_eq!(err, PoolError::NotConfigurable { layout: PoolLayout::ExclusivePages, backend: BackendKind::Cpu });
        assert!(err.to_string().contains("only wgpu"), "{err}");
    }

    /// The pool reserve after one 20 MiB tensor is made on `device`.
    fn reserve_for_one_tensor(device: &WgpuDevice) -> (u64, u64) {
        let tensor = Tensor::<Wgpu, 2>::random([5 * 1024, 1024], Distribution::Default, device);
        let sample = <Wgpu as MemoryProbe>::memory_sample(device).expect("a wgpu pool");
        drop(tensor);
        (sample.bytes_in_use, sample.bytes_reserved)
    }

    /// On llvmpipe (two device ids, two runtimes, two pools): exclusive pages reserve about
    /// what the tensor needs, the default layout (the control) a whole large page; a device
    /// already in use is refused with an error, not a panic.
    #[test]
    fn exclusive_pages_reserve_what_a_tensor_needs_and_a_used_device_is_refused() {
        let tensor_bytes = 20 << 20;
        let exclusive = WgpuDevice::Cpu;
        init_wgpu_pool(&exclusive, PoolLayout::ExclusivePages).expect("a fresh device takes a layout");
        let (in_use, reserved) = reserve_for_one_tensor(&exclusive);
        eprintln!("exclusive pages: {reserved} B reserved for {in_use} B in use");
        assert!((tensor_bytes..tensor_bytes + (1 << 20)).contains(&in_use), "{in_use} B in use");
        assert!(reserved < tensor_bytes * 3 / 2, "exclusive pages reserved {reserved} B for a {tensor_bytes} B tensor");

        let control = WgpuDevice::DefaultDevice;
        let (in_use, reserved) = reserve_for_one_tensor(&control);
        eprintln!("sub-slices: {reserved} B reserved for {in_use} B in use");
        assert!((tensor_bytes..tensor_bytes + (1 << 20)).contains(&in_use), "{in_use} B in use");
        assert!(reserved >= tensor_bytes * 4, "the default layout reserved only {reserved} B: the control fails");

        let err = init_wgpu_pool(&control, PoolLayout::ExclusivePages).unwrap_err();
        assert!(matches!(err, PoolError::AlreadyInUse { .. }), "{err:?}");
        assert!(err.to_string().contains("already in use"), "{err}");
    }
}
