//! [`EmbeddingOps`] on Burn's fused backends (`Cuda`, `Wgpu`): one Fusion custom operation
//! running the inner backend's (its kernel on CubeCL).

use core::marker::PhantomData;

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::Shape;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::EmbeddingOps;
use crate::backend::custom_op::queue_custom;

#[derive(Debug)]
struct QueuedGrad<B> {
    desc: CustomOpIr,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + EmbeddingOps> Operation<B::FusionRuntime> for QueuedGrad<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        #[cfg(test)]
        EXECUTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let [weights, output_grad, indices] = &self.desc.inputs[..] else {
            unreachable!("queued with the weights, the output's gradient and the indices")
        };
        let weights = handles.get_float_tensor::<B>(weights);
        let output_grad = handles.get_float_tensor::<B>(output_grad);
        let indices = handles.get_int_tensor::<B>(indices);
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, B::embedding_grad(weights, output_grad, indices));
    }
}

impl<B: FusionBackend + EmbeddingOps> EmbeddingOps for Fusion<B> {
    fn embedding_grad(
        weights: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let [rows, width] = weights.shape.dims::<2>();
        let output = (Shape::new([rows, width]), output_grad.dtype);
        // A Fusion tensor is one type, float or int: the indices travel as an input; the
        // weights for their shape, as Burn's op takes them.
        let inputs = vec![weights, output_grad, indices];
        let [grad] = queue_custom::<B, _, 1>("leanburn_embedding_grad", inputs, [output], |desc| QueuedGrad::<B> {
            desc,
            _backend: PhantomData,
        });
        grad
    }
}

/// Queued gradients executed, for the tests' control.
#[cfg(test)]
pub(super) static EXECUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
