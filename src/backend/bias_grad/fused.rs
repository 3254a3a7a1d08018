//! [`BiasGradOps`] on Burn's fused backends (`Cuda`, `Wgpu`): one Fusion custom operation
//! running the inner backend's (its kernel on CubeCL).

use core::marker::PhantomData;

use burn_backend::ops::ModuleOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::Shape;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::BiasGradOps;
use crate::backend::custom_op::queue_custom;

#[derive(Debug)]
struct QueuedGrad<B> {
    desc: CustomOpIr,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + BiasGradOps> Operation<B::FusionRuntime> for QueuedGrad<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        #[cfg(test)]
        EXECUTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let [output_grad] = &self.desc.inputs[..] else { unreachable!("queued with the output's gradient") };
        let output_grad = handles.get_float_tensor::<B>(output_grad);
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, B::bias_grad(output_grad));
    }
}

impl<B: FusionBackend + BiasGradOps> BiasGradOps for Fusion<B> {
    fn bias_grad(output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let &[.., _, columns] = &output_grad.shape[..] else {
            // One dimension: nothing to sum (Burn's op returns it as is).
            return <Self as ModuleOps<Self>>::linear_bias_backward(output_grad);
        };
        let output = (Shape::new([columns]), output_grad.dtype);
        let [grad] =
            queue_custom::<B, _, 1>("leanburn_bias_grad", vec![output_grad], [output], |desc| QueuedGrad::<B> {
                desc,
                _backend: PhantomData,
            });
        grad
    }
}

/// Queued gradients executed, for the tests' control.
#[cfg(test)]
pub(super) static EXECUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
