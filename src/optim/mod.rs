//! Optimizers as GPT-2 is trained elsewhere: Burn's AdamW behind gradient clipping by the
//! global norm (PyTorch's `clip_grad_norm_`), where Burn's own clipping works per tensor.
//! `tests/gpt2_parity.rs` checks ten steps of it against PyTorch's.

mod clip;

pub use clip::{clip_by_global_norm, GlobalNormClipping};

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig};
use burn::tensor::backend::AutodiffBackend;

/// AdamW with Burn's defaults (β = 0.9, 0.999, ε = 1e-5), decoupled `weight_decay` on every
/// parameter, and the gradients clipped to a global norm of `max_norm` first: the optimizer
/// leanburn's GPT-2 example and benches train with (weight decay 0.1, norm 1).
pub fn clipped_adamw<B: AutodiffBackend, M: AutodiffModule<B>>(
    weight_decay: f32,
    max_norm: f64,
) -> GlobalNormClipping<OptimizerAdaptor<AdamW, M, B>> {
    GlobalNormClipping::new(AdamWConfig::new().with_weight_decay(weight_decay).init(), max_norm)
}
