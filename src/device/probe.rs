//! Finding out, without touching Burn, which devices answer on this machine.
//!
//! Touching a CUDA device without a driver panics on a Burn service thread, where no
//! `catch_unwind` can see it, so the driver is asked directly first (dlopen + `cuInit`).
//! wgpu adapters are listed through wgpu itself, which reports "none" rather than failing.

use std::fmt;

use burn::backend::wgpu::graphics::{AutoGraphicsApi, GraphicsApi};
use serde::{Deserialize, Serialize};

/// What the CUDA driver said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaStatus {
    /// leanburn was built without the `cuda` feature.
    NotCompiled,
    /// The driver initialised and reported devices; NVRTC (needed to compile kernels at run
    /// time) was found too.
    Available { devices: usize, driver_version: i32 },
    /// Why CUDA cannot be used here, in words for the user.
    Unavailable(String),
}

impl fmt::Display for CudaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotCompiled => f.write_str("this build has no CUDA support (feature `cuda` off)"),
            Self::Available { devices, driver_version } => write!(
                f,
                "CUDA driver {}.{} with {devices} device(s)",
                driver_version / 1000,
                (driver_version % 1000) / 10
            ),
            Self::Unavailable(why) => f.write_str(why),
        }
    }
}

#[cfg(target_os = "windows")]
pub(super) const LIBCUDA: &str = "nvcuda.dll";
#[cfg(not(target_os = "windows"))]
pub(super) const LIBCUDA: &str = "libcuda.so.1";

/// Names under which cudarc looks for NVRTC (a subset covering CUDA 11 to 13).
#[cfg(not(target_os = "windows"))]
const NVRTC_NAMES: &[&str] =
    &["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11", "libnvrtc.so.1"];
#[cfg(target_os = "windows")]
const NVRTC_NAMES: &[&str] = &["nvrtc64_130_0.dll", "nvrtc64_120_0.dll", "nvrtc64_112_0.dll"];

/// Asks the CUDA driver, loaded by hand, whether it initialises and how many devices it has.
pub fn probe_cuda() -> CudaStatus {
    if !cfg!(feature = "cuda") {
        return CudaStatus::NotCompiled;
    }
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuGetInt = unsafe extern "C" fn(*mut i32) -> i32;

    // SAFETY: libcuda's entry points are called with the C signatures the driver API
    // documents; the library stays loaded while they run.
    unsafe {
        let lib = match libloading::Library::new(LIBCUDA) {
            Ok(lib) => lib,
            Err(err) => {
                return CudaStatus::Unavailable(format!("no CUDA driver: {LIBCUDA} could not be loaded ({err})"))
            }
        };
        let symbols = (
            lib.get::<CuInit>(b"cuInit\0"),
            lib.get::<CuGetInt>(b"cuDeviceGetCount\0"),
            lib.get::<CuGetInt>(b"cuDriverGetVersion\0"),
        );
        let (Ok(cu_init), Ok(device_count), Ok(driver_version)) = symbols else {
            return CudaStatus::Unavailable(format!("{LIBCUDA} lacks the driver API entry points"));
        };
        let rc = cu_init(0);
        if rc != 0 {
            return CudaStatus::Unavailable(format!(
                "the CUDA driver did not initialise: cuInit returned {rc} ({})",
                cu_result_name(rc)
            ));
        }
        let mut devices = 0i32;
        let rc = device_count(&mut devices);
        if rc != 0 || devices <= 0 {
            return CudaStatus::Unavailable(format!(
                "the CUDA driver reports no device (cuDeviceGetCount returned {rc}, count {devices})"
            ));
        }
        let mut version = 0i32;
        let _ = driver_version(&mut version);
        if !NVRTC_NAMES.iter().any(|name| libloading::Library::new(name).is_ok()) {
            return CudaStatus::Unavailable(format!(
                "the CUDA driver answered ({devices} device(s)) but NVRTC, which compiles the \
                 kernels at run time, was not found (tried {}); add the CUDA toolkit's lib64 \
                 directory to LD_LIBRARY_PATH",
                NVRTC_NAMES.join(", ")
            ));
        }
        CudaStatus::Available { devices: devices as usize, driver_version: version }
    }
}

fn cu_result_name(code: i32) -> &'static str {
    match code {
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        35 => "CUDA_ERROR_INSUFFICIENT_DRIVER",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        304 => "CUDA_ERROR_OPERATING_SYSTEMS_CALL_FAILED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "see the CUDA driver API's CUresult",
    }
}

/// The kind of a wgpu adapter, in the order `auto` prefers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AdapterKind {
    DiscreteGpu,
    IntegratedGpu,
    VirtualGpu,
    /// A software rasteriser such as Mesa's llvmpipe: correct, but slow.
    Software,
    Other,
}

impl AdapterKind {
    pub fn is_hardware(self) -> bool {
        matches!(self, Self::DiscreteGpu | Self::IntegratedGpu | Self::VirtualGpu)
    }
}

/// One adapter wgpu can open with the graphics API CubeCL uses here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterSummary {
    pub name: String,
    pub kind: AdapterKind,
    /// Position among the adapters of the same kind: the index CubeCL's `WgpuDevice` takes.
    pub index_in_kind: usize,
    pub api: String,
    pub driver: String,
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            AdapterKind::DiscreteGpu => "discrete GPU",
            AdapterKind::IntegratedGpu => "integrated GPU",
            AdapterKind::VirtualGpu => "virtual GPU",
            AdapterKind::Software => "software rasteriser",
            AdapterKind::Other => "adapter of unknown type",
        };
        write!(f, "{} ({kind}, {}", self.name, self.api)?;
        if !self.driver.is_empty() {
            write!(f, ", {}", self.driver)?;
        }
        f.write_str(")")
    }
}

/// Lists the adapters of the graphics API CubeCL picks on this platform (Vulkan on Linux
/// and Windows, Metal on macOS), best first.
pub fn probe_wgpu() -> Vec<AdapterSummary> {
    let listed = std::panic::catch_unwind(|| {
        let backend = AutoGraphicsApi::backend();
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backend.into(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        futures_lite::future::block_on(instance.enumerate_adapters(backend.into()))
            .into_iter()
            .map(|adapter| adapter.get_info())
            .collect::<Vec<_>>()
    });
    let infos = match listed {
        Ok(infos) => infos,
        Err(_) => {
            tracing::warn!("listing wgpu adapters panicked; treating wgpu as unavailable");
            Vec::new()
        }
    };
    let mut counts = std::collections::HashMap::new();
    let mut adapters: Vec<AdapterSummary> = infos
        .into_iter()
        .map(|info| {
            let kind = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => AdapterKind::DiscreteGpu,
                wgpu::DeviceType::IntegratedGpu => AdapterKind::IntegratedGpu,
                wgpu::DeviceType::VirtualGpu => AdapterKind::VirtualGpu,
                wgpu::DeviceType::Cpu => AdapterKind::Software,
                wgpu::DeviceType::Other => AdapterKind::Other,
            };
            let counter = counts.entry(kind).or_insert(0usize);
            let index_in_kind = *counter;
            *counter += 1;
            AdapterSummary {
                name: info.name,
                kind,
                index_in_kind,
                api: format!("{:?}", info.backend),
                driver: info.driver_info,
            }
        })
        .collect();
    adapters.sort_by_key(|a| (a.kind, a.index_in_kind));
    adapters
}
