//! Cross-entropy through a language-model head with its gradients, chunk by chunk, as one
//! backend op.
//!
//! For logits `z = h·Wᵀ` (`h` `[tokens, d]`, `W` `[vocab, d]`) against targets `t`, the
//! mean cross-entropy over `n` tokens has `∂L/∂z = (softmax(z) − onehot(t)) / n`, so
//! `∂L/∂h = (∂L/∂z)·W` and `∂L/∂W = (∂L/∂z)ᵀ·h`. [`LmHeadLossOps::lm_head_loss_grads`]
//! computes the loss and both gradients walking the tokens `chunk` at a time, so that at
//! most one chunk of logits is alive. On `Autodiff`, [`LmHeadLossOps::lm_head_loss`] is one
//! graph node whose backward hands those gradients on (`autodiff.rs`): what
//! `model::fused_lm_head_loss` returns.
//!
//! Between a chunk's GEMMs, its rows of logits go through
//! [`LmHeadLossOps::lm_head_loss_rows`]: by default Burn tensor ops (about eight passes over
//! each `[chunk, vocab]` block of logits, each a new tensor); on the CubeCL backends (fused
//! or not) one kernel (`leanburn-kernels`' `lm_head_loss`: one read for each row's maximum
//! and sum, one more for the gradient it writes). On the CPU backend (`Flex`, `flex.rs`) the logits
//! go into one buffer, their softmax gradient is written over them row by row in one pass,
//! and the two gradient GEMMs read it there, the weight's accumulating in place.

mod autodiff;
mod cube;
mod flex;
mod fused;
#[cfg(test)]
mod tests;

use burn::backend::NdArray;
use burn::prelude::*;
use burn::tensor::{DType, FloatDType, IndexingUpdateOp, TensorPrimitive};
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::TensorMetadata;

use super::bias_grad::BiasGradOps;
use super::conv::ChunkedConv;
use super::gemm::{gemm, gemm_accumulate, GemmOps};
use super::Lean;

