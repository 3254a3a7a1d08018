//! LayerNorm over the last dimension (Ba et al., arXiv 1607.06450), forward and backward,
//! keeping only each row's mean and reciprocal standard deviation between them.
//!
//! For a row `x` of `d` elements: `μ = Σx/d`, `σ² = Σ(x − μ)²/d`, `r = 1/√(σ² + ε)`,
//! `x̂ = (x − μ)·r`, `y = x̂·γ + β`. Given `dy`, with `g = dy·γ`:
//!
//! ```text
//! dx = r · (g − mean(g) − x̂ · mean(g · x̂))
//! dγ = Σ_rows dy · x̂        dβ = Σ_rows dy
//! ```
//!
//! One cube works on one row in [`layer_norm_forward_kernel`] and
//! [`layer_norm_backward_kernel`] (its units stride over the row's vectors, the widest the
//! runtime prefers that divides `d`; sums in shared memory, f32 whatever the element
//! type). The parameters' gradients are sums over rows:
//! [`layer_norm_param_grads_kernel`] sums blocks of [`ROWS_PER_PARTIAL`] rows, one unit
//! per column, and [`launch_layer_norm_param_grads_finish`] adds the blocks' sums up with
//! `column_sums`' kernel (not needed when there is one block). A backward pass is two or
//! four launches. Rows are contiguous, `d` elements each.

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::column_sums::launch_column_sums;
use crate::reduce::{cube_row, cube_sum, cube_sum_pair, row_cubes};
use crate::vector::vector_width;

/// Units per cube of the row kernels (a power of two).
pub const ROW_UNITS: usize = 128;

/// Units per cube of the parameter-gradient kernels: one column each.
const COLUMN_UNITS: usize = 128;

/// Rows summed into one partial sum of the parameters' gradients: 64 makes 768 cubes at
/// GPT-2-small's 8,192 rows of 768 (256 made 192, fewer than an H100 has SMs twice over),
/// and the finishing kernel adds 128 partials per column. Chosen by that count; the step's
/// time on a GPU is not yet measured with it.
pub const ROWS_PER_PARTIAL: usize = 64;

/// Writes `y`, and each row's `mean` and `rstd` (f32), from `x`, `gamma` and, when
/// `has_beta`, `beta` (else `beta` is not read). Rows, `gamma` and `beta` are read in
/// vectors of `N` (a row is `d / N` of them).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_forward_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    gamma: &Tensor<Vector<F, N>>,
    beta: &Tensor<Vector<F, N>>,
    y: &mut Tensor<Vector<F, N>>,
    mean: &mut Tensor<f32>,
    rstd: &mut Tensor<f32>,
    rows: usize,
    d: usize,
    epsilon: f32,
    #[comptime] has_beta: bool,
) {
    let (row, active) = cube_row(rows);
    if !active {
        terminate!();
    }
    let width = x.vector_size();
    let vectors = d / width;
    let base = row * vectors;
    let first = UNIT_POS_X as usize;
    let mut sum = 0.0f32;
    let mut v = first;
    while v < vectors {
        let values = x[base + v];
        #[unroll]
        for j in 0..width {
            sum += f32::cast_from(values[j]);
        }
        v += ROW_UNITS;
    }
    let mu = cube_sum(sum, ROW_UNITS) / f32::cast_from(d);
    let mut squares = 0.0f32;
    v = first;
    while v < vectors {
        let values = x[base + v];
        #[unroll]
        for j in 0..width {
            let centered = f32::cast_from(values[j]) - mu;
            squares += centered * centered;
        }
        v += ROW_UNITS;
    }
    let deviation = (cube_sum(squares, ROW_UNITS) / f32::cast_from(d) + epsilon).sqrt();
    v = first;
    while v < vectors {
        let (values, scales) = (x[base + v], gamma[v]);
        let mut shifts = Vector::<F, N>::new(F::new(0.0));
        if has_beta {
            shifts = beta[v];
        }
        let mut out = Vector::<F, N>::empty();
        #[unroll]
        for j in 0..width {
            let value = (f32::cast_from(values[j]) - mu) / deviation * f32::cast_from(scales[j]);
            out[j] = F::cast_from(value + f32::cast_from(shifts[j]));
        }
        y[base + v] = out;
        v += ROW_UNITS;
    }
    if first == 0 {
        mean[row] = mu;
        rstd[row] = 1.0f32 / deviation;
    }
}

