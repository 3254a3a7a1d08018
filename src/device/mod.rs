//! Choosing the backend at run time: CUDA, wgpu (Vulkan/Metal) or the CPU.
//!
//! User code is written once, generic over the backend, as a [`BackendJob`]; [`select`]
//! decides where it runs and [`DeviceChoice::run`] runs it there.

mod capacity;
mod headless;
mod kernel_cache;
mod pool;
mod precision;
mod probe;
mod run;

use std::fmt;
use std::str::FromStr;

use burn::backend::wgpu::WgpuDevice;
use serde::{Deserialize, Serialize};

#[cfg(feature = "cuda")]
pub use capacity::cuda_total_memory;
pub use capacity::{default_attention_workspace, device_memory, largest_pool_page, total_host_memory};
pub use headless::quiet_headless_vulkan;
pub use kernel_cache::{init_kernel_cache, KernelCache, KernelCacheError, KernelCacheSetup, CACHE_DIR_VAR};
pub use pool::{init_memory_pool, PoolError, PoolLayout};
pub use probe::{probe_cuda, probe_wgpu, AdapterKind, AdapterSummary, CudaStatus};
#[cfg(feature = "cuda")]
pub use run::CubeCuda;
pub use run::{BackendJob, Checkpointing, CubeWgpu, ReplicatedJob, TrainBackend};

/// The backend a user asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CUDA if a driver and device answer, else a GPU through wgpu, else the CPU.
    #[default]
    Auto,
    /// NVIDIA GPUs through CubeCL's CUDA runtime.
    Cuda,
    /// Any Vulkan/Metal adapter through CubeCL's wgpu runtime, software ones included.
    #[cfg_attr(feature = "cli", value(alias = "vulkan"))]
    Wgpu,
    /// Burn's `flex` CPU backend (pure Rust, SIMD, multi-threaded through rayon).
    #[cfg_attr(feature = "cli", value(alias = "flex"))]
    Cpu,
}

impl BackendKind {
    pub const NAMES: [&'static str; 4] = ["auto", "cuda", "wgpu", "cpu"];

    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cuda => "cuda",
            Self::Wgpu => "wgpu",
            Self::Cpu => "cpu",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = SelectError;

    /// A name of [`NAMES`](Self::NAMES) in any case, or the aliases `vulkan` (wgpu) and
    /// `flex` (cpu).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cuda" => Ok(Self::Cuda),
            "wgpu" | "vulkan" => Ok(Self::Wgpu),
            "cpu" | "flex" => Ok(Self::Cpu),
            _ => Err(SelectError::UnknownBackend(s.to_string())),
        }
    }
}

/// Why a backend could not be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("unknown backend '{0}'; valid backends are: auto, cuda, wgpu, cpu")]
    UnknownBackend(String),
    #[error("the CUDA backend was requested but is not available: {0}")]
    CudaUnavailable(String),
    #[error("CUDA device {requested} was requested but only {available} device(s) exist")]
    NoSuchCudaDevice { requested: usize, available: usize },
    #[error(
        "the wgpu backend was requested but wgpu found no adapter (on Linux install a Vulkan \
         driver, e.g. `apt-get install mesa-vulkan-drivers libvulkan1`)"
    )]
    NoWgpuAdapter,
    #[error("wgpu adapter {requested} was requested but only {available} adapter(s) exist")]
    NoSuchWgpuAdapter { requested: usize, available: usize },
    #[error(
        "the CPU backend has one device, 0, but device {requested} was requested (repeat 0, as in \
         `--devices 0,0`, for several replicas on it)"
    )]
    NoSuchCpuDevice { requested: usize },
    #[error("a data-parallel run needs at least one device")]
    NoDevices,
    #[error(transparent)]
    Pool(#[from] PoolError),
}

#[cfg(feature = "cli")]
impl SelectError {
    /// Process exit code for a command-line tool: 2 for a malformed request (as for any
    /// other bad flag), 1 for a well-formed request this machine cannot serve.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::UnknownBackend(_) | Self::NoDevices | Self::Pool(PoolError::NotConfigurable { .. }) => 2,
            _ => 1,
        }
    }
}

