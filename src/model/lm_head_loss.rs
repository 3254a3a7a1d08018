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
//! The losses and gradients are the backend's [`LmHeadLossOps`] (composed of Burn ops, or
//! one pass per row of logits on the CPU); see its docs for the arithmetic. The loss
//! [`fused_lm_head_loss`] returns is one graph node ([`LmHeadLossOps::lm_head_loss`]) whose
//! backward hands on the gradients `Gₕ` and `G_W` computed with it, times the loss's own
//! gradient: no pass over `h` or `W` in the forward, one in the backward.

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use crate::backend::{lm_head_loss, lm_head_loss_total, lm_head_token_losses, LmHeadLossOps};

/// Mean cross-entropy of `hidden · weightᵀ` (`[tokens, d] · [d, vocab]`) against `targets`
/// (`[tokens]`), with at most `chunk` rows of logits alive at once. Differentiable on any
/// backend, but under autodiff every chunk's softmax is kept for the backward pass: use
/// [`fused_lm_head_loss`] there.
///
/// # Panics
/// If `chunk` is 0.
pub fn chunked_lm_head_loss<B: LmHeadLossOps>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    let tokens = hidden.dims()[0];
    lm_head_loss_total(chunked_lm_head_token_losses(hidden, weight, targets, chunk)).div_scalar(tokens as f64)
}

/// The same loss as [`chunked_lm_head_loss`] with gradients computed chunk by chunk in the
/// forward pass; see the module docs (`src/model/lm_head_loss.rs`). `hidden` and `weight` must be tracked tensors
/// for their gradients to flow.
///
/// # Panics
/// If `chunk` is 0.
pub fn fused_lm_head_loss<B: AutodiffBackend + LmHeadLossOps>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    lm_head_loss(hidden, weight, targets, chunk)
}

/// Each token's cross-entropy (`[tokens]`) of `hidden · weightᵀ` against `targets`, with at
/// most `chunk` rows of logits alive at once: what selection scores examples by, forward
/// only, and (their mean) the loss of [`chunked_lm_head_loss`].
///
/// # Panics
/// If `chunk` is 0.
pub fn chunked_lm_head_token_losses<B: LmHeadLossOps>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    lm_head_token_losses(hidden, weight, targets, chunk)
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
    /// A frozen head (the weight untracked): the loss node still gives the hidden states
    /// the plain loss's gradient, and the weight none; frozen hidden states get none either.
    #[test]
    fn a_frozen_weight_still_passes_the_hidden_gradient() {
        let (h, w, t) = case(11, 5, 13, 9);
        let plain = {
            let hidden = Tensor::<Ad, 2>::from_inner(h.clone()).require_grad();
            let grads =
                reference(hidden.clone(), Tensor::from_inner(w.clone()), Tensor::from_inner(t.clone())).backward();
            hidden.grad(&grads).unwrap()
        };
        let hidden = Tensor::<Ad, 2>::from_inner(h.clone()).require_grad();
        let weight = Tensor::<Ad, 2>::from_inner(w.clone());
        let grads = fused_lm_head_loss(hidden.clone(), weight.clone(), Tensor::from_inner(t.clone()), 4).backward();
        assert!(weight.grad(&grads).is_none(), "an untracked weight got a gradient");
        plain.into_data().assert_approx_eq::<f32>(&hidden.grad(&grads).unwrap().into_data(), Tolerance::absolute(1e-5));
        let frozen = Tensor::<Ad, 2>::from_inner(h);
        let grads = fused_lm_head_loss(frozen.clone(), Tensor::from_inner(w).require_grad(), Tensor::from_inner(t), 4)
            .backward();
        assert!(frozen.grad(&grads).is_none(), "untracked hidden states got a gradient");
    }
}
