//! The gradient of an embedding table (Burn's `embedding_backward`), on leanburn's kernel
//! where the backend is CubeCL's.
//!
//! Burn computes it as `select_add` into a zeroed table; on CubeCL that kernel gives each
//! of the table's columns one unit walking every token (768 units for gpt2-small: its two
//! tables took 5.9 ms of an H200 step). On the CubeCL backends (fused or not) `Lean` runs
//! `leanburn-kernels`' `embedding_grad` instead, which spreads the table's rows over as
//! many units as fill the device and sums each entry in the same token order, so the
//! gradient is Burn's to the bit. Elsewhere (Flex, ndarray) it is Burn's op.

mod cube;
mod fused;
#[cfg(test)]
mod tests;

use burn::backend::{Flex, NdArray};
use burn_backend::ops::ModuleOps;
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::Backend;

/// A backend's gradient of an embedding table: Burn's op by default; on the CubeCL
/// backends (fused or not) leanburn's kernel, Burn's result to the bit.
pub trait EmbeddingOps: Backend {
    /// The gradient of `weights` (`[rows, width]`) looked up at `indices` (`[batch, seq]`)
    /// for the lookup's output gradient `output_grad` (`[batch, seq, width]`): Burn's
    /// `embedding_backward`, in `output_grad`'s type.
    fn embedding_grad(
        weights: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        <Self as ModuleOps<Self>>::embedding_backward(weights, output_grad, indices)
    }
}

impl EmbeddingOps for NdArray {}

impl EmbeddingOps for Flex {}
