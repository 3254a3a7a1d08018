//! Device-memory invariants on a real CubeCL runtime (wgpu; llvmpipe in CI).
//!
//! Each test asserts on measured `bytes_in_use`; the first is the control that shows the
//! measurement catches the failure leanburn exists to prevent.

use crate::common::{exclusive_device, image_batch, wgpu_device, CLASSES};
use burn::backend::{Autodiff, Wgpu};
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use leanburn::memory::LeakVerdict;
use leanburn::model::SmallCnnConfig;
use leanburn::{MemoryMonitor, MemoryProbe};

type B = Autodiff<Wgpu>;
type Inner = Wgpu;

const STEPS: u64 = 30;
const BATCH: usize = 4;
const SIDE: usize = 32;
/// Bytes one batch of images occupies on the device.
const INPUT_BYTES: u64 = (BATCH * 3 * SIDE * SIDE * 4) as u64;
/// What "flat" may still drift by over a whole phase: allocator bookkeeping, not tensors.
const FLAT_SLACK: u64 = 64 * 1024;

fn assert_on_device_pool(device: &burn::backend::wgpu::WgpuDevice) {
    assert!(
        B::memory_sample(device).is_some(),
        "wgpu memory could not be read: the test would not be measuring anything"
    );
}

#[test]
fn control_forward_only_on_the_autodiff_model_grows_every_step() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    assert_on_device_pool(&device);
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device);
    let mut monitor = MemoryMonitor::<B>::new(device.clone(), STEPS as usize);
    for step in 0..STEPS {
        let (images, labels) = image_batch::<B>(BATCH, SIDE, step, &device);
        let loss: f32 = model.loss(images, labels).into_scalar().elem();
        assert!(loss.is_finite());
        monitor.sample(step);
    }
    let leak = monitor.report().leak.expect("sampled");
    assert_eq!(leak.verdict, LeakVerdict::Growing, "{leak}");
    // The graph keeps at least the first conv's input alive per step.
    assert!(leak.growth_per_step >= INPUT_BYTES as f64, "{leak}");
}

#[test]
fn forward_only_on_the_inner_model_stays_flat() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    assert_on_device_pool(&device);
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device).valid();
    let mut monitor = MemoryMonitor::<Inner>::new(device.clone(), STEPS as usize);
    for step in 0..STEPS {
        let (images, labels) = image_batch::<Inner>(BATCH, SIDE, step, &device);
        let loss: f32 = model.loss(images, labels).into_scalar().elem();
        assert!(loss.is_finite());
        monitor.sample(step);
    }
    let report = monitor.report();
    let leak = report.leak.expect("sampled");
    assert_eq!(leak.verdict, LeakVerdict::Flat, "{report}");
    let (first, last) = (report.first.unwrap(), report.current.unwrap());
    assert!(last.bytes_in_use <= first.bytes_in_use + FLAT_SLACK, "{report}");
}

#[test]
fn full_training_steps_stay_flat_after_the_first() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    assert_on_device_pool(&device);
    let mut model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device);
    let mut optimizer = AdamConfig::new().init();
    let mut monitor = MemoryMonitor::<B>::new(device.clone(), STEPS as usize);
    let mut after_first = None;
    for step in 0..=STEPS {
        let (images, labels) = image_batch::<B>(BATCH, SIDE, step, &device);
        let loss = model.loss(images, labels);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(1e-3, model, grads);
        if step == 0 {
            // The first step creates Adam's moment buffers; growth is judged after it.
            after_first = B::memory_sample(&device);
            continue;
        }
        monitor.sample(step);
    }
    let report = monitor.report();
    let leak = report.leak.expect("sampled");
    assert_eq!(leak.verdict, LeakVerdict::Flat, "{report}");
    let last = report.current.unwrap();
    assert!(last.bytes_in_use <= after_first.unwrap().bytes_in_use + FLAT_SLACK, "{report}");
}

/// Token batches for the GPT-2 evaluation loops: a fixed validation set on the host.
fn gpt2_validation() -> Vec<leanburn::data::HostBatch> {
    let tokens: Vec<u32> = (0..4_000u32).map(|i| (i * 31 + 7) % 512).collect();
    leanburn::data::evaluation_windows(&tokens, 2, 16, 4)
}

fn gpt2_config() -> leanburn::model::Gpt2Config {
    leanburn::model::Gpt2Config {
        vocab_size: 512,
        ..leanburn::model::Gpt2Config::preset("gpt2-tiny").expect("a preset")
    }
}

#[test]
fn gpt2_evaluation_loop_under_valid_stays_flat() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let model = gpt2_config().init::<B>(&device).valid();
    let validation = gpt2_validation();
    let mut monitor = MemoryMonitor::<Inner>::new(device.clone(), STEPS as usize);
    for round in 0..STEPS {
        assert!(model.evaluate(&validation, &device).is_finite());
        monitor.sample(round);
    }
    let report = monitor.report();
    assert_eq!(report.leak.expect("sampled").verdict, LeakVerdict::Flat, "{report}");
    let (first, last) = (report.first.unwrap(), report.current.unwrap());
    assert!(last.bytes_in_use <= first.bytes_in_use + FLAT_SLACK, "{report}");
}

#[test]
fn control_gpt2_evaluation_loop_on_the_autodiff_model_grows() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let model = gpt2_config().init::<B>(&device);
    let validation = gpt2_validation();
    let mut monitor = MemoryMonitor::<B>::new(device.clone(), 10);
    for round in 0..10 {
        assert!(model.evaluate(&validation, &device).is_finite());
        monitor.sample(round);
    }
    let leak = monitor.report().leak.expect("sampled");
    assert_eq!(leak.verdict, LeakVerdict::Growing, "{leak}");
}
