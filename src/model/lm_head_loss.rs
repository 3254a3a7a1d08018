//! Cross-entropy through a language-model head without the full logits tensor.
//!
//! For GPT-2 the logits `tokens × vocab × 4 B` dominate memory: 8 × 1024 tokens against
//! 50,257 ids is 1.6 GB per copy, and an autodiff cross-entropy keeps several copies until
//! the backward pass. The functions here walk the tokens `chunk` at a time:
//!
//! - [`chunked_lm_head_loss`] (any backend) frees each chunk's logits before the next,
//!   which is all a forward-only pass (predict and evaluation steps) needs;
//! - [`fused_lm_head_loss`] (autodiff backends) also computes the gradients with respect to
//!   the hidden states and the head's weight chunk by chunk, during the forward pass, and
//!   returns a loss whose backward pass only hands those gradients on. What the graph keeps
//!   is `tokens × d + vocab × d` floats, not `tokens × vocab`.
//!
//! For a chunk of logits `z = h·Wᵀ` with targets `t`, the mean cross-entropy over `n`
//! tokens has `∂L/∂z = (softmax(z) − onehot(t)) / n`, so `∂L/∂h = (∂L/∂z)·W` and
//! `∂L/∂W = (∂L/∂z)ᵀ·h`. The returned loss is `Σ h⊙Gₕ + Σ W⊙G_W + c`, with `Gₕ`, `G_W`
//! and `c` constants (no graph): its gradients are exactly `Gₕ` and `G_W`, and `c` makes
//! its value the cross-entropy.

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{FloatDType, IndexingUpdateOp};

use super::loss_precision::logits_in_f32;

/// Mean cross-entropy of `hidden · weightᵀ` (`[tokens, d] · [d, vocab]`) against `targets`
/// (`[tokens]`), with at most `chunk` rows of logits alive at once. Differentiable on any
/// backend, but under autodiff every chunk's softmax is kept for the backward pass: use
/// [`fused_lm_head_loss`] there.
///
/// # Panics
/// If `chunk` is 0.
pub fn chunked_lm_head_loss<B: Backend>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    let tokens = hidden.dims()[0];
    chunked_lm_head_token_losses(hidden, weight, targets, chunk).sum().div_scalar(tokens as f64)
}

/// The same loss as [`chunked_lm_head_loss`] with gradients computed chunk by chunk in the
/// forward pass; see the [module docs](self). `hidden` and `weight` must be tracked tensors
/// for their gradients to flow.
///
/// # Panics
/// If `chunk` is 0.
pub fn fused_lm_head_loss<B: AutodiffBackend>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    assert!(chunk > 0, "loss chunk must be at least 1 token");
    let tokens = hidden.dims()[0];
    let (h, w, targets) = (hidden.clone().inner(), weight.clone().inner(), targets.inner());
    let w_t = w.clone().transpose();
    let scale = 1.0 / tokens as f64;
    // The loss is computed in f32; the gradients go back in the model's precision.
    let compute = FloatDType::from(h.dtype());

    let mut loss = Tensor::<B::InnerBackend, 1>::zeros([1], &h.device());
    let mut grad_weight = w.zeros_like();
    let mut grad_hidden = Vec::new();
    for (start, len) in chunks(tokens, chunk) {
        let h_chunk = h.clone().narrow(0, start, len);
        let t_chunk = targets.clone().narrow(0, start, len).reshape([len, 1]);
        let logits = logits_in_f32(h_chunk.clone().matmul(w_t.clone()));
        let softmax = ChunkSoftmax::new(logits, t_chunk.clone());
        loss = loss + softmax.nll;
        // (softmax − onehot) / n, built in place of the chunk's exponentials.
        let row_scale = softmax.row_sums.recip().mul_scalar(scale);
        let minus_scale = Tensor::full([len, 1], -scale, &h.device());
        let grad_logits =
            (softmax.exp * row_scale).scatter(1, t_chunk, minus_scale, IndexingUpdateOp::Add).cast(compute);
        grad_hidden.push(grad_logits.clone().matmul(w.clone()));
        grad_weight = grad_weight + grad_logits.transpose().matmul(h_chunk);
    }
    let loss = loss.mul_scalar(scale);
    let grad_hidden = Tensor::cat(grad_hidden, 0);

    // In f32 like the loss; in a half-precision model each sum is cast once.
    let surrogate = logits_in_f32((hidden * Tensor::from_inner(grad_hidden)).sum())
        + logits_in_f32((weight * Tensor::from_inner(grad_weight)).sum());
    let offset = loss - surrogate.clone().inner();
    surrogate + Tensor::from_inner(offset)
}

