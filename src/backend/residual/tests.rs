//! [`residual_linear`] against the composed linear layer and add: on unfused wgpu the GEMM
//! and leanburn's kernel; on the fused stack one custom operation where the GEMMs are
//! queued (as on CUDA) and Fusion's own ops where not; on Flex and ndarray the composed
//! ops. Under `Autodiff` one graph node, whose gradients (residual, input, weight, bias)
//! are the composed nodes'. The controls: the linear layer without the residual, or the
//! residual without the bias, is far off. (The kernel against its f64 reference:
//! `kernels/tests/residual.rs`.)

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use super::cube::{BIAS_IN_GEMM, KERNEL_RUNS};
use super::fused::QUEUED;
use super::{residual_linear, ResidualOps};
use crate::backend::gemm::tests::{QUEUE_GEMM, VENDOR_LAYOUTS};
use crate::backend::gemm::{gemm_fused_adds, set_gemm_fused_adds};
use crate::backend::Lean;
use crate::device::CubeWgpu;

/// The shapes of the GEMM tests (whose products the autotune seed holds): `x` `[2, 7, 5]`,
/// the weight stored `[9, 5]` and used transposed, `[5, 9]`.
const X: [usize; 3] = [2, 7, 5];
const OUT: [usize; 3] = [2, 7, 9];
const STORED: [usize; 2] = [9, 5];

/// Values over [−1, 1] spread by a stride prime to `len`, shifted by `offset`.
fn spread(len: usize, stride: usize, offset: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * stride + offset) % len) as f32 * 2.0 / len as f32 - 1.0).collect()
}

fn tensor<B: Backend, const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// `[residual, x]` and the layer, with or without its bias.
fn case<B: Backend>(biased: bool) -> (Tensor<B, 3>, Tensor<B, 3>, Linear<B>) {
    let residual = tensor::<B, 3>(spread(126, 37, 5).iter().map(|v| 4.0 * v).collect(), OUT);
    let x = tensor::<B, 3>(spread(70, 11, 3), X);
    let weight = tensor::<B, 2>(spread(45, 7, 1), STORED).transpose();
    let bias = biased.then(|| Param::from_tensor(tensor::<B, 1>(spread(9, 4, 2), [9])));
    (residual, x, Linear { weight: Param::from_tensor(weight), bias })
}

fn values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().to_vec::<f32>().expect("f32 values")
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

/// The op's largest difference from `residual + linear(x)` on `B`.
fn forward_difference<B: ResidualOps>(biased: bool) -> f32 {
    let (residual, x, linear) = case::<B>(biased);
    let composed = values(residual.clone() + linear.forward(x.clone()));
    largest_difference(&values(residual_linear(residual, x, &linear)), &composed)
}

/// Runs `f` with this thread's GEMMs queued as on CUDA (the fused stack's custom operations).
fn queued<T>(f: impl FnOnce() -> T) -> T {
    QUEUE_GEMM.with(|queue| queue.set(true));
    let out = f();
    QUEUE_GEMM.with(|queue| queue.set(false));
    out
}

fn count(counter: &'static std::thread::LocalKey<core::cell::Cell<usize>>) -> usize {
    counter.with(|count| count.get())
}

#[test]
fn the_residual_linear_is_one_op_where_gemms_are_queued_and_composed_elsewhere() {
    for biased in [true, false] {
        let runs = count(&KERNEL_RUNS);
        let worst = forward_difference::<CubeWgpu>(biased);
        assert!(worst <= 1e-5, "CubeWgpu, bias {biased}: off by {worst:.2e}");
        assert_eq!(count(&KERNEL_RUNS) - runs, 1, "CubeWgpu: the kernel did not run");
        let before = count(&QUEUED);
        let worst = queued(|| forward_difference::<Wgpu>(biased));
        assert!(worst <= 1e-5, "Wgpu queued, bias {biased}: off by {worst:.2e}");
        assert_eq!(count(&QUEUED) - before, 1, "Wgpu: the op was not queued");
        let worst = forward_difference::<Wgpu>(biased);
        assert!(worst <= 1e-5, "Wgpu, bias {biased}: off by {worst:.2e}");
        assert_eq!(count(&QUEUED) - before, 1, "Wgpu without queued GEMMs: Fusion's own ops, not one op");
        for (backend, worst) in
            [("Flex", forward_difference::<Flex>(biased)), ("ndarray", forward_difference::<NdArray>(biased))]
        {
            assert_eq!(worst, 0.0, "{backend}, bias {biased}: not the composed ops");
        }
    }
    // The controls: the linear layer alone, and the residual without the bias.
    let (residual, x, linear) = case::<CubeWgpu>(true);
    let want = values(residual.clone() + linear.forward(x.clone()));
    let missed = largest_difference(&values(linear.forward(x.clone())), &want);
    assert!(missed > 1.0, "a linear layer without its residual went unnoticed: {missed:.2e}");
    let unbiased = Linear { weight: linear.weight.clone(), bias: None };
    let missed = largest_difference(&values(residual_linear(residual, x, &unbiased)), &want);
    assert!(missed > 1e-1, "a residual add without its bias went unnoticed: {missed:.2e}");
}

