//! leanburn's device-memory promises, each measured on a real CubeCL runtime (wgpu;
//! llvmpipe in CI) through `bytes_in_use` / `bytes_reserved`, and each next to a control
//! that shows the same measurement catches the failure. `docs/memory.md` maps every
//! promise to the test here that covers it.
//!
//! - `forward`: forward-only work on the inner backend (predict steps, evaluation loops
//!   under `valid()`) stays flat while the same work on the autodiff model grows; full
//!   training steps stay flat.
//! - `predict`: `HybridTrainer`'s predict steps stay flat; the naive predict step grows.
//! - `hybrid`: 300 steps of hybrid training mixing every phase, for the conv net on
//!   `Autodiff<Lean<Wgpu>>` and for a tiny GPT-2, do not grow after warmup.
//! - `data`: building the datasets leaves the device untouched; one batch is resident.
//! - `residency`: after training, live memory is parameters + optimizer state (+ predictor
//!   and snapshot): no persistent convolution buffers.
//! - `pool`: `trim()` hands a large transient allocation's reserve back.
//! - `checkpointing`: activation checkpointing keeps the update and holds less.
//! - `execution`: gradient accumulation keeps one micro-batch's peak; the trainer's trim
//!   policy hands the pool's spare pages back.
//! - `precision`: f16 training with loss scaling survives an overflow and learns; the f32
//!   master keeps small updates; an f16 step holds less than an f32 one.
//! - `rollback`: rollbacks and checkpoint save/resume cycles leave nothing behind.
//! - `selection`: steps that score their examples (forward only, on the inner model) and
//!   train on the chosen ones stay flat; scoring on the autodiff model grows.
//! - `conv_memory`: `Lean`'s convolutions keep their workspace within the budget, tile an
//!   image over it by rows, and leave nothing on the device between calls.
//! - `attention_memory`: `Lean`'s attention keeps no `T × T` scores through a step, and its
//!   two paths agree with each other and with Burn's.
//! - `lm_loss_memory`: the chunked LM-head loss keeps the `tokens × vocab` logits off the
//!   device.
//! - `persistent_weights`: weights built by `materialize_persistent` reserve their own size,
//!   not a shared page.
//!
//! One binary, one process: the tests take turns at the device lock
//! (`common::exclusive_device`), which also puts the process-wide settings some of them
//! change (the convolution budget, the attention workspace) back to their defaults.
//! (Four of these modules were binaries of their own until 2026-11-30: one binary links
//! and instantiates Burn's generics once, and compiles each kernel once; docs/ci.md.)

#[path = "../common/mod.rs"]
mod common;

mod attention_memory;
mod checkpointing;
mod conv_memory;
mod data;
mod execution;
mod forward;
mod hybrid;
mod lm_loss_memory;
mod persistent_weights;
mod pool;
mod precision;
mod predict;
mod residency;
mod rollback;
mod selection;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::Optimizer;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor};
use leanburn::memory::{LeakDetector, LeakReport};
use leanburn::trainer::TrainerStatistics;
use leanburn::MemoryProbe;
use leanburn::{HybridBatch, HybridTrainer};

/// `Autodiff<Lean<CubeBackend<Wgpu>>>`: leanburn's convolutions inside autodiff.
pub type LeanWgpu = burn::backend::Autodiff<leanburn::backend::Lean<leanburn::device::CubeWgpu>>;

/// Live bytes in the device pool now.
pub fn in_use<B: MemoryProbe>(device: &B::Device) -> u64 {
    B::memory_sample(device).expect("wgpu memory is readable").bytes_in_use
}

/// Every float parameter of `model`, in the module's order: its values as f32 and the
/// dtype it is stored in.
pub fn float_parameters<B: Backend, M: Module<B>>(model: &M) -> Vec<(Vec<f32>, DType)> {
    struct Values(Vec<(Vec<f32>, DType)>);
    impl<B: Backend> ModuleVisitor<B> for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let tensor = param.val();
            let dtype = tensor.dtype();
            let values = tensor.into_data().convert::<f32>().to_vec::<f32>().expect("float parameters");
            self.0.push((values, dtype));
        }
    }
    let mut values = Values(Vec::new());
    model.visit(&mut values);
    values.0
}

/// What a long run's memory did after it settled.
pub struct Soak {
    /// Leak fit over the between-block samples after `settle`.
    pub leak: LeakReport,
    /// Highest `bytes_in_use` sampled in the first third after `settle`.
    pub early_peak: u64,
    /// Highest `bytes_in_use` sampled in the last third.
    pub late_peak: u64,
    pub samples: usize,
    pub statistics: TrainerStatistics,
}

impl std::fmt::Display for Soak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.statistics;
        write!(
            f,
            "{}; peak in use {} B (first third) → {} B (last third) over {} samples; steps: \
             {} warmup, {} full, {} predict, {} correct, {} rollbacks",
            self.leak,
            self.early_peak,
            self.late_peak,
            self.samples,
            s.warmup_steps,
            s.full_steps,
            s.predict_steps,
            s.correct_steps,
            s.rollbacks
        )
    }
}

/// Runs `steps` trainer steps, sampling `bytes_in_use` after every full step from `settle`
/// on (a block's first step holds its snapshot and its batch while it probes, so samples
/// are taken at the same kind of point of every cycle).
pub fn soak<B, M, O, T>(
    trainer: &mut HybridTrainer<B, M, O, T>,
    steps: usize,
    settle: usize,
    mut next_batch: impl FnMut(usize) -> T,
) -> Soak
where
    B: AutodiffBackend + MemoryProbe,
    M: leanburn::trainer::HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    let mut samples = Vec::new();
    for step in 0..steps {
        let record = trainer.step(next_batch(step)).expect("training step");
        // A predict block's later steps run nothing: no loss, no sync, no sample.
        let ran = record.loss.is_some();
        assert!(ran || record.predicted, "step {step}: a full step without its loss");
        assert!(
            !ran || record.loss.is_some_and(f64::is_finite) || record.rolled_back,
            "step {step}: loss {:?}",
            record.loss
        );
        if step >= settle && ran && !record.predicted {
            samples.push((step as u64, record.memory.expect("wgpu memory is readable").bytes_in_use));
        }
    }
    let mut detector = LeakDetector::new(samples.len());
    for &(step, bytes) in &samples {
        detector.record(step, bytes);
    }
    let third = samples.len() / 3;
    assert!(third >= 5, "too few between-block samples to judge: {}", samples.len());
    let peak = |part: &[(u64, u64)]| part.iter().map(|s| s.1).max().unwrap_or(0);
    Soak {
        leak: detector.report(),
        early_peak: peak(&samples[..third]),
        late_peak: peak(&samples[samples.len() - third..]),
        samples: samples.len(),
        statistics: trainer.statistics(),
    }
}
