//! The blocked forward (with each row's log-sum-exp) and the recomputing backward, on
//! plain Burn tensors of any backend: each block's products are the backend's GEMMs
//! ([`GemmOps`]: the vendor's where it has them, its matmul otherwise), its
//! softmax between them the backend's block softmax op ([`composed_softmax`] and
//! [`composed_softmax_grad`] by default).
//!
//! The scores are the unscaled `q·kᵀ`: the block softmax ops apply the softmax's scale
//! (`1/√head_dim`) as they read them and return the unscaled scores' gradient, so neither
//! the query (forward and backward) nor the query's gradient takes a pass for the scale.
//!
//! A causal block stops at the last key its rows may see: it neither computes nor masks
//! the scores above the diagonal (about half of all `queries × keys`), and in the same
//! workspace the blocks that see fewer keys take more rows.

use std::ops::Range;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, FloatDType, Int, Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, TensorMetadata};

use super::{attention_workspace, AttentionOps};
use crate::backend::gemm::{gemm, gemm_transposed, GemmOps};

/// Query rows `start .. start + rows`, which attend to keys `0 .. keys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub start: usize,
    pub rows: usize,
    pub keys: usize,
}

impl Block {
    fn rows(&self) -> Range<usize> {
        self.start..self.start + self.rows
    }
}

/// Scores one block may hold per batch item and head, so that about four
/// `[batch, heads, rows, keys]` buffers of `elem_bytes` fit in the [`attention_workspace`].
pub(crate) fn block_scores(dims: [usize; 4], elem_bytes: usize) -> usize {
    let [batch, heads, _, _] = dims;
    attention_workspace() / (4 * batch * heads * elem_bytes).max(1)
}

/// Keys a causal block computes come in multiples of this (or all of them): fewer distinct
/// shapes, so fewer kernels to compile and tune, for a few masked scores more.
pub(crate) const KEY_GRANULE: usize = 32;

