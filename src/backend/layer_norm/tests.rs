//! leanburn's LayerNorm against Burn's own `layer_norm` (the composed default,
//! differentiated op by op under `Autodiff`): the output and the gradients of the input, γ
//! and β, widths below and above the kernels' 128 units, rows in one gradient block and
//! in several. On wgpu (llvmpipe) through `Autodiff`: the kernels as Fusion custom ops. On
//! Flex, whose `Autodiff` keeps Burn's LayerNorm, the composed forward and backward called
//! directly (not on ndarray: there the composed backward and Burn's differ by up to 1.5e-5
//! of the largest input gradient, both in f32 with ndarray's reductions). Control: a wrong
//! ε is caught. The input used again after the LayerNorm (a residual connection's way): its
//! gradient from that use added by the node's backward pass, as Burn's sum; the control, a
//! gradient left out, is caught.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, Tensor, TensorPrimitive};

use super::autodiff::PRIORS_ADDED;
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
    let [dx, dgamma, dbeta] = composed_backward::<I<B>>(p3(x), p1(gamma), [mean, rstd], p3(dy), None);
    [
        values(float::<I<B>, 3>(y)),
        values(float::<I<B>, 3>(dx)),
        values(float::<I<B>, 1>(dgamma)),
        values(float::<I<B>, 1>(dbeta)),
    ]
}

/// The largest difference over the largest magnitude of `theirs`.
fn error(ours: &[f32], theirs: &[f32]) -> f32 {
    let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
    ours.iter().zip(theirs).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// [`error`] per output.
fn errors(ours: &Outputs, theirs: &Outputs) -> [f32; 4] {
    [0, 1, 2, 3].map(|i| error(&ours[i], &theirs[i]))
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

/// The input's other use besides the LayerNorm.
#[derive(Clone, Copy, Debug, PartialEq)]
enum OtherUse {
    /// `x + LayerNorm(x)`, a residual connection: the add's node is deeper in the graph
    /// than the LayerNorm's, so its backward pass runs first and the node adds its gradient.
    Residual,
    /// `w ⊙ x` added to the loss: a node as deep as the LayerNorm's, whose backward may run
    /// before the node's or after it.
    Product,
}

/// The input's gradient of `Σ dy ⊙ LayerNorm(x)` plus the other use (`Σ dy ⊙ x` or
/// `Σ w ⊙ x`) through `Autodiff<B>`, with `lean_layer_norm` when `lean` (else Burn's
/// `layer_norm`), and how many of the node's backward passes added a gradient the input
/// already had.
fn input_gradient_with<B: AutodiffBackend + LayerNormOps>(
    lean: bool,
    (x, [gamma, beta], dy): &(Tensor<B, 3>, [Tensor<B, 1>; 2], Tensor<B, 3>),
    w: &Tensor<B, 3>,
    other: OtherUse,
) -> (Vec<f32>, usize) {
    let x = x.clone().require_grad();
    let p = |t: &Tensor<B, 1>| t.clone().into_primitive().tensor();
    let (xp, gp, bp) = (x.clone().into_primitive().tensor(), p(gamma), p(beta));
    let y = if lean { B::lean_layer_norm(xp, gp, Some(bp), EPSILON) } else { B::layer_norm(xp, gp, Some(bp), EPSILON) };
    let y = float::<B, 3>(y);
    let loss = match other {
        OtherUse::Residual => ((x.clone() + y) * dy.clone()).sum(),
        OtherUse::Product => (y * dy.clone()).sum() + (x.clone() * w.clone()).sum(),
    };
    let added = PRIORS_ADDED.with(|added| added.get());
    let grads = loss.backward();
    (values(x.grad(&grads).unwrap()), PRIORS_ADDED.with(|now| now.get()) - added)
}

#[test]
fn the_gradient_from_the_inputs_other_use_is_added_by_the_backward_pass() {
    let device = Default::default();
    for shape in SHAPES {
        let wgpu = inputs::<Autodiff<Wgpu>>(shape, &device);
        let w = Tensor::random(shape, Distribution::Normal(0.0, 1.0), &device);
        for other in [OtherUse::Residual, OtherUse::Product] {
            let (burns, _) = input_gradient_with(false, &wgpu, &w, other);
            let (ours, added) = input_gradient_with(true, &wgpu, &w, other);
            let err = error(&ours, &burns);
            eprintln!("wgpu {shape:?}, other use {other:?}: dx off by {err:.2e}, priors added {added}");
            assert!(err <= TOLERANCE, "{shape:?} {other:?}: dx off by {err} (tolerance {TOLERANCE:.0e})");
            match other {
                OtherUse::Residual => assert_eq!(added, 1, "{shape:?}: the residual's gradient was not added"),
                OtherUse::Product => assert!(added <= 1, "{shape:?}: {added} priors added"),
            }
        }
        // The control: the LayerNorm's gradient alone, as a prior taken out and not added
        // back would leave it, is far from the sum.
        let alone = &through_autodiff(true, &wgpu, EPSILON)[1];
        let (burns, _) = input_gradient_with(false, &wgpu, &w, OtherUse::Residual);
        assert!(error(alone, &burns) > 100.0 * TOLERANCE, "{shape:?}: a gradient left out went unnoticed");
    }
}
