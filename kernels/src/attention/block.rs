//! The softmax of attention computed in blocks of query rows on GEMMs (leanburn's
//! `AttentionPath::Gemm`): between a block's products, its scores `[batch, heads, rows,
//! keys]` become probabilities and each row's log-sum-exp in one kernel (forward), and the
//! backward's probabilities and score gradients in one more, where Burn's ops make a pass
//! (or a fused kernel) for the mask, the maximum, the exponentials, the sum and the casts.
//!
//! The scores are the unscaled products `q · kᵀ`: both kernels apply the softmax's scale
//! (`1/√head_dim`) as they read them, and the backward's gradient is the unscaled scores'
//! (`scale · p · (dP − Δ)`), so neither the query nor its gradient needs a pass for it.
//!
//! Causal blocks: row `i` of the block sees keys `0 ..= i + diagonal`; the keys past it
//! are 0 in the probabilities and in the gradient. The score-shaped tensors are read and
//! written in vectors of the widest width the runtime prefers that divides a row (one
//! scalar at a time where none does): more bytes in flight per load, where these passes
//! over `[batch, heads, rows, keys]` are the attention's memory traffic besides its GEMMs.
//! f32 arithmetic whatever the element type; the log-sum-exp is an f32 `[batch, heads, rows, 1]` tensor read and written by its
//! strides, and the backward's `Δ = Σ dO ∘ O` is each row's sum over the block's output and
//! its gradient (`[batch, heads, rows, head_dim]`, read by their strides): a block's rows of
//! the whole sequence's tensors need no copy, and `Δ` no pass of its own.

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::{cube_row, cube_softmax_stats, cube_sum, row_cubes};
use crate::vector::vector_width;

/// Units per cube of both kernels: one cube per score row.
pub const SCORE_ROW_UNITS: usize = 64;

/// One block's scores: `batch · heads · rows` rows of `keys` scores, contiguous.
#[derive(CubeLaunch, CubeType)]
pub struct ScoreBlock {
    /// Heads (a score row `r` is row `r % rows` of batch-head `r / rows`).
    pub heads: usize,
    /// Query rows of the block per batch-head.
    pub rows: usize,
    /// Scores per row.
    pub keys: usize,
    /// `batch · heads · rows`.
    pub count: usize,
    /// Causal: row `i` sees keys `0 ..= i + diagonal`.
    pub diagonal: usize,
    /// The softmax's scale: the probabilities are `softmax(scale · scores)`.
    pub scale: f32,
}

/// The keys score row `r` sees: all of them, or, causal, those up to its diagonal.
#[cube]
fn visible_keys(r: usize, block: &ScoreBlock, #[comptime] causal: bool) -> usize {
    let mut keys = block.keys;
    if causal {
        keys = min(r % block.rows + block.diagonal + 1, block.keys);
    }
    keys
}

/// Where score row `r`'s statistic sits in `stat` (`[batch, heads, rows, 1]`, any strides).
#[cube]
fn stat_at(stat: &Tensor<f32>, r: usize, block: &ScoreBlock) -> usize {
    let bh = r / block.rows;
    (bh / block.heads) * stat.stride(0) + (bh % block.heads) * stat.stride(1) + (r % block.rows) * stat.stride(2)
}

/// One cube per score row: the maximum of its scaled scores and the sum of their
/// exponentials shifted by it (a running pair per unit, one read), combined pairwise in
/// shared memory into the log-sum-exp, written to `lse`; then
/// `probabilities = exp(scale · score − lse)` (0 past the diagonal). Scores and
/// probabilities are read and written in vectors of `N` (a row is `keys / N` of them); a
/// vector wholly past the diagonal is written as zeros without being read.
#[cube(launch_unchecked)]
pub fn attention_block_softmax_kernel<F: Float, N: Size>(
    scores: &Tensor<Vector<F, N>>,
    probabilities: &mut Tensor<Vector<F, N>>,
    lse: &mut Tensor<f32>,
    block: &ScoreBlock,
    #[comptime] causal: bool,
) {
    let (r, active) = cube_row(block.count);
    if !active {
        terminate!();
    }
    let width = scores.vector_size();
    let visible = visible_keys(r, block, causal);
    let vectors = block.keys / width;
    let base = r * vectors;
    // Key 0 is seen by every row: the statistics are over at least one score.
    let (row_max, row_sum) = cube_softmax_stats(scores, base, visible, block.scale, SCORE_ROW_UNITS);
    let unit = UNIT_POS_X as usize;
    let row_lse = row_max + row_sum.ln();
    if unit == 0 {
        lse[stat_at(lse, r, block)] = row_lse;
    }
    let mut v = unit;
    while v < vectors {
        let mut p = Vector::<F, N>::new(F::new(0.0));
        if v * width < visible {
            let x = scores[base + v];
            #[unroll]
            for j in 0..width {
                if v * width + j < visible {
                    p[j] = F::cast_from((f32::cast_from(x[j]) * block.scale - row_lse).exp());
                }
            }
        }
        probabilities[base + v] = p;
        v += SCORE_ROW_UNITS;
    }
}

/// `Δ = Σ dO ∘ O` of score row `r`: the cube's units share the head dimension of the
/// block's output and its gradient (`[batch, heads, rows, head_dim]`, any strides), the
/// products summed in f32.
#[cube]
fn row_delta<F: Float>(output: &Tensor<F>, grad_output: &Tensor<F>, r: usize, block: &ScoreBlock) -> f32 {
    let bh = r / block.rows;
    let (b, h, i) = (bh / block.heads, bh % block.heads, r % block.rows);
    let out_base = b * output.stride(0) + h * output.stride(1) + i * output.stride(2);
    let grad_base = b * grad_output.stride(0) + h * grad_output.stride(1) + i * grad_output.stride(2);
    let mut partial = 0.0f32;
    let mut d = UNIT_POS_X as usize;
    while d < output.shape(3) {
        let o = f32::cast_from(output[out_base + d * output.stride(3)]);
        partial += o * f32::cast_from(grad_output[grad_base + d * grad_output.stride(3)]);
        d += SCORE_ROW_UNITS;
    }
    cube_sum(partial, SCORE_ROW_UNITS)
}

