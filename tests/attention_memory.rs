//! leanburn's attention on a real CubeCL runtime (wgpu; llvmpipe in CI): the same output
//! and gradients as Burn's, and no `T × T` scores kept through a training step.
//!
//! What is measured: how far the pool's `bytes_reserved` rises over one forward and
//! backward of causal attention on tracked q, k, v, after a trim (the pool keeps pages, so
//! the rise is the step's high-water mark rounded up to pages). Burn's own `attention`
//! under autodiff is the control: it keeps the scores and the softmax for the backward
//! pass (each `[1, 2, 2048, 2048]` f32 tensor is 32 MiB). leanburn's runs its fused kernels
//! at head dimension 16 (no score buffer at all), and its composed blocks at head dimension
//! 18, which the kernels do not take (a multiple of 4 is needed), over 1,024 tokens (8 MiB
//! per score tensor; llvmpipe took minutes over 2,048) in a 2 MiB workspace.

mod common;

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::Distribution;
use burn_cubecl::CubeBackend;
use leanburn::backend::lean_attention;
use leanburn::backend::set_attention_workspace;
use leanburn::MemoryProbe;

/// The unfused wgpu backend, as in `lm_loss_memory`: the question is only which tensors
/// exist, not what fusion makes of them.
type B = Autodiff<CubeBackend<WgpuRuntime, f32, i32, u32>>;

const HEADS: usize = 2;
const SEQ: usize = 2048;
/// The fused kernels' head dimension and the composed path's.
const KERNEL_HEAD_DIM: usize = 16;
const COMPOSED_HEAD_DIM: usize = 18;
/// The composed blocks' sequence length and workspace.
const COMPOSED_SEQ: usize = 1024;
const MIB: u64 = 1 << 20;
const WORKSPACE: usize = 2 << 20;

fn scores_bytes(seq: usize) -> u64 {
    (HEADS * seq * seq * 4) as u64
}

/// The reserve's rise over one forward + backward, gradients kept alive until read.
fn step_rise(device: &WgpuDevice, [seq, head_dim]: [usize; 2], lean: bool) -> u64 {
    let normal = Distribution::Normal(0.0, 1.0);
    let input = || Tensor::<B, 4>::random([1, HEADS, seq, head_dim], normal, device).require_grad();
    let (query, key, value) = (input(), input(), input());
    B::sync(device).expect("sync");
    B::release_unused(device);
    let before = B::memory_sample(device).expect("wgpu pool").bytes_reserved;
    let output = if lean {
        lean_attention(query.clone(), key.clone(), value.clone(), true)
    } else {
        let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: true };
        attention(query.clone(), key.clone(), value.clone(), None, None, options)
    };
    let grads = output.sum().backward();
    let grad = query.grad(&grads).expect("a query gradient");
    assert!(grad.abs().sum().into_scalar().is_finite());
    let after = B::memory_sample(device).expect("wgpu pool").bytes_reserved;
    after.saturating_sub(before)
}

#[test]
fn lean_attention_never_reserves_the_scores() {
    let _device_lock = common::exclusive_device();
    let device = common::wgpu_device();
    set_attention_workspace(WORKSPACE);
    // Warm the kernels (compilation allocates too), then measure each.
    let (kernel, composed) = ([SEQ, KERNEL_HEAD_DIM], [COMPOSED_SEQ, COMPOSED_HEAD_DIM]);
    step_rise(&device, kernel, true);
    step_rise(&device, composed, true);
    step_rise(&device, kernel, false);
    let burn = step_rise(&device, kernel, false);
    let kernels = step_rise(&device, kernel, true);
    let blocks = step_rise(&device, composed, true);
    println!(
        "reserve rise over one attention step of {SEQ} tokens: Burn's {} MiB, leanburn's kernels {} MiB (one score \
         tensor {} MiB); of {COMPOSED_SEQ} tokens: leanburn's composed blocks {} MiB (one score tensor {} MiB, \
         workspace {} MiB)",
        burn / MIB,
        kernels / MIB,
        scores_bytes(SEQ) / MIB,
        blocks / MIB,
        scores_bytes(COMPOSED_SEQ) / MIB,
        WORKSPACE as u64 / MIB
    );
    let scores = scores_bytes(SEQ);
    assert!(burn >= 2 * scores, "control: Burn's attention must reserve the scores twice or more: {burn} B");
    assert!(kernels < scores, "leanburn's kernels must stay below one score tensor: {kernels} B");
    assert!(kernels + scores <= burn, "leanburn's kernels must save a score tensor: {kernels} B vs {burn} B");
    let scores = scores_bytes(COMPOSED_SEQ);
    assert!(blocks < scores, "leanburn's composed blocks must stay below one score tensor: {blocks} B");
}

/// The output and the three gradients of `sum(out ∘ w)` under one attention or the other.
fn outputs_and_gradients(device: &WgpuDevice, shape: [usize; 4], causal: bool, lean: bool) -> Vec<Vec<f32>> {
    let normal = Distribution::Normal(0.0, 1.0);
    <B as Backend>::seed(device, 11);
    let input = || Tensor::<B, 4>::random(shape, normal, device).require_grad();
    let (query, key, value) = (input(), input(), input());
    let weight = Tensor::<B, 4>::random(shape, normal, device);
    let output = if lean {
        lean_attention(query.clone(), key.clone(), value.clone(), causal)
    } else {
        let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: causal };
        attention(query.clone(), key.clone(), value.clone(), None, None, options)
    };
    let grads = (output.clone() * weight).sum().backward();
    let data = |t: Tensor<burn::backend::wgpu::CubeBackend<WgpuRuntime, f32, i32, u32>, 4>| {
        t.into_data().to_vec::<f32>().expect("f32")
    };
    vec![
        data(output.inner()),
        data(query.grad(&grads).expect("grad")),
        data(key.grad(&grads).expect("grad")),
        data(value.grad(&grads).expect("grad")),
    ]
}

#[test]
fn lean_attention_matches_burns_on_the_cubecl_runtime() {
    // Tolerance as in the unit tests: |ours − Burn's| ≤ 1e-4 + 1e-4·|Burn's|.
    let _device_lock = common::exclusive_device();
    let device = common::wgpu_device();
    // The composed path (head dimension 6: the fused kernels take multiples of 4; they are
    // compared with Burn's in the unit tests and against their reference in
    // leanburn-kernels). One shape: kernels compile per shape on llvmpipe (minutes cold); the
    // random shapes, causal and not, run in the unit tests. A workspace of 1,200 scores per
    // head makes causal blocks of 32, 18, 15 and 15 rows seeing 32, 64, 80 and 80 keys:
    // blocks that stop at the diagonal, and the accumulation of their key and value
    // gradients, run on the CubeCL runtime.
    set_attention_workspace(4 * 2 * 4 * 1200);
    for (shape, causal) in [([1, 2, 80, 6], true)] {
        let ours = outputs_and_gradients(&device, shape, causal, true);
        let burns = outputs_and_gradients(&device, shape, causal, false);
        for (name, (a, b)) in ["output", "grad query", "grad key", "grad value"].iter().zip(ours.iter().zip(&burns)) {
            let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs() - (1e-4 + 1e-4 * y.abs())).fold(f32::MIN, f32::max);
            assert!(worst <= 0.0, "{name} of {shape:?} (causal {causal}) off by {worst} over the tolerance");
        }
    }
}
