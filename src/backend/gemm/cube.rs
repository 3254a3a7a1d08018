//! [`GemmOps`] on CubeCL backends: cuBLASLt where the runtime is CUDA and the library is
//! there, CubeCL's matmul (Burn's `float_matmul`) everywhere else.

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::layout::{operand_copies, View};
use super::{count_operand_copies, leading_ones, GemmOps};

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
        if super::cublaslt::serves::<R>() {
            return true;
        }
        vendor_layouts_in_test()
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
        count_operand_copies(would_copy(&lhs, &rhs));
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

/// The operands cuBLASLt would copy contiguous for `lhs · rhs` where CubeCL's matmul takes
/// it (no cuBLASLt on this runtime or build, or it refused the product after its own
/// copies, counted apart): 0 where even copies would not let cuBLASLt take it.
fn would_copy<R: CubeRuntime>(lhs: &CubeTensor<R>, rhs: &CubeTensor<R>) -> usize {
    #[cfg(feature = "cuda")]
    if super::cublaslt::serves::<R>() {
        return 0;
    }
    let lhs = View::new(lhs.meta.shape(), lhs.meta.strides());
    let rhs = View::new(rhs.meta.shape(), rhs.meta.strides());
    operand_copies(lhs, rhs).unwrap_or(0)
}

/// Whether a test asked this thread's CubeCL backends to say their GEMMs are the vendor's
/// (CubeCL's matmul still runs them), so that the ops above take their cuBLASLt paths
/// where the copies its layouts would need are counted on the test's own thread.
#[cfg(test)]
fn vendor_layouts_in_test() -> bool {
    super::tests::VENDOR_LAYOUTS.with(|vendor| vendor.get())
}

#[cfg(not(test))]
fn vendor_layouts_in_test() -> bool {
    false
}
