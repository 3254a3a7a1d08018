//! [`LinearOps::linear_layer`] on `Autodiff<B>`: one node as Burn's linear layer
//! (compute-bound: its output kept, not recomputed, by a checkpointing strategy; `x` kept
//! only for the weight's gradient, the weight only for `x`'s), whose backward is `B`'s
//! [`LinearOps::linear_grads`].

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn_backend::tensor::FloatTensor;

use super::{LinearGrads, LinearOps};

/// `x`'s node where the weight needs a gradient, the weight's where `x` does.
pub(crate) type LinearState = (Option<NodeId>, Option<NodeId>);

/// The linear layer's node: parents `[x, weight]` or `[x, weight, bias]`.
#[derive(Debug)]
struct LinearBackward;

impl<B: LinearOps, const N: usize> Backward<B, N> for LinearBackward {
    type State = LinearState;

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let mut parents = ops.parents.into_iter().map(|node| node.map(|node| node.id));
        let parents = [(); 3].map(|_| parents.next().flatten());
        register_linear_grads::<B>(grads, checkpointer, parents, ops.state, grad);
    }
}

/// Registers the gradients of a linear layer's tracked parents (the nodes of `[x, weight,
/// bias]`), all from one [`LinearOps::linear_grads`] of `grad`, the layer's output's
/// gradient.
pub(crate) fn register_linear_grads<B: LinearOps>(
    grads: &mut Gradients,
    checkpointer: &mut Checkpointer,
    [node_x, node_weight, node_bias]: [Option<NodeId>; 3],
    (x_state, weight_state): LinearState,
    grad: FloatTensor<B>,
) {
    let mut retrieve = |id: Option<NodeId>| id.map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
    let (x, weight) = (retrieve(x_state), retrieve(weight_state));
    // `x` is kept exactly where the weight is tracked, and the weight where `x` is.
    let LinearGrads { x: x_grad, weight: weight_grad, bias: bias_grad } =
        B::linear_grads(node_weight.as_ref().and(x), node_x.as_ref().and(weight), grad, node_bias.is_some());
    for (node, grad) in [(node_x, x_grad), (node_weight, weight_grad), (node_bias, bias_grad)] {
        if let (Some(node), Some(grad)) = (node, grad) {
            grads.register::<B>(node, grad);
        }
    }
}

impl<B: LinearOps, C: CheckpointStrategy> LinearOps for Autodiff<B, C> {
    fn linear_layer(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let (x_tracked, weight_tracked) = (x.is_tracked(), weight.is_tracked());
        match bias {
            Some(bias) => {
                let parents = [x.node.clone(), weight.node.clone(), bias.node.clone()];
                match LinearBackward.prepare::<C>(parents).compute_bound().stateful() {
                    OpsKind::Tracked(mut prep) => {
                        let x_state = weight_tracked.then(|| prep.checkpoint(&x));
                        let weight_state = x_tracked.then(|| prep.checkpoint(&weight));
                        let out = B::linear_layer(x.primitive, weight.primitive, Some(bias.primitive));
                        prep.finish((x_state, weight_state), out)
                    }
                    OpsKind::UnTracked(prep) => {
                        prep.finish(B::linear_layer(x.primitive, weight.primitive, Some(bias.primitive)))
                    }
                }
            }
            None => match LinearBackward.prepare::<C>([x.node.clone(), weight.node.clone()]).compute_bound().stateful()
            {
                OpsKind::Tracked(mut prep) => {
                    let x_state = weight_tracked.then(|| prep.checkpoint(&x));
                    let weight_state = x_tracked.then(|| prep.checkpoint(&weight));
                    prep.finish((x_state, weight_state), B::linear_layer(x.primitive, weight.primitive, None))
                }
                OpsKind::UnTracked(prep) => prep.finish(B::linear_layer(x.primitive, weight.primitive, None)),
            },
        }
    }
}