/// A backend with the LM head's loss and gradients as one op; see the module docs (`src/backend/lm_head_loss/mod.rs`).
pub trait LmHeadLossOps: GemmOps {
    /// The mean cross-entropy of `hidden · weightᵀ` (`hidden` `[tokens, d]`, `weight`
    /// `[vocab, d]`) against `targets` (`[tokens]`, ids below `vocab`), with at most `chunk`
    /// tokens of logits alive at once: `[loss, grad_hidden, grad_weight]`, the loss `[1]` in
    /// f32, the gradients of `hidden`'s and `weight`'s shapes in `hidden`'s type. Values,
    /// not a graph: under `Autodiff` they are constants.
    ///
    /// # Panics
    /// If `chunk` is 0.
    fn lm_head_loss_grads(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> [FloatTensor<Self>; 3] {
        composed::<Self>(hidden, weight, targets, chunk)
    }

    /// The mean cross-entropy of `hidden · weightᵀ` against `targets` (`[1]`, f32), `chunk`
    /// tokens of logits at a time. On `Autodiff` one graph node whose backward hands on the
    /// gradients [`Self::lm_head_loss_grads`] computed with the loss (times the loss's own
    /// gradient); what it keeps for the backward is those two gradients, of `hidden`'s and
    /// `weight`'s sizes. Elsewhere the mean of [`Self::lm_head_token_losses`].
    ///
    /// # Panics
    /// If `chunk` is 0.
    fn lm_head_loss(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> FloatTensor<Self> {
        let losses = Self::lm_head_token_losses(hidden, weight, targets, chunk);
        let tokens = losses.shape().num_elements();
        let total = Tensor::<Self, 1>::from_primitive(TensorPrimitive::Float(Self::lm_head_loss_total(losses)));
        total.div_scalar(tokens as f64).into_primitive().tensor()
    }

    /// The sum of token losses (`[n]`, f32) as `[1]`: a chunk's share of the loss, or a
    /// forward-only pass's total. By default Burn's `sum`; on the CubeCL backends (fused or
    /// not) leanburn's column sums of the losses as one column, which CubeCL does not
    /// autotune (its reductions are tuned for each length before their first run: compile
    /// and timing work before a fresh process's first step).
    fn lm_head_loss_total(losses: FloatTensor<Self>) -> FloatTensor<Self> {
        Tensor::<Self, 1>::from_primitive(TensorPrimitive::Float(losses)).sum().into_primitive().tensor()
    }

    /// Each token's cross-entropy of `hidden · weightᵀ` against `targets` (`[tokens]`, in
    /// f32), `chunk` tokens of logits at a time: what forward-only passes (evaluation, the
    /// predict phase, selection's scores) need. Differentiable where the backend is: on
    /// `Autodiff` it is the composed default.
    ///
    /// # Panics
    /// If `chunk` is 0.
    fn lm_head_token_losses(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> FloatTensor<Self> {
        composed_token_losses::<Self>(hidden, weight, targets, chunk)
    }

    /// One chunk's rows: each row of `logits` (`[n, vocab]`) against its target (`targets`
    /// `[n]`): its cross-entropy (`[n]`, f32) and, with `grad_scale`, its softmax gradient
    /// `(softmax − onehot) · grad_scale` (`[n, vocab]`, the logits' type). What the two ops
    /// above do between their GEMMs; by default composed of Burn ops (the logits in f32).
    fn lm_head_loss_rows(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        grad_scale: Option<f32>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        composed_rows::<Self>(logits, targets, grad_scale)
    }
}

impl LmHeadLossOps for NdArray {}

/// `B`'s op.
impl<B: ChunkedConv + LmHeadLossOps> LmHeadLossOps for Lean<B> {
    fn lm_head_loss_grads(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> [FloatTensor<Self>; 3] {
        B::lm_head_loss_grads(hidden, weight, targets, chunk)
    }

    fn lm_head_token_losses(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> FloatTensor<Self> {
        B::lm_head_token_losses(hidden, weight, targets, chunk)
    }

    fn lm_head_loss_rows(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        grad_scale: Option<f32>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        B::lm_head_loss_rows(logits, targets, grad_scale)
    }

    fn lm_head_loss_total(losses: FloatTensor<Self>) -> FloatTensor<Self> {
        B::lm_head_loss_total(losses)
    }
}

/// [`LmHeadLossOps::lm_head_loss_grads`] chunk by chunk: the products on `B`'s GEMM, each
/// chunk's rows through [`LmHeadLossOps::lm_head_loss_rows`].
pub(crate) fn composed<B: LmHeadLossOps>(
    hidden: FloatTensor<B>,
    weight: FloatTensor<B>,
    targets: IntTensor<B>,
    chunk: usize,
) -> [FloatTensor<B>; 3] {
    assert!(chunk > 0, "loss chunk must be at least 1 token");
    let h = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(hidden));
    let w = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(weight));
    let targets = Tensor::<B, 1, Int>::from_primitive(targets);
    let tokens = h.dims()[0];
    let w_t = w.clone().transpose();
    let scale = 1.0 / tokens as f64;

    let mut loss = Tensor::<B, 1>::zeros([1], &h.device());
    let mut grad_weight: Option<Tensor<B, 2>> = None;
    let mut grad_hidden = Vec::new();
    for (start, len) in chunks(tokens, chunk) {
        let h_chunk = h.clone().narrow(0, start, len);
        let logits = gemm(h_chunk.clone(), w_t.clone());
        let (row_losses, grad_logits) = loss_rows(logits, targets.clone().narrow(0, start, len), Some(scale as f32));
        loss = loss + total::<B>(row_losses);
        let grad_logits = grad_logits.expect("the gradient was asked for");
        grad_hidden.push(gemm(grad_logits.clone(), w.clone()));
        // Summed over the chunks by the GEMM itself where it can (cuBLASLt's `β = 1`).
        grad_weight = Some(match grad_weight {
            None => gemm(grad_logits.transpose(), h_chunk),
            Some(sum) => gemm_accumulate(sum, grad_logits.transpose(), h_chunk),
        });
    }
    let grad_weight = grad_weight.unwrap_or_else(|| w.zeros_like());
    let loss = loss.mul_scalar(scale);
    let gradients = [Tensor::cat(grad_hidden, 0), grad_weight].map(|tensor| tensor.into_primitive().tensor());
    let [grad_hidden, grad_weight] = gradients;
    [loss.into_primitive().tensor(), grad_hidden, grad_weight]
}

/// [`LmHeadLossOps::lm_head_token_losses`] chunk by chunk: the products on `B`'s GEMM, each
/// chunk's rows through [`LmHeadLossOps::lm_head_loss_rows`].
pub(crate) fn composed_token_losses<B: LmHeadLossOps>(
    hidden: FloatTensor<B>,
    weight: FloatTensor<B>,
    targets: IntTensor<B>,
    chunk: usize,
) -> FloatTensor<B> {
    assert!(chunk > 0, "loss chunk must be at least 1 token");
    let hidden = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(hidden));
    let weight_t = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(weight)).transpose();
    let targets = Tensor::<B, 1, Int>::from_primitive(targets);
    let tokens = hidden.dims()[0];
    let losses = chunks(tokens, chunk)
        .map(|(start, len)| {
            let logits = gemm(hidden.clone().narrow(0, start, len), weight_t.clone());
            loss_rows(logits, targets.clone().narrow(0, start, len), None).0
        })
        .collect();
    Tensor::cat(losses, 0).into_primitive().tensor()
}

/// [`LmHeadLossOps::lm_head_loss_rows`] on `Tensor`s.
fn loss_rows<B: LmHeadLossOps>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    grad_scale: Option<f32>,
) -> (Tensor<B, 1>, Option<Tensor<B, 2>>) {
    let (losses, grad) = B::lm_head_loss_rows(logits.into_primitive().tensor(), targets.into_primitive(), grad_scale);
    let float = |tensor| TensorPrimitive::Float(tensor);
    (Tensor::from_primitive(float(losses)), grad.map(|grad| Tensor::from_primitive(float(grad))))
}

