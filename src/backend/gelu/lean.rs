//! [`GeluOps`] on `Lean<B>`: `B`'s, and Burn's `gelu` op on `Lean` runs `B`'s exact GELU.

use burn_backend::tensor::FloatTensor;
use burn_backend::DType;

use super::GeluOps;
use crate::backend::conv::ChunkedConv;
use crate::backend::Lean;

impl<B: ChunkedConv> GeluOps for Lean<B> {
    fn exact_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        B::exact_gelu(x)
    }

    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        B::exact_gelu_backward(x, grad)
    }

    fn bias_gelu(x: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        B::bias_gelu(x, bias)
    }

    fn bias_gelu_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        B::bias_gelu_backward(x, bias, grad)
    }

    fn gelu_kernel(dtype: DType) -> bool {
        B::gelu_kernel(dtype)
    }
}
