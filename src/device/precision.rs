//! The precision a run computes in unless told otherwise: bf16 on CUDA devices that
//! compute it, f32 elsewhere.
//!
//! On an H200 (2026-11-30, `docs/benchmarks.md`) gpt2-small at 8 × 1024 trained 1.39×
//! faster in bf16 than in f32 (134,469 against 96,449 tokens/s) to the same validation loss
//! at step 60 (6.1110 against 6.1114), in 0.69× the GPU memory. bf16 keeps f32's range, so
//! it needs no loss scaling; the master weights and optimizer state stay f32
//! ([`Precision::Bf16`]). wgpu has no bf16, and f16 needs a loss scaler: neither is a
//! default. The trainer's own default ([`crate::trainer::PrecisionConfig`]) stays f32: this
//! is the default of a run that chose its device at run time.

use burn::tensor::DType;

use super::{BackendJob, BackendKind, DeviceChoice, TrainBackend};
use crate::trainer::Precision;

impl DeviceChoice {
    /// The precision to compute in where the user did not choose one: bf16 on a CUDA
    /// device that computes it, f32 everywhere else.
    pub fn default_precision(&self) -> Precision {
        let computes_bf16 = self.kind() == BackendKind::Cuda && self.run(ComputesIn(DType::BF16));
        default_precision(self.kind(), computes_bf16)
    }
}

/// The rule of [`DeviceChoice::default_precision`], given what the device computes in.
fn default_precision(kind: BackendKind, computes_bf16: bool) -> Precision {
    match kind {
        BackendKind::Cuda if computes_bf16 => Precision::Bf16,
        _ => Precision::F32,
    }
}

/// Whether the chosen device computes in a float type.
struct ComputesIn(DType);

impl BackendJob for ComputesIn {
    type Output = bool;

    fn run<B: TrainBackend>(self, device: B::Device) -> bool {
        <B as burn::tensor::backend::Backend>::supports_dtype(&device, self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_only_on_cuda_devices_that_compute_it() {
        assert_eq!(default_precision(BackendKind::Cuda, true), Precision::Bf16);
        // Controls: an older CUDA device, and the backends whose bf16 has not been measured
        // (wgpu has none; the CPU computes it slowly).
        assert_eq!(default_precision(BackendKind::Cuda, false), Precision::F32);
        assert_eq!(default_precision(BackendKind::Wgpu, true), Precision::F32);
        assert_eq!(default_precision(BackendKind::Cpu, true), Precision::F32);
    }
}