/// Writes `dx` from `x`, `gamma`, the forward's `mean` and `rstd`, and `dy`, all but the
/// statistics in vectors of `N`; `mean(g)` and `mean(g · x̂)` are summed over the cube in
/// one halving pass.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    gamma: &Tensor<Vector<F, N>>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    dy: &Tensor<Vector<F, N>>,
    dx: &mut Tensor<Vector<F, N>>,
    rows: usize,
    d: usize,
) {
    let (row, active) = cube_row(rows);
    if !active {
        terminate!();
    }
    let width = x.vector_size();
    let vectors = d / width;
    let base = row * vectors;
    let (mu, r) = (mean[row], rstd[row]);
    let first = UNIT_POS_X as usize;
    let mut sum_g = 0.0f32;
    let mut sum_gx = 0.0f32;
    let mut v = first;
    while v < vectors {
        let (grads, values, scales) = (dy[base + v], x[base + v], gamma[v]);
        #[unroll]
        for j in 0..width {
            let g = f32::cast_from(grads[j]) * f32::cast_from(scales[j]);
            let x_hat = (f32::cast_from(values[j]) - mu) * r;
            sum_g += g;
            sum_gx += g * x_hat;
        }
        v += ROW_UNITS;
    }
    let (total_g, total_gx) = cube_sum_pair(sum_g, sum_gx, ROW_UNITS);
    let (mean_g, mean_gx) = (total_g / f32::cast_from(d), total_gx / f32::cast_from(d));
    v = first;
    while v < vectors {
        let (grads, values, scales) = (dy[base + v], x[base + v], gamma[v]);
        let mut out = Vector::<F, N>::empty();
        #[unroll]
        for j in 0..width {
            let g = f32::cast_from(grads[j]) * f32::cast_from(scales[j]);
            let x_hat = (f32::cast_from(values[j]) - mu) * r;
            out[j] = F::cast_from(r * (g - mean_g - x_hat * mean_gx));
        }
        dx[base + v] = out;
        v += ROW_UNITS;
    }
}

/// Cube `(c, b)`: for the columns `c · COLUMN_UNITS ..` (one a unit) and the rows of block
/// `b`, `Σ dy · x̂` into `dgamma[b, column]` and `Σ dy` into `dbeta[b, column]`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_param_grads_kernel<F: Float, G: Float>(
    x: &Tensor<F>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    dy: &Tensor<F>,
    dgamma: &mut Tensor<G>,
    dbeta: &mut Tensor<G>,
    rows: usize,
    d: usize,
) {
    let column = CUBE_POS_X as usize * COLUMN_UNITS + UNIT_POS_X as usize;
    if column >= d {
        terminate!();
    }
    let block = CUBE_POS_Y as usize;
    let start = block * ROWS_PER_PARTIAL;
    let end = min(start + ROWS_PER_PARTIAL, rows);
    let mut sum_gamma = 0.0f32;
    let mut sum_beta = 0.0f32;
    for row in start..end {
        let at = row * d + column;
        let grad = f32::cast_from(dy[at]);
        sum_gamma += grad * (f32::cast_from(x[at]) - mean[row]) * rstd[row];
        sum_beta += grad;
    }
    dgamma[block * d + column] = G::cast_from(sum_gamma);
    dbeta[block * d + column] = G::cast_from(sum_beta);
}

/// The blocks of [`ROWS_PER_PARTIAL`] rows the parameters' gradients are summed in.
pub fn layer_norm_blocks(rows: usize) -> usize {
    rows.div_ceil(ROWS_PER_PARTIAL).max(1)
}

