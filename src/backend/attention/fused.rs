//! [`AttentionOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's fused
//! attention kernels as Fusion custom operations, as `Lean`'s pixel moves are
//! (`backend/conv/fused.rs`); where the inner backend has no kernel for the inputs, the
//! composed path on the fused backend itself, its products Fusion's and each block's
//! softmax the inner backend's block softmax kernel, again as a custom operation.

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{blocked, kernel_inputs, AttentionOps};
use crate::backend::custom_op::queue_custom;
use crate::backend::has_kernels;

/// Which pass one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum Pass {
    Forward { causal: bool },
    Backward { causal: bool },
    BlockSoftmax { diagonal: Option<usize>, scale: f32 },
    BlockSoftmaxGrad { diagonal: Option<usize>, scale: f32 },
}

#[derive(Debug)]
struct QueuedAttention<B> {
    desc: CustomOpIr,
    pass: Pass,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + AttentionOps> Operation<B::FusionRuntime> for QueuedAttention<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        match self.pass {
            Pass::Forward { causal } => {
                let ([query, key, value], [output, lse]) = self.desc.as_fixed();
                let (out, row_lse) = B::lean_attention_forward(
                    handles.get_float_tensor::<B>(query),
                    handles.get_float_tensor::<B>(key),
                    handles.get_float_tensor::<B>(value),
                    causal,
                );
                handles.register_float_tensor::<B>(&output.id, out);
                handles.register_float_tensor::<B>(&lse.id, row_lse);
            }
            Pass::Backward { causal } => {
                let ([query, key, value, output, lse, grad], outputs) = self.desc.as_fixed::<6, 3>();
                let gradients = B::lean_attention_backward(
                    handles.get_float_tensor::<B>(query),
                    handles.get_float_tensor::<B>(key),
                    handles.get_float_tensor::<B>(value),
                    handles.get_float_tensor::<B>(output),
                    handles.get_float_tensor::<B>(lse),
                    handles.get_float_tensor::<B>(grad),
                    causal,
                );
                for (ir, gradient) in outputs.iter().zip(gradients) {
                    handles.register_float_tensor::<B>(&ir.id, gradient);
                }
            }
            Pass::BlockSoftmax { diagonal, scale } => {
                let ([scores], [probabilities, lse]) = self.desc.as_fixed();
                let scores = handles.get_float_tensor::<B>(scores);
                let (p, row_lse) = B::lean_attention_block_softmax(scores, diagonal, scale);
                handles.register_float_tensor::<B>(&probabilities.id, p);
                handles.register_float_tensor::<B>(&lse.id, row_lse);
            }
            Pass::BlockSoftmaxGrad { diagonal, scale } => {
                let ([scores, lse, output, grad_output, grad_probabilities], [probabilities, grad_scores]) =
                    self.desc.as_fixed();
                let (p, ds) = B::lean_attention_block_softmax_grad(
                    handles.get_float_tensor::<B>(scores),
                    handles.get_float_tensor::<B>(lse),
                    [handles.get_float_tensor::<B>(output), handles.get_float_tensor::<B>(grad_output)],
                    handles.get_float_tensor::<B>(grad_probabilities),
                    diagonal,
                    scale,
                );
                handles.register_float_tensor::<B>(&probabilities.id, p);
                handles.register_float_tensor::<B>(&grad_scores.id, ds);
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
) -> [FloatTensor<Fusion<B>>; N] {
    queue_custom::<B, _, N>(name, inputs, outputs, |desc| QueuedAttention::<B> { desc, pass, _backend: PhantomData })
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
        let inputs = vec![query, key, value];
        let [output, lse] = queue::<B, 2>(Pass::Forward { causal }, "leanburn_attention_forward", inputs, outputs);
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
        queue::<B, 3>(Pass::Backward { causal }, "leanburn_attention_backward", inputs, outputs)
    }

    fn lean_attention_block_softmax(
        scores: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !has_kernels(scores.dtype) {
            return blocked::composed_softmax::<Self>(scores, diagonal, scale);
        }
        let [batch, heads, rows, _] = scores.shape.dims::<4>();
        let outputs = [(scores.shape.clone(), scores.dtype), (Shape::new([batch, heads, rows, 1]), DType::F32)];
        let pass = Pass::BlockSoftmax { diagonal, scale };
        let [probabilities, lse] = queue::<B, 2>(pass, "leanburn_attention_block_softmax", vec![scores], outputs);
        (probabilities, lse)
    }

    fn lean_attention_block_softmax_grad(
        scores: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        [output, grad_output]: [FloatTensor<Self>; 2],
        grad_probabilities: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !has_kernels(scores.dtype) {
            let outputs = [output, grad_output];
            return blocked::composed_softmax_grad::<Self>(scores, lse, outputs, grad_probabilities, diagonal, scale);
        }
        let pass = Pass::BlockSoftmaxGrad { diagonal, scale };
        let score_like = (scores.shape.clone(), scores.dtype);
        let inputs = vec![scores, lse, output, grad_output, grad_probabilities];
        let [probabilities, grad_scores] =
            queue::<B, 2>(pass, "leanburn_attention_block_softmax_grad", inputs, [score_like.clone(), score_like]);
        (probabilities, grad_scores)
    }

    fn fused_attention(dtype: DType, head_dim: usize) -> bool {
        B::fused_attention(dtype, head_dim)
    }
}
