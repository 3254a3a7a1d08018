//! Plain-Rust references for the kernels: the definitions the kernels are tested against.
//! Slow on purpose: straight loops over the mathematical definition, accumulated in f64.

mod attention;
mod conv;

pub use attention::{attention, attention_backward, AttentionGrads, Dims};
pub use conv::{col2im, im2col};