/// One cube per score row, as the forward: the row's `Δ` from the block's output and its
/// gradient, then `p = exp(scale · score − lse)` and the unscaled scores' gradient
/// `dS = scale · p · (dP − Δ)` (both 0 past the diagonal), the score-shaped tensors in
/// vectors of `N` as the forward's.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_block_softmax_grad_kernel<F: Float, N: Size>(
    scores: &Tensor<Vector<F, N>>,
    grad_probabilities: &Tensor<Vector<F, N>>,
    lse: &Tensor<f32>,
    output: &Tensor<F>,
    grad_output: &Tensor<F>,
    probabilities: &mut Tensor<Vector<F, N>>,
    grad_scores: &mut Tensor<Vector<F, N>>,
    block: &ScoreBlock,
    #[comptime] causal: bool,
) {
    let (r, active) = cube_row(block.count);
    if !active {
        terminate!();
    }
    let width = scores.vector_size();
    let visible = visible_keys(r, block, causal);
    let vectors = block.keys / width;
    let base = r * vectors;
    let row_lse = lse[stat_at(lse, r, block)];
    let delta = row_delta(output, grad_output, r, block);
    let mut v = UNIT_POS_X as usize;
    while v < vectors {
        let mut p = Vector::<F, N>::new(F::new(0.0));
        let mut ds = Vector::<F, N>::new(F::new(0.0));
        if v * width < visible {
            let (x, dp) = (scores[base + v], grad_probabilities[base + v]);
            #[unroll]
            for j in 0..width {
                if v * width + j < visible {
                    let prob = (f32::cast_from(x[j]) * block.scale - row_lse).exp();
                    p[j] = F::cast_from(prob);
                    ds[j] = F::cast_from(block.scale * prob * (f32::cast_from(dp[j]) - delta));
                }
            }
        }
        probabilities[base + v] = p;
        grad_scores[base + v] = ds;
        v += SCORE_ROW_UNITS;
    }
}

/// A block's sizes and mask: `[batch · heads, heads, rows, keys]`, causal, the
/// diagonal (`None`: every row sees every key), and the softmax's scale.
#[derive(Clone, Copy, Debug)]
pub struct BlockDims {
    pub batch_heads: usize,
    pub heads: usize,
    pub rows: usize,
    pub keys: usize,
    pub diagonal: Option<usize>,
    pub scale: f32,
}

impl BlockDims {
    fn count(&self) -> usize {
        self.batch_heads * self.rows
    }

    /// The score rows' vectors: the widest the runtime prefers for elements of
    /// `elem_bytes` that divides a row.
    fn vector_width<R: Runtime>(&self, client: &ComputeClient<R>, elem_bytes: usize) -> usize {
        vector_width(client, elem_bytes, self.keys)
    }

    fn launch<R: Runtime>(&self) -> ScoreBlockLaunch<R> {
        ScoreBlockLaunch::new(self.heads, self.rows, self.keys, self.count(), self.diagonal.unwrap_or(0), self.scale)
    }
}

/// Runs [`attention_block_softmax_kernel()`]: `probabilities` and `lse` from `scores`.
///
/// # Safety
/// `scores` and `probabilities` contiguous `[batch, heads, rows, keys]` of `F`, `lse`
/// `[batch, heads, rows, 1]` f32 (any strides inside its buffer), `rows` and `keys` at
/// least 1.
pub unsafe fn launch_attention_block_softmax<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    scores: TensorArg<R>,
    probabilities: TensorArg<R>,
    lse: TensorArg<R>,
    dims: BlockDims,
) {
    attention_block_softmax_kernel::launch_unchecked::<F, R>(
        client,
        row_cubes(dims.count()),
        CubeDim::new_1d(SCORE_ROW_UNITS as u32),
        dims.vector_width(client, size_of::<F>()),
        scores,
        probabilities,
        lse,
        dims.launch(),
        dims.diagonal.is_some(),
    );
}

/// Runs [`attention_block_softmax_grad_kernel()`]: `probabilities` and `grad_scores` from
/// `scores`, `grad_probabilities`, `lse` and the block's `output` and `grad_output`.
///
/// # Safety
/// As [`launch_attention_block_softmax`]; `grad_probabilities` and `grad_scores`
/// contiguous `[batch, heads, rows, keys]` of `F`; `output` and `grad_output`
/// `[batch, heads, rows, head_dim]` of `F` (any strides inside their buffers).
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_attention_block_softmax_grad<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    scores: TensorArg<R>,
    grad_probabilities: TensorArg<R>,
    lse: TensorArg<R>,
    output: TensorArg<R>,
    grad_output: TensorArg<R>,
    probabilities: TensorArg<R>,
    grad_scores: TensorArg<R>,
    dims: BlockDims,
) {
    attention_block_softmax_grad_kernel::launch_unchecked::<F, R>(
        client,
        row_cubes(dims.count()),
        CubeDim::new_1d(SCORE_ROW_UNITS as u32),
        dims.vector_width(client, size_of::<F>()),
        scores,
        grad_probabilities,
        lse,
        output,
        grad_output,
        probabilities,
        grad_scores,
        dims.launch(),
        dims.diagonal.is_some(),
    );
}
