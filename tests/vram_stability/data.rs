//! The text pipeline keeps its data on the host: building the corpus, the tokens, the
//! split and the samplers leaves device memory untouched, and a training loop that moves
//! one batch per step never holds more than that batch. Measured on wgpu (llvmpipe in CI),
//! with a control that keeps every batch and is caught.

use std::path::Path;

type Wgpu = burn::backend::Wgpu<f32, i32>;
use leanburn::data::{evaluation_windows, Corpus, Gpt2Tokenizer, Split, TokenDataset, WindowSampler};
use leanburn::MemoryProbe;

const BATCH: usize = 4;
const SEQ: usize = 32;
/// Two i32 tensors of `BATCH × SEQ` (inputs and targets), plus one allocation's alignment
/// slack each.
const ONE_BATCH_BYTES: u64 = 2 * (BATCH * SEQ * 4) as u64 + 2 * 256;

fn in_use(device: &burn::backend::wgpu::WgpuDevice) -> u64 {
    Wgpu::memory_sample(device).expect("wgpu has a memory pool").bytes_in_use
}

#[test]
fn the_dataset_stays_on_the_host_and_only_one_batch_is_on_the_device() {
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    // Make sure the device is up before the baseline.
    let _ = burn::tensor::Tensor::<Wgpu, 1>::zeros([1], &device);
    let baseline = in_use(&device);

    let corpus = Corpus::from_path(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), Some(1 << 20)).unwrap();
    let tokens = Gpt2Tokenizer::new().unwrap().encode_corpus(&corpus.text);
    let data = TokenDataset::split(tokens, 0.1).unwrap();
    let mut sampler = WindowSampler::new(BATCH, SEQ, 7).unwrap();
    let validation = evaluation_windows(data.validation(), BATCH, SEQ, 4);
    assert!(data.train().len() > 10_000 && !validation.is_empty());
    assert_eq!(in_use(&device), baseline, "building the data touched the device");

    let mut peak = baseline;
    for _ in 0..20 {
        let batch = sampler.sample(data.train(), Split::Train).unwrap().into_device::<Wgpu>(&device);
        peak = peak.max(in_use(&device));
        drop(batch);
    }
    let after = in_use(&device);
    println!("baseline {baseline} B, peak {peak} B, after {after} B, one batch ≤ {ONE_BATCH_BYTES} B");
    assert!(peak > baseline, "a batch on the device must show in the pool");
    assert!(peak - baseline <= ONE_BATCH_BYTES, "more than one batch resident: {} B", peak - baseline);
    assert_eq!(after, baseline, "dropped batches must leave nothing behind");

    // Control: a loop that keeps its batches is caught by the same bound.
    let kept: Vec<_> =
        (0..5).map(|_| sampler.sample(data.train(), Split::Train).unwrap().into_device::<Wgpu>(&device)).collect();
    let held = in_use(&device) - baseline;
    assert!(held > ONE_BATCH_BYTES, "the control should exceed one batch: {held} B");
    drop(kept);
}

#[test]
fn the_shapes_dataset_stays_on_the_host_and_only_one_batch_is_on_the_device() {
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    let _ = burn::tensor::Tensor::<Wgpu, 1>::zeros([1], &device);
    let baseline = in_use(&device);

    let mut sampler = leanburn::data::ShapeSampler::new(32, 8, 3).unwrap();
    let validation = leanburn::data::shapes_validation(32, 8, 4, 3).unwrap();
    let host = sampler.sample();
    assert_eq!(in_use(&device), baseline, "generating images touched the device");

    // Images (f32) and labels (i32 on this backend), one alignment slack each.
    let one_batch = (8 * 3 * 32 * 32 * 4 + 8 * 4 + 2 * 256) as u64;
    let mut peak = baseline;
    for batch in validation.iter().chain([&host]) {
        let on_device = batch.to_device::<Wgpu>(&device);
        peak = peak.max(in_use(&device));
        drop(on_device);
    }
    println!("baseline {baseline} B, peak {peak} B, one batch ≤ {one_batch} B");
    assert!(peak > baseline && peak - baseline <= one_batch, "resident: {} B", peak - baseline);
    assert_eq!(in_use(&device), baseline, "dropped batches must leave nothing behind");

    // Control: keeping the validation set on the device is caught by the same bound.
    let kept: Vec<_> = validation.iter().map(|b| b.to_device::<Wgpu>(&device)).collect();
    assert!(in_use(&device) - baseline > one_batch);
    drop(kept);
}
