//! GELU with its exact derivative on every backend.
//!
//! Burn 0.21's default `gelu` is the exact erf form, `x·Φ(x)`, but its default
//! `gelu_backward` (`burn-backend`'s `ActivationOps`) is the derivative of the *tanh
//! approximation*. Flex overrides both exactly (leanburn's Flex path replaces both with one
//! vectorised pass each, `flex.rs`); the CubeCL backends (CUDA, wgpu, fused or not) and
//! ndarray keep the defaults, so under `Autodiff` they train on gradients of a
//! function they do not compute (off by up to about 1e-3 per element;
//! `tests/parity/gelu_derivative.rs` measures it against finite differences).
//!
//! [`GeluOps::exact_gelu`] is the exact GELU whose autodiff backward is the exact
//! derivative, `Φ(x) + x·φ(x)`, on every backend: [`exact_gelu`] in a model instead of
//! `burn::nn::Gelu` (leanburn's GPT-2 does). `Lean<B>`'s own `gelu_backward` is the exact one
//! as well, so Burn's `Gelu` is exact on `Autodiff<Lean<B>>`.
//!
//! The derivative itself is [`GeluOps::exact_gelu_backward`]: one pass where the backend
//! has one (leanburn's on Flex, for f32 in contiguous memory, else Flex's own exact
//! `gelu_backward`; leanburn's kernel on the CubeCL backends,
//! queued as one custom operation on Burn's fusion stacks), else [`gelu_derivative`]'s
//! eleven element-wise ops. On the CubeCL backends the forward is leanburn's kernel too
//! (Burn's composed `gelu` is five operations on the fusion stacks).
//!
//! [`bias_gelu`] is `gelu(x + bias)`, the bias of the linear layer before it added to every
//! row: where the backend has the kernels, one pass forward and one backward that add the
//! bias as they read `x` (one graph node under `Autodiff`, whose backward gives `x` the
//! pre-activation's gradient and the bias its column sums), where Burn's linear layer and
//! GELU are, on the fusion stacks, a reshape of the bias, its add and GELU's five
//! operations; elsewhere (Flex, ndarray) the add and [`exact_gelu`], as before.

mod autodiff;
mod cube;
mod flex;
mod fused;
mod lean;

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape, TensorMetadata};

use super::gemm::leading_ones;

/// 1/√2.
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// 1/√(2π), the standard normal density at 0.
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// A backend whose GELU trains with the exact derivative; see the module docs (`src/backend/gelu/mod.rs`).
pub trait GeluOps: Backend {
    /// GELU, `x·Φ(x)` with `Φ` the standard normal CDF (the erf form): by default the
    /// backend's own `gelu`, on the CubeCL backends leanburn's kernel; under `Autodiff` its
    /// backward is [`exact_gelu_backward`](Self::exact_gelu_backward).
    fn exact_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gelu(x)
    }

    /// `grad · (Φ(x) + x·φ(x))`, GELU's exact derivative at `x` times its output's gradient
    /// (same shape and type): [`exact_gelu`]'s backward under `Autodiff`. By default
    /// [`gelu_derivative`]'s element-wise ops.
    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        gelu_derivative::<Self>(x, grad)
    }

    /// `gelu(x + bias)`, `bias` `[d]` added to every row of `x` `[..., d]` first: one node
    /// under `Autodiff` where the backend has leanburn's kernels; by default `bias`'s add
    /// and [`exact_gelu`](Self::exact_gelu) (under `Autodiff` their two nodes).
    fn bias_gelu(x: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::exact_gelu(add_bias::<Self>(x, bias))
    }

    /// `grad · gelu′(x + bias)`, the gradient of `x + bias` (and so of `x`) through
    /// [`bias_gelu`](Self::bias_gelu); by default the add and
    /// [`exact_gelu_backward`](Self::exact_gelu_backward).
    fn bias_gelu_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::exact_gelu_backward(add_bias::<Self>(x, bias), grad)
    }

    /// Whether leanburn's kernels run the GELU and its derivative for inputs of `dtype`
    /// (the fused stacks and `Autodiff` ask their inner backend).
    fn gelu_kernel(_dtype: burn_backend::DType) -> bool {
        false
    }
}

impl GeluOps for NdArray {}

/// `x + bias`, `bias` `[d]` added to every row of `x` `[..., d]`.
fn add_bias<B: Backend>(x: FloatTensor<B>, bias: FloatTensor<B>) -> FloatTensor<B> {
    let rank = x.shape().num_dims();
    B::float_add(x, leading_ones::<B>(bias, rank))
}

/// Whether `bias` is a vector as long as the rows of `x` (and neither is empty): what the
/// kernels take.
fn bias_fits(x: &Shape, bias: &Shape) -> bool {
    let row = x.as_slice().last().copied();
    bias.num_dims() == 1 && row == Some(bias[0]) && bias[0] > 0 && x.num_elements() > 0
}

/// [`GeluOps::exact_gelu`] on tensors of any rank.
pub fn exact_gelu<B: GeluOps, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::exact_gelu(x.into_primitive().tensor())))
}

/// [`GeluOps::bias_gelu`]: `gelu(x + bias)` with `bias` `[d]` added to every row of `x`
/// `[..., d]` (the linear layer before it computed without its bias).
///
/// # Panics
/// If `bias`'s length is not `x`'s last dimension.
pub fn bias_gelu<B: GeluOps, const D: usize>(x: Tensor<B, D>, bias: Tensor<B, 1>) -> Tensor<B, D> {
    let ([row], [d]) = ([x.dims()[D - 1]], bias.dims());
    assert_eq!(row, d, "a bias of {d} for rows of {row}");
    let (x, bias) = (x.into_primitive().tensor(), bias.into_primitive().tensor());
    Tensor::from_primitive(TensorPrimitive::Float(B::bias_gelu(x, bias)))
}

/// `grad · (Φ(x) + x·φ(x))`: the gradient through GELU at `x`, exactly, composed of `B`'s
/// element-wise ops (one fused kernel on Burn's fusion stacks, but eleven operations in
/// its stream).
pub fn gelu_derivative<B: Backend>(x: FloatTensor<B>, grad: FloatTensor<B>) -> FloatTensor<B> {
    let cdf = B::float_erf(B::float_mul_scalar(x.clone(), FRAC_1_SQRT_2.into()));
    let cdf = B::float_mul_scalar(B::float_add_scalar(cdf, 1.0.into()), 0.5.into());
    let pdf = B::float_exp(B::float_mul_scalar(B::float_mul(x.clone(), x.clone()), (-0.5).into()));
    let x_pdf = B::float_mul(x, B::float_mul_scalar(pdf, FRAC_1_SQRT_2PI.into()));
    B::float_mul(grad, B::float_add(cdf, x_pdf))
}

#[cfg(test)]
mod tests;