/// What to select: the backend, the device, and whether software adapters count. With
/// the `cli` feature also command-line flags, to `#[command(flatten)]` into a clap parser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct BackendArgs {
    /// Backend to run on.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_enum, env = "LEANBURN_BACKEND", default_value_t = BackendKind::Auto, ignore_case = true)
    )]
    pub backend: BackendKind,
    /// Which device of the chosen backend: the CUDA ordinal, or the wgpu adapter in the
    /// order listed (best first).
    #[cfg_attr(feature = "cli", arg(long = "device", default_value_t = 0))]
    pub device_index: usize,
    /// Let `auto` pick a software Vulkan adapter (llvmpipe) over the CPU backend.
    #[cfg_attr(feature = "cli", arg(long, env = "LEANBURN_ALLOW_SOFTWARE"))]
    pub allow_software: bool,
    /// Where compiled kernels and autotune results are kept between runs (a directory, or
    /// `off`); default `<user cache dir>/leanburn`. See `leanburn::device::init_kernel_cache`.
    #[cfg_attr(feature = "cli", arg(long, env = CACHE_DIR_VAR, value_parser = clap::value_parser!(KernelCache)))]
    pub kernel_cache: Option<KernelCache>,
    /// How the device's memory pool is laid out (wgpu only; see docs/memory.md, "The pool
    /// layout"); unset, the runtime's default (`sub-slices`).
    #[cfg_attr(feature = "cli", arg(long, value_enum, env = "LEANBURN_MEMORY_POOL", ignore_case = true))]
    pub memory_pool: Option<PoolLayout>,
}

/// The device a job will run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chosen {
    #[cfg(feature = "cuda")]
    Cuda {
        ordinal: usize,
    },
    Wgpu {
        device: WgpuDevice,
        adapter: AdapterSummary,
    },
    Cpu,
}

/// The outcome of [`select`]: what runs where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceChoice {
    pub requested: BackendKind,
    pub chosen: Chosen,
    pub reason: String,
    /// The pool layout set on the device, or `None` for the runtime's default.
    pub pool: Option<PoolLayout>,
}

impl DeviceChoice {
    /// The backend actually chosen (never `Auto`).
    pub fn kind(&self) -> BackendKind {
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { .. } => BackendKind::Cuda,
            Chosen::Wgpu { .. } => BackendKind::Wgpu,
            Chosen::Cpu => BackendKind::Cpu,
        }
    }

    /// The attention `Lean` trains with on the chosen device (blocks on the GEMMs where they
    /// are cuBLASLt's, unless set otherwise: [`crate::backend::attention_path`]).
    pub fn attention_path(&self) -> crate::backend::AttentionPath {
        let cublaslt = matches!(crate::backend::vendor_gemm(), crate::backend::VendorGemm::CublasLt { .. });
        crate::backend::attention_path(self.kind() == BackendKind::Cuda && cublaslt)
    }

    /// Whether the chosen device has a memory pool that telemetry can read.
    pub fn has_device_memory(&self) -> bool {
        self.kind() != BackendKind::Cpu
    }

    /// A wgpu selection on an explicit device, for tests and tools that already know it.
    pub fn wgpu(device: WgpuDevice, reason: impl Into<String>) -> Self {
        let adapter = AdapterSummary {
            name: format!("{device:?}"),
            kind: AdapterKind::Other,
            index_in_kind: 0,
            api: "default".into(),
            driver: String::new(),
        };
        Self {
            requested: BackendKind::Wgpu,
            chosen: Chosen::Wgpu { device, adapter },
            reason: reason.into(),
            pool: None,
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { ordinal } => write!(
                f,
                "backend cuda, device {ordinal}, {}, {}",
                crate::backend::vendor_gemm(),
                self.attention_path()
            )?,
            Chosen::Wgpu { adapter, .. } => write!(f, "backend wgpu, adapter {adapter}")?,
            Chosen::Cpu => f.write_str("backend cpu (flex)")?,
        }
        if let Some(pool) = self.pool {
            write!(f, ", memory pool {pool}")?;
        }
        write!(f, " (requested: {}; {})", self.requested, self.reason)
    }
}

impl DeviceChoice {
    /// The devices of a data-parallel run on the chosen backend, one replica each:
    /// `indices` are CUDA ordinals, wgpu adapters in the order listed (as `--device`), or
    /// the CPU backend's one device, 0. An index may repeat: its replicas share the
    /// device. Refuses an empty list and devices that do not exist.
    pub fn replica_devices(&self, indices: &[usize]) -> Result<Vec<Chosen>, SelectError> {
        if indices.is_empty() {
            return Err(SelectError::NoDevices);
        }
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { .. } => {
                let available = match probe_cuda() {
                    CudaStatus::Available { devices, .. } => devices,
                    other => return Err(SelectError::CudaUnavailable(other.to_string())),
                };
                indices
                    .iter()
                    .map(|&requested| match requested < available {
                        true => Ok(Chosen::Cuda { ordinal: requested }),
                        false => Err(SelectError::NoSuchCudaDevice { requested, available }),
                    })
                    .collect()
            }
            Chosen::Wgpu { .. } => {
                let adapters = probe_wgpu();
                indices
                    .iter()
                    .map(|&requested| match adapters.get(requested) {
                        Some(adapter) => Ok(Chosen::Wgpu { device: wgpu_device(adapter), adapter: adapter.clone() }),
                        None => Err(SelectError::NoSuchWgpuAdapter { requested, available: adapters.len() }),
                    })
                    .collect()
            }
            Chosen::Cpu => indices
                .iter()
                .map(|&requested| match requested {
                    0 => Ok(Chosen::Cpu),
                    _ => Err(SelectError::NoSuchCpuDevice { requested }),
                })
                .collect(),
        }
    }
}

