//! LayerNorm over the last dimension whose autodiff backward is one op, keeping only each
//! row's mean and reciprocal standard deviation.
//!
//! Burn 0.21's `LayerNorm` runs `B::layer_norm`, which `Autodiff` does not override: its
//! default composes about nine tensor ops (two mean reductions, the centring, the square
//! root, the division, the scale and the shift), each a graph node, and the backward pass
//! walks all of them. [`LayerNormOps::lean_layer_norm`] on `Autodiff<B>` is one node: its
//! forward ([`LayerNormOps::lean_layer_norm_forward`] on `B`) keeps the input, γ and the
//! row statistics, and its backward ([`LayerNormOps::lean_layer_norm_backward`]) gives the
//! input's, γ's and β's gradients. On the CubeCL backends (CUDA, wgpu; fused or not) they
//! are `leanburn-kernels`' `layer_norm` kernels (one launch forward, two or three
//! backward). Where the backend has no kernel for the input's type
//! ([`LayerNormOps::fused_layer_norm`] false: Flex, ndarray, other element types) the node
//! would buy nothing, and `Autodiff` runs Burn's `layer_norm` as before; the composed
//! forward and backward stay the trait's defaults. Without autodiff, `lean_layer_norm` is
//! the backend's own `layer_norm` (the forward kernel on CubeCL).
//!
//! Use [`layer_norm`] with a `burn::nn::LayerNorm`'s parameters (its records unchanged).

mod autodiff;
mod cube;
mod fused;
#[cfg(test)]
mod tests;

use burn::backend::{Flex, NdArray};
use burn::nn::LayerNorm;
use burn::tensor::{FloatDType, Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};

use super::conv::ChunkedConv;
use super::Lean;

/// A backend with leanburn's LayerNorm; see the module docs (`src/backend/layer_norm/mod.rs`).
pub trait LayerNormOps: Backend {
    /// `(x − μ)/√(σ² + ε)·γ + β` over the last dimension of `x` (γ and β of its size).
    fn lean_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        Self::layer_norm(x, gamma, beta, epsilon)
    }

    /// The forward pass a backward pass will follow: `[y, mean, rstd]`, the row statistics
    /// `[rows]` f32 (`rows` = the elements of `x` over its last dimension).
    fn lean_layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        composed_forward::<Self>(x, gamma, beta, epsilon)
    }

    /// `[dx, dgamma, dbeta]` given the output's gradient `grad` and the forward's `mean`
    /// and `rstd`.
    fn lean_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        composed_backward::<Self>(x, gamma, mean, rstd, grad)
    }

    /// Whether the forward and backward above run leanburn's kernels for inputs of
    /// `dtype` (and so whether `Autodiff` makes LayerNorm one node). The fused stacks ask
    /// their inner backend.
    fn fused_layer_norm(_dtype: DType) -> bool {
        false
    }
}

impl LayerNormOps for Flex {}

impl LayerNormOps for NdArray {}

/// `B`'s LayerNorm, its kernels included.
impl<B: ChunkedConv + LayerNormOps> LayerNormOps for Lean<B> {
    fn lean_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        B::lean_layer_norm(x, gamma, beta, epsilon)
    }

    fn lean_layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        B::lean_layer_norm_forward(x, gamma, beta, epsilon)
    }

    fn lean_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        B::lean_layer_norm_backward(x, gamma, mean, rstd, grad)
    }

    fn fused_layer_norm(dtype: DType) -> bool {
        B::fused_layer_norm(dtype)
    }
}

/// `norm` (a `burn::nn::LayerNorm`, whose ε Burn keeps private: give it as `epsilon`)
/// applied to `x`: through [`LayerNormOps::lean_layer_norm`] where the backend has kernels
/// for `x`'s type, else `norm`'s own forward (Burn's LayerNorm, exactly as before).
pub fn layer_norm<B: LayerNormOps, const D: usize>(norm: &LayerNorm<B>, x: Tensor<B, D>, epsilon: f64) -> Tensor<B, D> {
    if !B::fused_layer_norm(x.dtype()) {
        return norm.forward(x);
    }
    let primitive = |t: Tensor<B, 1>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::lean_layer_norm(
        x.into_primitive().tensor(),
        primitive(norm.gamma.val()),
        norm.beta.as_ref().map(|beta| primitive(beta.val())),
        epsilon,
    )))
}

/// `x` as `[rows, d]`, `d` its last dimension.
fn rows_of<B: Backend>(x: FloatTensor<B>) -> Tensor<B, 2> {
    let shape = x.shape();
    let d = shape[shape.num_dims() - 1];
    let rows = shape.num_elements() / d.max(1);
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(x, [rows, d].into())))
}

fn vector<B: Backend>(x: FloatTensor<B>) -> Tensor<B, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(x))
}

/// [`LayerNormOps::lean_layer_norm_forward`] composed of `B`'s tensor ops.
pub(crate) fn composed_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: Option<FloatTensor<B>>,
    epsilon: f64,
) -> [FloatTensor<B>; 3] {
    let shape = x.shape();
    let x = rows_of::<B>(x);
    let mean = x.clone().mean_dim(1);
    let centered = x - mean.clone();
    let variance = centered.clone().square().mean_dim(1);
    let deviation = variance.add_scalar(epsilon).sqrt();
    let mut y = centered / deviation.clone() * vector::<B>(gamma).unsqueeze();
    if let Some(beta) = beta {
        y = y + vector::<B>(beta).unsqueeze();
    }
    let stat = |t: Tensor<B, 2>| t.squeeze_dim::<1>(1).cast(FloatDType::F32).into_primitive().tensor();
    [B::float_reshape(y.into_primitive().tensor(), shape), stat(mean), stat(deviation.recip())]
}

/// [`LayerNormOps::lean_layer_norm_backward`] composed of `B`'s tensor ops.
pub(crate) fn composed_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> [FloatTensor<B>; 3] {
    let shape = x.shape();
    let x = rows_of::<B>(x);
    let dtype = x.dtype();
    let stat = |t: FloatTensor<B>| vector::<B>(t).cast(dtype).unsqueeze_dim::<2>(1);
    let (mean, rstd) = (stat(mean), stat(rstd));
    let x_hat = (x - mean) * rstd.clone();
    let dy = rows_of::<B>(grad);
    let g = dy.clone() * vector::<B>(gamma).unsqueeze();
    let mean_g = g.clone().mean_dim(1);
    let mean_gx = (g.clone() * x_hat.clone()).mean_dim(1);
    let dx = rstd * (g - mean_g - x_hat.clone() * mean_gx);
    let dgamma = (dy.clone() * x_hat).sum_dim(0).squeeze_dim::<1>(0);
    let dbeta = dy.sum_dim(0).squeeze_dim::<1>(0);
    [
        B::float_reshape(dx.into_primitive().tensor(), shape),
        dgamma.into_primitive().tensor(),
        dbeta.into_primitive().tensor(),
    ]
}
