//! `HybridTrainer`'s predict steps leave device memory flat on a real CubeCL runtime
//! (wgpu; llvmpipe in CI), while the naive predict step (the update applied with autodiff
//! ops and the forward run on the autodiff model, as an earlier public attempt did)
//! grows every step. Both are measured the same way, through the `LeakDetector`.

use crate::common::{exclusive_device, image_batch, wgpu_device, CLASSES};
use burn::backend::{Autodiff, Wgpu};
use burn::module::{AutodiffModule, Module, ModuleMapper, Param};
use burn::optim::SgdConfig;
use burn::prelude::*;
use leanburn::memory::{LeakDetector, LeakVerdict};
use leanburn::model::{SmallCnn, SmallCnnConfig};
use leanburn::trainer::{ParamUpdates, Phase};
use leanburn::MemoryProbe;
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};

type B = Autodiff<Wgpu>;

const PREDICT_STEPS: usize = 50;
/// Predict blocks the trainer's test runs (each one jump, two probe forwards).
const BLOCKS: usize = 30;
const WARMUP: usize = 3;
const BATCH: usize = 4;
const SIDE: usize = 32;

/// Warmup, then one-step predict blocks that nothing rolls back, each followed by one
/// correct and one full step.
fn config() -> HybridConfig {
    HybridConfig::default()
        .with_warmup_steps(WARMUP)
        .with_initial_horizon(1)
        .with_min_horizon(1)
        .with_max_horizon(1)
        .with_full_steps(1)
        .with_correct_steps(1)
        .with_min_confidence(0.0)
        .with_min_gain(-1e9)
}

#[allow(clippy::type_complexity)] // the trainer's type, spelled out once
fn trainer(
    device: &burn::backend::wgpu::WgpuDevice,
) -> HybridTrainer<B, SmallCnn<B>, impl burn::optim::Optimizer<SmallCnn<B>, B>, (Tensor<B, 4>, Tensor<B, 1, Int>)> {
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(device);
    HybridTrainer::new(model, SgdConfig::new().init(), config(), LrSchedule::Constant { lr: 1e-2 }, device.clone())
        .expect("valid configuration")
}

#[test]
fn predict_blocks_leave_bytes_in_use_flat() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut trainer = trainer(&device);
    for step in 0..WARMUP {
        trainer.step(image_batch::<B>(BATCH, SIDE, step as u64, &device)).expect("warmup step");
    }
    let mut detector = LeakDetector::new(BLOCKS);
    let mut first = None;
    let mut blocks = 0;
    let mut step = WARMUP;
    while blocks < BLOCKS {
        let phase = trainer.phase();
        let record = trainer.step(image_batch::<B>(BATCH, SIDE, step as u64, &device)).expect("step");
        step += 1;
        if phase != Phase::Predict {
            continue;
        }
        // Each block's one step: the jump and its two probe forwards on the inner model.
        assert!(record.predicted && !record.rolled_back && record.loss.is_some_and(f64::is_finite));
        let memory = record.memory.expect("wgpu memory is readable");
        blocks += 1;
        // The first block's step sets the baseline: judge growth after it.
        if blocks == 1 {
            first = Some(memory.bytes_in_use);
            continue;
        }
        detector.record(step as u64, memory.bytes_in_use);
    }
    let report = detector.report();
    assert_eq!(report.verdict, LeakVerdict::Flat, "{report}");
    let last = B::memory_sample(&device).expect("sample").bytes_in_use;
    assert!(
        last <= first.expect("sampled") + 64 * 1024,
        "bytes_in_use went from {first:?} to {last} over {BLOCKS} blocks"
    );
}

/// Adds an update to every parameter with autodiff ops, recording a graph node each time.
struct NaiveUpdate<'a> {
    updates: &'a ParamUpdates<Wgpu>,
}

impl ModuleMapper<B> for NaiveUpdate<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(update) = self.updates.get(&param.id) else { return param };
        let (id, tensor, mapper) = param.consume();
        let update = Tensor::<B, 1>::from_inner(update.clone()).reshape(tensor.shape());
        Param::from_mapped_value(id, tensor + update, mapper)
    }
}

#[test]
fn control_naive_predict_steps_on_the_autodiff_model_grow() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut trainer = trainer(&device);
    for step in 0..WARMUP {
        trainer.step(image_batch::<B>(BATCH, SIDE, step as u64, &device)).expect("warmup step");
    }
    let updates = trainer.predictor().predict(1e-2);
    let mut model: SmallCnn<B> = trainer.into_model();
    let mut detector = LeakDetector::new(PREDICT_STEPS);
    for step in 0..PREDICT_STEPS {
        model = model.map(&mut NaiveUpdate { updates: &updates });
        let (images, labels) = image_batch::<B>(BATCH, SIDE, (WARMUP + step) as u64, &device);
        let loss: f32 = model.loss(images, labels).into_scalar().elem();
        assert!(loss.is_finite());
        detector.record(step as u64, B::memory_sample(&device).expect("sample").bytes_in_use);
    }
    let report = detector.report();
    assert_eq!(report.verdict, LeakVerdict::Growing, "{report}");
    // The same model, moved to the inner backend, drops the whole chain.
    drop(model.valid());
}
