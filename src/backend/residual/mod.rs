//! The residual stream's add after a linear layer, `residual + x · weight + bias`, as one op.
//!
//! A transformer block adds the attention's output projection and the MLP's second linear
//! layer to the residual stream. Composed, that is Burn's linear layer (a GEMM, the bias's
//! reshape and add) and then the residual's add: on the fusion stacks four entries in the
//! stream, each with its host work, and under `Autodiff` two graph nodes. [`residual_linear`]
//! is one: where `Lean`'s GEMMs are queued as on CUDA (the vendor's GEMM, or
//! `LEANBURN_GEMM=queued`), one Fusion custom operation that runs the GEMM and then
//! leanburn's kernel adding the bias and the residual in place on the product (the bias in
//! cuBLASLt's epilogue instead where [`gemm_fused_adds`](super::gemm_fused_adds)); under
//! `Autodiff` one node whose backward is the linear layer's (the residual's gradient passes
//! through). Elsewhere (Flex, ndarray, Burn's own fused matmul, which may fuse the adds
//! into its kernel) the composed ops, as before.

mod autodiff;
mod cube;
mod fused;
mod lean;

use burn::backend::{Flex, NdArray};
use burn::nn::Linear;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};

use super::gemm::{self, GemmOps};
use super::linear::LinearOps;

/// A backend whose residual add after a linear layer is one op; see the module docs (`src/backend/residual/mod.rs`).
pub trait ResidualOps: LinearOps {
    /// `residual + x · weight [+ bias]`: `x` `[..., d_in]`, `weight` `[d_in, d_out]`, `bias`
    /// `[d_out]`, `residual` of the product's shape. By default the linear layer (on
    /// [`GemmOps::gemm`] where [`GemmOps::vendor_gemm`]) and the add.
    fn residual_linear(
        residual: FloatTensor<Self>,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        composed::<Self>(residual, x, weight, bias)
    }
}

impl ResidualOps for Flex {}

impl ResidualOps for NdArray {}

/// The linear layer, on [`GemmOps::gemm`] where [`GemmOps::vendor_gemm`] (as `Lean`'s own
/// linear layer), then the residual's add.
fn composed<B: GemmOps>(
    residual: FloatTensor<B>,
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
) -> FloatTensor<B> {
    let product = match B::vendor_gemm(&B::float_device(&x)) {
        true => gemm::linear::<B>(x, weight, bias),
        false => B::linear(x, weight, bias),
    };
    B::float_add(residual, product)
}

/// The shapes and types of one residual linear op, for the checks of what a one-op path
/// takes.
struct Operands<'a> {
    residual: (&'a Shape, DType),
    x: (&'a Shape, DType),
    weight: (&'a Shape, DType),
    bias: Option<(&'a Shape, DType)>,
}

impl Operands<'_> {
    /// Whether the operands are of one type, `weight` `[d_in, d_out]` multiplies `x`'s rows,
    /// the residual has the product's shape, the bias (where given) is `[d_out]`, and none
    /// is empty.
    fn fit(&self) -> bool {
        let dtype = self.x.1;
        let same_type = [self.residual.1, self.weight.1].into_iter().chain(self.bias.map(|b| b.1)).all(|d| d == dtype);
        let (x, weight, residual) = (self.x.0.as_slice(), self.weight.0.as_slice(), self.residual.0.as_slice());
        let [d_in, d_out] = match weight {
            &[d_in, d_out] => [d_in, d_out],
            _ => return false,
        };
        let product_fits = x.last() == Some(&d_in)
            && residual.len() == x.len()
            && residual[..x.len() - 1] == x[..x.len() - 1]
            && residual.last() == Some(&d_out);
        let bias_fits = self.bias.is_none_or(|(bias, _)| bias.as_slice() == [d_out]);
        same_type && product_fits && bias_fits && self.residual.0.num_elements() > 0 && d_in > 0
    }
}

/// [`ResidualOps::residual_linear`] with Burn's linear layer: `residual + linear(x)`, one op
/// (and one graph node under `Autodiff`) where the backend has it.
///
/// # Panics
/// If `residual` is not of the layer's output's shape, or `x`'s rows not of its input's width.
pub fn residual_linear<B: ResidualOps, const D: usize>(
    residual: Tensor<B, D>,
    x: Tensor<B, D>,
    linear: &Linear<B>,
) -> Tensor<B, D> {
    let [d_in, d_out] = linear.weight.dims();
    let (rows, out) = (x.dims(), residual.dims());
    assert_eq!(rows[D - 1], d_in, "rows of {} into a linear layer of {d_in} inputs", rows[D - 1]);
    let expected: Vec<usize> = rows[..D - 1].iter().copied().chain([d_out]).collect();
    assert_eq!(out.as_slice(), expected.as_slice(), "a residual of {out:?} for the linear layer's output {expected:?}");
    let [residual, x] = [residual, x].map(|tensor| tensor.into_primitive().tensor());
    let weight = linear.weight.val().into_primitive().tensor();
    let bias = linear.bias.as_ref().map(|bias| bias.val().into_primitive().tensor());
    Tensor::from_primitive(TensorPrimitive::Float(B::residual_linear(residual, x, weight, bias)))
}

#[cfg(test)]
mod tests;
