//! [`GeluOps::exact_gelu_backward`] runs one pass where the backend has one: leanburn's
//! kernel on both wgpu stacks (queued as one custom operation on the fused one), leanburn's
//! vectorised pass on Flex (`flex.rs`); the unfused kernel and Flex's pass differ from the
//! composed [`gelu_derivative`] in the last bits, and all agree with it within 1e-6. The
//! control: on ndarray the op is the composed default, bit for bit. The same for the forward against
//! Burn's `gelu`, and for [`bias_gelu`] (the bias added in the kernels) against the add and
//! the composed ops, and for its graph node's gradients against the add's and GELU's
//! nodes (the control: without the bias they are far off). (Against finite differences:
//! `tests/parity/gelu_derivative.rs`; the kernel against its f64 reference:
//! `kernels/tests/gelu.rs`.)

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_backend::tensor::FloatTensor;

use super::fused::QUEUED;
use super::{add_bias, bias_gelu, exact_gelu, gelu_derivative, GeluOps};
use crate::backend::Lean;
use crate::device::CubeWgpu;

/// The custom operations this thread has queued so far.
fn queued() -> usize {
    QUEUED.with(|queued| queued.get())
}

/// The largest |a − b|, and whether any value differs at all.
fn difference(a: &[f32], b: &[f32]) -> (f32, bool) {
    assert_eq!(a.len(), b.len());
    let worst = a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    (worst, a.iter().zip(b).any(|(a, b)| a.to_bits() != b.to_bits()))
}

/// The largest |op − composed| over 4,099 points in [−6, 6] with random output gradients,
/// and whether any value differs at all.
fn compare<B: GeluOps>() -> (f32, bool) {
    let len = 4099;
    let x: Vec<f32> = (0..len).map(|i| ((i * 7919) % 4099) as f32 * 12.0 / 4099.0 - 6.0).collect();
    let grad: Vec<f32> = (0..len).map(|i| ((i * 104_729) % 1013) as f32 / 506.5 - 1.0).collect();
    let device = Default::default();
    let tensor = |values: &Vec<f32>| {
        Tensor::<B, 1>::from_data(TensorData::new(values.clone(), [len]), &device).into_primitive().tensor()
    };
    let mut ours = values::<B>(B::exact_gelu_backward(tensor(&x), tensor(&grad)));
    let mut composed = values::<B>(gelu_derivative::<B>(tensor(&x), tensor(&grad)));
    ours.extend(values::<B>(B::exact_gelu(tensor(&x))));
    composed.extend(values::<B>(B::gelu(tensor(&x))));
    difference(&ours, &composed)
}

#[test]
fn the_gelu_derivative_is_one_pass_on_wgpu_and_flex_and_composed_on_ndarray() {
    for (backend, (worst, differs)) in [("CubeWgpu", compare::<CubeWgpu>()), ("Flex", compare::<Flex>())] {
        assert!(worst <= 1e-6, "{backend}: off by {worst:.2e} from the composed derivative");
        assert!(differs, "{backend}: the composed derivative ran (the same bits)");
    }
    // The fused stack's composed chain is one kernel, which may give the kernel's bits:
    // the witness is the queued custom operation.
    let before = queued();
    let (worst, _) = compare::<Wgpu>();
    assert!(worst <= 1e-6, "Wgpu: off by {worst:.2e} from the composed derivative");
    assert_eq!(queued() - before, 2, "Wgpu: the kernels were not queued");
    let (worst, differs) = compare::<NdArray>();
    assert!(worst == 0.0 && !differs, "ndarray: {worst:.2e}");
}

/// `x` `[37, 24]` over [−6, 6], a bias `[24]` over [−2, 2], an output gradient over [−1, 1].
struct BiasCase {
    x: Vec<f32>,
    bias: Vec<f32>,
    grad: Vec<f32>,
}

const ROWS: usize = 37;
const ROW: usize = 24;

impl BiasCase {
    fn new() -> Self {
        let len = ROWS * ROW;
        let x = (0..len).map(|i| ((i * 7919) % len) as f32 * 12.0 / len as f32 - 6.0).collect();
        let bias = (0..ROW).map(|i| ((i * 13) % ROW) as f32 * 4.0 / ROW as f32 - 2.0).collect();
        let grad = (0..len).map(|i| ((i * 104_729) % 1013) as f32 / 506.5 - 1.0).collect();
        Self { x, bias, grad }
    }

    fn tensor<B: GeluOps, const D: usize>(values: &[f32], shape: [usize; D]) -> Tensor<B, D> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    /// `[x, bias, grad]` as `B`'s primitives.
    fn primitives<B: GeluOps>(&self) -> [FloatTensor<B>; 3] {
        [
            Self::tensor::<B, 2>(&self.x, [ROWS, ROW]).into_primitive().tensor(),
            Self::tensor::<B, 1>(&self.bias, [ROW]).into_primitive().tensor(),
            Self::tensor::<B, 2>(&self.grad, [ROWS, ROW]).into_primitive().tensor(),
        ]
    }
}

fn values<B: GeluOps>(primitive: FloatTensor<B>) -> Vec<f32> {
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(primitive)).into_data().to_vec::<f32>().expect("f32 values")
}

