//! leanburn's LayerNorm against Burn's own `layer_norm` (the composed default,
//! differentiated op by op under `Autodiff`): the output and the gradients of the input, γ
//! and β, widths below and above the kernels' 128 units, rows in one gradient block and
//! in several. On wgpu (llvmpipe) through `Autodiff`: the kernels as Fusion custom ops. On
//! Flex, whose `Autodiff` keeps Burn's LayerNorm, the composed forward and backward called
//! directly (not on ndarray: there the composed backward and Burn's differ by up to 1.5e-5
//! of the largest input gradient, both in f32 with ndarray's reductions). Control: a wrong
//! ε is caught.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, Tensor, TensorPrimitive};

use super::{composed_backward, composed_forward, LayerNormOps};

/// Largest difference over the largest magnitude of Burn's.
const TOLERANCE: f32 = 1e-5;
const EPSILON: f64 = 1e-5;
const SHAPES: [[usize; 3]; 3] = [[2, 3, 7], [3, 100, 128], [1, 520, 200]];

/// `[y, dx, dgamma, dbeta]` flattened.
type Outputs = [Vec<f32>; 4];

fn values<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

fn float<B: burn::tensor::backend::Backend, const D: usize>(p: burn_backend::tensor::FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// Random inputs `[x, gamma, beta, dy]` on `device`.
fn inputs<B: AutodiffBackend>(
    shape: [usize; 3],
    device: &B::Device,
) -> (Tensor<B, 3>, [Tensor<B, 1>; 2], Tensor<B, 3>) {
    let d = shape[2];
    let x = Tensor::random(shape, Distribution::Normal(0.3, 1.5), device);
    let gamma = Tensor::random([d], Distribution::Normal(1.0, 0.3), device);
    let beta = Tensor::random([d], Distribution::Normal(0.0, 0.3), device);
    (x, [gamma, beta], Tensor::random(shape, Distribution::Normal(0.0, 1.0), device))
}

/// Through `Autodiff<B>`: `lean_layer_norm` when `lean`, else Burn's `layer_norm`.
fn through_autodiff<B: AutodiffBackend + LayerNormOps>(
    lean: bool,
    (x, [gamma, beta], dy): &(Tensor<B, 3>, [Tensor<B, 1>; 2], Tensor<B, 3>),
    epsilon: f64,
) -> Outputs {
    let (x, gamma, beta) = (x.clone().require_grad(), gamma.clone().require_grad(), beta.clone().require_grad());
    let p = |t: Tensor<B, 1>| t.into_primitive().tensor();
    let (xp, gp, bp) = (x.clone().into_primitive().tensor(), p(gamma.clone()), p(beta.clone()));
    let y = if lean { B::lean_layer_norm(xp, gp, Some(bp), epsilon) } else { B::layer_norm(xp, gp, Some(bp), epsilon) };
    let y = float::<B, 3>(y);
    let grads = (y.clone() * dy.clone()).sum().backward();
    [
        values(y.inner()),
        values(x.grad(&grads).unwrap()),
        values(gamma.grad(&grads).unwrap()),
        values(beta.grad(&grads).unwrap()),
    ]
}

/// The composed forward and backward on `B`'s inner backend.
fn composed<B: AutodiffBackend>(
    (x, [gamma, beta], dy): &(Tensor<B, 3>, [Tensor<B, 1>; 2], Tensor<B, 3>),
    epsilon: f64,
) -> Outputs {
    type I<B> = <B as AutodiffBackend>::InnerBackend;
    let p3 = |t: &Tensor<B, 3>| t.clone().inner().into_primitive().tensor();
    let p1 = |t: &Tensor<B, 1>| t.clone().inner().into_primitive().tensor();
    let [y, mean, rstd] = composed_forward::<I<B>>(p3(x), p1(gamma), Some(p1(beta)), epsilon);
    let [dx, dgamma, dbeta] = composed_backward::<I<B>>(p3(x), p1(gamma), mean, rstd, p3(dy));
    [
        values(float::<I<B>, 3>(y)),
        values(float::<I<B>, 3>(dx)),
        values(float::<I<B>, 1>(dgamma)),
        values(float::<I<B>, 1>(dbeta)),
    ]
}

/// The largest difference over the largest magnitude of `theirs`, per output.
fn errors(ours: &Outputs, theirs: &Outputs) -> [f32; 4] {
    let mut out = [0.0; 4];
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
        out[i] = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale;
    }
    out
}

fn assert_close(backend: &str, shape: [usize; 3], errs: [f32; 4]) {
    eprintln!("{backend} {shape:?}: y, dx, dgamma, dbeta off by {errs:?}");
    assert!(errs.iter().all(|&e| e <= TOLERANCE), "{backend} {shape:?}: {errs:?} (tolerance {TOLERANCE:.0e})");
}

#[test]
fn the_composed_layer_norm_is_burns_on_flex() {
    for shape in SHAPES {
        let flex = inputs::<Autodiff<Flex>>(shape, &Default::default());
        let burns = through_autodiff(false, &flex, EPSILON);
        assert_close("flex", shape, errors(&composed(&flex, EPSILON), &burns));
    }
}

#[test]
fn the_layer_norm_kernels_are_burns_on_wgpu() {
    for shape in SHAPES {
        let wgpu = inputs::<Autodiff<Wgpu>>(shape, &Default::default());
        let burns = through_autodiff(false, &wgpu, EPSILON);
        assert_close("wgpu", shape, errors(&through_autodiff(true, &wgpu, EPSILON), &burns));
    }
}

/// The control: ε of 0.1 in place of 1e-5 is caught.
#[test]
fn a_wrong_epsilon_is_caught() {
    let flex = inputs::<Autodiff<Flex>>([2, 4, 16], &Default::default());
    let errs = errors(&composed(&flex, 1e4 * EPSILON), &through_autodiff(false, &flex, EPSILON));
    assert!(errs[0] > 100.0 * TOLERANCE || errs[1] > 100.0 * TOLERANCE, "a wrong epsilon went unnoticed: {errs:?}");
}
