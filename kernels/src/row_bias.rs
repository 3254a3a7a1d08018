//! A bias added to every row of an element-wise kernel's input (the linear layer before the
//! kernel computed its product without the bias): the vector of it each unit reads, the
//! element it adds in f32, and a launch whose vectors divide the row.

use cubecl::prelude::*;

use crate::vector::ElementwiseGrid;

/// A bias: `row` elements added to every row of that many, or none.
pub struct RowBias<R: Runtime> {
    /// The bias; any tensor where `row` is `None` (then not read).
    pub arg: TensorArg<R>,
    /// The bias's (and each row's) length; `None`: no bias.
    pub row: Option<usize>,
}

/// The bias vector for the vector at `at` (rows of `row_vectors` vectors), or `x` itself
/// where there is no bias (then not read).
#[cube]
pub(crate) fn bias_at<F: Float, N: Size>(
    x: Vector<F, N>,
    bias: &Tensor<Vector<F, N>>,
    at: usize,
    row_vectors: usize,
    #[comptime] has_bias: bool,
) -> Vector<F, N> {
    let mut b = x;
    if has_bias {
        b = bias[at % row_vectors];
    }
    b
}

/// Element `i` of `x [+ b]`, in f32.
#[cube]
pub(crate) fn biased<F: Float, N: Size>(x: Vector<F, N>, b: Vector<F, N>, i: usize, #[comptime] has_bias: bool) -> f32 {
    let mut v = f32::cast_from(x[i]);
    if has_bias {
        v += f32::cast_from(b[i]);
    }
    v
}

/// The launch over `len` elements of `F` with vectors that divide the bias's row where
/// there is one, and the row's length in those vectors.
pub(crate) fn row_grid<R: Runtime, F>(
    client: &ComputeClient<R>,
    len: usize,
    row: Option<usize>,
) -> (ElementwiseGrid, usize) {
    let grid = ElementwiseGrid::dividing::<R, F>(client, len, row.unwrap_or(len));
    let row_vectors = row.unwrap_or(len) / grid.width;
    (grid, row_vectors.max(1))
}
