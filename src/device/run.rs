//! Running one generic job on whichever backend was selected.

use burn::backend::autodiff::checkpoint::strategy::{BalancedCheckpointing, CheckpointStrategy, NoCheckpointing};
use burn::backend::flex::FlexDevice;
use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::AutodiffBackend;

use super::{Chosen, DeviceChoice};
use crate::backend::{Lean, OptimizerOps, TransformerOps};
use crate::memory::MemoryProbe;

/// A backend leanburn can train on: autodiff, with memory telemetry on both the autodiff
/// backend and its inner backend (where predict and evaluation forwards run), leanburn's
/// attention and exact GELU on both, and its one-op AdamW update on the inner backend
/// (where optimizers step).
pub trait TrainBackend:
    AutodiffBackend<InnerBackend: MemoryProbe + TransformerOps + OptimizerOps> + MemoryProbe + TransformerOps
{
}

impl<B> TrainBackend for B
where
    B: AutodiffBackend + MemoryProbe + TransformerOps,
    B::InnerBackend: MemoryProbe + TransformerOps + OptimizerOps,
{
}

/// The unfused CubeCL backend on CUDA (`Lean<CubeCuda>` runs leanburn's kernels without
/// Burn's fuser).
#[cfg(feature = "cuda")]
pub type CubeCuda = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
/// The unfused CubeCL backend on wgpu (`Lean<CubeWgpu>` runs leanburn's kernels without
/// Burn's fuser).
pub type CubeWgpu = burn_cubecl::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;

/// Whether the autodiff backend keeps every activation the backward pass needs, or
/// recomputes the cheap ones.
///
/// `Balanced` is Burn's `BalancedCheckpointing` strategy: operations Burn marks as memory
/// bound (element-wise ops, activations) do not keep their outputs for the backward pass;
/// it recomputes them from the nearest kept, compute-bound result (matmuls,
/// convolutions). Less memory between forward and backward, some extra time in the
/// backward; gradients are the same. Measured effects are in `docs/benchmarks.md`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Checkpointing {
    /// Keep what the backward pass needs (Burn's default, `NoCheckpointing`).
    #[default]
    Off,
    /// Recompute memory-bound operations in the backward pass.
    Balanced,
}

/// Work written once, generic over the backend, run by [`DeviceChoice::run`].
///
/// Rust closures cannot be generic over a type, hence a trait with one generic method.
pub trait BackendJob {
    type Output;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output;
}

impl DeviceChoice {
    /// Runs `job` on the chosen device, on Burn's default stack there: `Autodiff<Cuda>`,
    /// `Autodiff<Wgpu>` or `Autodiff<Flex>`.
    pub fn run<J: BackendJob>(&self, job: J) -> J::Output {
        dispatch_stock::<One<J>, NoCheckpointing>(self.one(), One(job))
    }

    /// [`run`](Self::run), with the given activation checkpointing.
    pub fn run_with<J: BackendJob>(&self, job: J, checkpointing: Checkpointing) -> J::Output {
        match checkpointing {
            Checkpointing::Off => dispatch_stock::<One<J>, NoCheckpointing>(self.one(), One(job)),
            Checkpointing::Balanced => dispatch_stock::<One<J>, BalancedCheckpointing>(self.one(), One(job)),
        }
    }

    /// Runs `job` on the chosen device with `Lean` inside autodiff, so its convolutions
    /// are leanburn's memory-bounded ones (see `docs/backend.md`): `Autodiff<Lean<B>>` with
    /// `B` Burn's default `Cuda` or `Wgpu` (fused; leanburn's kernels run as Fusion custom
    /// operations), or `Flex`.
    pub fn run_lean<J: BackendJob>(&self, job: J) -> J::Output {
        dispatch_lean::<One<J>, NoCheckpointing>(self.one(), One(job))
    }

    /// [`run_lean`](Self::run_lean), with the given activation checkpointing.
    pub fn run_lean_with<J: BackendJob>(&self, job: J, checkpointing: Checkpointing) -> J::Output {
        match checkpointing {
            Checkpointing::Off => dispatch_lean::<One<J>, NoCheckpointing>(self.one(), One(job)),
            Checkpointing::Balanced => dispatch_lean::<One<J>, BalancedCheckpointing>(self.one(), One(job)),
        }
    }

