//! Running one generic job on whichever backend was selected.

use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn::backend::flex::FlexDevice;
use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::AutodiffBackend;

use super::{Chosen, Selection};
use crate::backend::Lean;
use crate::memory::MemoryProbe;

/// A backend leanburn can train on: autodiff, with memory telemetry on both the autodiff
/// backend and its inner backend (where predict and evaluation forwards run).
pub trait TrainBackend: AutodiffBackend<InnerBackend: MemoryProbe> + MemoryProbe {}

impl<B> TrainBackend for B
where
    B: AutodiffBackend + MemoryProbe,
    B::InnerBackend: MemoryProbe,
{
}

/// The stack used for the CUDA choice.
#[cfg(feature = "cuda")]
pub type CudaStack = Autodiff<burn::backend::Cuda>;
/// The stack used for the wgpu choice.
pub type WgpuStack = Autodiff<Wgpu>;
/// The stack used for the CPU choice.
pub type CpuStack = Autodiff<Flex>;

/// The `Lean` stack for the CUDA choice: leanburn's kernels on the unfused CubeCL backend.
#[cfg(feature = "cuda")]
pub type LeanCudaStack = Autodiff<Lean<burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>>>;
/// The `Lean` stack for the wgpu choice: leanburn's kernels on the unfused CubeCL backend.
pub type LeanWgpuStack = Autodiff<Lean<burn_cubecl::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>>>;
/// The `Lean` stack for the CPU choice (composed convolutions).
pub type LeanCpuStack = Autodiff<Lean<Flex>>;

/// The CUDA stack with activation checkpointing.
#[cfg(feature = "cuda")]
pub type CudaCheckpointedStack = Autodiff<burn::backend::Cuda, BalancedCheckpointing>;
/// The wgpu stack with activation checkpointing.
pub type WgpuCheckpointedStack = Autodiff<Wgpu, BalancedCheckpointing>;
/// The CPU stack with activation checkpointing.
pub type CpuCheckpointedStack = Autodiff<Flex, BalancedCheckpointing>;
/// The `Lean` CUDA stack with activation checkpointing.
#[cfg(feature = "cuda")]
pub type LeanCudaCheckpointedStack =
    Autodiff<Lean<burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>>, BalancedCheckpointing>;
/// The `Lean` wgpu stack with activation checkpointing.
pub type LeanWgpuCheckpointedStack =
    Autodiff<Lean<burn_cubecl::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>>, BalancedCheckpointing>;
/// The `Lean` CPU stack with activation checkpointing.
pub type LeanCpuCheckpointedStack = Autodiff<Lean<Flex>, BalancedCheckpointing>;

/// Whether the autodiff backend keeps every activation the backward pass needs, or
/// recomputes the cheap ones.
///
/// `Balanced` is Burn's `BalancedCheckpointing` strategy: operations Burn marks as memory
/// bound (element-wise ops, activations) do not keep their outputs for the backward pass;
/// it recomputes them from the nearest kept, compute-bound result (matmuls,
/// convolutions). Less memory between forward and backward, some extra time in the
/// backward; gradients are the same. Measured effects are in `docs/benchmarks.md`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Checkpointing {
    /// Keep what the backward pass needs (Burn's default, `NoCheckpointing`).
    #[default]
    Off,
    /// Recompute memory-bound operations in the backward pass.
    Balanced,
}

/// Work written once, generic over the backend, run by [`Selection::run`].
///
/// Rust closures cannot be generic over a type, hence a trait with one generic method.
pub trait BackendJob {
    type Output;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output;
}

impl Selection {
    /// Runs `job` on the chosen backend and device.
    pub fn run<J: BackendJob>(&self, job: J) -> J::Output {
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { ordinal } => job.run::<CudaStack>(burn::backend::cuda::CudaDevice::new(*ordinal)),
            Chosen::Wgpu { device, .. } => job.run::<WgpuStack>(device.clone()),
            Chosen::Cpu => job.run::<CpuStack>(FlexDevice),
        }
    }

    /// [`run`](Self::run), with the given activation checkpointing.
    pub fn run_with<J: BackendJob>(&self, job: J, checkpointing: Checkpointing) -> J::Output {
        if checkpointing == Checkpointing::Off {
            return self.run(job);
        }
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { ordinal } => {
                job.run::<CudaCheckpointedStack>(burn::backend::cuda::CudaDevice::new(*ordinal))
            }
            Chosen::Wgpu { device, .. } => job.run::<WgpuCheckpointedStack>(device.clone()),
            Chosen::Cpu => job.run::<CpuCheckpointedStack>(FlexDevice),
        }
    }

    /// [`run_lean`](Self::run_lean), with the given activation checkpointing.
    pub fn run_lean_with<J: BackendJob>(&self, job: J, checkpointing: Checkpointing) -> J::Output {
        if checkpointing == Checkpointing::Off {
            return self.run_lean(job);
        }
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { ordinal } => {
                job.run::<LeanCudaCheckpointedStack>(burn::backend::cuda::CudaDevice::new(*ordinal))
            }
            Chosen::Wgpu { device, .. } => job.run::<LeanWgpuCheckpointedStack>(device.clone()),
            Chosen::Cpu => job.run::<LeanCpuCheckpointedStack>(FlexDevice),
        }
    }

    /// Runs `job` on the chosen device with `Lean` inside autodiff, so its convolutions
    /// are leanburn's memory-bounded ones (see `docs/backend.md`).
    pub fn run_lean<J: BackendJob>(&self, job: J) -> J::Output {
        match &self.chosen {
            #[cfg(feature = "cuda")]
            Chosen::Cuda { ordinal } => job.run::<LeanCudaStack>(burn::backend::cuda::CudaDevice::new(*ordinal)),
            Chosen::Wgpu { device, .. } => job.run::<LeanWgpuStack>(device.clone()),
            Chosen::Cpu => job.run::<LeanCpuStack>(FlexDevice),
        }
    }
}