/// Blocks of query rows covering `0 .. queries` in order, each with at most `scores`
/// `rows × keys` (a block of one row may have more). Causal (aligned at the bottom right,
/// as Burn's: row `i` sees keys `0 ..= i + keys − queries`), a block's keys end at the
/// last one its last row sees, rounded up to a multiple of `granule`, and it takes as many
/// rows as fit.
pub(crate) fn blocks(queries: usize, keys: usize, causal: bool, scores: usize, granule: usize) -> Vec<Block> {
    let offset = keys.saturating_sub(queries);
    let granule = granule.max(1);
    let seen = |start: usize, rows: usize| {
        if causal {
            (start + rows + offset).next_multiple_of(granule).min(keys)
        } else {
            keys
        }
    };
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < queries {
        // rows × seen(rows) grows with rows: the most rows within `scores`, at least one.
        let (mut low, mut high) = (1, queries - start);
        while low < high {
            let mid = low + (high - low).div_ceil(2);
            if mid * seen(start, mid) <= scores {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        blocks.push(Block { start, rows: low, keys: seen(start, low) });
        start += low;
    }
    blocks
}

/// The scores of `block`: `[b, h, rows, block keys]`, from the whole query and key,
/// unscaled and unmasked (the block's softmax op scales and masks them).
fn scores<B: GemmOps>(query: &Tensor<B, 4>, key: &Tensor<B, 4>, block: Block) -> Tensor<B, 4> {
    gemm_transposed(block_rows(query, block), seen_keys(key, block), [false, true])
}

/// The causal diagonal of `block` of a `queries`-row attention over `keys` keys: row
/// `start + i` may not see key `j > start + i + keys − queries` (Burn's bottom-right
/// alignment), so row `i` of the block sees keys `0 ..= i + diagonal`; `None` where
/// nothing is hidden (not causal, or the block's first row sees all of its keys).
fn diagonal(block: Block, queries: usize, keys: usize, causal: bool) -> Option<usize> {
    let diagonal = block.start + keys - queries;
    (causal && block.keys > diagonal + 1).then_some(diagonal)
}

/// `scores` (`[b, h, rows, keys]`) with the keys past row `i`'s `i + diagonal` at −∞.
fn masked<B: Backend>(scores: Tensor<B, 4>, diagonal: Option<usize>) -> Tensor<B, 4> {
    let Some(diagonal) = diagonal else { return scores };
    let [batch, heads, rows, keys] = scores.dims();
    let device = scores.device();
    let row = Tensor::<B, 1, Int>::arange(diagonal as i64..(diagonal + rows) as i64, &device);
    let col = Tensor::<B, 1, Int>::arange(0..keys as i64, &device);
    let hidden: Tensor<B, 2, Bool> = col.reshape([1, keys]).greater(row.reshape([rows, 1]));
    scores.mask_fill(hidden.reshape([1, 1, rows, keys]).expand([batch, heads, rows, keys]), f32::NEG_INFINITY)
}

/// `scores` in f32 times `scale`, masked past `diagonal`: what the block's softmax is of.
fn scaled_scores<B: Backend>(scores: FloatTensor<B>, diagonal: Option<usize>, scale: f32) -> Tensor<B, 4> {
    masked(to_f32(tensor::<B>(scores)).mul_scalar(scale), diagonal)
}

/// [`AttentionOps::lean_attention_block_softmax`] composed of Burn ops, in f32.
pub(crate) fn composed_softmax<B: Backend>(
    scores: FloatTensor<B>,
    diagonal: Option<usize>,
    scale: f32,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let dtype = scores.dtype();
    let scores = scaled_scores::<B>(scores, diagonal, scale);
    let max = scores.clone().max_dim(3);
    let weights = (scores - max.clone()).exp();
    let sum = weights.clone().sum_dim(3);
    let probabilities = to_dtype(weights / sum.clone(), dtype);
    (primitive(probabilities), primitive(max + sum.log()))
}

/// `Δ = Σ dO ∘ O` of each row of `output` and its gradient (`[batch, heads, rows,
/// head_dim]`): `[batch, heads, rows, 1]`, in f32.
pub(crate) fn row_deltas<B: Backend>([output, grad_output]: [FloatTensor<B>; 2]) -> Tensor<B, 4> {
    (to_f32(tensor::<B>(grad_output)) * to_f32(tensor::<B>(output))).sum_dim(3)
}

/// [`AttentionOps::lean_attention_block_softmax_grad`] composed of Burn ops, in f32.
pub(crate) fn composed_softmax_grad<B: Backend>(
    scores: FloatTensor<B>,
    lse: FloatTensor<B>,
    outputs: [FloatTensor<B>; 2],
    grad_probabilities: FloatTensor<B>,
    diagonal: Option<usize>,
    scale: f32,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let dtype = scores.dtype();
    let delta = row_deltas::<B>(outputs);
    let probabilities = (scaled_scores::<B>(scores, diagonal, scale) - to_f32(tensor(lse))).exp();
    let grad_scores = probabilities.clone().mul_scalar(scale) * (to_f32(tensor(grad_probabilities)) - delta);
    (primitive(to_dtype(probabilities, dtype)), primitive(to_dtype(grad_scores, dtype)))
}

/// One block's probabilities and log-sum-exp from its unscaled scores, by `B`'s op.
fn block_softmax<B: AttentionOps>(
    scores: Tensor<B, 4>,
    diagonal: Option<usize>,
    scale: f32,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let (probabilities, lse) = B::lean_attention_block_softmax(primitive(scores), diagonal, scale);
    (tensor(probabilities), tensor(lse))
}

/// One block's probabilities and unscaled score gradients in the backward pass, by `B`'s
/// op, from its rows of the output and of the output's gradient (`Δ` is the op's).
fn block_softmax_grad<B: AttentionOps>(
    scores: Tensor<B, 4>,
    lse: Tensor<B, 4>,
    [output, grad_output]: [Tensor<B, 4>; 2],
    grad_probabilities: Tensor<B, 4>,
    (diagonal, scale): (Option<usize>, f32),
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let (probabilities, grad_scores) = B::lean_attention_block_softmax_grad(
        primitive(scores),
        primitive(lse),
        [primitive(output), primitive(grad_output)],
        primitive(grad_probabilities),
        diagonal,
        scale,
    );
    (tensor(probabilities), tensor(grad_scores))
}

/// The softmax's scale, 1/√head_dim (GPT-2's 64: 0.125, a power of two, so scaling the
/// scores in the softmax op is exactly scaling the query before the product).
fn scale<B: Backend>(query: &Tensor<B, 4>) -> f32 {
    (1.0 / (query.dims()[3] as f64).sqrt()) as f32
}

/// `tensor` in `dtype` (itself where it is).
fn to_dtype<B: Backend>(tensor: Tensor<B, 4>, dtype: DType) -> Tensor<B, 4> {
    if tensor.dtype() == dtype {
        tensor
    } else {
        tensor.cast(FloatDType::from(dtype))
    }
}

/// `tensor` in f32, in which the softmax, its log-sum-exp and the gradients' sums are
/// computed whatever the inputs' precision (half-precision inputs' products run in their
/// own type, on f32 accumulators).
fn to_f32<B: Backend>(tensor: Tensor<B, 4>) -> Tensor<B, 4> {
    to_dtype(tensor, DType::F32)
}

/// The rows `0 .. block keys` of a `[b, h, keys, d]` tensor (itself when the block sees
/// them all).
fn seen_keys<B: Backend>(tensor: &Tensor<B, 4>, block: Block) -> Tensor<B, 4> {
    let [batch, heads, keys, dim] = tensor.dims();
    if block.keys == keys {
        return tensor.clone();
    }
    tensor.clone().slice([0..batch, 0..heads, 0..block.keys, 0..dim])
}

/// The block's query rows of a `[b, h, queries, n]` tensor (the tensor itself where the
/// block holds them all: no slice operation).
fn block_rows<B: Backend>(tensor: &Tensor<B, 4>, block: Block) -> Tensor<B, 4> {
    let [batch, heads, queries, n] = tensor.dims();
    if block.rows() == (0..queries) {
        return tensor.clone();
    }
    tensor.clone().slice([0..batch, 0..heads, block.rows(), 0..n])
}

/// `sum` plus `part` added to its first `part.dims()[2]` rows along dim 2; `part` itself
/// where there is no sum yet (it then covers all the keys: see [`backward`]).
fn add_to_first_keys<B: Backend>(sum: Option<Tensor<B, 4>>, part: Tensor<B, 4>) -> Tensor<B, 4> {
    let Some(sum) = sum else { return part };
    let [batch, heads, keys, dim] = part.dims();
    if keys == sum.dims()[2] {
        return sum + part;
    }
    let ranges = [0..batch, 0..heads, 0..keys, 0..dim];
    let head = sum.clone().slice(ranges.clone()) + part;
    sum.slice_assign(ranges, head)
}

/// The blocks' rows joined along dim 2 (the one block itself: no copy).
fn concat<B: Backend>(mut parts: Vec<Tensor<B, 4>>) -> Tensor<B, 4> {
    match parts.len() {
        1 => parts.pop().expect("one part"),
        _ => Tensor::cat(parts, 2),
    }
}

/// The attention output `[b, h, queries, head_dim]` (the inputs' type) and each query
/// row's log-sum-exp of its scores `[b, h, queries, 1]` (f32), one of `blocks` (covering
/// the queries in order) at a time.
pub(crate) fn forward<B: AttentionOps>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    causal: bool,
    blocks: &[Block],
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let [_, _, queries, _] = query.dims();
    let keys = key.dims()[2];
    let scale = scale(&query);
    let (mut outputs, mut lse) = (Vec::new(), Vec::new());
    for &block in blocks {
        let mask = diagonal(block, queries, keys, causal);
        let (probabilities, block_lse) = block_softmax(scores(&query, &key, block), mask, scale);
        outputs.push(gemm(probabilities, seen_keys(&value, block)));
        lse.push(block_lse);
    }
    (concat(outputs), concat(lse))
}

/// The gradients of query, key and value given the output's gradient, recomputing each
/// block's scores from `lse` (FlashAttention-2's backward).
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<B: AttentionOps>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    output: Tensor<B, 4>,
    lse: Tensor<B, 4>,
    grad: Tensor<B, 4>,
    causal: bool,
    blocks: &[Block],
) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
    let (dtype, scale) = (query.dtype(), scale(&query));
    let [_, _, queries, _] = query.dims();
    let keys = key.dims()[2];
    let grad = to_dtype(grad, dtype);
    // Summed over the blocks in f32, from the last block: it sees every key (causal blocks
    // see more keys the later they come), so its parts start the sums without a zeroed
    // buffer to add them to.
    let (mut grad_key, mut grad_value) = (None, None);
    let mut grad_query = Vec::new();
    for &block in blocks.iter().rev() {
        let grad_block = block_rows(&grad, block);
        let grad_probabilities = gemm_transposed(grad_block.clone(), seen_keys(&value, block), [false, true]);
        // Δ = rowsum(dO ∘ O), the softmax's backward term per query row, from the block's
        // rows inside the op.
        let (probabilities, grad_scores) = block_softmax_grad(
            scores(&query, &key, block),
            block_rows(&lse, block),
            [block_rows(&output, block), grad_block.clone()],
            grad_probabilities,
            (diagonal(block, queries, keys, causal), scale),
        );
        let grad_value_part = gemm_transposed(probabilities, grad_block, [true, false]);
        grad_value = Some(add_to_first_keys(grad_value, to_f32(grad_value_part)));
        // The op's gradient is the unscaled scores' s = q·kᵀ: dq = dS·k, dk = dSᵀ·q.
        grad_query.push(gemm(grad_scores.clone(), seen_keys(&key, block)));
        let grad_key_part = gemm_transposed(grad_scores, block_rows(&query, block), [true, false]);
        grad_key = Some(add_to_first_keys(grad_key, to_f32(grad_key_part)));
    }
    grad_query.reverse();
    let grad_query = concat(grad_query);
    let sum = |grad: Option<Tensor<B, 4>>| to_dtype(grad.expect("at least one block"), dtype);
    (grad_query, sum(grad_key), sum(grad_value))
}

