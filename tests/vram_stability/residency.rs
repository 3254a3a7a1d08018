//! No persistent convolution buffers: after hybrid training on `Autodiff<Lean<Wgpu>>`,
//! with the batch dropped and the trainer between blocks, live device memory is what the
//! model and its training state need, to within each allocation's alignment padding:
//! the model's tensors, Adam's two moments per trained parameter and the predictor's
//! state (the rollback snapshot is held only inside a block). The control keeps one
//! convolution's column workspace alive, as a backend caching it between calls would,
//! and breaks the bound.

use burn::module::Module;
use burn::optim::AdamConfig;
use burn::prelude::*;
use leanburn::data::{ShapeSampler, SHAPE_CLASSES};
use leanburn::memory::MemorySample;
use leanburn::model::{ConvClassifier, ConvClassifierConfig};
use leanburn::trainer::TrainerStatistics;
use leanburn::MemoryProbe;
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};

use crate::common::{exclusive_device, wgpu_device};
use crate::LeanWgpu;

const WIDTHS: [usize; 3] = [16, 32, 64];
const RESOLUTION: usize = 32;
const IMAGES: usize = 16;
/// Each live allocation may be padded up to the pool's 256-byte alignment.
const ALIGNMENT: u64 = 256;

/// Trains until at least 25 steps are taken; returns
/// the pool then (batch dropped), the trainer's statistics and the model's parameters.
fn train_and_settle(
    device: &burn::backend::wgpu::WgpuDevice,
) -> (MemorySample, TrainerStatistics, ConvClassifier<LeanWgpu>) {
    let model = ConvClassifierConfig::new().with_widths(WIDTHS.to_vec()).with_classes(SHAPE_CLASSES).init(device);
    // A guard that keeps every finite block, so the run predicts within its 25 steps (the
    // default one rejects the first block, which has no pace to be judged against).
    let config = HybridConfig::default().with_warmup_steps(8).with_min_gain(-1.0).with_seed(1);
    let mut trainer =
        HybridTrainer::new(model, AdamConfig::new().init(), config, LrSchedule::Constant { lr: 3e-3 }, device.clone())
            .expect("valid configuration");
    let mut sampler = ShapeSampler::new(RESOLUTION, IMAGES, 2).expect("valid sampler");
    while trainer.steps_taken() < 25 {
        trainer.step(sampler.sample().into_device::<LeanWgpu>(device)).expect("training step");
    }
    let statistics = trainer.statistics();
    assert!(statistics.predict_steps > 0, "the run must have predicted: {statistics:?}");
    let sample = LeanWgpu::memory_sample(device).expect("wgpu memory is readable");
    (sample, statistics, trainer.into_model())
}

/// Bytes the training state needs: the model's tensors (`num_params` counts batch norm's
/// running mean and variance too), Adam's two moments per trained parameter (the running
/// statistics get no gradient), the predictor's state as the trainer reports it, and the
/// probe set the trainer holds for the run (the first block's batch: f32 images
/// `[IMAGES, 3, RESOLUTION, RESOLUTION]` and their labels).
fn accounted_bytes(model: &ConvClassifier<LeanWgpu>, statistics: &TrainerStatistics) -> u64 {
    let tensors = model.num_params() as u64;
    let running_statistics = 2 * WIDTHS.iter().sum::<usize>() as u64;
    let probe_set = (IMAGES * 3 * RESOLUTION * RESOLUTION * 4 + IMAGES * 4) as u64;
    4 * tensors + 2 * 4 * (tensors - running_statistics) + statistics.predictor_bytes as u64 + probe_set
}

#[test]
fn after_training_only_parameters_and_optimizer_state_are_resident() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let baseline = LeanWgpu::memory_sample(&device).expect("wgpu memory is readable").bytes_in_use;
    let (sample, statistics, model) = train_and_settle(&device);
    let live = sample.bytes_in_use - baseline;
    let accounted = accounted_bytes(&model, &statistics);
    let slack = sample.allocations * ALIGNMENT;
    println!(
        "live {live} B in {} allocations; accounted {accounted} B (parameters {} B, predictor {} B); slack {slack} B",
        sample.allocations,
        model.num_params() * 4,
        statistics.predictor_bytes
    );
    assert!(statistics.predictor_bytes > 0, "the predictor's size must be reported");
    assert!(
        live.abs_diff(accounted) <= slack,
        "live {live} B differs from the training state's {accounted} B by more than {slack} B"
    );
}

#[test]
fn control_a_cached_column_workspace_breaks_the_bound() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let baseline = LeanWgpu::memory_sample(&device).expect("wgpu memory is readable").bytes_in_use;
    let (_, statistics, model) = train_and_settle(&device);
    // The first convolution's im2col matrix for one batch: [images·H·W, C_in·3·3].
    let columns = IMAGES * RESOLUTION * RESOLUTION * 3 * 9;
    let cached = Tensor::<LeanWgpu, 2>::from_data(
        TensorData::new(vec![0f32; columns], [IMAGES * RESOLUTION * RESOLUTION, 27]),
        &device,
    );
    let sample = LeanWgpu::memory_sample(&device).expect("wgpu memory is readable");
    let live = sample.bytes_in_use - baseline;
    let accounted = accounted_bytes(&model, &statistics);
    println!("control: live {live} B, accounted {accounted} B, cached workspace {} B", columns * 4);
    assert!(live > accounted + sample.allocations * ALIGNMENT, "the cached workspace went unnoticed");
    drop(cached);
}
