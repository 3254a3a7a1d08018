//! GELU, `x·Φ(x)`, and its exact derivative, `dx = dy · (Φ(x) + x·φ(x))`, each in one pass,
//! with `Φ` the standard normal CDF (`(1 + erf(x/√2)) / 2`) and `φ` its density, f32
//! arithmetic whatever the element type. Either may first add a bias to every row (the
//! linear layer before a transformer MLP's GELU: `x` is then the product without its bias,
//! and the bias is added as each element is read, in f32).
//!
//! Composed of Burn's element-wise ops the forward is five operations and the derivative
//! eleven (each fused into one kernel on Burn's fusion stacks, but each an entry, with its
//! host work, in the fusion stream, the bias's add and its reshape two more); each
//! kernel here is one.

use cubecl::prelude::*;

use crate::row_bias::{bias_at, biased, row_grid, RowBias};
use crate::vector::ElementwiseGrid;

/// 1/√2.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π), the standard normal density at 0.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// `Φ(v)`, the standard normal CDF.
#[cube]
fn normal_cdf(v: f32) -> f32 {
    (Erf::erf(v * FRAC_1_SQRT_2) + 1.0f32) * 0.5f32
}

/// `gelu′(v) = Φ(v) + v·φ(v)`.
#[cube]
fn gelu_slope(v: f32) -> f32 {
    normal_cdf(v) + v * (v * v * -0.5f32).exp() * FRAC_1_SQRT_2PI
}

/// One unit per vector of `N` elements: `y = gelu(x [+ bias])`, with `bias` (`[row]`,
/// `row_vectors` vectors) added to every row where `has_bias` (else not read).
#[cube(launch_unchecked)]
pub fn gelu_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    bias: &Tensor<Vector<F, N>>,
    y: &mut Tensor<Vector<F, N>>,
    vectors: usize,
    row_vectors: usize,
    #[comptime] has_bias: bool,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let at = ABSOLUTE_POS;
    let x = x[at];
    let b = bias_at(x, bias, at, row_vectors, has_bias);
    let mut out = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..x.vector_size() {
        let v = biased(x, b, i, has_bias);
        out[i] = F::cast_from(v * normal_cdf(v));
    }
    y[at] = out;
}

/// One unit per vector of `N` elements: `grad_x = grad · gelu′(x [+ bias])`, the bias as
/// in [`gelu_kernel()`]; `grad_x` is also the bias-added input's gradient.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn gelu_backward_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    bias: &Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    grad_x: &mut Tensor<Vector<F, N>>,
    vectors: usize,
    row_vectors: usize,
    #[comptime] has_bias: bool,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let at = ABSOLUTE_POS;
    let (x, grad) = (x[at], grad[at]);
    let b = bias_at(x, bias, at, row_vectors, has_bias);
    let mut out = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..x.vector_size() {
        let v = biased(x, b, i, has_bias);
        out[i] = F::cast_from(f32::cast_from(grad[i]) * gelu_slope(v));
    }
    grad_x[at] = out;
}

/// Runs [`gelu_kernel()`] over `len` elements of `F`.
///
/// # Safety
/// `x` and `y` contiguous with `len` elements of `F` each, `y` not sharing a buffer with
/// `x`; where `bias.row` is `Some(row)`, `bias.arg` contiguous with `row` elements of `F`
/// and `row` > 0 dividing `len`.
pub unsafe fn launch_gelu<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: TensorArg<R>,
    bias: RowBias<R>,
    y: TensorArg<R>,
    len: usize,
) {
    let (ElementwiseGrid { width, vectors, cube_count, cube_dim }, row_vectors) =
        row_grid::<R, F>(client, len, bias.row);
    gelu_kernel::launch_unchecked::<F, R>(
        client,
        cube_count,
        cube_dim,
        width,
        x,
        bias.arg,
        y,
        vectors,
        row_vectors,
        bias.row.is_some(),
    );
}

/// Runs [`gelu_backward_kernel()`] over `len` elements of `F`.
///
/// # Safety
/// `x`, `grad` and `grad_x` contiguous with `len` elements of `F` each, `grad_x` not
/// sharing a buffer with the inputs; the bias as in [`launch_gelu`].
pub unsafe fn launch_gelu_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: TensorArg<R>,
    bias: RowBias<R>,
    grad: TensorArg<R>,
    grad_x: TensorArg<R>,
    len: usize,
) {
    let (ElementwiseGrid { width, vectors, cube_count, cube_dim }, row_vectors) =
        row_grid::<R, F>(client, len, bias.row);
    gelu_backward_kernel::launch_unchecked::<F, R>(
        client,
        cube_count,
        cube_dim,
        width,
        x,
        bias.arg,
        grad,
        grad_x,
        vectors,
        row_vectors,
        bias.row.is_some(),
    );
}
