//! Losses are computed in f32 whatever precision the model runs in, as PyTorch's autocast
//! does for softmax and cross-entropy: a log-sum-exp over a vocabulary in half precision
//! loses the small probabilities the gradient is made of.

use burn::prelude::*;
use burn::tensor::{DType, FloatDType};

/// `logits` in f32: the one cast at the loss boundary (none when they already are).
pub fn logits_in_f32<B: Backend, const D: usize>(logits: Tensor<B, D>) -> Tensor<B, D> {
    if logits.dtype() == DType::F32 {
        logits
    } else {
        logits.cast(FloatDType::F32)
    }
}