/// [`LmHeadLossOps::lm_head_loss_total`] on `Tensor`s.
pub(crate) fn total<B: LmHeadLossOps>(losses: Tensor<B, 1>) -> Tensor<B, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(B::lm_head_loss_total(losses.into_primitive().tensor())))
}

/// The sum of `losses` (`[n]`) as `[1]` by [`BiasGradOps::bias_grad`] of them as one column:
/// the CubeCL backends' [`LmHeadLossOps::lm_head_loss_total`].
pub(crate) fn column_total<B: BiasGradOps>(losses: FloatTensor<B>) -> FloatTensor<B> {
    let rows = losses.shape().num_elements();
    B::bias_grad(B::float_reshape(losses, Shape::new([rows, 1])))
}

/// [`LmHeadLossOps::lm_head_loss_rows`] composed of Burn ops, the logits in f32.
pub(crate) fn composed_rows<B: Backend>(
    logits: FloatTensor<B>,
    targets: IntTensor<B>,
    grad_scale: Option<f32>,
) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
    let logits = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(logits));
    let [rows, _] = logits.dims();
    let dtype = FloatDType::from(logits.dtype());
    let targets = Tensor::<B, 1, Int>::from_primitive(targets).reshape([rows, 1]);
    let softmax = ChunkSoftmax::new(in_f32(logits), targets.clone());
    let grad = grad_scale.map(|scale| {
        // (softmax − onehot) · scale, built in place of the chunk's exponentials.
        let row_scale = softmax.row_sums.recip().mul_scalar(scale);
        let minus_scale = Tensor::full([rows, 1], -scale, &targets.device());
        let grad = (softmax.exp * row_scale).scatter(1, targets, minus_scale, IndexingUpdateOp::Add);
        grad.cast(dtype).into_primitive().tensor()
    });
    (softmax.row_nll.reshape([rows]).into_primitive().tensor(), grad)
}

/// [`LmHeadLossOps::lm_head_loss`] on `Tensor`s.
pub(crate) fn lm_head_loss<B: LmHeadLossOps>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    let loss = B::lm_head_loss(
        hidden.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        targets.into_primitive(),
        chunk,
    );
    Tensor::from_primitive(TensorPrimitive::Float(loss))
}

/// [`LmHeadLossOps::lm_head_token_losses`] on `Tensor`s.
pub(crate) fn lm_head_token_losses<B: LmHeadLossOps>(
    hidden: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    chunk: usize,
) -> Tensor<B, 1> {
    let losses = B::lm_head_token_losses(
        hidden.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        targets.into_primitive(),
        chunk,
    );
    Tensor::from_primitive(TensorPrimitive::Float(losses))
}

/// `tensor` in f32 (no cast when it already is): the loss's precision.
fn in_f32<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, D> {
    if tensor.dtype() == DType::F32 {
        tensor
    } else {
        tensor.cast(FloatDType::F32)
    }
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
        Self { row_nll, exp, row_sums }
    }
}
