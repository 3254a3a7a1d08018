//! [`AttentionOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's fused
//! attention kernels as Fusion custom operations, as `Lean`'s pixel moves are
//! (`backend/conv/fused.rs`); where the inner backend has no kernel for the inputs, the
//! composed path on the fused backend itself, whose element-wise ops Burn fuses.

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{blocked, kernel_inputs, AttentionOps};
use crate::backend::custom_op::queue_custom;

/// Which pass one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum Pass {
    Forward,
    Backward,
}

#[derive(Debug)]
struct QueuedAttention<B> {
    desc: CustomOpIr,
    pass: Pass,
    causal: bool,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + AttentionOps> Operation<B::FusionRuntime> for QueuedAttention<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        match self.pass {
            Pass::Forward => {
                let ([query, key, value], [output, lse]) = self.desc.as_fixed();
                let (out, row_lse) = B::lean_attention_forward(
                    handles.get_float_tensor::<B>(query),
                    handles.get_float_tensor::<B>(key),
                    handles.get_float_tensor::<B>(value),
                    self.causal,
                );
                handles.register_float_tensor::<B>(&output.id, out);
                handles.register_float_tensor::<B>(&lse.id, row_lse);
            }
            Pass::Backward => {
                let ([query, key, value, output, lse, grad], outputs) = self.desc.as_fixed::<6, 3>();
                let gradients = B::lean_attention_backward(
                    handles.get_float_tensor::<B>(query),
                    handles.get_float_tensor::<B>(key),
                    handles.get_float_tensor::<B>(value),
                    handles.get_float_tensor::<B>(output),
                    handles.get_float_tensor::<B>(lse),
                    handles.get_float_tensor::<B>(grad),
                    self.causal,
                );
                for (ir, gradient) in outputs.iter().zip(gradients) {
                    handles.register_float_tensor::<B>(&ir.id, gradient);
                }
            }
        }
    }
}

/// Queues `pass` with `inputs`, producing tensors of `outputs` (shape, type).
fn queue<B: FusionBackend + AttentionOps, const N: usize>(
    pass: Pass,
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: [(Shape, DType); N],
    causal: bool,
) -> [FloatTensor<Fusion<B>>; N] {
    queue_custom::<B, _, N>(name, inputs, outputs, |desc| QueuedAttention::<B> {
        desc,
        pass,
        causal,
        _backend: PhantomData,
    })
}

/// Whether the inner backend runs its kernels for these inputs.
fn fused<B: FusionBackend + AttentionOps>(
    query: &FloatTensor<Fusion<B>>,
    key: &FloatTensor<Fusion<B>>,
    value: &FloatTensor<Fusion<B>>,
) -> bool {
    let dims = |t: &FloatTensor<Fusion<B>>| t.shape.dims::<4>();
    let fused = B::fused_attention(query.dtype, dims(query)[3]);
    kernel_inputs([dims(query), dims(key), dims(value)], [query.dtype, key.dtype, value.dtype], fused)
}

impl<B: FusionBackend + AttentionOps> AttentionOps for Fusion<B> {
    fn lean_attention_forward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !fused::<B>(&query, &key, &value) {
            return blocked::forward_within_workspace::<Self>(query, key, value, causal);
        }
        let [batch, heads, rows, _] = query.shape.dims::<4>();
        let outputs = [(query.shape.clone(), query.dtype), (Shape::new([batch * heads, rows]), DType::F32)];
        let [output, lse] =
            queue::<B, 2>(Pass::Forward, "leanburn_attention_forward", vec![query, key, value], outputs, causal);
        (output, lse)
    }

    fn lean_attention_backward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        causal: bool,
    ) -> [FloatTensor<Self>; 3] {
        // The kernels' log-sum-exp is `[batch · heads, rows]`; the composed one 4-D.
        if lse.shape.num_dims() != 2 {
            return blocked::backward_within_workspace::<Self>(query, key, value, output, lse, grad, causal);
        }
        let outputs = [&query, &key, &value].map(|t| (t.shape.clone(), t.dtype));
        let inputs = vec![query, key, value, output, lse, grad];
        queue::<B, 3>(Pass::Backward, "leanburn_attention_backward", inputs, outputs, causal)
    }

    fn fused_attention(dtype: DType, head_dim: usize) -> bool {
        B::fused_attention(dtype, head_dim)
    }
}
