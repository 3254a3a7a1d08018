//! Plain-Rust references for the kernels: the definitions the kernels are tested against.
//! Slow on purpose: straight loops over the mathematical definition, accumulated in f64.

mod adamw;
mod attention;
mod column_sums;
mod conv;
mod embedding;
mod gelu;
mod layer_norm;
mod lm_head_loss;
mod residual;

pub use adamw::{adamw, clip_factor, AdamWSettings};
pub use attention::{attention, attention_backward, block_softmax, block_softmax_grad, AttentionGrads, Dims};
pub use column_sums::column_sums;
pub use conv::{col2im, im2col};
pub use embedding::embedding_grad;
pub use gelu::{erf, gelu, gelu_backward};
pub use layer_norm::{layer_norm, layer_norm_backward};
pub use lm_head_loss::lm_head_loss_rows;
pub use residual::residual_add;
