//! leanburn's attention on a real CubeCL runtime (wgpu; llvmpipe in CI): the same output
//! and gradients as Burn's, and no `T × T` scores kept through a training step; both of
//! `Lean`'s paths (the fused kernels, and blocks on its GEMMs: `AttentionPath`) agree, alone
//! and in a GPT-2 step.
//!
//! What is measured: how far the pool's `bytes_reserved` rises over one forward and
//! backward of causal attention on tracked q, k, v, after a trim (the pool keeps pages, so
//! the rise is the step's high-water mark rounded up to pages). Burn's own `attention`
//! under autodiff is the control: it keeps the scores and the softmax for the backward
//! pass (each `[1, 2, 2048, 2048]` f32 tensor is 32 MiB). leanburn's runs its fused kernels
//! at head dimension 16 (no score buffer at all), and its composed blocks at head dimension
//! 18, which the kernels do not take (a multiple of 4 is needed), over 1,024 tokens (8 MiB
//! per score tensor; llvmpipe took minutes over 2,048) in a 2 MiB workspace.

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::Distribution;
use burn_cubecl::CubeBackend;
use leanburn::backend::{lean_attention, set_attention_path, set_attention_workspace, AttentionOps, AttentionPath};
use leanburn::{Lean, MemoryProbe};

/// The unfused wgpu backend, as in `lm_loss_memory`: the question is only which tensors
/// exist, not what fusion makes of them.
type B = Autodiff<CubeBackend<WgpuRuntime, f32, i32, u32>>;
/// `Lean` over the same backend: its attention takes one path or the other.
type OnLean = Autodiff<Lean<CubeBackend<WgpuRuntime, f32, i32, u32>>>;

/// `Lean`'s attention on its GEMMs until dropped (then the default, the kernels, again).
struct OnGemms;

impl OnGemms {
    fn set() -> Self {
        set_attention_path(AttentionPath::Gemm);
        Self
    }
}

impl Drop for OnGemms {
    fn drop(&mut self) {
        set_attention_path(AttentionPath::Kernels);
    }
}

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
fn step_rise<B: AutodiffBackend<Device = WgpuDevice> + AttentionOps + MemoryProbe>(
    device: &WgpuDevice,
    [seq, head_dim]: [usize; 2],
    lean: bool,
) -> u64 {
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
    assert!(grad.abs().sum().into_scalar().elem::<f32>().is_finite());
    let after = B::memory_sample(device).expect("wgpu pool").bytes_reserved;
    after.saturating_sub(before)
}

