//! `lean_attention` on `Autodiff<B>`: one graph node whose backward recomputes the scores.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};

use super::{blocked, AttentionOps};

fn tensor<B: Backend>(primitive: FloatTensor<B>) -> Tensor<B, 4> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

fn primitive<B: Backend>(tensor: Tensor<B, 4>) -> FloatTensor<B> {
    tensor.into_primitive().tensor()
}

/// What the backward pass needs: q, k, v, the output, each row's log-sum-exp, causality.
type State<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, bool);

/// The query blocks of an attention over `dims` query and `keys` keys in the workspace.
fn blocks(dims: [usize; 4], keys: usize, causal: bool, elem_bytes: usize) -> Vec<blocked::Block> {
    blocked::blocks(dims[2], keys, causal, blocked::block_scores(dims, elem_bytes), blocked::KEY_GRANULE)
}

#[derive(Debug)]
struct LeanAttentionBackward;

impl<B: Backend> Backward<B, 3> for LeanAttentionBackward {
    type State = State<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [query_node, key_node, value_node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (query, key, value, output, lse, causal) = ops.state;
        let blocks = blocks(query.shape().dims::<4>(), key.shape().dims::<4>()[2], causal, query.dtype().size());
        let (grad_query, grad_key, grad_value) = blocked::backward(
            tensor::<B>(query),
            tensor(key),
            tensor(value),
            tensor(output),
            tensor(lse),
            tensor(grad),
            causal,
            &blocks,
        );
        for (node, grad) in [(query_node, grad_query), (key_node, grad_key), (value_node, grad_value)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, primitive(grad));
            }
        }
    }
}

impl<B: AttentionOps, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
    fn lean_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        let parents = [query.node.clone(), key.node.clone(), value.node.clone()];
        match LeanAttentionBackward.prepare::<C>(parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let keys = key.primitive.shape().dims::<4>()[2];
                let blocks = blocks(query.primitive.shape().dims::<4>(), keys, causal, query.primitive.dtype().size());
                let (output, lse) = blocked::forward(
                    tensor::<B>(query.primitive.clone()),
                    tensor(key.primitive.clone()),
                    tensor(value.primitive.clone()),
                    causal,
                    &blocks,
                );
                let output = primitive(output);
                let state = (query.primitive, key.primitive, value.primitive, output.clone(), primitive(lse), causal);
                prep.finish(state, output)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::lean_attention(query.primitive, key.primitive, value.primitive, causal))
            }
        }
    }
}
