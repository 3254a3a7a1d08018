//! The trainer's execution settings, measured on the device pool: gradient accumulation
//! keeps the activation memory of one micro-batch, and the trim policy hands the pool's
//! spare pages back. The controls are the same runs without the setting: one batch of
//! `k·b` images, and no trimming.

use burn::optim::SgdConfig;
use leanburn::data::{ShapeSampler, SHAPE_CLASSES};
use leanburn::memory::{format_bytes, trim};
use leanburn::model::{ConvClassifier, ConvClassifierConfig};
use leanburn::trainer::{ExecutionConfig, TrainerStatistics, TrimPolicy};
use leanburn::MemoryProbe;
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};

use crate::common::{exclusive_device, wgpu_device};
use crate::LeanWgpu;

type Device = burn::backend::wgpu::WgpuDevice;

/// Large enough that a step's activations (several MiB per block) dwarf the pool's page
/// size classes: smaller steps fit in pages the pool holds from the start, and the
/// reserve would not move at all.
const RESOLUTION: usize = 64;
const MICRO_BATCH: usize = 8;
const MICRO_BATCHES: usize = 4;
/// The pool keeps a step's pages, so one step shows its peak.
const STEPS: usize = 1;

fn reserved(device: &Device) -> u64 {
    LeanWgpu::memory_sample(device).expect("wgpu memory is readable").bytes_reserved
}

/// `STEPS` all-full steps of `micro_batches` batches of `batch` images each, from a
/// trimmed pool: how far `bytes_reserved` rose (the pool keeps every page a step's peak
/// needed, so the rise follows the peak), and the trainer's totals.
fn run(device: &Device, batch: usize, execution: ExecutionConfig) -> (u64, TrainerStatistics) {
    let model: ConvClassifier<LeanWgpu> =
        ConvClassifierConfig::new().with_widths(vec![8, 16]).with_classes(SHAPE_CLASSES).init(device);
    let mut trainer = HybridTrainer::new(
        model,
        SgdConfig::new().init(),
        HybridConfig::all_full(),
        LrSchedule::Constant { lr: 1e-2 },
        device.clone(),
    )
    .expect("valid configuration")
    .with_execution(execution)
    .expect("valid execution");
    let mut sampler = ShapeSampler::new(RESOLUTION, batch, 5).expect("valid sampler");
    trim::<LeanWgpu>(device);
    let before = reserved(device);
    let mut highest = before;
    for _ in 0..STEPS {
        // Lazily: one micro-batch on the device at a time.
        let batches = (0..execution.accumulation_steps).map(|_| sampler.sample().into_device::<LeanWgpu>(device));
        let record = trainer.step_accumulated(batches).expect("training step");
        highest = highest.max(record.memory.expect("wgpu memory is readable").bytes_reserved);
    }
    (highest - before, trainer.statistics())
}

#[test]
fn accumulation_keeps_the_peak_of_one_micro_batch() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let accumulating = ExecutionConfig::default().with_accumulation_steps(MICRO_BATCHES);
    let (micro, _) = run(&device, MICRO_BATCH, ExecutionConfig::default());
    let (accumulated, _) = run(&device, MICRO_BATCH, accumulating);
    // Control: the same images as one batch.
    let (large, _) = run(&device, MICRO_BATCH * MICRO_BATCHES, ExecutionConfig::default());
    println!(
        "reserve rise: one batch of {MICRO_BATCH} {}, {MICRO_BATCHES} × {MICRO_BATCH} accumulated {}, one batch of {} {}",
        format_bytes(micro as f64),
        format_bytes(accumulated as f64),
        MICRO_BATCH * MICRO_BATCHES,
        format_bytes(large as f64)
    );
    assert!(large >= 2 * micro, "the control should need clearly more than one micro-batch");
    // Accumulation adds one set of summed gradients (a few KiB here), which may open one
    // more page; holding a second micro-batch's activations would add a quarter of the
    // control's extra.
    assert!(accumulated <= micro + (large - micro) / 4, "accumulation held more than one micro-batch's activations");
}

#[test]
fn the_trainer_trims_the_pool_when_configured() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let batch = MICRO_BATCH * MICRO_BATCHES;
    // Control first: without trimming, the step's pages stay reserved.
    let (kept, untrimmed) = run(&device, batch, ExecutionConfig::default());
    let (_, trimmed) = run(&device, batch, ExecutionConfig::default().with_trim(TrimPolicy::EverySteps(1)));
    let after_trims = reserved(&device);
    trim::<LeanWgpu>(&device);
    let floor = reserved(&device);
    println!(
        "reserve rise kept without trimming {}; with a trim after every step: {} trims handed back {}, {} reserved above a trimmed pool",
        format_bytes(kept as f64),
        trimmed.trims,
        format_bytes(trimmed.trimmed_bytes as f64),
        format_bytes(after_trims.saturating_sub(floor) as f64)
    );
    assert_eq!(untrimmed.trims, 0);
    assert_eq!(trimmed.trims, STEPS);
    assert!(trimmed.trimmed_bytes >= kept / 2, "the trims handed back less than half of a step's pages");
    assert!(after_trims.saturating_sub(floor) < kept / 4, "the pool kept a step's pages despite the trims");
}