/// Runs the forward kernel over `rows` rows of `d`.
///
/// # Safety
/// `x` and `y` must be contiguous `[rows, d]` tensors of `F`, `gamma` (and `beta`) `[d]`,
/// `mean` and `rstd` `[rows]` f32; `beta` may be any tensor when `has_beta` is false.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_layer_norm_forward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    [x, gamma, beta]: [TensorArg<R>; 3],
    [y, mean, rstd]: [TensorArg<R>; 3],
    rows: usize,
    d: usize,
    epsilon: f32,
    has_beta: bool,
) {
    layer_norm_forward_kernel::launch_unchecked::<F, R>(
        client,
        row_cubes(rows),
        CubeDim::new_1d(ROW_UNITS as u32),
        vector_width(client, size_of::<F>(), d),
        x,
        gamma,
        beta,
        y,
        mean,
        rstd,
        rows,
        d,
        epsilon,
        has_beta,
    );
}

/// Runs the backward kernel for `dx`.
///
/// # Safety
/// `x`, `dy` and `dx` must be contiguous `[rows, d]` tensors of `F`, `gamma` `[d]`, `mean`
/// and `rstd` the forward's `[rows]` f32.
pub unsafe fn launch_layer_norm_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    [x, gamma, mean, rstd, dy]: [TensorArg<R>; 5],
    dx: TensorArg<R>,
    rows: usize,
    d: usize,
) {
    layer_norm_backward_kernel::launch_unchecked::<F, R>(
        client,
        row_cubes(rows),
        CubeDim::new_1d(ROW_UNITS as u32),
        vector_width(client, size_of::<F>(), d),
        x,
        gamma,
        mean,
        rstd,
        dy,
        dx,
        rows,
        d,
    );
}

/// Sums `dy · x̂` and `dy` over each block of [`ROWS_PER_PARTIAL`] rows into `sums`
/// (`[dgamma, dbeta]`, each `[layer_norm_blocks(rows), d]` of `G`): with one block, the
/// parameters' gradients themselves; else partial sums (f32) for
/// [`launch_layer_norm_param_grads_finish`].
///
/// # Safety
/// `x` and `dy` must be contiguous `[rows, d]` tensors of `F`, `mean` and `rstd` the
/// forward's `[rows]` f32, `sums` as above.
pub unsafe fn launch_layer_norm_param_grads<R: Runtime, F: Float + CubeElement, G: Float + CubeElement>(
    client: &ComputeClient<R>,
    [x, mean, rstd, dy]: [TensorArg<R>; 4],
    [dgamma, dbeta]: [TensorArg<R>; 2],
    rows: usize,
    d: usize,
) {
    layer_norm_param_grads_kernel::launch_unchecked::<F, G, R>(
        client,
        CubeCount::Static(d.div_ceil(COLUMN_UNITS) as u32, layer_norm_blocks(rows) as u32, 1),
        CubeDim::new_1d(COLUMN_UNITS as u32),
        x,
        mean,
        rstd,
        dy,
        dgamma,
        dbeta,
        rows,
        d,
    );
}

/// Adds the `blocks` partial sums (`[blocks, d]` f32 each) up into the parameters'
/// gradients `dgamma` and `dbeta` (`[d]` of `F`): `column_sums`' kernel, one launch each
/// (each cube's units share the blocks of a few columns, where one unit a column would
/// walk every block alone).
///
/// # Safety
/// The tensors must have the shapes and types above, contiguous, with `blocks` at most
/// 32,768 (LayerNorm over at most 2,097,152 rows).
pub unsafe fn launch_layer_norm_param_grads_finish<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    [partial_gamma, partial_beta]: [TensorArg<R>; 2],
    [dgamma, dbeta]: [TensorArg<R>; 2],
    blocks: usize,
    d: usize,
) {
    let width = vector_width(client, size_of::<f32>(), d);
    for (partial, sums) in [(partial_gamma, dgamma), (partial_beta, dbeta)] {
        launch_column_sums::<R, f32, F>(client, partial, sums, [blocks, d / width], width, d / width, 1);
    }
}