#[test]
fn lean_attention_never_reserves_the_scores() {
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    set_attention_workspace(WORKSPACE);
    // Warm the kernels (compilation allocates too), then measure each.
    let (kernel, composed) = ([SEQ, KERNEL_HEAD_DIM], [COMPOSED_SEQ, COMPOSED_HEAD_DIM]);
    step_rise::<B>(&device, kernel, true);
    step_rise::<B>(&device, composed, true);
    step_rise::<B>(&device, kernel, false);
    let burn = step_rise::<B>(&device, kernel, false);
    let kernels = step_rise::<B>(&device, kernel, true);
    let blocks = step_rise::<B>(&device, composed, true);
    // `Lean`'s blocks on its GEMMs, at the composed path's shape: on wgpu Lean's GEMMs are
    // the backend's matmul, so the products are those just tuned, and the reading is the
    // GEMM path's own (the switch is what `the_path_decides_…` checks).
    let on_gemms = {
        let _path = OnGemms::set();
        step_rise::<OnLean>(&device, composed, true)
    };
    println!(
        "reserve rise over one attention step of {SEQ} tokens: Burn's {} MiB, leanburn's kernels {} MiB (one score \
         tensor {} MiB); of {COMPOSED_SEQ} tokens: leanburn's composed blocks {} MiB, Lean's blocks on its GEMMs {} MiB \
         (one score tensor {} MiB, workspace {} MiB)",
        burn / MIB,
        kernels / MIB,
        scores_bytes(SEQ) / MIB,
        blocks / MIB,
        on_gemms / MIB,
        scores_bytes(COMPOSED_SEQ) / MIB,
        WORKSPACE as u64 / MIB
    );
    let scores = scores_bytes(SEQ);
    assert!(burn >= 2 * scores, "control: Burn's attention must reserve the scores twice or more: {burn} B");
    assert!(kernels < scores, "leanburn's kernels must stay below one score tensor: {kernels} B");
    assert!(kernels + scores <= burn, "leanburn's kernels must save a score tensor: {kernels} B vs {burn} B");
    let scores = scores_bytes(COMPOSED_SEQ);
    assert!(blocks < scores, "leanburn's composed blocks must stay below one score tensor: {blocks} B");
    assert!(on_gemms < scores, "Lean's blocks on its GEMMs must stay below one score tensor: {on_gemms} B");
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
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
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

/// A case's seeded inputs (query, key, value and the weight `w` of `sum(out ∘ w)`), and the
/// output and the three gradients of `sum(out ∘ w)` under `lean_attention` on `Backend`.
fn lean_outputs<Backend: AutodiffBackend<Device = WgpuDevice> + AttentionOps>(
    device: &WgpuDevice,
    shape: [usize; 4],
    keys: usize,
    causal: bool,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let normal = Distribution::Normal(0.0, 1.0);
    <Backend as burn::tensor::backend::Backend>::seed(device, 12);
    let [batch, heads, queries, head_dim] = shape;
    let input = |rows| Tensor::<Backend, 4>::random([batch, heads, rows, head_dim], normal, device).require_grad();
    let (query, key, value) = (input(queries), input(keys), input(keys));
    let weight = Tensor::<Backend, 4>::random(shape, normal, device);
    let output = lean_attention(query.clone(), key.clone(), value.clone(), causal);
    let grads = (output.clone() * weight.clone()).sum().backward();
    let data = |t: Tensor<Backend::InnerBackend, 4>| t.into_data().to_vec::<f32>().expect("f32");
    let inputs = [query.clone(), key.clone(), value.clone(), weight].map(|t| data(t.inner()));
    let outputs = vec![
        data(output.inner()),
        data(query.grad(&grads).expect("grad")),
        data(key.grad(&grads).expect("grad")),
        data(value.grad(&grads).expect("grad")),
    ];
    (inputs.to_vec(), outputs)
}

/// The output and the three gradients by the definition, in f64 on the host
/// (`leanburn-kernels`' reference), for `lean_outputs`' inputs.
fn definition(inputs: &[Vec<f32>], shape: [usize; 4], keys: usize, causal: bool) -> Vec<Vec<f32>> {
    use leanburn_kernels::reference::{attention, attention_backward, Dims};

    let [batch, heads, rows, head_dim] = shape;
    let [q, k, v, w] = [&inputs[0], &inputs[1], &inputs[2], &inputs[3]];
    let dims = Dims { batch_heads: batch * heads, rows, keys, head_dim };
    let (output, _) = attention(q, k, v, dims, causal);
    // The loss is Σ output ∘ w: the output's gradient is w.
    let grads = attention_backward(q, k, v, w, dims, causal);
    vec![output, grads.dq, grads.dk, grads.dv]
}

/// The largest excess of |a − b| over `1e-4 + 1e-4·|b|`, per named output.
fn worst_excess(ours: &[Vec<f32>], theirs: &[Vec<f32>]) -> Vec<(&'static str, f32)> {
    let names = ["output", "grad query", "grad key", "grad value"];
    names
        .iter()
        .zip(ours.iter().zip(theirs))
        .map(|(name, (a, b))| {
            (*name, a.iter().zip(b).map(|(x, y)| (x - y).abs() - (1e-4 + 1e-4 * y.abs())).fold(f32::MIN, f32::max))
        })
        .collect()
}

#[test]
fn lean_on_its_gemms_matches_the_definition_and_its_kernels_on_the_cubecl_runtime() {
    // Tolerance as in the unit tests, against the f64 definition and against the kernels
    // (which leanburn-kernels checks against the definition at head dimensions 8 to 128).
    // The head dimensions GPT-2 sizes use (32, 64, 128), rows that are and are not
    // multiples of the kernels' tile, causal and not, keys beyond the queries; a workspace
    // of 1,000 scores per head: two blocks at 40 and 33 rows (the causal one stops at key
    // 32, then sums its key and value gradients with the next), one at 24. Few shapes and
    // blocks: each compiles its products on llvmpipe, and the kernels compile per head
    // dimension (at 128, a minute of Mesa's LLVM here), so the kernels run at 32 and 64.
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    for (shape, keys, causal, with_kernels) in
        [([2, 2, 40, 32], 40, true, true), ([1, 3, 33, 64], 41, false, true), ([1, 2, 24, 128], 30, true, false)]
    {
        set_attention_workspace(1000 * 4 * 4 * shape[0] * shape[1]);
        let (inputs, on_gemms) = {
            let _path = OnGemms::set();
            lean_outputs::<OnLean>(&device, shape, keys, causal)
        };
        let mut references = vec![("the definition", definition(&inputs, shape, keys, causal))];
        if with_kernels {
            let (kernel_inputs, kernels) = lean_outputs::<OnLean>(&device, shape, keys, causal);
            assert_eq!(kernel_inputs, inputs, "both paths must see the same inputs");
            references.push(("the kernels", kernels));
        }
        if causal {
            // The control: the definition with the other mask is not within the tolerance.
            let unmasked = definition(&inputs, shape, keys, false);
            let worst = worst_excess(&on_gemms, &unmasked).into_iter().map(|(_, w)| w).fold(f32::MIN, f32::max);
            assert!(worst > 0.0, "control: {shape:?} on the GEMMs is as close to the unmasked definition");
        }
        for (reference, outputs) in references {
            for (name, worst) in worst_excess(&on_gemms, &outputs) {
                assert!(
                    worst <= 0.0,
                    "{name} of {shape:?} ({keys} keys, causal {causal}) off {reference} by {worst} over the tolerance"
                );
            }
        }
    }
}

/// Which forward ran, read from its log-sum-exp: the kernels write `[batch · heads, rows]`,
/// the blocks `[batch, heads, rows, 1]`.
fn lse_rank<Backend: AttentionOps<Device = WgpuDevice>>(device: &WgpuDevice) -> usize {
    use burn::tensor::TensorPrimitive;
    use burn_backend::TensorMetadata;

    let input = || match Tensor::<Backend, 4>::random([1, 2, 8, 16], Distribution::Default, device).into_primitive() {
        TensorPrimitive::Float(tensor) => tensor,
        TensorPrimitive::QFloat(_) => unreachable!("float inputs"),
    };
    let (_, lse) = Backend::lean_attention_forward(input(), input(), input(), true);
    lse.shape().num_dims()
}

#[test]
fn the_path_decides_which_forward_runs_on_the_unfused_and_the_fused_stack() {
    // The control for the comparison above: the switch does change the path taken.
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    type Unfused = Lean<CubeBackend<WgpuRuntime, f32, i32, u32>>;
    type Fused = Lean<burn::backend::Wgpu>;
    assert_eq!([lse_rank::<Unfused>(&device), lse_rank::<Fused>(&device)], [2, 2], "the kernels by default");
    let _path = OnGemms::set();
    assert_eq!([lse_rank::<Unfused>(&device), lse_rank::<Fused>(&device)], [4, 4], "the blocks on the GEMMs");
}

/// GPT-2's loss and every parameter's gradient after one forward and backward pass.
fn gpt2_step(device: &WgpuDevice, seed: u64) -> (f32, Vec<Vec<f32>>) {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use leanburn::model::{Gpt2, Gpt2Config};

    struct Collect<'a>(&'a GradientsParams, Vec<Vec<f32>>);
    impl ModuleVisitor<OnLean> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<OnLean, D>>) {
            let grad = self.0.get::<Lean<CubeBackend<WgpuRuntime, f32, i32, u32>>, D>(param.id).expect("a gradient");
            self.1.push(grad.into_data().to_vec::<f32>().expect("f32"));
        }
    }
    <OnLean as burn::tensor::backend::Backend>::seed(device, 7);
    let config = Gpt2Config::new(96, 32, 2, 64, 2);
    let model: Gpt2<OnLean> = config.init(device);
    <OnLean as burn::tensor::backend::Backend>::seed(device, seed);
    let tokens = || Tensor::<OnLean, 2, Int>::random([2, 32], Distribution::Uniform(0.0, 96.0), device);
    let loss = model.loss(tokens(), tokens());
    let value = loss.clone().into_scalar();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let mut collect = Collect(&grads, Vec::new());
    model.visit(&mut collect);
    (value, collect.1)
}

