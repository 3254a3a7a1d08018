//! The residual stream's add after a linear layer, `y = residual + (y + bias)`, in place on
//! `y`, the layer's product computed without its bias, in f32 whatever the element type
//! (one rounding where the composed adds round twice in f16 and bf16; in f32 the same
//! bits as Burn's linear layer's bias add followed by the residual's add).
//!
//! Composed of Burn's ops these are three entries in a fusion stream (the bias's reshape
//! and two adds, each with its host work, though they fuse into one kernel); this is one.

use cubecl::prelude::*;

use crate::row_bias::{bias_at, biased, row_grid, RowBias};
use crate::vector::ElementwiseGrid;

/// One unit per vector of `N` elements: `sum = residual + (sum + bias)`, with `bias`
/// (`[row]`, `row_vectors` vectors) added to every row where `has_bias` (else not read).
#[cube(launch_unchecked)]
pub fn residual_add_kernel<F: Float, N: Size>(
    sum: &mut Tensor<Vector<F, N>>,
    bias: &Tensor<Vector<F, N>>,
    residual: &Tensor<Vector<F, N>>,
    vectors: usize,
    row_vectors: usize,
    #[comptime] has_bias: bool,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let at = ABSOLUTE_POS;
    let (product, residual) = (sum[at], residual[at]);
    let b = bias_at(product, bias, at, row_vectors, has_bias);
    let mut out = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..product.vector_size() {
        out[i] = F::cast_from(f32::cast_from(residual[i]) + biased(product, b, i, has_bias));
    }
    sum[at] = out;
}

/// Runs [`residual_add_kernel()`] over `len` elements of `F`: `sum += residual [+ bias]`.
///
/// # Safety
/// `sum` and `residual` contiguous with `len` elements of `F` each, not sharing a buffer;
/// where `bias.row` is `Some(row)`, `bias.arg` contiguous with `row` elements of `F` and
/// `row` > 0 dividing `len`.
pub unsafe fn launch_residual_add<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    sum: TensorArg<R>,
    bias: RowBias<R>,
    residual: TensorArg<R>,
    len: usize,
) {
    let (ElementwiseGrid { width, vectors, cube_count, cube_dim }, row_vectors) =
        row_grid::<R, F>(client, len, bias.row);
    residual_add_kernel::launch_unchecked::<F, R>(
        client,
        cube_count,
        cube_dim,
        width,
        sum,
        bias.arg,
        residual,
        vectors,
        row_vectors,
        bias.row.is_some(),
    );
}
