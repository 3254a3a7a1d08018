//! [`ResidualOps`] on `Lean<B>`: `B`'s.

use burn_backend::tensor::FloatTensor;

use super::ResidualOps;
use crate::backend::conv::ChunkedConv;
use crate::backend::Lean;

impl<B: ChunkedConv> ResidualOps for Lean<B> {
    fn residual_linear(
        residual: FloatTensor<Self>,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        B::residual_linear(residual, x, weight, bias)
    }
}
