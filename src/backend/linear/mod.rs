//! A linear layer as one graph node whose backward pass is one op.
//!
//! Burn's linear layer under `Autodiff` computes its gradients as three ops, the input's
//! (`output_grad · weightᵀ`), the weight's (`xᵀ · output_grad`) and the bias's (column sums).
//! Where `Lean`'s GEMMs are queued on a fused stack (CUDA's cuBLASLt, or
//! `LEANBURN_GEMM=queued`) each is an entry of the fusion stream with its host work, three a
//! layer, four layers a GPT-2 block. [`LinearOps::linear_grads`] computes them together:
//! one Fusion custom operation running the inner backend's two GEMMs and column sums, and
//! [`linear`] (and [`residual_linear`](super::residual_linear)'s node) call it from their
//! backward. Elsewhere (Flex, ndarray, CubeCL's own matmul) the three ops, as before.

mod autodiff;
mod fused;
mod lean;
#[cfg(test)]
mod tests;

use burn::backend::{Flex, NdArray};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::bias_grad::BiasGradOps;
use super::gemm::{self, GemmOps};

pub(crate) use autodiff::{register_linear_grads, LinearState};

/// A linear layer's gradients, each where it was asked for.
pub struct LinearGrads<B: burn_backend::Backend> {
    /// The input's, `output_grad · weightᵀ` (of the input's shape).
    pub x: Option<FloatTensor<B>>,
    /// The weight's, `xᵀ · output_grad` over every row (`[d_in, d_out]`).
    pub weight: Option<FloatTensor<B>>,
    /// The bias's, `output_grad` summed over every row (`[d_out]`).
    pub bias: Option<FloatTensor<B>>,
}

/// A backend whose linear layer's backward pass is one op; see the module docs (`src/backend/linear/mod.rs`).
pub trait LinearOps: GemmOps {
    /// `x · weight [+ bias]` (`x` `[..., d_in]`, `weight` `[d_in, d_out]`, `bias` `[d_out]`):
    /// Burn's `linear`; under `Autodiff` one node whose backward is [`Self::linear_grads`].
    fn linear_layer(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        Self::linear(x, weight, bias)
    }

    /// The gradients of `x · weight [+ bias]` from `output_grad`: the input's where `weight`
    /// is given, the weight's where `x` is, the bias's where `bias`. By default Burn's three
    /// ops (`linear_x_backward`, `linear_weight_backward`, `linear_bias_backward`).
    fn linear_grads(
        x: Option<FloatTensor<Self>>,
        weight: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        bias: bool,
    ) -> LinearGrads<Self> {
        burn_grads::<Self>(x, weight, output_grad, bias)
    }
}

impl LinearOps for Flex {}

impl LinearOps for NdArray {}

/// Where the vendor's GEMM serves, its products and leanburn's column sums (what `Lean`'s
/// own `linear_*_backward` run there); elsewhere Burn's ops.
impl<R, F, I, BT> LinearOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn linear_grads(
        x: Option<FloatTensor<Self>>,
        weight: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        bias: bool,
    ) -> LinearGrads<Self> {
        match Self::vendor_gemm(&output_grad.device) {
            true => gemm_grads::<Self>(x, weight, output_grad, bias),
            false => burn_grads::<Self>(x, weight, output_grad, bias),
        }
    }
}

/// The three gradients as Burn's ops.
fn burn_grads<B: burn_backend::Backend>(
    x: Option<FloatTensor<B>>,
    weight: Option<FloatTensor<B>>,
    output_grad: FloatTensor<B>,
    bias: bool,
) -> LinearGrads<B> {
    LinearGrads {
        x: weight.map(|weight| B::linear_x_backward(weight, output_grad.clone())),
        weight: x.map(|x| B::linear_weight_backward(x, output_grad.clone())),
        bias: bias.then(|| B::linear_bias_backward(output_grad)),
    }
}

/// The three gradients on [`GemmOps::gemm`] and [`BiasGradOps::bias_grad`]: what `Lean`'s
/// `linear_*_backward` run where its GEMMs are the vendor's, and what a queued
/// [`LinearOps::linear_grads`] runs on the inner backend.
pub(crate) fn gemm_grads<B: GemmOps + BiasGradOps>(
    x: Option<FloatTensor<B>>,
    weight: Option<FloatTensor<B>>,
    output_grad: FloatTensor<B>,
    bias: bool,
) -> LinearGrads<B> {
    LinearGrads {
        x: weight.map(|weight| gemm::linear_x_backward::<B>(weight, output_grad.clone())),
        weight: x.map(|x| gemm::linear_weight_backward::<B>(x, output_grad.clone())),
        bias: bias.then(|| B::bias_grad(output_grad)),
    }
}

/// Burn's `module::linear` (`x · weight [+ bias]`, `weight` `[d_in, d_out]`) as one graph
/// node under `Autodiff` whose backward is [`LinearOps::linear_grads`].
///
/// # Panics
/// If `x`'s rows are not `weight`'s `d_in` wide, or `bias` is not `[d_out]`.
pub(crate) fn linear<B: LinearOps, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, D> {
    let [d_in, d_out] = weight.dims();
    assert_eq!(x.dims()[D - 1], d_in, "rows of {} into a linear layer of {d_in} inputs", x.dims()[D - 1]);
    if let Some(bias) = &bias {
        assert_eq!(bias.dims(), [d_out], "a bias of {:?} for a linear layer of {d_out} outputs", bias.dims());
    }
    let bias = bias.map(|bias| bias.into_primitive().tensor());
    let out = B::linear_layer(x.into_primitive().tensor(), weight.into_primitive().tensor(), bias);
    Tensor::from_primitive(TensorPrimitive::Float(out))
}
