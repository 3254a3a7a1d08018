//! [`ResidualOps`] on Burn's fused backends: where `Lean`'s GEMMs are queued (CUDA's
//! cuBLASLt, or `LEANBURN_GEMM=queued`), one Fusion custom operation that runs the inner
//! backend's op (the GEMM and the add kernel) when the stream executes, where composed it
//! would be four entries (the GEMM, the bias's reshape, its add and the residual's add).
//! Elsewhere Fusion's own matmul and adds, which it may fuse into one kernel.

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{composed, Operands, ResidualOps};
use crate::backend::bias_grad::BiasGradOps;
use crate::backend::custom_op::queue_custom;
use crate::backend::gemm::GemmOps;

#[cfg(test)]
thread_local! {
    /// Residual linear ops this thread queued as one custom operation: the tests' witness.
    pub(super) static QUEUED: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// Runs the inner backend's op on `[residual, x, weight]` or `[residual, x, weight, bias]`.
#[derive(Debug)]
struct QueuedResidualLinear<B> {
    desc: CustomOpIr,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + ResidualOps> Operation<B::FusionRuntime> for QueuedResidualLinear<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let inputs = &self.desc.inputs;
        let mut input = |i: usize| handles.get_float_tensor::<B>(&inputs[i]);
        let [residual, x, weight] = [0, 1, 2].map(&mut input);
        let bias = (inputs.len() > 3).then(|| input(3));
        let out = B::residual_linear(residual, x, weight, bias);
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, out);
    }
}

impl<B: FusionBackend + ResidualOps + BiasGradOps> ResidualOps for Fusion<B> {
    fn residual_linear(
        residual: FloatTensor<Self>,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let operands = Operands {
            residual: (&residual.shape, residual.dtype),
            x: (&x.shape, x.dtype),
            weight: (&weight.shape, weight.dtype),
            bias: bias.as_ref().map(|bias| (&bias.shape, bias.dtype)),
        };
        if !(Self::vendor_gemm(x.client.device()) && operands.fit()) {
            return composed::<Self>(residual, x, weight, bias);
        }
        #[cfg(test)]
        QUEUED.with(|queued| queued.set(queued.get() + 1));
        let output = [(residual.shape.clone(), residual.dtype)];
        let inputs = [residual, x, weight].into_iter().chain(bias).collect();
        let [out] =
            queue_custom::<B, _, 1>("leanburn_residual_linear", inputs, output, |desc| QueuedResidualLinear::<B> {
                desc,
                _backend: PhantomData,
            });
        out
    }
}
