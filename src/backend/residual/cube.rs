//! [`ResidualOps`] on CubeCL backends: the GEMM (cuBLASLt where it serves, CubeCL's matmul
//! elsewhere), then leanburn's kernel adding the bias and the residual to the product in
//! place; with [`gemm_fused_adds`] on cuBLASLt the bias in its epilogue instead.

use burn_backend::tensor::FloatTensor;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{launch_residual_add, RowBias};

use super::{composed, Operands, ResidualOps};
use crate::backend::gemm::{self, gemm_fused_adds, GemmOps};
use crate::backend::{contiguous_of, has_kernels};

/// Whether the kernel takes these operands: a kernel type, shapes that fit.
fn takes<R: CubeRuntime>(
    residual: &CubeTensor<R>,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
) -> bool {
    let operands = Operands {
        residual: (residual.meta.shape(), residual.dtype),
        x: (x.meta.shape(), x.dtype),
        weight: (weight.meta.shape(), weight.dtype),
        bias: bias.map(|bias| (bias.meta.shape(), bias.dtype)),
    };
    has_kernels(x.dtype) && operands.fit()
}

#[cfg(test)]
thread_local! {
    /// Residual adds this thread ran on the kernel: the tests' witness (in f32 its sums are
    /// the composed adds' bits).
    pub(super) static KERNEL_RUNS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    /// Residual linear ops whose bias this thread left to the GEMM (the adds folded into
    /// cuBLASLt's calls): the tests' witness of that branch.
    pub(super) static BIAS_IN_GEMM: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// `sum += residual [+ bias]` on the kernel, in place where `sum` is this op's alone
/// (a product just made: always, unless a backend returned a view).
fn add_in_place<R: CubeRuntime>(
    sum: CubeTensor<R>,
    residual: CubeTensor<R>,
    bias: Option<CubeTensor<R>>,
) -> CubeTensor<R> {
    #[cfg(test)]
    KERNEL_RUNS.with(|runs| runs.set(runs.get() + 1));
    let dtype = sum.dtype;
    let sum = contiguous_of(sum, dtype);
    let sum = if sum.can_mut() && sum.is_contiguous_buffer() { sum } else { sum.copy() };
    let residual = contiguous_of(residual, dtype);
    let len = sum.meta.num_elements();
    let bias = match bias {
        Some(bias) => {
            let row = bias.meta.num_elements();
            RowBias { arg: contiguous_of(bias, dtype).into_tensor_arg(), row: Some(row) }
        }
        None => RowBias { arg: residual.clone().into_tensor_arg(), row: None },
    };
    // SAFETY: `sum` and `residual` contiguous with `len` elements of `dtype` (the product's
    // shape, checked by `takes`), `sum` in a buffer of its own; the bias contiguous, as long
    // as the rows.
    unsafe {
        with_float_type!(dtype, E => launch_residual_add::<R, E>(
            &sum.client.clone(),
            sum.clone().into_tensor_arg(),
            bias,
            residual.into_tensor_arg(),
            len,
        ));
    }
    sum
}

impl<R, F, I, BT> ResidualOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn residual_linear(
        residual: FloatTensor<Self>,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        if !takes(&residual, &x, &weight, bias.as_ref()) {
            return composed::<Self>(residual, x, weight, bias);
        }
        // cuBLASLt adds the bias in its epilogue where asked to (it may still refuse and
        // add it after: `gemm_bias`'s fallback).
        let epilogue = gemm_fused_adds() && Self::vendor_gemm(&x.device);
        #[cfg(test)]
        BIAS_IN_GEMM.with(|runs| runs.set(runs.get() + usize::from(epilogue)));
        let (product, bias) = match epilogue {
            true => (gemm::linear::<Self>(x, weight, bias), None),
            false => (gemm::linear::<Self>(x, weight, None), bias),
        };
        add_in_place(product, residual, bias)
    }
}
