//! [`GeluOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's GELU
//! derivative kernel as one Fusion custom operation, where composed it would be eleven
//! entries in the fusion stream (each with its host work, though they fuse into one
//! kernel).

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::DType;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{gelu_derivative, GeluOps};
use crate::backend::custom_op::queue_custom;

#[cfg(test)]
thread_local! {
    /// Derivatives this thread queued as the kernel's custom operation: the tests' witness
    /// that the fused stacks take the kernel (its results may equal the fused composed
    /// chain's bit for bit).
    pub(super) static QUEUED: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

#[derive(Debug)]
struct QueuedGeluBackward<B> {
    desc: CustomOpIr,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + GeluOps> Operation<B::FusionRuntime> for QueuedGeluBackward<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([x, grad], [grad_x]) = self.desc.as_fixed();
        let out = B::exact_gelu_backward(handles.get_float_tensor::<B>(x), handles.get_float_tensor::<B>(grad));
        handles.register_float_tensor::<B>(&grad_x.id, out);
    }
}

impl<B: FusionBackend + GeluOps> GeluOps for Fusion<B> {
    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        if !(B::gelu_kernel(x.dtype) && grad.dtype == x.dtype && grad.shape == x.shape) {
            return gelu_derivative::<Self>(x, grad);
        }
        #[cfg(test)]
        QUEUED.with(|queued| queued.set(queued.get() + 1));
        let output = [(x.shape.clone(), x.dtype)];
        let [grad_x] = queue_custom::<B, _, 1>("leanburn_gelu_backward", vec![x, grad], output, |desc| {
            QueuedGeluBackward::<B> { desc, _backend: PhantomData }
        });
        grad_x
    }

    fn gelu_kernel(dtype: DType) -> bool {
        B::gelu_kernel(dtype)
    }
}