/// Chooses a backend for `args`, probing drivers without ever panicking on a missing one,
/// and lays out the chosen device's pool as `args.memory_pool` asks ([`init_memory_pool`]).
pub fn select(args: &BackendArgs) -> Result<DeviceChoice, SelectError> {
    let mut selection = match args.backend {
        BackendKind::Cpu => DeviceChoice {
            requested: BackendKind::Cpu,
            chosen: Chosen::Cpu,
            reason: "asked for by name".into(),
            pool: None,
        },
        BackendKind::Cuda => select_cuda(args.device_index, probe_cuda())?,
        BackendKind::Wgpu => select_wgpu(args.device_index, &probe_wgpu())?,
        BackendKind::Auto => select_auto(args, probe_cuda(), &probe_wgpu()),
    };
    if let Some(layout) = args.memory_pool {
        init_memory_pool(&selection, layout)?;
        selection.pool = Some(layout);
    }
    Ok(selection)
}

fn select_cuda(index: usize, status: CudaStatus) -> Result<DeviceChoice, SelectError> {
    match status {
        CudaStatus::Available { devices, .. } if index >= devices => {
            Err(SelectError::NoSuchCudaDevice { requested: index, available: devices })
        }
        #[cfg(feature = "cuda")]
        CudaStatus::Available { .. } => Ok(DeviceChoice {
            requested: BackendKind::Cuda,
            chosen: Chosen::Cuda { ordinal: index },
            reason: format!("asked for by name; {status}"),
            pool: None,
        }),
        other => Err(SelectError::CudaUnavailable(other.to_string())),
    }
}

fn wgpu_device(adapter: &AdapterSummary) -> WgpuDevice {
    let i = adapter.index_in_kind;
    match adapter.kind {
        AdapterKind::DiscreteGpu => WgpuDevice::DiscreteGpu(i),
        AdapterKind::IntegratedGpu => WgpuDevice::IntegratedGpu(i),
        AdapterKind::VirtualGpu => WgpuDevice::VirtualGpu(i),
        AdapterKind::Software => WgpuDevice::Cpu,
        AdapterKind::Other => WgpuDevice::DefaultDevice,
    }
}

fn select_wgpu(index: usize, adapters: &[AdapterSummary]) -> Result<DeviceChoice, SelectError> {
    if adapters.is_empty() {
        return Err(SelectError::NoWgpuAdapter);
    }
    let adapter =
        adapters.get(index).ok_or(SelectError::NoSuchWgpuAdapter { requested: index, available: adapters.len() })?;
    Ok(DeviceChoice {
        requested: BackendKind::Wgpu,
        chosen: Chosen::Wgpu { device: wgpu_device(adapter), adapter: adapter.clone() },
        reason: format!("asked for by name; adapter {index} of {}", adapters.len()),
        pool: None,
    })
}