#[test]
fn a_gpt2_step_has_the_same_loss_and_gradients_on_either_path() {
    // Both paths compute in f32 here (no TF32 on llvmpipe): the loss within 1e-5 relative,
    // each gradient within 1e-4 of its norm; the control: another batch's gradients, which
    // must differ by more.
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    let (loss, kernels) = gpt2_step(&device, 1);
    let (other_loss, other) = gpt2_step(&device, 2);
    let (gemm_loss, on_gemms) = {
        let _path = OnGemms::set();
        gpt2_step(&device, 1)
    };
    let norm = |x: &[f32]| x.iter().map(|v| v * v).sum::<f32>().sqrt();
    let gap = |a: &[Vec<f32>], b: &[Vec<f32>]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| {
                let difference: Vec<f32> = x.iter().zip(y).map(|(p, q)| p - q).collect();
                norm(&difference) / norm(y).max(f32::MIN_POSITIVE)
            })
            .fold(0.0, f32::max)
    };
    println!(
        "GPT-2 step: loss {loss} on the kernels, {gemm_loss} on the GEMMs; worst gradient gap {:.1e} (another batch: \
         loss {other_loss}, gap {:.1e})",
        gap(&on_gemms, &kernels),
        gap(&other, &kernels)
    );
    assert!((gemm_loss - loss).abs() <= 1e-5 * loss.abs(), "loss {gemm_loss} on the GEMMs, {loss} on the kernels");
    assert!(gap(&on_gemms, &kernels) <= 1e-4, "gradients apart by {:.1e} of their norm", gap(&on_gemms, &kernels));
    assert!(gap(&other, &kernels) > 1e-2, "control: another batch's gradients are as close");
}
