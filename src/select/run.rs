//! Running one generic job on whichever backend was selected.

use burn::backend::ndarray::NdArrayDevice;
use burn::backend::{Autodiff, NdArray, Wgpu};
use burn::tensor::backend::AutodiffBackend;

use super::{Chosen, Selection};
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
pub type CpuStack = Autodiff<NdArray>;

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
            Chosen::Cuda { ordinal } => {
                job.run::<CudaStack>(burn::backend::cuda::CudaDevice::new(*ordinal))
            }
            Chosen::Wgpu { device, .. } => job.run::<WgpuStack>(device.clone()),
            Chosen::Cpu => job.run::<CpuStack>(NdArrayDevice::Cpu),
        }
    }
}
