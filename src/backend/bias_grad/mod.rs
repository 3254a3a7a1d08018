//! The gradient of a linear layer's bias (Burn's `linear_bias_backward`), on leanburn's
//! kernel where the backend is CubeCL's.
//!
//! Burn sums the output's gradient over each leading dimension in turn with its reduction,
//! which on CubeCL gives each column one unit walking every row: 768 units for a
//! gpt2-small projection's 8,192 rows, too few to fill a GPU (with a few other row sums,
//! 6.8 ms in 94 launches of an H200 step). On the CubeCL backends (fused or not) `Lean`
//! runs `leanburn-kernels`' column sums instead: the leading dimensions folded into rows,
//! the rows cut into blocks that fill the device, two launches. Elsewhere (Flex, ndarray)
//! it is Burn's op.

mod cube;
mod fused;
#[cfg(test)]
mod tests;

use burn::backend::{Flex, NdArray};
use burn_backend::ops::ModuleOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::Backend;

/// A backend's gradient of a bias added to every row: Burn's op by default; on the CubeCL
/// backends (fused or not) leanburn's column sums.
pub trait BiasGradOps: Backend {
    /// `output_grad` (`[..., d_output]`, at least two dimensions) summed over every
    /// dimension but the last: `[d_output]`, in `output_grad`'s type, as Burn's
    /// `linear_bias_backward`.
    fn bias_grad(output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as ModuleOps<Self>>::linear_bias_backward(output_grad)
    }
}

impl BiasGradOps for NdArray {}

impl BiasGradOps for Flex {}