fn select_auto(args: &BackendArgs, cuda: CudaStatus, adapters: &[AdapterSummary]) -> DeviceChoice {
    #[cfg(feature = "cuda")]
    if let CudaStatus::Available { devices, .. } = cuda {
        let ordinal = args.device_index.min(devices - 1);
        return DeviceChoice {
            requested: BackendKind::Auto,
            chosen: Chosen::Cuda { ordinal },
            reason: format!("{cuda} answered"),
            pool: None,
        };
    }
    let hardware = adapters.iter().find(|a| a.kind.is_hardware());
    let software = adapters.iter().find(|a| a.kind == AdapterKind::Software);
    let pick = hardware.or(if args.allow_software { software } else { None });
    if let Some(adapter) = pick {
        let why = if adapter.kind.is_hardware() {
            "a GPU adapter answered"
        } else {
            "only a software adapter answered and --allow-software was given"
        };
        return DeviceChoice {
            requested: BackendKind::Auto,
            chosen: Chosen::Wgpu { device: wgpu_device(adapter), adapter: adapter.clone() },
            reason: format!("no CUDA ({cuda}); {why}"),
            pool: None,
        };
    }
    let wgpu_note = match software {
        Some(sw) => format!("wgpu found only {sw}, which auto skips (pass --allow-software or --backend wgpu)"),
        None => "wgpu found no adapter".to_string(),
    };
    DeviceChoice {
        requested: BackendKind::Auto,
        chosen: Chosen::Cpu,
        reason: format!("no CUDA ({cuda}); {wgpu_note}; falling back to the CPU"),
        pool: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(kind: AdapterKind, index_in_kind: usize) -> AdapterSummary {
        AdapterSummary { name: format!("{kind:?}"), kind, index_in_kind, api: "Vulkan".into(), driver: String::new() }
    }

    #[test]
    fn names_parse_case_insensitively_with_aliases() {
        assert_eq!("CUDA".parse::<BackendKind>(), Ok(BackendKind::Cuda));
        assert_eq!(" wgpu ".parse::<BackendKind>(), Ok(BackendKind::Wgpu));
        assert_eq!("vulkan".parse::<BackendKind>(), Ok(BackendKind::Wgpu));
        assert_eq!("flex".parse::<BackendKind>(), Ok(BackendKind::Cpu));
        assert!("ndarray".parse::<BackendKind>().is_err(), "ndarray is not a backend choice any more");
        assert_eq!("auto".parse::<BackendKind>(), Ok(BackendKind::Auto));
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let err = "nosuch".parse::<BackendKind>().unwrap_err();
        assert!(matches!(err, SelectError::UnknownBackend(_)));
        let text = err.to_string();
        for name in BackendKind::NAMES {
            assert!(text.contains(name), "{text}");
        }
    }

    #[test]
    fn auto_prefers_a_hardware_adapter_and_skips_software_unless_allowed() {
        let no_cuda = CudaStatus::Unavailable("no driver".into());
        let adapters = [adapter(AdapterKind::Software, 0)];
        let args = BackendArgs::default();
        assert_eq!(select_auto(&args, no_cuda.clone(), &adapters).chosen, Chosen::Cpu);

        let allow = BackendArgs { allow_software: true, ..BackendArgs::default() };
        let chosen = select_auto(&allow, no_cuda.clone(), &adapters).chosen;
        assert!(matches!(chosen, Chosen::Wgpu { device: WgpuDevice::Cpu, .. }), "{chosen:?}");

        let adapters = [adapter(AdapterKind::IntegratedGpu, 0), adapter(AdapterKind::Software, 0)];
        let chosen = select_auto(&args, no_cuda, &adapters).chosen;
        assert!(matches!(chosen, Chosen::Wgpu { device: WgpuDevice::IntegratedGpu(0), .. }), "{chosen:?}");
    }

    #[test]
    fn explicit_cuda_without_a_driver_is_a_clear_error() {
        let err = select_cuda(0, CudaStatus::Unavailable("no CUDA driver".into())).unwrap_err();
        assert!(matches!(err, SelectError::CudaUnavailable(_)), "{err:?}");
        assert!(err.to_string().contains("no CUDA driver"), "{err}");
        let err = select_cuda(0, CudaStatus::NotCompiled).unwrap_err();
        assert!(err.to_string().contains("feature `cuda`"), "{err}");
    }

    #[test]
    fn explicit_wgpu_checks_the_adapter_index() {
        assert_eq!(select_wgpu(0, &[]).unwrap_err(), SelectError::NoWgpuAdapter);
        let adapters = [adapter(AdapterKind::DiscreteGpu, 0), adapter(AdapterKind::DiscreteGpu, 1)];
        let sel = select_wgpu(1, &adapters).unwrap();
        assert!(matches!(sel.chosen, Chosen::Wgpu { device: WgpuDevice::DiscreteGpu(1), .. }));
        assert_eq!(
            select_wgpu(2, &adapters).unwrap_err(),
            SelectError::NoSuchWgpuAdapter { requested: 2, available: 2 }
        );
    }

    #[test]
    fn replica_devices_exist_or_are_refused() {
        let cpu = DeviceChoice { requested: BackendKind::Cpu, chosen: Chosen::Cpu, reason: String::new(), pool: None };
        // The CPU's one device, twice: two replicas share it.
        assert_eq!(cpu.replica_devices(&[0, 0]).unwrap(), vec![Chosen::Cpu, Chosen::Cpu]);
        let err = cpu.replica_devices(&[0, 1]).unwrap_err();
        assert_eq!(err, SelectError::NoSuchCpuDevice { requested: 1 });
        assert!(err.to_string().contains("--devices 0,0"), "{err}");
        assert_eq!(cpu.replica_devices(&[]).unwrap_err(), SelectError::NoDevices);
        // wgpu indices are checked against the adapters this machine lists.
        let wgpu = DeviceChoice::wgpu(WgpuDevice::DefaultDevice, "test");
        let listed = probe::probe_wgpu().len();
        assert_eq!(
            wgpu.replica_devices(&[listed]).unwrap_err(),
            SelectError::NoSuchWgpuAdapter { requested: listed, available: listed }
        );
    }
}
