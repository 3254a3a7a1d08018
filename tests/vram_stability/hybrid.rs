//! 300 steps of hybrid training, every phase mixed (warmup, full, predict, correct, with
//! rollbacks), leave `bytes_in_use` flat after warmup: for the conv net on
//! `Autodiff<Lean<Wgpu>>`, whose convolutions are leanburn's, and for a tiny GPT-2. The
//! controls run the same loops keeping one device tensor per step, as a loop that stores
//! its batches or outputs for logging would, and are caught.

use burn::optim::AdamConfig;
use burn::prelude::*;
use leanburn::data::{ImageBatch, ShapeSampler, Split, TokenBatch, WindowSampler, SHAPE_CLASSES};
use leanburn::memory::LeakVerdict;
use leanburn::model::{ConvClassifier, ConvClassifierConfig, Gpt2, Gpt2Config};
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};

use crate::common::{exclusive_device, wgpu_device};
use crate::{soak, LeanWgpu, Soak};

type Gpt2Backend = burn::backend::Autodiff<burn::backend::Wgpu>;

const STEPS: usize = 300;
/// The controls grow by a tensor a step: a third of the run shows it.
const CONTROL_STEPS: usize = STEPS / 3;
/// Steps before growth is judged: Adam's moments, the predictor's state and the kernels'
/// autotune results are all created in these.
const SETTLE: usize = 40;
/// What the last third's peak may exceed the first third's by: allocator bookkeeping,
/// not tensors (one image batch of the conv net is 24 KiB).
const PEAK_SLACK: u64 = 16 * 1024;
const RESOLUTION: usize = 16;
const IMAGES: usize = 8;

/// Short blocks and cooldowns, a guard that keeps any block that lowers its probe and a
/// gate that never closes, so 300 steps hold many cycles of every phase, rollbacks
/// included.
fn mixed_phases() -> HybridConfig {
    HybridConfig::default()
        .with_warmup_steps(10)
        .with_min_horizon(1)
        .with_initial_horizon(2)
        .with_max_horizon(4)
        .with_cooldown_steps(2)
        .with_min_gain(0.0)
        .with_min_confidence(0.0)
        .with_seed(3)
}

#[allow(clippy::type_complexity)] // the trainer's type, spelled out once
fn cnn_trainer(
    device: &burn::backend::wgpu::WgpuDevice,
) -> HybridTrainer<
    LeanWgpu,
    ConvClassifier<LeanWgpu>,
    impl burn::optim::Optimizer<ConvClassifier<LeanWgpu>, LeanWgpu>,
    (Tensor<LeanWgpu, 4>, Tensor<LeanWgpu, 1, Int>),
> {
    let model = ConvClassifierConfig::new().with_widths(vec![8, 16]).with_classes(SHAPE_CLASSES).init(device);
    HybridTrainer::new(
        model,
        AdamConfig::new().init(),
        mixed_phases(),
        LrSchedule::Constant { lr: 3e-3 },
        device.clone(),
    )
    .expect("valid configuration")
}

fn assert_every_phase_ran(soak: &Soak) {
    let s = &soak.statistics;
    assert!(
        s.warmup_steps > 0 && s.full_steps > 0 && s.predict_steps > 0 && s.correct_steps > 0,
        "the run must mix every phase: {soak}"
    );
}

fn assert_flat(soak: &Soak) {
    assert_eq!(soak.leak.verdict, LeakVerdict::Flat, "{soak}");
    assert!(soak.late_peak <= soak.early_peak + PEAK_SLACK, "live memory rose: {soak}");
}

fn images(
    sampler: &mut ShapeSampler,
    device: &burn::backend::wgpu::WgpuDevice,
) -> (Tensor<LeanWgpu, 4>, Tensor<LeanWgpu, 1, Int>) {
    let batch: ImageBatch = sampler.sample();
    batch.into_device::<LeanWgpu>(device)
}

#[test]
fn hybrid_cnn_on_lean_stays_flat_over_300_steps() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut trainer = cnn_trainer(&device);
    let mut sampler = ShapeSampler::new(RESOLUTION, IMAGES, 11).expect("valid sampler");
    let soak = soak(&mut trainer, STEPS, SETTLE, |_| images(&mut sampler, &device));
    println!("conv net on Lean<Wgpu>: {soak}");
    assert_every_phase_ran(&soak);
    assert_flat(&soak);
}

#[test]
fn control_hybrid_cnn_keeping_one_tensor_per_step_grows() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut trainer = cnn_trainer(&device);
    let mut sampler = ShapeSampler::new(RESOLUTION, IMAGES, 11).expect("valid sampler");
    let mut kept = Vec::new();
    let soak = soak(&mut trainer, CONTROL_STEPS, SETTLE, |_| {
        let batch = images(&mut sampler, &device);
        kept.push(batch.0.clone());
        batch
    });
    println!("control: {soak}");
    assert_eq!(soak.leak.verdict, LeakVerdict::Growing, "{soak}");
    assert!(soak.late_peak > soak.early_peak + PEAK_SLACK, "{soak}");
}

/// gpt2-tiny's shape (2 layers, width 64, 2 heads) with a 1,024-token vocabulary, so that
/// 300 steps take seconds on llvmpipe rather than minutes.
fn gpt2_trainer(
    device: &burn::backend::wgpu::WgpuDevice,
) -> HybridTrainer<
    Gpt2Backend,
    Gpt2<Gpt2Backend>,
    impl burn::optim::Optimizer<Gpt2<Gpt2Backend>, Gpt2Backend>,
    TokenBatch<Gpt2Backend>,
> {
    let config = Gpt2Config { vocab_size: 1024, ..Gpt2Config::preset("gpt2-tiny").expect("a preset") };
    HybridTrainer::new(
        config.init(device),
        AdamConfig::new().init(),
        mixed_phases(),
        LrSchedule::Constant { lr: 1e-3 },
        device.clone(),
    )
    .expect("valid configuration")
}

fn token_stream() -> Vec<u32> {
    // A repeating pattern with structure to learn, so the loss moves and the guard judges.
    (0..20_000u32).map(|i| (i * 7 + i / 13) % 1024).collect()
}

#[test]
fn hybrid_gpt2_tiny_stays_flat_over_300_steps() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut trainer = gpt2_trainer(&device);
    let tokens = token_stream();
    let mut sampler = WindowSampler::new(4, 32, 5).expect("valid sampler");
    let soak = soak(&mut trainer, STEPS, SETTLE, |_| {
        sampler.sample(&tokens, Split::Train).expect("windows").into_device::<Gpt2Backend>(&device)
    });
    println!("gpt2-tiny (vocab 1024) on Wgpu: {soak}");
    assert_every_phase_ran(&soak);
    assert_flat(&soak);
}

#[test]
fn control_hybrid_gpt2_keeping_one_tensor_per_step_grows() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let mut trainer = gpt2_trainer(&device);
    let tokens = token_stream();
    let mut sampler = WindowSampler::new(4, 32, 5).expect("valid sampler");
    let mut kept = Vec::new();
    let soak = soak(&mut trainer, CONTROL_STEPS, SETTLE, |_| {
        // One step's worth of hidden states, as a loop that logs activations might keep.
        let batch = sampler.sample(&tokens, Split::Train).expect("windows").into_device::<Gpt2Backend>(&device);
        kept.push(Tensor::<Gpt2Backend, 2>::zeros([4 * 32, 64], &device));
        batch
    });
    println!("control: {soak}");
    assert_eq!(soak.leak.verdict, LeakVerdict::Growing, "{soak}");
    assert!(soak.late_peak > soak.early_peak + PEAK_SLACK, "{soak}");
}
