//! [`ActivationOps`] for [`Lean`]: all of them `B`'s but GELU's.
//!
//! Every method of this trait has a default body (composed from float ops); backends such
//! as `Fusion` and `Autodiff` override some of them, and only forwarding keeps those.
//! `gelu_backward` is the one default that is wrong: Burn 0.21's is the derivative of the
//! tanh approximation while its `gelu` is the exact erf form, so `Lean` computes the exact
//! derivative instead, and its `gelu` is `B`'s exact GELU (leanburn's kernel on the
//! CubeCL backends; see `backend/gelu`).

use burn_backend::element::Scalar;
use burn_backend::ops::ActivationOps;
use burn_backend::tensor::FloatTensor;

use super::forward::forward;
use crate::backend::{ChunkedConv, Lean};

impl<B: ChunkedConv> ActivationOps<Self> for Lean<B> {
    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        B::exact_gelu(tensor)
    }

    fn gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        B::exact_gelu_backward(x, grad)
    }

    forward! {
        fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self>;
        fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn relu_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn prelu(tensor: FloatTensor<Self>, alpha: FloatTensor<Self>) -> FloatTensor<Self>;
        fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn sigmoid_backward(
            output: FloatTensor<Self>,
            grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn hard_sigmoid(
            tensor: FloatTensor<Self>,
            alpha: Scalar,
            beta: Scalar,
        ) -> FloatTensor<Self>;
        fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn softmin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn log_sigmoid_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
    }
}
