//! `lean_attention` on `Autodiff<B>`: one graph node whose backward recomputes the scores;
//! `lean_attention_packed` the same with one parent, the packed `qkv`, whose gradient it
//! writes as one tensor, and its output in token rows.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn_backend::tensor::FloatTensor;

use super::AttentionOps;

/// What the backward pass needs: q, k, v, the output, each row's log-sum-exp, causality.
type State<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, bool);

#[derive(Debug)]
struct LeanAttentionBackward;

impl<B: AttentionOps> Backward<B, 3> for LeanAttentionBackward {
    type State = State<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [query_node, key_node, value_node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (query, key, value, output, lse, causal) = ops.state;
        let gradients = B::lean_attention_backward(query, key, value, output, lse, grad, causal);
        for (node, grad) in [query_node, key_node, value_node].into_iter().zip(gradients) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// What the packed node's backward needs: what its forward pass saved, causality and the
/// packing `[batch, seq, heads]`.
type PackedState<B> = ([FloatTensor<B>; 5], bool, [usize; 3]);

#[derive(Debug)]
struct PackedAttentionBackward;

impl<B: AttentionOps> Backward<B, 1> for PackedAttentionBackward {
    type State = PackedState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [qkv_node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (saved, causal, layout) = ops.state;
        if let Some(node) = qkv_node {
            grads.register::<B>(node.id, B::lean_attention_packed_backward(saved, grad, layout, causal));
        }
    }
}

impl<B: AttentionOps, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
    fn lean_attention_packed(qkv: FloatTensor<Self>, layout: [usize; 3], causal: bool) -> FloatTensor<Self> {
        match PackedAttentionBackward.prepare::<C>([qkv.node.clone()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (saved, rows) = B::lean_attention_packed_forward(qkv.primitive, layout, causal);
                prep.finish((saved, causal, layout), rows)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::lean_attention_packed(qkv.primitive, layout, causal)),
        }
    }

    fn lean_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        let parents = [query.node.clone(), key.node.clone(), value.node.clone()];
        match LeanAttentionBackward.prepare::<C>(parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (output, lse) = B::lean_attention_forward(
                    query.primitive.clone(),
                    key.primitive.clone(),
                    value.primitive.clone(),
                    causal,
                );
                let state = (query.primitive, key.primitive, value.primitive, output.clone(), lse, causal);
                prep.finish(state, output)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::lean_attention(query.primitive, key.primitive, value.primitive, causal))
            }
        }
    }
}
