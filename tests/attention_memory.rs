//! leanburn's attention on a real CubeCL runtime (wgpu; llvmpipe in CI): the same output
//! and gradients as Burn's, and no `T × T` scores kept through a training step.
//!
//! What is measured: how far the pool's `bytes_reserved` rises over one forward and
//! backward of causal attention on tracked q, k, v, after a trim (the pool keeps pages, so
//! the rise is the step's high-water mark rounded up to pages). Burn's own `attention`
//! under autodiff is the control: it keeps the scores and the softmax for the backward
//! pass (each `[1, 2, 2048, 2048]` f32 tensor is 32 MiB). leanburn's workspace is set to 8 MiB,
//! so its causal blocks are 27 to 512 query rows (at most 262,144 scores per head), which
//! the measurement must see.

mod common;

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::Distribution;
use burn_cubecl::CubeBackend;
use leanburn::backend::attention::set_attention_workspace;
use leanburn::backend::lean_attention;
use leanburn::memory::MemoryProbe;

/// The unfused wgpu backend, as in `lm_loss_memory`: the question is only which tensors
/// exist, not what fusion makes of them.
type B = Autodiff<CubeBackend<WgpuRuntime, f32, i32, u32>>;

const HEADS: usize = 2;
const SEQ: usize = 2048;
const HEAD_DIM: usize = 16;
const MIB: u64 = 1 << 20;
const WORKSPACE: usize = 8 << 20;

fn scores_bytes() -> u64 {
    (HEADS * SEQ * SEQ * 4) as u64
}

/// The reserve's rise over one forward + backward, gradients kept alive until read.
fn step_rise(device: &WgpuDevice, lean: bool) -> u64 {
    let normal = Distribution::Normal(0.0, 1.0);
    let input = || Tensor::<B, 4>::random([1, HEADS, SEQ, HEAD_DIM], normal, device).require_grad();
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
    step_rise(&device, true);
    step_rise(&device, false);
    let burn = step_rise(&device, false);
    let lean = step_rise(&device, true);
    println!(
        "reserve rise over one attention step: Burn's {} MiB, leanburn's {} MiB; one score tensor {} MiB, \
         leanburn's workspace {} MiB",
        burn / MIB,
        lean / MIB,
        scores_bytes() / MIB,
        WORKSPACE as u64 / MIB
    );
    assert!(burn >= 2 * scores_bytes(), "control: Burn's attention must reserve the scores twice or more: {burn} B");
    assert!(lean < scores_bytes(), "leanburn's step must stay below one score tensor: {lean} B");
    assert!(lean + scores_bytes() <= burn, "leanburn must save at least one score tensor: {lean} B vs {burn} B");
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
    // One shape: kernels compile per shape on llvmpipe (minutes cold); the random shapes,
    // causal and not, run in the unit tests. A workspace of 1,200 scores per head makes
    // causal blocks of 32, 18, 15 and 15 rows seeing 32, 64, 80 and 80 keys: blocks that
    // stop at the diagonal, and the accumulation of their key and value gradients, run on
    // the CubeCL runtime.
    set_attention_workspace(4 * 2 * 4 * 1200);
    for (shape, causal) in [([1, 2, 80, 8], true)] {
        let ours = outputs_and_gradients(&device, shape, causal, true);
        let burns = outputs_and_gradients(&device, shape, causal, false);
        for (name, (a, b)) in ["output", "grad query", "grad key", "grad value"].iter().zip(ours.iter().zip(&burns)) {
            let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs() - (1e-4 + 1e-4 * y.abs())).fold(f32::MIN, f32::max);
            assert!(worst <= 0.0, "{name} of {shape:?} (causal {causal}) off by {worst} over the tolerance");
        }
    }
}
