//! Scaled dot-product attention, forward and backward, over contiguous
//! `[batch, heads, rows, head_dim]` (queries) and `[batch, heads, keys, head_dim]` (keys,
//! values) tensors. Causal attention is aligned at the bottom right: query `i` sees keys
//! `0 ..= i + keys − rows`.

/// Sizes: batch · heads, query rows, key rows, head dimension.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub batch_heads: usize,
    pub rows: usize,
    pub keys: usize,
    pub head_dim: usize,
}

/// The probabilities of one batch-head's query row `i`, over all keys (0 where masked).
fn probabilities(q: &[f32], k: &[f32], dims: Dims, bh: usize, i: usize, causal: bool) -> (Vec<f64>, f64) {
    let Dims { rows, keys, head_dim, .. } = dims;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let seen = if causal { (i + keys - rows + 1).min(keys) } else { keys };
    let scores: Vec<f64> = (0..seen)
        .map(|j| {
            (0..head_dim)
                .map(|d| f64::from(q[(bh * rows + i) * head_dim + d]) * f64::from(k[(bh * keys + j) * head_dim + d]))
                .sum::<f64>()
                * scale
        })
        .collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
    let mut p: Vec<f64> = scores.iter().map(|s| (s - max).exp() / sum).collect();
    p.resize(keys, 0.0);
    (p, max + sum.ln())
}

/// `(output, lse)`: `softmax(Q·Kᵀ/√head_dim)·V` and each row's log-sum-exp of the scaled
/// scores (`[batch · heads, rows]`).
pub fn attention(q: &[f32], k: &[f32], v: &[f32], dims: Dims, causal: bool) -> (Vec<f32>, Vec<f32>) {
    let Dims { batch_heads, rows, keys, head_dim } = dims;
    let mut output = vec![0.0; batch_heads * rows * head_dim];
    let mut lse = vec![0.0; batch_heads * rows];
    for bh in 0..batch_heads {
        for i in 0..rows {
            let (p, row_lse) = probabilities(q, k, dims, bh, i, causal);
            lse[bh * rows + i] = row_lse as f32;
            for d in 0..head_dim {
                let value: f64 = (0..keys).map(|j| p[j] * f64::from(v[(bh * keys + j) * head_dim + d])).sum();
                output[(bh * rows + i) * head_dim + d] = value as f32;
            }
        }
    }
    (output, lse)
}

/// The gradients of `Σ grad ∘ attention(q, k, v)` with respect to `q`, `k` and `v`.
pub struct AttentionGrads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
}

/// Backward of [`attention`] for the output gradient `grad`.
pub fn attention_backward(q: &[f32], k: &[f32], v: &[f32], grad: &[f32], dims: Dims, causal: bool) -> AttentionGrads {
    let Dims { batch_heads, rows, keys, head_dim } = dims;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut dq = vec![0.0f64; q.len()];
    let mut dk = vec![0.0f64; k.len()];
    let mut dv = vec![0.0f64; v.len()];
    for bh in 0..batch_heads {
        for i in 0..rows {
            let (p, _) = probabilities(q, k, dims, bh, i, causal);
            let g = |d: usize| f64::from(grad[(bh * rows + i) * head_dim + d]);
            // dP_ij = g_i · v_j; dS_ij = p_ij (dP_ij − Σ_l p_il dP_il).
            let dp: Vec<f64> = (0..keys)
                .map(|j| (0..head_dim).map(|d| g(d) * f64::from(v[(bh * keys + j) * head_dim + d])).sum())
                .collect();
            let weighted: f64 = (0..keys).map(|j| p[j] * dp[j]).sum();
            for j in 0..keys {
                let ds = p[j] * (dp[j] - weighted) * scale;
                for d in 0..head_dim {
                    let (qi, kj) = ((bh * rows + i) * head_dim + d, (bh * keys + j) * head_dim + d);
                    dq[qi] += ds * f64::from(k[kj]);
                    dk[kj] += ds * f64::from(q[qi]);
                    dv[kj] += p[j] * g(d);
                }
            }
        }
    }
    let narrow = |x: Vec<f64>| x.into_iter().map(|x| x as f32).collect();
    AttentionGrads { dq: narrow(dq), dk: narrow(dk), dv: narrow(dv) }
}

/// One block of scores `[rows, keys]` per batch-head (row-major, `rows · keys` each), row
/// `r` (of all of them) seeing keys `0 ..= r % rows + diagonal`, or all without a diagonal:
/// `(probabilities, lse)`, the masked softmax of each row's scores times `scale` (0 past
/// the diagonal) and its log-sum-exp.
pub fn block_softmax(
    scores: &[f32],
    (rows, keys): (usize, usize),
    diagonal: Option<usize>,
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let scale = f64::from(scale);
    let mut probabilities = Vec::with_capacity(scores.len());
    let mut lse = Vec::with_capacity(scores.len() / keys);
    for (r, row) in scores.chunks(keys).enumerate() {
        let seen = diagonal.map_or(keys, |d| (r % rows + d + 1).min(keys));
        let scaled: Vec<f64> = row[..seen].iter().map(|&s| f64::from(s) * scale).collect();
        let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let row_lse = max + scaled.iter().map(|s| (s - max).exp()).sum::<f64>().ln();
        probabilities.extend((0..keys).map(|j| scaled.get(j).map_or(0.0, |s| (s - row_lse).exp())));
        lse.push(row_lse);
    }
    (probabilities, lse)
}

/// The backward of one block (as [`block_softmax`]'s) from each row's log-sum-exp and
/// `Δ`: `(probabilities, grad_scores)`, `p = exp(scale · s − lse)` and the unscaled
/// scores' gradient `scale · p · (dP − Δ)`.
pub fn block_softmax_grad(
    scores: &[f32],
    grad_probabilities: &[f32],
    [lse, delta]: [&[f32]; 2],
    (rows, keys): (usize, usize),
    diagonal: Option<usize>,
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let scale = f64::from(scale);
    let mut probabilities = Vec::with_capacity(scores.len());
    let mut grad_scores = Vec::with_capacity(scores.len());
    for (index, (&s, &dp)) in scores.iter().zip(grad_probabilities).enumerate() {
        let (r, j) = (index / keys, index % keys);
        let seen = diagonal.map_or(keys, |d| (r % rows + d + 1).min(keys));
        let p = if j < seen { (f64::from(s) * scale - f64::from(lse[r])).exp() } else { 0.0 };
        probabilities.push(p);
        grad_scores.push(scale * p * (f64::from(dp) - f64::from(delta[r])));
    }
    (probabilities, grad_scores)
}