/// `bias_gelu` and its backward against Burn's `gelu` and the composed derivative of
/// `x + bias`: (the forward's largest difference, the backward's, whether any value differs).
fn compare_bias<B: GeluOps>() -> (f32, f32, bool) {
    let case = BiasCase::new();
    let [x, bias, grad] = case.primitives::<B>();
    let forward = values::<B>(B::bias_gelu(x.clone(), bias.clone()));
    let backward = values::<B>(B::bias_gelu_backward(x.clone(), bias.clone(), grad.clone()));
    let pre_activation = add_bias::<B>(x, bias);
    let burn_forward = values::<B>(B::gelu(pre_activation.clone()));
    let composed_backward = values::<B>(gelu_derivative::<B>(pre_activation, grad));
    let (forward_worst, forward_differs) = difference(&forward, &burn_forward);
    let (backward_worst, backward_differs) = difference(&backward, &composed_backward);
    (forward_worst, backward_worst, forward_differs || backward_differs)
}

#[test]
fn the_bias_gelu_is_one_kernel_each_way_on_wgpu_and_composed_elsewhere() {
    let (forward, backward, differs) = compare_bias::<CubeWgpu>();
    assert!(forward <= 1e-6 && backward <= 1e-6, "CubeWgpu: off by {forward:.2e} / {backward:.2e}");
    assert!(differs, "CubeWgpu: the composed GELU ran (the same bits)");
    let before = queued();
    let (forward, backward, _) = compare_bias::<Wgpu>();
    assert!(forward <= 1e-6 && backward <= 1e-6, "Wgpu: off by {forward:.2e} / {backward:.2e}");
    assert_eq!(queued() - before, 2, "Wgpu: the kernels were not queued");
    let (forward, backward, _) = compare_bias::<Flex>();
    assert!(forward <= 1e-6 && backward <= 1e-6, "Flex: off by {forward:.2e} / {backward:.2e}");
    let (forward, backward, differs) = compare_bias::<NdArray>();
    assert!(forward == 0.0 && backward == 0.0 && !differs, "ndarray: not the composed ops");
}

/// The gradients of `Σ grad ⊙ gelu(x + bias)` for `x` and `bias`, through [`bias_gelu`] or,
/// with `composed`, through the add and [`exact_gelu`].
fn bias_gelu_grads<B: AutodiffBackend + GeluOps>(composed: bool) -> [Vec<f32>; 2] {
    let case = BiasCase::new();
    let x = BiasCase::tensor::<B, 2>(&case.x, [ROWS, ROW]).require_grad();
    let bias = BiasCase::tensor::<B, 1>(&case.bias, [ROW]).require_grad();
    let y = match composed {
        true => exact_gelu(x.clone() + bias.clone().unsqueeze::<2>()),
        false => bias_gelu(x.clone(), bias.clone()),
    };
    let grads = (y * BiasCase::tensor::<B, 2>(&case.grad, [ROWS, ROW])).sum().backward();
    let grad_of = |tensor: Tensor<B::InnerBackend, 1>| tensor.into_data().to_vec::<f32>().expect("f32 values");
    [
        grad_of(x.grad(&grads).expect("x's gradient").flatten(0, 1)),
        grad_of(bias.grad(&grads).expect("the bias's gradient")),
    ]
}

#[test]
fn the_bias_gelu_node_gives_the_composed_gradients() {
    let before = queued();
    let [x_grad, bias_grad] = bias_gelu_grads::<Autodiff<Lean<Wgpu>>>(false);
    assert_eq!(queued() - before, 2, "one forward and one backward kernel");
    let [composed_x, composed_bias] = bias_gelu_grads::<Autodiff<Lean<Wgpu>>>(true);
    // The bias's gradient sums 37 rows: a few ulps of its largest partial sums.
    let ((x_worst, _), (bias_worst, _)) = (difference(&x_grad, &composed_x), difference(&bias_grad, &composed_bias));
    assert!(x_worst <= 1e-6 && bias_worst <= 1e-5, "off by {x_worst:.2e} (x) / {bias_worst:.2e} (bias)");
    // Flex composes: the same gradients.
    let [flex_x, flex_bias] = bias_gelu_grads::<Autodiff<Lean<Flex>>>(false);
    let ((x_worst, _), (bias_worst, _)) = (difference(&flex_x, &composed_x), difference(&flex_bias, &composed_bias));
    assert!(x_worst <= 1e-6 && bias_worst <= 1e-5, "Flex: off by {x_worst:.2e} (x) / {bias_worst:.2e} (bias)");
    // The control: without its bias the GELU's gradient is far off.
    let case = BiasCase::new();
    let x = BiasCase::tensor::<Autodiff<Lean<Wgpu>>, 2>(&case.x, [ROWS, ROW]).require_grad();
    let y = exact_gelu(x.clone()) * BiasCase::tensor::<Autodiff<Lean<Wgpu>>, 2>(&case.grad, [ROWS, ROW]);
    let unbiased =
        x.grad(&y.sum().backward()).expect("x's gradient").flatten::<1>(0, 1).into_data().to_vec::<f32>().unwrap();
    assert!(difference(&unbiased, &composed_x).0 > 1e-2, "a GELU without its bias went unnoticed");
}
