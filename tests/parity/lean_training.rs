//! `Autodiff<Lean<B>>` trains an unmodified Burn model exactly like `Autodiff<B>`.
//!
//! The same small CNN (two `burn::nn::conv::Conv2d` layers), the same initial weights and
//! batches, 50 Adam steps on each stack. The two stacks sum the convolutions in different
//! orders, and float differences compound through training, so the losses must agree
//! within 1e-4 relative for the first 10 steps and within 1e-2 relative for all 50.

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::{Autodiff, Wgpu};
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn_cubecl::CubeBackend;
use leanburn::model::{SmallCnn, SmallCnnConfig};
use leanburn::Lean;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const STEPS: usize = 50;
const BATCH: usize = 4;
const SIDE: usize = 12;
const CLASSES: usize = 4;
const EARLY_TOLERANCE: f32 = 1e-4;
const EARLY_STEPS: usize = 10;
const TOLERANCE: f32 = 1e-2;

type Cube = CubeBackend<WgpuRuntime, f32, i32, u32>;

/// The initial weights, serialised once so every stack starts from the same values;
/// seeded, so that every run starts from the same ones.
fn initial_weights() -> Vec<u8> {
    type Host = burn::backend::Flex;
    let device = Default::default();
    <Host as Backend>::seed(&device, 50);
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<Host>(&device);
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(model.into_record(), ())
        .expect("serialise the initial weights")
}

fn batches() -> Vec<(TensorData, TensorData)> {
    let mut rng = SmallRng::seed_from_u64(50);
    (0..STEPS)
        .map(|_| {
            // Learnable: the class shifts the brightness of one channel.
            let labels: Vec<i64> = (0..BATCH).map(|_| rng.random_range(0..CLASSES as i64)).collect();
            let plane = SIDE * SIDE;
            let pixels: Vec<f32> = (0..BATCH * 3 * plane)
                .map(|i| {
                    let (n, c) = (i / (3 * plane), (i / plane) % 3);
                    let shift = if c == 0 { labels[n] as f32 - 1.5 } else { 0.0 };
                    rng.random_range(-0.5..0.5) + shift
                })
                .collect();
            (TensorData::new(pixels, [BATCH, 3, SIDE, SIDE]), TensorData::new(labels, [BATCH]))
        })
        .collect()
}

fn train<B: AutodiffBackend>(device: &B::Device, weights: &[u8], data: &[(TensorData, TensorData)]) -> Vec<f32> {
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(weights.to_vec(), device)
        .expect("load the initial weights");
    let mut model: SmallCnn<B> = SmallCnnConfig::new().with_classes(CLASSES).init(device).load_record(record);
    let mut optimizer = AdamConfig::new().init();
    let mut losses = Vec::with_capacity(data.len());
    for (images, labels) in data {
        let images = Tensor::<B, 4>::from_data(images.clone(), device);
        let labels = Tensor::<B, 1, Int>::from_data(labels.clone(), device);
        let loss = model.loss(images, labels);
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(2e-3, model, grads);
    }
    losses
}

fn assert_same_losses(lean: &[f32], stock: &[f32]) {
    for (step, (l, s)) in lean.iter().zip(stock).enumerate() {
        let tolerance = if step < EARLY_STEPS { EARLY_TOLERANCE } else { TOLERANCE };
        assert!(
            l.is_finite() && (l - s).abs() <= tolerance * s.abs().max(1.0),
            "step {step}: lean {l}, stock {s}\nlean {lean:?}\nstock {stock:?}"
        );
    }
    // Single-batch losses are noisy (batches of 4): compare the first and last five.
    let mean = |losses: &[f32]| losses.iter().sum::<f32>() / losses.len() as f32;
    let (first, last) = (mean(&stock[..5]), mean(&stock[stock.len() - 5..]));
    assert!(last < first, "the reference run must learn: first five {first}, last five {last}: {stock:?}");
}

#[test]
fn kernel_path_trains_like_stock_cubecl() {
    let (weights, data, device) = (initial_weights(), batches(), WgpuDevice::default());
    let lean = train::<Autodiff<Lean<Cube>>>(&device, &weights, &data);
    let stock = train::<Autodiff<Cube>>(&device, &weights, &data);
    assert_same_losses(&lean, &stock);
}

#[test]
fn fused_wgpu_trains_like_stock_wgpu() {
    let (weights, data, device) = (initial_weights(), batches(), WgpuDevice::default());
    let lean = train::<Autodiff<Lean<Wgpu>>>(&device, &weights, &data);
    let stock = train::<Autodiff<Wgpu>>(&device, &weights, &data);
    assert_same_losses(&lean, &stock);
}
