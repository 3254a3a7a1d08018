//! [`GeluOps`] on CubeCL backends: GELU and its exact derivative as leanburn's kernels,
//! a bias added to every row as they read their input where there is one.

use burn_backend::tensor::FloatTensor;
use burn_backend::DType;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{launch_gelu, launch_gelu_backward, RowBias};

use super::{add_bias, bias_fits, gelu_derivative, GeluOps};
use crate::backend::{contiguous_of, has_kernels};

/// Whether the kernels take `x` (and `bias`, `grad`, where given): a kernel type, the same
/// type and shape for `grad`, a bias as long as `x`'s rows.
fn takes<R: CubeRuntime>(x: &CubeTensor<R>, bias: Option<&CubeTensor<R>>, grad: Option<&CubeTensor<R>>) -> bool {
    let shape = x.meta.shape();
    let bias_ok = bias.is_none_or(|bias| bias.dtype == x.dtype && bias_fits(shape, bias.meta.shape()));
    let grad_ok = grad.is_none_or(|grad| grad.dtype == x.dtype && grad.meta.shape() == shape);
    has_kernels(x.dtype) && shape.num_elements() > 0 && bias_ok && grad_ok
}

/// The kernel's bias argument: `bias` contiguous, or `x` (not read) where there is none.
fn bias_arg<R: CubeRuntime>(x: &CubeTensor<R>, bias: Option<CubeTensor<R>>) -> RowBias<R> {
    match bias {
        Some(bias) => {
            let row = bias.meta.num_elements();
            RowBias { arg: contiguous_of(bias, x.dtype).into_tensor_arg(), row: Some(row) }
        }
        None => RowBias { arg: x.clone().into_tensor_arg(), row: None },
    }
}

/// `gelu(x [+ bias])` on the kernel; the caller checked [`takes`].
fn gelu<R: CubeRuntime>(x: CubeTensor<R>, bias: Option<CubeTensor<R>>) -> CubeTensor<R> {
    let dtype = x.dtype;
    let x = contiguous_of(x, dtype);
    let len = x.meta.num_elements();
    let y = empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), x.meta.shape().clone(), dtype);
    let bias = bias_arg(&x, bias);
    // SAFETY: `x` contiguous with `len` elements of `dtype`, `y` just allocated with its
    // shape; the bias contiguous, as long as `x`'s last dimension (checked by `takes`).
    unsafe {
        with_float_type!(dtype, E => launch_gelu::<R, E>(
            &x.client.clone(),
            x.into_tensor_arg(),
            bias,
            y.clone().into_tensor_arg(),
            len,
        ));
    }
    y
}

/// `grad · gelu′(x [+ bias])` on the kernel; the caller checked [`takes`].
fn gelu_backward<R: CubeRuntime>(x: CubeTensor<R>, bias: Option<CubeTensor<R>>, grad: CubeTensor<R>) -> CubeTensor<R> {
    let dtype = x.dtype;
    let (x, grad) = (contiguous_of(x, dtype), contiguous_of(grad, dtype));
    let len = x.meta.num_elements();
    let grad_x = empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), x.meta.shape().clone(), dtype);
    let bias = bias_arg(&x, bias);
    // SAFETY: `x` and `grad` contiguous with `len` elements of `dtype`, `grad_x` just
    // allocated with their shape; the bias as in `gelu`.
    unsafe {
        with_float_type!(dtype, E => launch_gelu_backward::<R, E>(
            &x.client.clone(),
            x.into_tensor_arg(),
            bias,
            grad.into_tensor_arg(),
            grad_x.clone().into_tensor_arg(),
            len,
        ));
    }
    grad_x
}

impl<R, F, I, BT> GeluOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn exact_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes(&x, None, None) {
            true => gelu(x, None),
            false => <Self as burn_backend::ops::ActivationOps<Self>>::gelu(x),
        }
    }

    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes(&x, None, Some(&grad)) {
            true => gelu_backward(x, None, grad),
            false => gelu_derivative::<Self>(x, grad),
        }
    }

    fn bias_gelu(x: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes(&x, Some(&bias), None) {
            true => gelu(x, Some(bias)),
            false => Self::exact_gelu(add_bias::<Self>(x, bias)),
        }
    }

    fn bias_gelu_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes(&x, Some(&bias), Some(&grad)) {
            true => gelu_backward(x, Some(bias), grad),
            false => Self::exact_gelu_backward(add_bias::<Self>(x, bias), grad),
        }
    }

    fn gelu_kernel(dtype: DType) -> bool {
        has_kernels(dtype)
    }
}
