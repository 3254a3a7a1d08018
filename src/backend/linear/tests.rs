//! [`linear`]'s node against Burn's linear layer: the same gradients for the input, the
//! weight and the bias (each alone tracked, and all), with and without a bias; where the
//! GEMMs are queued as on CUDA its backward is one custom operation, elsewhere Burn's
//! three ops (bit for bit on Flex). The controls: no queued operation where the GEMMs are
//! not queued, and a misplaced gradient far off.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use super::fused::QUEUED;
use super::{linear, LinearOps};
use crate::backend::gemm::tests::QUEUE_GEMM;
use crate::backend::Lean;

/// `x` `[2, 7, 5]` and the weight `[5, 9]` (the GEMM tests' products, which the autotune
/// seed holds), the output `[2, 7, 9]`.
const X: [usize; 3] = [2, 7, 5];
const OUT: [usize; 3] = [2, 7, 9];

/// Values over [−1, 1] spread by a stride prime to `len`, shifted by `offset`.
fn spread(len: usize, stride: usize, offset: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * stride + offset) % len) as f32 * 2.0 / len as f32 - 1.0).collect()
}

fn tensor<B: Backend, const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

fn values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().to_vec::<f32>().expect("f32 values")
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

/// Which of `[x, weight, bias]` need a gradient (the bias's also whether there is one).
type Tracked = [bool; 3];

const CASES: [Tracked; 4] = [[true, true, true], [true, true, false], [true, false, false], [false, true, true]];

/// The gradients of `Σ g ⊙ linear(x)` for the tracked of `[x, weight, bias]` (empty where
/// untracked), through [`linear`] or, with `burn`, Burn's linear layer.
fn grads<B: AutodiffBackend + LinearOps>([x_tracked, weight_tracked, bias]: Tracked, burn: bool) -> [Vec<f32>; 3] {
    let track = |tensor: Tensor<B, 2>, tracked: bool| if tracked { tensor.require_grad() } else { tensor };
    let x = tensor::<B, 3>(spread(70, 11, 3), X);
    let x = if x_tracked { x.require_grad() } else { x };
    let weight = track(tensor::<B, 2>(spread(45, 7, 1), [5, 9]), weight_tracked);
    let bias_tensor = bias.then(|| tensor::<B, 1>(spread(9, 4, 2), [9]).require_grad());
    let out = match burn {
        true => burn::tensor::module::linear(x.clone(), weight.clone(), bias_tensor.clone()),
        false => linear(x.clone(), weight.clone(), bias_tensor.clone()),
    };
    let grads = (out * tensor::<B, 3>(spread(126, 53, 7), OUT)).sum().backward();
    let flat = |tensor: Option<Tensor<B::InnerBackend, 3>>| tensor.map(|t| values(t.flatten::<1>(0, 2)));
    [
        flat(x.grad(&grads)).unwrap_or_default(),
        weight.grad(&grads).map(values).unwrap_or_default(),
        bias_tensor.and_then(|bias| bias.grad(&grads)).map(values).unwrap_or_default(),
    ]
}

/// The largest difference of each gradient from Burn's linear layer's, and how many
/// gradients [`linear`] queued as one operation.
fn against_burn<B: AutodiffBackend + LinearOps>(tracked: Tracked) -> ([f32; 3], usize) {
    let before = QUEUED.with(|queued| queued.get());
    let ours = grads::<B>(tracked, false);
    let queued = QUEUED.with(|queued| queued.get()) - before;
    let burn = grads::<B>(tracked, true);
    for (i, (ours, burn)) in ours.iter().zip(&burn).enumerate() {
        assert_eq!(ours.len(), burn.len(), "gradient {i} of {tracked:?}: given by one and not the other");
    }
    ([0, 1, 2].map(|i| largest_difference(&ours[i], &burn[i])), queued)
}

/// Runs `f` with this thread's GEMMs queued as on CUDA (the fused stack's custom operations).
fn queued<T>(f: impl FnOnce() -> T) -> T {
    QUEUE_GEMM.with(|queue| queue.set(true));
    let out = f();
    QUEUE_GEMM.with(|queue| queue.set(false));
    out
}

#[test]
fn the_linear_node_gives_burns_gradients_in_one_queued_op() {
    for tracked in CASES {
        let (worst, ops) = against_burn::<Autodiff<Lean<Flex>>>(tracked);
        assert_eq!((worst, ops), ([0.0; 3], 0), "Flex, {tracked:?}: not Burn's three ops");
        // The weight's and the bias's gradients sum 14 rows: a few ulps of their partial sums.
        let (worst, ops) = queued(|| against_burn::<Autodiff<Lean<Wgpu>>>(tracked));
        assert!(worst.iter().all(|&w| w <= 1e-5), "Wgpu queued, {tracked:?}: off by {worst:?}");
        assert_eq!(ops, 1, "Wgpu queued, {tracked:?}: the gradients were not one operation");
        // The control: without queued GEMMs, Burn's ops.
        let (worst, ops) = against_burn::<Autodiff<Lean<Wgpu>>>(tracked);
        assert!(worst.iter().all(|&w| w <= 1e-5), "Wgpu, {tracked:?}: off by {worst:?}");
        assert_eq!(ops, 0, "Wgpu without queued GEMMs, {tracked:?}: queued all the same");
    }
    // The control: the weight's gradient shifted by one place is far off.
    let ours = queued(|| grads::<Autodiff<Lean<Wgpu>>>(CASES[0], false));
    let burn = grads::<Autodiff<Flex>>(CASES[0], true);
    let shifted: Vec<f32> = ours[1].iter().skip(1).chain(&ours[1][..1]).copied().collect();
    assert!(largest_difference(&ours[1], &burn[1]) <= 1e-5, "the same gradients must match");
    assert!(largest_difference(&shifted, &burn[1]) > 1e-2, "a misplaced weight gradient went unnoticed");
}