/// Each token's cross-entropy (`[tokens]`) of `hidden · weightᵀ` against `targets`, with at
/// most `chunk` rows of logits alive at once: what selection scores examples by, forward
/// only, and (their mean) the loss of [`chunked_lm_head_loss`].
///
/// # Panics
/// If `chunk` is 0.
pub fn chunked_lm_head_token_losses<B: Backend>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    assert!(chunk > 0, "loss chunk must be at least 1 token");
    let tokens = hidden.dims()[0];
    let weight_t = weight.transpose();
    let losses = chunks(tokens, chunk)
        .map(|(start, len)| {
            let logits = hidden.clone().narrow(0, start, len).matmul(weight_t.clone());
            let targets = targets.clone().narrow(0, start, len).reshape([len, 1]);
            ChunkSoftmax::new(logits_in_f32(logits), targets).row_nll
        })
        .collect();
    Tensor::cat(losses, 0).reshape([tokens])
}

/// `(start, len)` of consecutive chunks covering `0..tokens`.
fn chunks(tokens: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..tokens).step_by(chunk).map(move |start| (start, chunk.min(tokens - start)))
}

/// The softmax of one chunk of logits, taken apart: one exponential per logit serves both
/// the loss and its gradient (`softmax = exp / row_sums`), where a log-softmax followed by
/// `exp` would take two, and each is a pass over `n × vocab` floats.
struct ChunkSoftmax<B: Backend> {
    /// Each row's negative log-likelihood of its target, `log(row_sum) − (z_t − max)`, `[n, 1]`.
    row_nll: Tensor<B, 2>,
    /// Their sum, `[1]`.
    nll: Tensor<B, 1>,
    /// `exp(z − rowmax(z))`, `[n, vocab]`.
    exp: Tensor<B, 2>,
    /// Its row sums, `[n, 1]`.
    row_sums: Tensor<B, 2>,
}

impl<B: Backend> ChunkSoftmax<B> {
    /// `logits` `[n, vocab]`, `targets` `[n, 1]`.
    fn new(logits: Tensor<B, 2>, targets: Tensor<B, 2, Int>) -> Self {
        let shifted = logits.clone() - logits.max_dim(1);
        let picked = shifted.clone().gather(1, targets);
        let exp = shifted.exp();
        let row_sums = exp.clone().sum_dim(1);
        let row_nll = row_sums.clone().log() - picked;
        let nll = row_nll.clone().sum();
        Self { row_nll, nll, exp, row_sums }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::tensor::{Distribution, Tolerance};

    type Cpu = Flex;
    type Ad = Autodiff<Cpu>;

    fn case(tokens: usize, d: usize, vocab: usize, seed: u64) -> (Tensor<Cpu, 2>, Tensor<Cpu, 2>, Tensor<Cpu, 1, Int>) {
        let device = Default::default();
        Cpu::seed(&device, seed);
        let hidden = Tensor::random([tokens, d], Distribution::Normal(0.0, 1.0), &device);
        let weight = Tensor::random([vocab, d], Distribution::Normal(0.0, 0.5), &device);
        let ids: Vec<i64> = (0..tokens).map(|i| ((i * 31 + seed as usize * 7) % vocab) as i64).collect();
        (hidden, weight, Tensor::from_data(TensorData::new(ids, [tokens]), &device))
    }

    fn reference<B: Backend>(hidden: Tensor<B, 2>, weight: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = hidden.matmul(weight.transpose());
        CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, targets)
    }

