//! The blocked forward (with each row's log-sum-exp) and the recomputing backward, on
//! plain Burn tensors of any backend.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

use super::attention_workspace;

/// Query rows per block so that about four `[batch, heads, rows, keys]` buffers of
/// `elem_bytes` fit in the [`attention_workspace`] (at least one row).
pub(crate) fn block_rows(dims: [usize; 4], keys: usize, elem_bytes: usize) -> usize {
    let [batch, heads, queries, _] = dims;
    let per_row = 4 * batch * heads * keys * elem_bytes;
    (attention_workspace() / per_row.max(1)).clamp(1, queries.max(1))
}

/// `[batch, heads, rows, keys]` true where query row `start + i` may not see key `j`:
/// `j > start + i + (keys − queries)`, Burn's bottom-right alignment.
fn causal_mask<B: Backend>(
    dims: [usize; 4],
    start: usize,
    rows: usize,
    keys: usize,
    device: &B::Device,
) -> Tensor<B, 4, Bool> {
    let [batch, heads, queries, _] = dims;
    let offset = (keys - queries) as i64;
    let row = Tensor::<B, 1, Int>::arange(start as i64..(start + rows) as i64, device).add_scalar(offset);
    let col = Tensor::<B, 1, Int>::arange(0..keys as i64, device);
    let mask = col.reshape([1, keys]).greater(row.reshape([rows, 1]));
    mask.reshape([1, 1, rows, keys]).expand([batch, heads, rows, keys])
}

/// The scaled (and masked) scores of query rows `start .. start + rows`: `[b, h, rows, keys]`.
fn scores<B: Backend>(
    query: &Tensor<B, 4>,
    key_t: &Tensor<B, 4>,
    start: usize,
    rows: usize,
    causal: bool,
    scale: f64,
) -> Tensor<B, 4> {
    let [batch, heads, _, head_dim] = query.dims();
    let keys = key_t.dims()[3];
    let block = query.clone().slice([0..batch, 0..heads, start..start + rows, 0..head_dim]);
    let scores = block.matmul(key_t.clone()).mul_scalar(scale);
    if causal {
        scores.mask_fill(causal_mask::<B>(query.dims(), start, rows, keys, &query.device()), f32::NEG_INFINITY)
    } else {
        scores
    }
}

/// The attention output `[b, h, queries, head_dim]` and each query row's log-sum-exp of
/// its scores `[b, h, queries, 1]`, `block` query rows at a time.
pub(crate) fn forward<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    causal: bool,
    block: usize,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let queries = query.dims()[2];
    let scale = 1.0 / (query.dims()[3] as f64).sqrt();
    let key_t = key.swap_dims(2, 3);
    let (mut outputs, mut lse) = (Vec::new(), Vec::new());
    for start in (0..queries).step_by(block.max(1)) {
        let rows = block.min(queries - start);
        let scores = scores(&query, &key_t, start, rows, causal, scale);
        let max = scores.clone().max_dim(3);
        let weights = (scores - max.clone()).exp();
        let sum = weights.clone().sum_dim(3);
        outputs.push(weights.matmul(value.clone()).div(sum.clone()));
        lse.push(max + sum.log());
    }
    (Tensor::cat(outputs, 2), Tensor::cat(lse, 2))
}

/// The gradients of query, key and value given the output's gradient, recomputing each
/// block's scores from `lse` (FlashAttention-2's backward).
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<B: Backend>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    output: Tensor<B, 4>,
    lse: Tensor<B, 4>,
    grad: Tensor<B, 4>,
    causal: bool,
    block: usize,
) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
    let [batch, heads, queries, head_dim] = query.dims();
    let scale = 1.0 / (head_dim as f64).sqrt();
    // D = rowsum(dO ∘ O): the softmax's backward term, per query row.
    let delta = (grad.clone() * output).sum_dim(3);
    let key_t = key.clone().swap_dims(2, 3);
    let value_t = value.clone().swap_dims(2, 3);
    let mut grad_key = key.zeros_like();
    let mut grad_value = value.zeros_like();
    let mut grad_query = Vec::new();
    for start in (0..queries).step_by(block.max(1)) {
        let rows = block.min(queries - start);
        let range = [0..batch, 0..heads, start..start + rows];
        let probabilities =
            (scores(&query, &key_t, start, rows, causal, scale) - lse.clone().slice(range.clone())).exp();
        let grad_block = grad.clone().slice([0..batch, 0..heads, start..start + rows, 0..head_dim]);
        grad_value = grad_value + probabilities.clone().swap_dims(2, 3).matmul(grad_block.clone());
        let grad_probabilities = grad_block.matmul(value_t.clone());
        let grad_scores = probabilities * (grad_probabilities - delta.clone().slice(range));
        grad_query.push(grad_scores.clone().matmul(key.clone()).mul_scalar(scale));
        let query_block = query.clone().slice([0..batch, 0..heads, start..start + rows, 0..head_dim]);
        grad_key = grad_key + grad_scores.swap_dims(2, 3).matmul(query_block).mul_scalar(scale);
    }
    (Tensor::cat(grad_query, 2), grad_key, grad_value)
}
