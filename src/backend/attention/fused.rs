//! [`AttentionOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's fused
//! attention kernels as Fusion custom operations, as `Lean`'s pixel moves are
//! (`backend/conv/fused.rs`); where the inner backend has no kernel for the inputs, the
//! composed path on the fused backend itself, its products Fusion's and each block's
//! softmax the inner backend's block softmax kernel, again as a custom operation. The
//! packed attention in blocks on the GEMMs (`Lean`'s path where they are the vendor's) is
//! one custom operation a pass, run by the inner backend: the fusion stream takes two
//! operations a layer where it took the heads' copy, the blocks' products and softmax, the
//! gradient's packing and the drops of their intermediates.

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{blocked, kernel_inputs, packed, AttentionOps};
use crate::backend::custom_op::queue_custom;
use crate::backend::has_kernels;

/// Which pass one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum Pass {
    Forward {
        causal: bool,
    },
    Backward {
        causal: bool,
    },
    BlockSoftmax {
        diagonal: Option<usize>,
        scale: f32,
    },
    BlockSoftmaxGrad {
        diagonal: Option<usize>,
        scale: f32,
    },
    /// The packed attention in blocks on the inner backend's GEMMs, `[batch, seq, heads]`.
    BlocksForward {
        layout: [usize; 3],
        causal: bool,
    },
    BlocksBackward {
        layout: [usize; 3],
        causal: bool,
    },
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
            Pass::BlocksForward { layout, causal } => {
                let qkv = handles.get_float_tensor::<B>(&self.desc.inputs[0]);
                let ([query, key, value, _, lse], rows) = packed::blocks_forward::<B>(qkv, layout, causal);
                self.register(handles, [query, key, value, lse, rows]);
            }
            Pass::BlocksBackward { layout, causal } => {
                let ([query, key, value, output, lse, grad], _) = self.desc.as_fixed::<6, 1>();
                let saved = [query, key, value, output, lse].map(|ir| handles.get_float_tensor::<B>(ir));
                let grad = handles.get_float_tensor::<B>(grad);
                self.register(handles, [packed::blocks_backward::<B>(saved, grad, layout, causal)]);
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

impl<B: FusionBackend> QueuedAttention<B> {
    /// Registers `tensors` as the operation's outputs, in order.
    fn register<const N: usize>(
        &self,
        handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
        tensors: [FloatTensor<B>; N],
    ) {
        for (ir, tensor) in self.desc.outputs.iter().zip(tensors) {
            handles.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// The attention's operations queued on this thread so far, by name (for the tests:
    /// what one test queued while others run).
    pub(super) static QUEUED: std::cell::RefCell<std::collections::HashMap<&'static str, usize>> =
        std::cell::RefCell::default();
}

/// How many operations named `name` this thread has queued (tests).
#[cfg(test)]
pub(super) fn queued_here(name: &str) -> usize {
    QUEUED.with(|queued| queued.borrow().get(name).copied().unwrap_or(0))
}

/// Queues `pass` with `inputs`, producing tensors of `outputs` (shape, type).
fn queue<B: FusionBackend + AttentionOps, const N: usize>(
    pass: Pass,
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: [(Shape, DType); N],
) -> [FloatTensor<Fusion<B>>; N] {
    #[cfg(test)]
    QUEUED.with(|queued| *queued.borrow_mut().entry(name).or_default() += 1);
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

    /// One queued operation, the inner backend's blocks (their products its GEMMs): the
    /// copy of q, k and v, the blocks' products and softmax, the output's copy into token
    /// rows, none of them an operation of the fusion stream.
    fn lean_attention_blocks_forward(
        qkv: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> ([FloatTensor<Self>; 5], FloatTensor<Self>) {
        let [batch, seq, heads] = layout;
        let head_dim = qkv.shape[1] / 3 / heads.max(1);
        let heads_like = (Shape::new([batch, heads, seq, head_dim]), qkv.dtype);
        let lse = (Shape::new([batch, heads, seq, 1]), DType::F32);
        let rows = (Shape::new([batch * seq, heads * head_dim]), qkv.dtype);
        let outputs = [heads_like.clone(), heads_like.clone(), heads_like, lse, rows];
        let pass = Pass::BlocksForward { layout, causal };
        let [query, key, value, lse, rows] =
            queue::<B, 5>(pass, "leanburn_attention_blocks_forward", vec![qkv], outputs);
        ([query, key, value, rows.clone(), lse], rows)
    }

    /// One queued operation: the output's gradient copied from token rows into contiguous
    /// heads, the blocks' backward and the packed gradient.
    fn lean_attention_blocks_backward(
        saved: [FloatTensor<Self>; 5],
        grad: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> FloatTensor<Self> {
        let [batch, seq, heads] = layout;
        let [_, _, _, head_dim] = saved[0].shape.dims::<4>();
        let packed = (Shape::new([batch * seq, 3 * heads * head_dim]), saved[0].dtype);
        let mut inputs = Vec::from(saved);
        inputs.push(grad);
        let pass = Pass::BlocksBackward { layout, causal };
        let [gradient] = queue::<B, 1>(pass, "leanburn_attention_blocks_backward", inputs, [packed]);
        gradient
    }

    fn fused_attention(dtype: DType, head_dim: usize) -> bool {
        B::fused_attention(dtype, head_dim)
    }
}