    #[test]
    fn chunked_loss_matches_burns_cross_entropy() {
        for (tokens, d, vocab, chunk) in [(10, 4, 7, 3), (17, 8, 33, 5), (6, 3, 5, 6), (9, 5, 11, 100)] {
            let (h, w, t) = case(tokens, d, vocab, tokens as u64);
            let expected = reference(h.clone(), w.clone(), t.clone()).into_scalar();
            let got = chunked_lm_head_loss(h, w, t, chunk).into_scalar();
            assert!((expected - got).abs() < 1e-5, "{tokens}×{vocab}, chunk {chunk}: {got} vs {expected}");
        }
    }

    #[test]
    fn token_losses_are_burns_per_token_cross_entropy_and_average_to_the_loss() {
        for (tokens, d, vocab, chunk) in [(10, 4, 7, 3), (17, 8, 33, 5), (9, 5, 11, 100)] {
            let (h, w, t) = case(tokens, d, vocab, 5 + tokens as u64);
            let got = chunked_lm_head_token_losses(h.clone(), w.clone(), t.clone(), chunk)
                .into_data()
                .to_vec::<f32>()
                .unwrap();
            assert_eq!(got.len(), tokens);
            for (i, &loss) in got.iter().enumerate() {
                let expected = reference(h.clone().narrow(0, i, 1), w.clone(), t.clone().narrow(0, i, 1)).into_scalar();
                assert!((expected - loss).abs() < 1e-5, "token {i}: {loss} vs {expected}");
            }
            let mean = got.iter().sum::<f32>() / tokens as f32;
            let loss = chunked_lm_head_loss(h, w, t, chunk).into_scalar();
            assert!((mean - loss).abs() < 1e-5, "{mean} vs {loss}");
        }
    }

    #[test]
    fn large_logits_neither_overflow_nor_lose_the_loss() {
        // Logits in the hundreds: exp without the row maximum taken out would overflow f32.
        let (h, w, t) = case(12, 6, 17, 11);
        let w = w.mul_scalar(100.0);
        let expected = reference(h.clone(), w.clone(), t.clone()).into_scalar();
        assert!(expected.is_finite() && expected > 10.0, "a case with large logits: {expected}");
        let got = chunked_lm_head_loss(h.clone(), w.clone(), t.clone(), 5).into_scalar();
        assert!((expected - got).abs() <= 1e-5 * expected.abs(), "{got} vs {expected}");
        let fused = fused_lm_head_loss(
            Tensor::<Ad, 2>::from_inner(h).require_grad(),
            Tensor::<Ad, 2>::from_inner(w).require_grad(),
            Tensor::<Ad, 1, Int>::from_inner(t),
            5,
        )
        .into_scalar();
        assert!((expected - fused).abs() <= 1e-5 * expected.abs(), "{fused} vs {expected}");
    }

    #[test]
    fn fused_loss_has_the_value_and_gradients_of_the_plain_loss() {
        for (tokens, d, vocab, chunk) in [(10, 4, 7, 3), (24, 8, 41, 7), (5, 6, 9, 1), (12, 4, 13, 12)] {
            let (h, w, t) = case(tokens, d, vocab, 3 + tokens as u64);
            let run = |fused: bool| {
                let hidden = Tensor::<Ad, 2>::from_inner(h.clone()).require_grad();
                let weight = Tensor::<Ad, 2>::from_inner(w.clone()).require_grad();
                let targets = Tensor::<Ad, 1, Int>::from_inner(t.clone());
                // A downstream scale checks that the upstream gradient is applied.
                let loss = if fused {
                    fused_lm_head_loss(hidden.clone(), weight.clone(), targets, chunk)
                } else {
                    reference(hidden.clone(), weight.clone(), targets)
                };
                let value = loss.clone().into_scalar();
                let grads = loss.mul_scalar(2.5).backward();
                (value, hidden.grad(&grads).unwrap(), weight.grad(&grads).unwrap())
            };
            let (value, grad_h, grad_w) = run(false);
            let (fused_value, fused_h, fused_w) = run(true);
            assert!((value - fused_value).abs() < 1e-5, "{value} vs {fused_value}");
            let tolerance = Tolerance::absolute(1e-5);
            grad_h.into_data().assert_approx_eq::<f32>(&fused_h.into_data(), tolerance);
            grad_w.into_data().assert_approx_eq::<f32>(&fused_w.into_data(), tolerance);
        }
    }
}
