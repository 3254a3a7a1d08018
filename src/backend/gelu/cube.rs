//! [`GeluOps`] on CubeCL backends: GELU's exact derivative as leanburn's one kernel.

use burn_backend::tensor::FloatTensor;
use burn_backend::DType;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::launch_gelu_backward;

use super::{gelu_derivative, GeluOps};
use crate::backend::{contiguous_of, has_kernels};

impl<R, F, I, BT> GeluOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let dtype = x.dtype;
        let len = x.meta.num_elements();
        let fits = has_kernels(dtype) && grad.dtype == dtype && grad.meta.shape() == x.meta.shape() && len > 0;
        if !fits {
            return gelu_derivative::<Self>(x, grad);
        }
        let (x, grad) = (contiguous_of(x, dtype), contiguous_of(grad, dtype));
        let shape = x.meta.shape().clone();
        let grad_x = empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), shape, dtype);
        // SAFETY: `x` and `grad` contiguous with `len` elements of `dtype`, `grad_x` just
        // allocated with their shape.
        unsafe {
            with_float_type!(dtype, E => launch_gelu_backward::<R, E>(
                &x.client.clone(),
                x.into_tensor_arg(),
                grad.into_tensor_arg(),
                grad_x.clone().into_tensor_arg(),
                len,
            ));
        }
        grad_x
    }

    fn gelu_kernel(dtype: DType) -> bool {
        has_kernels(dtype)
    }
}
