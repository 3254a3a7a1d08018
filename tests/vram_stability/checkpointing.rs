//! Activation checkpointing (Burn's `BalancedCheckpointing`, leanburn's
//! `Checkpointing::Balanced`) on a tiny GPT-2: one training step gives the same update as
//! on the plain autodiff backend, and the graph holds fewer live bytes between the forward
//! and the backward pass. The control is the same step on the plain backend, whose reading
//! is the one checkpointing must beat.

use burn::backend::autodiff::checkpoint::strategy::{BalancedCheckpointing, NoCheckpointing};
use burn::backend::wgpu::WgpuRuntime;
use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module, ModuleMapper, Param};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor};
use leanburn::data::{HostBatch, Split, WindowSampler};
use leanburn::memory::{format_bytes, trim};
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::MemoryProbe;

use crate::common::{exclusive_device, wgpu_device};

type Device = burn::backend::wgpu::WgpuDevice;
/// The unfused wgpu backend: fusion would decide on its own which intermediate results
/// exist, and the reading would measure fusion rather than checkpointing.
type Wgpu = burn_cubecl::CubeBackend<WgpuRuntime, f32, i32, u32>;

/// Marks every float parameter as trainable: a module made with `from_inner` from an
/// inner module records no graph otherwise.
struct Trainable;

impl<B: AutodiffBackend> ModuleMapper<B> for Trainable {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, tensor.require_grad(), mapper)
    }
}

/// One training step of `start` on `B`: how far `bytes_reserved` rose over the forward
/// and backward passes from a trimmed pool (the pool keeps every page the step's peak
/// needed), and the parameters after one SGD step at learning rate 1 (so they differ from
/// the start by exactly the gradient).
fn one_step<B>(start: &Gpt2<Wgpu>, batch: &HostBatch, device: &Device) -> (u64, Vec<Vec<f32>>)
where
    B: AutodiffBackend<InnerBackend = Wgpu> + leanburn::backend::TransformerOps,
{
    let model = Gpt2::<B>::from_inner(start.clone()).map(&mut Trainable);
    let batch = batch.to_device::<Wgpu>(device);
    let (inputs, targets) =
        (Tensor::<B, 2, Int>::from_inner(batch.inputs), Tensor::<B, 2, Int>::from_inner(batch.targets));
    trim::<Wgpu>(device);
    let before = reserved(device);
    let grads = GradientsParams::from_grads(model.loss(inputs, targets).backward(), &model);
    let rise = reserved(device).saturating_sub(before);
    let model = SgdConfig::new().init().step(1.0, model, grads);
    (rise, parameters(&model.valid()))
}

fn reserved(device: &Device) -> u64 {
    Wgpu::memory_sample(device).expect("wgpu memory is readable").bytes_reserved
}

fn parameters(model: &Gpt2<Wgpu>) -> Vec<Vec<f32>> {
    crate::float_parameters(model).into_iter().map(|(values, _)| values).collect()
}

#[test]
fn balanced_checkpointing_gives_the_same_update_and_holds_less() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let config = Gpt2Config { vocab_size: 1024, ..Gpt2Config::preset("gpt2-tiny").expect("a preset") };
    let tokens: Vec<u32> = (0..20_000u32).map(|i| (i * 7 + i / 13) % 1024).collect();
    let batch = WindowSampler::new(64, 64, 3).expect("valid sampler").sample(&tokens, Split::Train).expect("windows");

    // Control: what the plain backend's graph holds.
    let start = leanburn::init::materialize(config.init::<Wgpu>(&device));
    let initial = parameters(&start);
    let (plain, plain_params) = one_step::<Autodiff<Wgpu, NoCheckpointing>>(&start, &batch, &device);
    let (checkpointed, checkpointed_params) =
        one_step::<Autodiff<Wgpu, BalancedCheckpointing>>(&start, &batch, &device);
    println!(
        "reserve rise over forward and backward: plain {}, balanced checkpointing {} ({:.0}% less)",
        format_bytes(plain as f64),
        format_bytes(checkpointed as f64),
        100.0 * (1.0 - checkpointed as f64 / plain as f64)
    );

    assert!(plain_params != initial, "the step must move the parameters (is there a graph?)");
    let mut worst = 0f32;
    for (a, b) in plain_params.iter().zip(&checkpointed_params) {
        for (x, y) in a.iter().zip(b) {
            worst = worst.max((x - y).abs() / x.abs().max(1.0));
        }
    }
    assert_eq!(plain_params.len(), checkpointed_params.len());
    assert!(worst <= 1e-4, "checkpointing changed the update: worst relative difference {worst}");
    // Measured 31% less on llvmpipe; an eighth is well clear of the pool's page sizes.
    assert!(checkpointed <= plain - plain / 8, "checkpointing needed {checkpointed} B, the plain graph {plain} B");
}
