//! GELU's exact derivative in one pass: `dx = dy · (Φ(x) + x·φ(x))`, with `Φ` the standard
//! normal CDF (`(1 + erf(x/√2)) / 2`) and `φ` its density, f32 arithmetic whatever the
//! element type. Composed of Burn's element-wise ops the same gradient is eleven
//! operations (a fused kernel on Burn's fusion stacks, but eleven entries, each with its
//! host work, in the fusion stream); this kernel is one.

use cubecl::prelude::*;

use crate::vector::ElementwiseGrid;

/// 1/√2.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π), the standard normal density at 0.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// One unit per vector of `N` elements: `grad_x = grad · gelu′(x)`.
#[cube(launch_unchecked)]
pub fn gelu_backward_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    grad_x: &mut Tensor<Vector<F, N>>,
    vectors: usize,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let at = ABSOLUTE_POS;
    let (x, grad) = (x[at], grad[at]);
    let mut out = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..x.vector_size() {
        let v = f32::cast_from(x[i]);
        let cdf = (Erf::erf(v * FRAC_1_SQRT_2) + 1.0f32) * 0.5f32;
        let pdf = (v * v * -0.5f32).exp() * FRAC_1_SQRT_2PI;
        out[i] = F::cast_from(f32::cast_from(grad[i]) * (cdf + v * pdf));
    }
    grad_x[at] = out;
}

/// Runs [`gelu_backward_kernel`] over `len` elements of `F`.
///
/// # Safety
/// `x`, `grad` and `grad_x` contiguous with `len` elements of `F` each; `grad_x` must not
/// share a buffer with the inputs.
pub unsafe fn launch_gelu_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    x: TensorArg<R>,
    grad: TensorArg<R>,
    grad_x: TensorArg<R>,
    len: usize,
) {
    let ElementwiseGrid { width, vectors, cube_count, cube_dim } = ElementwiseGrid::new::<R, F>(client, len);
    gelu_backward_kernel::launch_unchecked::<F, R>(client, cube_count, cube_dim, width, x, grad, grad_x, vectors);
}
