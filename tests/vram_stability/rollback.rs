//! Rollbacks and checkpoint save/resume cycles leave nothing behind, on the conv net on
//! `Autodiff<Lean<Wgpu>>`. The controls leak what a faulty implementation would (one set
//! of parameters per rollback; the previous model on each resume) and are caught.

use burn::module::Module;
use burn::optim::AdamConfig;
use burn::prelude::*;
use leanburn::data::{ShapeSampler, SHAPE_CLASSES};
use leanburn::memory::{LeakDetector, LeakVerdict};
use leanburn::model::{ConvClassifier, ConvClassifierConfig};
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};

use crate::common::{exclusive_device, wgpu_device};
use crate::{in_use, LeanWgpu};

const RESOLUTION: usize = 16;
const IMAGES: usize = 8;
const FLAT_SLACK: u64 = 16 * 1024;

fn model(device: &burn::backend::wgpu::WgpuDevice) -> ConvClassifier<LeanWgpu> {
    ConvClassifierConfig::new().with_widths(vec![16, 32]).with_classes(SHAPE_CLASSES).init(device)
}

/// A guard that asks each block for a hundred times what its full steps would gain, no
/// cooldown and no confidence floor: nearly every block is rolled back.
fn rolling_back() -> HybridConfig {
    HybridConfig::default()
        .with_warmup_steps(5)
        .with_min_horizon(1)
        .with_initial_horizon(1)
        .with_min_gain(100.0)
        .with_cooldown_steps(0)
        .with_min_confidence(0.0)
        .with_seed(4)
}

/// Runs 150 steps; returns the between-block `bytes_in_use` after each rollback's
/// recovery and how many rollbacks there were. `leak` is called at each rollback.
fn run_with_rollbacks(
    device: &burn::backend::wgpu::WgpuDevice,
    mut leak: impl FnMut(&ConvClassifier<LeanWgpu>),
) -> (Vec<(u64, u64)>, usize) {
    let mut trainer = HybridTrainer::new(
        model(device),
        AdamConfig::new().init(),
        rolling_back(),
        LrSchedule::Constant { lr: 3e-3 },
        device.clone(),
    )
    .expect("valid configuration");
    let mut sampler = ShapeSampler::new(RESOLUTION, IMAGES, 8).expect("valid sampler");
    let mut samples = Vec::new();
    for step in 0..150 {
        let record = trainer.step(sampler.sample().into_device::<LeanWgpu>(device)).expect("step");
        if record.rolled_back {
            leak(trainer.model());
        }
        // Sampled after steps that synced (a predict block's later steps do not).
        if step >= 20 && record.loss.is_some() {
            samples.push((step as u64, record.memory.expect("wgpu memory is readable").bytes_in_use));
        }
    }
    (samples, trainer.statistics().rollbacks)
}

fn verdict(samples: &[(u64, u64)]) -> leanburn::memory::LeakReport {
    let mut detector = LeakDetector::new(samples.len());
    samples.iter().for_each(|&(step, bytes)| detector.record(step, bytes));
    detector.report()
}

#[test]
fn rollbacks_leave_nothing_behind() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let (samples, rollbacks) = run_with_rollbacks(&device, |_| {});
    let report = verdict(&samples);
    // A rolled-back step's own reading can still include the rejected weights; compare
    // the peaks of the first and last thirds, which both contain such steps.
    let third = samples.len() / 3;
    let peak = |part: &[(u64, u64)]| part.iter().map(|s| s.1).max().unwrap_or(0);
    let (early, late) = (peak(&samples[..third]), peak(&samples[samples.len() - third..]));
    println!(
        "{rollbacks} rollbacks; {report}; between-block peak in use {early} B (first third), {late} B (last third)"
    );
    assert!(rollbacks >= 10, "the guard should have rolled back often: {rollbacks}");
    assert_eq!(report.verdict, LeakVerdict::Flat, "{report}");
    assert!(late <= early + FLAT_SLACK, "between-block memory rose from {early} B to {late} B");
}

#[test]
fn control_keeping_the_rejected_weights_grows() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut kept = Vec::new();
    let (samples, rollbacks) = run_with_rollbacks(&device, |model| {
        let parameters = model.num_params();
        kept.push(Tensor::<LeanWgpu, 1>::from_data(TensorData::new(vec![0f32; parameters], [parameters]), &device));
    });
    let report = verdict(&samples);
    println!("control: {rollbacks} rollbacks; {report}");
    assert_eq!(report.verdict, LeakVerdict::Growing, "{report}");
}

/// Trains to step 12 (between blocks), then `cycles` times: checkpoint, drop the trainer,
/// resume a new one from disk, train 6 more steps. Returns
/// `bytes_in_use` after each cycle; `leak` sees each dropped trainer's model.
fn checkpoint_cycles(
    device: &burn::backend::wgpu::WgpuDevice,
    cycles: usize,
    mut leak: impl FnMut(ConvClassifier<LeanWgpu>),
) -> Vec<(u64, u64)> {
    let dir = std::env::temp_dir().join(format!("leanburn-vram-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = HybridConfig::default().with_warmup_steps(4).with_seed(5);
    let mut trainer = HybridTrainer::new(
        model(device),
        AdamConfig::new().init(),
        config,
        LrSchedule::Constant { lr: 3e-3 },
        device.clone(),
    )
    .expect("valid configuration");
    let mut sampler = ShapeSampler::new(RESOLUTION, IMAGES, 9).expect("valid sampler");
    let mut samples = Vec::new();
    let mut target = 12;
    for cycle in 0..cycles {
        while trainer.steps_taken() < target {
            trainer.step(sampler.sample().into_device::<LeanWgpu>(device)).expect("step");
        }
        trainer.save_checkpoint(&dir).expect("checkpoint");
        leak(trainer.into_model());
        trainer = HybridTrainer::resume(model(device), AdamConfig::new().init(), &dir, device.clone()).expect("resume");
        target = trainer.steps_taken() + 6;
        samples.push((cycle as u64, in_use::<LeanWgpu>(device)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    samples
}

#[test]
fn checkpoint_and_resume_cycles_leave_nothing_behind() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let samples = checkpoint_cycles(&device, 8, drop);
    let report = verdict(&samples[1..]);
    println!("resume cycles: {samples:?}; {report}");
    assert_eq!(report.verdict, LeakVerdict::Flat, "{report}");
    let (first, last) = (samples[1].1, samples.last().unwrap().1);
    assert!(last <= first + FLAT_SLACK, "in use went from {first} B to {last} B over the cycles");
}

#[test]
fn control_keeping_the_previous_model_on_resume_grows() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut kept = Vec::new();
    let samples = checkpoint_cycles(&device, 6, |model| kept.push(model));
    let report = verdict(&samples[1..]);
    println!("control resume cycles: {samples:?}; {report}");
    assert_eq!(report.verdict, LeakVerdict::Growing, "{report}");
}