    /// Runs `job` on `devices` (from [`replica_devices`](Self::replica_devices)), one
    /// replica each, on Burn's default stack there, wrapped in `Lean` when `lean`.
    pub fn run_replicated<J: ReplicatedJob>(
        &self,
        devices: &[Chosen],
        job: J,
        lean: bool,
        checkpointing: Checkpointing,
    ) -> J::Output {
        match checkpointing {
            Checkpointing::Off => dispatch::<J, NoCheckpointing>(devices, job, lean),
            Checkpointing::Balanced => dispatch::<J, BalancedCheckpointing>(devices, job, lean),
        }
    }

    fn one(&self) -> &[Chosen] {
        std::slice::from_ref(&self.chosen)
    }
}

/// Work written once, generic over the backend, run on several devices of it (one
/// data-parallel replica each) by [`DeviceChoice::run_replicated`].
pub trait ReplicatedJob {
    type Output;

    /// `devices` holds at least one device; a device may repeat.
    fn run<B: TrainBackend>(self, devices: Vec<B::Device>) -> Self::Output;
}

/// A [`BackendJob`] as a replicated job on its one device.
struct One<J>(J);

impl<J: BackendJob> ReplicatedJob for One<J> {
    type Output = J::Output;

    fn run<B: TrainBackend>(self, devices: Vec<B::Device>) -> J::Output {
        let device = devices.into_iter().next().expect("one device");
        self.0.run::<B>(device)
    }
}

/// `Autodiff<B, C>` over the chosen backend, wrapped in `Lean` when `lean` (a choice made
/// at run time: the job is compiled for both stacks).
fn dispatch<J: ReplicatedJob, C: CheckpointStrategy>(devices: &[Chosen], job: J, lean: bool) -> J::Output {
    if lean {
        dispatch_lean::<J, C>(devices, job)
    } else {
        dispatch_stock::<J, C>(devices, job)
    }
}

/// Where a choice becomes a type, on Burn's default stack: `Autodiff<B, C>` over the chosen
/// backend. `devices` are all of the first one's kind.
///
/// The two stacks are two functions so that a job run on one of them is compiled for its
/// three backends only: every instantiation of a training job is a large share of a
/// binary's build time (`docs/ci.md`).
fn dispatch_stock<J: ReplicatedJob, C: CheckpointStrategy>(devices: &[Chosen], job: J) -> J::Output {
    match &devices[0] {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { .. } => job.run::<Autodiff<burn::backend::Cuda, C>>(cuda_devices(devices)),
        Chosen::Wgpu { .. } => job.run::<Autodiff<Wgpu, C>>(wgpu_devices(devices)),
        Chosen::Cpu => job.run::<Autodiff<Flex, C>>(vec![FlexDevice; devices.len()]),
    }
}

/// [`dispatch_stock`] with `Lean` inside autodiff: `Autodiff<Lean<B>, C>`.
fn dispatch_lean<J: ReplicatedJob, C: CheckpointStrategy>(devices: &[Chosen], job: J) -> J::Output {
    match &devices[0] {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { .. } => job.run::<Autodiff<Lean<burn::backend::Cuda>, C>>(cuda_devices(devices)),
        Chosen::Wgpu { .. } => job.run::<Autodiff<Lean<Wgpu>, C>>(wgpu_devices(devices)),
        Chosen::Cpu => job.run::<Autodiff<Lean<Flex>, C>>(vec![FlexDevice; devices.len()]),
    }
}

#[cfg(feature = "cuda")]
fn cuda_devices(devices: &[Chosen]) -> Vec<burn::backend::cuda::CudaDevice> {
    let ordinal = |chosen: &Chosen| match chosen {
        Chosen::Cuda { ordinal } => *ordinal,
        other => unreachable!("a CUDA run was given {other:?}"),
    };
    devices.iter().map(|chosen| burn::backend::cuda::CudaDevice::new(ordinal(chosen))).collect()
}

fn wgpu_devices(devices: &[Chosen]) -> Vec<burn::backend::wgpu::WgpuDevice> {
    let device = |chosen: &Chosen| match chosen {
        Chosen::Wgpu { device, .. } => device.clone(),
        other => unreachable!("a wgpu run was given {other:?}"),
    };
    devices.iter().map(device).collect()
}
