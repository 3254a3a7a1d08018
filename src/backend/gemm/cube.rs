//! [`GemmOps`] on CubeCL backends: cuBLASLt where the runtime is CUDA and the library is
//! there, CubeCL's matmul (Burn's `float_matmul`) everywhere else.

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::{leading_ones, GemmOps};

impl<R, F, I, BT> GemmOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn vendor_gemm(device: &Self::Device) -> bool {
        let _ = device;
        #[cfg(feature = "cuda")]
        {
            super::cublaslt::serves::<R>()
        }
        #[cfg(not(feature = "cuda"))]
        false
    }

    fn gemm(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        #[cfg(feature = "cuda")]
        let (lhs, rhs) = match super::cublaslt::serves::<R>() {
            true => match super::cublaslt::gemm::<R>(lhs, rhs) {
                Ok(product) => return product,
                Err(operands) => *operands,
            },
            false => (lhs, rhs),
        };
        <Self as FloatTensorOps<Self>>::float_matmul(lhs, rhs)
    }

    fn gemm_bias(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        #[cfg(feature = "cuda")]
        let (lhs, rhs, bias) = match super::cublaslt::serves::<R>() && super::gemm_fused_adds() {
            true => match super::cublaslt::gemm_bias::<R>(lhs, rhs, bias) {
                Ok(product) => return product,
                Err(operands) => *operands,
            },
            false => (lhs, rhs, bias),
        };
        let rank = lhs.meta.shape().num_dims();
        <Self as FloatTensorOps<Self>>::float_add(Self::gemm(lhs, rhs), leading_ones::<Self>(bias, rank))
    }

    fn gemm_accumulate(sum: FloatTensor<Self>, lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        #[cfg(feature = "cuda")]
        let (sum, lhs, rhs) = match super::cublaslt::serves::<R>() && super::gemm_fused_adds() {
            true => match super::cublaslt::gemm_accumulate::<R>(sum, lhs, rhs) {
                Ok(product) => return product,
                Err(operands) => *operands,
            },
            false => (sum, lhs, rhs),
        };
        <Self as FloatTensorOps<Self>>::float_add(sum, Self::gemm(lhs, rhs))
    }
}