/// With the adds folded into cuBLASLt's calls the GEMM adds the bias (on CUDA in its
/// epilogue; here, the thread saying its GEMMs are the vendor's, CubeCL's matmul and an
/// add) and the kernel the residual alone: the same sums, the bias added once. The
/// control: that branch ran (a bias dropped or added twice is off by up to 1, its largest magnitude).
#[test]
fn with_the_adds_folded_in_the_gemm_adds_the_bias_and_the_kernel_the_residual() {
    let was = gemm_fused_adds();
    let before = count(&BIAS_IN_GEMM);
    VENDOR_LAYOUTS.with(|vendor| vendor.set(true));
    set_gemm_fused_adds(true);
    let worst = forward_difference::<CubeWgpu>(true);
    set_gemm_fused_adds(was);
    VENDOR_LAYOUTS.with(|vendor| vendor.set(false));
    assert!(worst <= 1e-5, "off by {worst:.2e}");
    assert_eq!(count(&BIAS_IN_GEMM) - before, 1, "the bias was not left to the GEMM");
}

/// The gradients of `Σ g ⊙ (residual + linear(x))` for the residual, `x`, the weight and
/// the bias, through [`residual_linear`] or, with `composed`, the linear layer and the add.
fn grads<B: AutodiffBackend + ResidualOps>(composed: bool) -> [Vec<f32>; 4] {
    let (residual, x, linear) = case::<B>(true);
    let (residual, x) = (residual.require_grad(), x.require_grad());
    let out = match composed {
        true => residual.clone() + linear.forward(x.clone()),
        false => residual_linear(residual.clone(), x.clone(), &linear),
    };
    let grads = (out * tensor::<B, 3>(spread(126, 53, 7), OUT)).sum().backward();
    let flat = |tensor: Tensor<B::InnerBackend, 3>| values(tensor.flatten::<1>(0, 2));
    let bias = linear.bias.as_ref().expect("a bias").val();
    [
        flat(residual.grad(&grads).expect("the residual's gradient")),
        flat(x.grad(&grads).expect("x's gradient")),
        values(linear.weight.val().grad(&grads).expect("the weight's gradient")),
        values(bias.grad(&grads).expect("the bias's gradient")),
    ]
}

/// The largest difference of each gradient from the composed nodes'.
fn grad_differences<B: AutodiffBackend + ResidualOps>() -> [f32; 4] {
    let (ours, composed) = (grads::<B>(false), grads::<B>(true));
    [0, 1, 2, 3].map(|i| largest_difference(&ours[i], &composed[i]))
}

#[test]
fn the_residual_linear_node_gives_the_composed_gradients() {
    let before = count(&QUEUED);
    let wgpu = queued(grad_differences::<Autodiff<Lean<Wgpu>>>);
    assert_eq!(count(&QUEUED) - before, 1, "one queued op forward");
    // The weight's and the bias's gradients sum 14 rows: a few ulps of their partial sums.
    for (backend, worst) in [("Wgpu", wgpu), ("Flex", grad_differences::<Autodiff<Lean<Flex>>>())] {
        assert!(worst.iter().all(|&w| w <= 1e-5), "{backend}: off by {worst:?} (residual, x, weight, bias)");
    }
    // The control: the weight's gradient of another output gradient is far off.
    let (ours, composed) = (grads::<Autodiff<Lean<Flex>>>(false), grads::<Autodiff<Flex>>(true));
    let shifted = ours[2].iter().skip(1).chain(&ours[2][..1]).copied().collect::<Vec<_>>();
    assert!(largest_difference(&ours[2], &composed[2]) <= 1e-5, "the same gradients must match");
    assert!(largest_difference(&shifted, &composed[2]) > 1e-2, "a misplaced weight gradient went unnoticed");
}
