//! `Lean`'s bias gradient against Burn's, through autodiff, on wgpu (Fusion over CubeCL:
//! the custom operation and the kernel) and on Flex (Burn's op); and wgpu's on random
//! output gradients, padded rows and dimensions that do not fold (copied first) among them.

use std::sync::atomic::Ordering;

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module::linear;
use burn::tensor::TensorPrimitive;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::cube::LAUNCHED;
use super::BiasGradOps;
use crate::backend::Lean;

/// f32 sums of up to a few hundred terms in another order than Burn's, relative to the
/// column's sum of absolute values.
const TOLERANCE: f64 = 1e-5;

/// A linear layer's input `[batch, rows, d_in]` (batch 0: two dimensions), weight, bias,
/// and the gradient arriving at its output.
#[derive(Clone)]
struct Case {
    input: Vec<f32>,
    weight: Vec<f32>,
    bias: Vec<f32>,
    upstream: Vec<f32>,
    shape: [usize; 4],
}

impl Case {
    fn random(rng: &mut SmallRng, [batch, rows, d_in, d_out]: [usize; 4]) -> Self {
        let mut values = |len: usize| (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>();
        let tokens = batch.max(1) * rows;
        let (input, weight, bias) = (values(tokens * d_in), values(d_in * d_out), values(d_out));
        Self { input, weight, bias, upstream: values(tokens * d_out), shape: [batch, rows, d_in, d_out] }
    }

    /// The bias's gradient for `Σ linear(input) · upstream`.
    fn bias_grad<B: AutodiffBackend>(&self) -> Vec<f32> {
        let [batch, rows, d_in, d_out] = self.shape;
        let device = Default::default();
        let weight = Tensor::<B, 2>::from_data(TensorData::new(self.weight.clone(), [d_in, d_out]), &device);
        let bias = Tensor::<B, 1>::from_data(TensorData::new(self.bias.clone(), [d_out]), &device).require_grad();
        let grads = if batch == 0 {
            let input = Tensor::<B, 2>::from_data(TensorData::new(self.input.clone(), [rows, d_in]), &device);
            let upstream = Tensor::<B, 2>::from_data(TensorData::new(self.upstream.clone(), [rows, d_out]), &device);
            (linear(input, weight, Some(bias.clone())) * upstream).sum().backward()
        } else {
            let input = Tensor::<B, 3>::from_data(TensorData::new(self.input.clone(), [batch, rows, d_in]), &device);
            let upstream =
                Tensor::<B, 3>::from_data(TensorData::new(self.upstream.clone(), [batch, rows, d_out]), &device);
            (linear(input, weight, Some(bias.clone())) * upstream).sum().backward()
        };
        bias.grad(&grads).expect("the bias has a gradient").into_data().to_vec::<f32>().unwrap()
    }

    /// The largest difference between `got` and `want`, relative to each column's sum of
    /// the upstream gradient's absolute values (at least 1).
    fn error(&self, got: &[f32], want: &[f32]) -> f64 {
        let d_out = self.shape[3];
        let mut scale = vec![0.0f64; d_out];
        for (i, v) in self.upstream.iter().enumerate() {
            scale[i % d_out] += f64::from(v.abs());
        }
        got.iter().zip(want).zip(scale).map(|((&g, &w), s)| f64::from(g - w).abs() / s.max(1.0)).fold(0.0, f64::max)
    }
}

/// Through autodiff on wgpu (a linear layer of gpt2-tiny's, whose products the autotune
/// seed has), `Lean`'s gradient is Burn's within [`TOLERANCE`]; the controls: the custom
/// operation and the kernel ran, and one upstream value changed is caught by the same
/// comparison.
#[test]
fn the_bias_gradient_through_autodiff_is_burns_on_wgpu() {
    let mut rng = SmallRng::seed_from_u64(0xb1a);
    let case = Case::random(&mut rng, [0, 128, 64, 256]);
    let (executed, launched) = (super::fused::EXECUTED.load(Ordering::Relaxed), LAUNCHED.load(Ordering::Relaxed));
    let lean = case.bias_grad::<Autodiff<Lean<Wgpu>>>();
    assert!(super::fused::EXECUTED.load(Ordering::Relaxed) > executed, "the custom operation did not run");
    assert!(LAUNCHED.load(Ordering::Relaxed) > launched, "the kernel did not run");
    let burn = case.bias_grad::<Autodiff<Wgpu>>();
    let error = case.error(&lean, &burn);
    assert!(error <= TOLERANCE, "Lean's bias gradient is off Burn's by {error:.1e}");
    let mut moved = case.clone();
    moved.upstream[0] += 1.0;
    assert!(case.error(&moved.bias_grad::<Autodiff<Lean<Wgpu>>>(), &burn) > TOLERANCE, "a change went unnoticed");
}

/// The largest difference between Burn's sums over `values`' leading dimensions and
/// [`BiasGradOps::bias_grad`] on wgpu (the custom operation, then the kernel or Burn's op),
/// relative to each column's sum of absolute values (at least 1).
fn wgpu_error<const D: usize>(values: Tensor<Wgpu, D>) -> f64 {
    let columns = values.dims()[D - 1];
    let rows = values.shape().num_elements() / columns.max(1);
    let flat = |t: Tensor<Wgpu, D>| t.reshape([rows, columns]);
    let want = flat(values.clone()).sum_dim(0).into_data().to_vec::<f32>().unwrap();
    let scale = flat(values.clone()).abs().sum_dim(0).into_data().to_vec::<f32>().unwrap();
    let got = Tensor::<Wgpu, 1>::from_primitive(TensorPrimitive::Float(<Wgpu as BiasGradOps>::bias_grad(
        values.into_primitive().tensor(),
    )));
    let got = got.into_data().to_vec::<f32>().unwrap();
    assert_eq!(got.len(), columns);
    got.iter().zip(&want).zip(&scale).map(|((&g, &w), &s)| f64::from((g - w).abs() / s.max(1.0))).fold(0.0, f64::max)
}

/// Random output gradients, two and three dimensions (one row, one column, rows past one
/// launch's), contiguous, with padded rows (a slice of wider ones) and with dimensions that
/// do not fold into rows (copied first), against Burn's sums; the controls: the custom
/// operation and the kernel ran, and a gradient that is not the sums is caught.
#[test]
fn the_kernels_sums_are_burns_on_wgpu() {
    let mut rng = SmallRng::seed_from_u64(0xb1c);
    let device = Default::default();
    let mut random = |dims: [usize; 3]| {
        let values: Vec<f32> = (0..dims.iter().product()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        Tensor::<Wgpu, 3>::from_data(TensorData::new(values, dims), &device)
    };
    let (executed, launched) = (super::fused::EXECUTED.load(Ordering::Relaxed), LAUNCHED.load(Ordering::Relaxed));
    // More rows than one launch's lanes take (two launches on any runtime).
    for dims in [[1, 1, 40], [1, 777, 1], [3, 300, 200], [2, 1000, 7], [1, 128, 256], [1, 40_000, 4]] {
        let values = random(dims);
        let error = wgpu_error(values.clone());
        assert!(error <= TOLERANCE, "{dims:?}: off Burn's sums by {error:.1e}");
        let [a, b, c] = dims;
        let error = wgpu_error(values.reshape([a * b, c]));
        assert!(error <= TOLERANCE, "{dims:?} as rows: off Burn's sums by {error:.1e}");
    }
    let padded = random([1, 300, 40]).reshape([300, 40]).slice([0..300, 0..36]);
    let error = wgpu_error(padded);
    assert!(error <= TOLERANCE, "padded rows: off Burn's sums by {error:.1e}");
    let swapped = random([6, 50, 40]).swap_dims(0, 1);
    let error = wgpu_error(swapped);
    assert!(error <= TOLERANCE, "unfolded dimensions: off Burn's sums by {error:.1e}");
    assert!(super::fused::EXECUTED.load(Ordering::Relaxed) > executed, "the custom operation did not run");
    assert!(LAUNCHED.load(Ordering::Relaxed) >= launched + 10, "the kernel did not run");
    // The control: the sums of other values are caught by the same comparison.
    let values = random([1, 64, 16]);
    let want = values.clone().reshape([64, 16]).sum_dim(0);
    let got = Tensor::<Wgpu, 1>::from_primitive(TensorPrimitive::Float(<Wgpu as BiasGradOps>::bias_grad(
        (values * 1.001).into_primitive().tensor(),
    )));
    let error = (got - want.reshape([16])).abs().max().into_scalar();
    assert!(error > 1e-4, "a gradient off the sums went unnoticed");
}

/// On Flex, `Lean`'s gradient is Burn's op, to the bit.
#[test]
fn the_bias_gradient_on_flex_is_burns() {
    let mut rng = SmallRng::seed_from_u64(0xb1b);
    let case = Case::random(&mut rng, [2, 7, 3, 5]);
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert!(bits(case.bias_grad::<Autodiff<Lean<Flex>>>()) == bits(case.bias_grad::<Autodiff<Flex>>()));
}
