//! The chunked LM-head loss keeps the `tokens × vocab` logits off the device, measured on a
//! real CubeCL pool (wgpu; llvmpipe in CI).
//!
//! What is measured: how far the pool's `bytes_reserved` rises during one GPT-2 training
//! step (forward and backward) after a trim. CubeCL's pool does not give pages back on its
//! own, so the rise is the step's high-water mark rounded up to pages. The plain loss is
//! the control: its logits (256 tokens × 32,768 ids × 4 B = 32 MiB per copy) must show,
//! or the measurement could not see what chunking removes.

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::train::TrainStep;
use burn_cubecl::CubeBackend;
use leanburn::data::TokenBatch;
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::MemoryProbe;

/// The unfused wgpu backend: fusion decides on its own which intermediate results exist
/// (and compiles and autotunes a kernel for each fused group: slow on a cold llvmpipe),
/// while the question here is only whether the logits are ever materialised.
type B = Autodiff<CubeBackend<WgpuRuntime, f32, i32, u32>>;

const BATCH: usize = 4;
const SEQ: usize = 64;
/// A vocabulary large enough for the logits to dominate, small enough for llvmpipe.
const VOCAB: usize = 32_768;
const CHUNK: usize = 32;
const MIB: u64 = 1 << 20;

fn logits_bytes() -> u64 {
    (BATCH * SEQ * VOCAB * 4) as u64
}

fn batch(device: &WgpuDevice) -> TokenBatch<B> {
    let ids = |salt: usize| -> Vec<i64> { (0..BATCH * SEQ).map(|i| ((i * 7919 + salt) % VOCAB) as i64).collect() };
    TokenBatch {
        inputs: Tensor::from_data(TensorData::new(ids(1), [BATCH, SEQ]), device),
        targets: Tensor::from_data(TensorData::new(ids(2), [BATCH, SEQ]), device),
    }
}

/// The reserve's rise over one forward + backward of `model`, gradients kept alive.
fn step_rise(model: &Gpt2<B>, device: &WgpuDevice) -> u64 {
    B::release_unused(device);
    let batch = batch(device);
    let before = B::memory_sample(device).expect("wgpu pool").bytes_reserved;
    let output = TrainStep::step(model, batch);
    let after = B::memory_sample(device).expect("wgpu pool").bytes_reserved;
    assert!(output.item.loss.into_scalar().is_finite());
    drop(output.grads);
    after.saturating_sub(before)
}

#[test]
fn the_chunked_loss_never_reserves_the_logits() {
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    // One narrow layer and a large vocabulary: the logits dominate the step.
    let config = Gpt2Config::new(VOCAB, SEQ, 1, 32, 2);
    let model: Gpt2<B> = config.init(&device);

    // Warm the kernels (compilation allocates too), then measure each variant.
    step_rise(&model, &device);
    let chunked_model = model.clone().with_loss_chunk(Some(CHUNK));
    step_rise(&chunked_model, &device);
    let plain = step_rise(&model, &device);
    let chunked = step_rise(&chunked_model, &device);
    println!(
        "reserve rise over one step: plain {} MiB, chunked ({CHUNK} tokens) {} MiB; logits {} MiB",
        plain / MIB,
        chunked / MIB,
        logits_bytes() / MIB
    );
    assert!(plain >= 2 * logits_bytes(), "control: the plain loss must reserve the logits twice or more");
    assert!(
        chunked + logits_bytes() <= plain,
        "chunking must save at least one logits copy: chunked {chunked} B, plain {plain} B"
    );
    assert!(chunked < logits_bytes(), "the chunked step must stay below one logits copy: {chunked} B");
}