fn tensor<B: Backend>(primitive: FloatTensor<B>) -> Tensor<B, 4> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

fn primitive<B: Backend>(tensor: Tensor<B, 4>) -> FloatTensor<B> {
    tensor.into_primitive().tensor()
}

/// Bytes per score of the blocks' buffers: f32 (the softmax's type) or wider inputs'.
fn score_bytes<B: Backend>(query: &FloatTensor<B>) -> usize {
    query.dtype().size().max(4)
}

/// The query blocks of an attention over `dims` queries and `keys` keys in the workspace.
fn workspace_blocks(dims: [usize; 4], keys: usize, causal: bool, elem_bytes: usize) -> Vec<Block> {
    blocks(dims[2], keys, causal, block_scores(dims, elem_bytes), KEY_GRANULE)
}

/// [`forward`] in blocks that fit the [`attention_workspace`]: the output and the
/// log-sum-exp `[batch, heads, queries, 1]` (`AttentionOps::lean_attention_forward`'s default).
pub(crate) fn forward_within_workspace<B: AttentionOps>(
    query: FloatTensor<B>,
    key: FloatTensor<B>,
    value: FloatTensor<B>,
    causal: bool,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let blocks =
        workspace_blocks(query.shape().dims::<4>(), key.shape().dims::<4>()[2], causal, score_bytes::<B>(&query));
    let (output, lse) = forward(tensor::<B>(query), tensor(key), tensor(value), causal, &blocks);
    (primitive(output), primitive(lse))
}

/// [`backward`] in the blocks [`forward_within_workspace`] used.
pub(crate) fn backward_within_workspace<B: AttentionOps>(
    query: FloatTensor<B>,
    key: FloatTensor<B>,
    value: FloatTensor<B>,
    output: FloatTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
    causal: bool,
) -> [FloatTensor<B>; 3] {
    let blocks =
        workspace_blocks(query.shape().dims::<4>(), key.shape().dims::<4>()[2], causal, score_bytes::<B>(&query));
    let (dq, dk, dv) = backward(
        tensor::<B>(query),
        tensor(key),
        tensor(value),
        tensor(output),
        tensor(lse),
        tensor(grad),
        causal,
        &blocks,
    );
    [primitive(dq), primitive(dk), primitive(dv)]
}
