//! `residual_linear` on `Autodiff<B>`: one node where there is a bias (GPT-2's layers),
//! compute-bound as Burn's linear layer (its output kept, not recomputed, by a
//! checkpointing strategy), whose backward is the linear layer's (`B`'s
//! [`LinearOps::linear_grads`]: on `Lean` its GEMMs and column sums, one op where they are
//! queued) with the output's gradient passed on to the residual. Without a bias, the linear
//! layer's node ([`LinearOps::linear_layer`]) and the add's.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;

use super::ResidualOps;
use crate::backend::linear::{register_linear_grads, LinearOps, LinearState};

#[derive(Debug)]
struct ResidualLinearBackward;

impl<B: ResidualOps> Backward<B, 4> for ResidualLinearBackward {
    type State = LinearState;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_residual, node_x, node_weight, node_bias] = ops.parents.map(|node| node.map(|node| node.id));
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node_residual {
            grads.register::<B>(node, grad.clone());
        }
        register_linear_grads::<B>(grads, checkpointer, [node_x, node_weight, node_bias], ops.state, grad);
    }
}

impl<B: ResidualOps, C: CheckpointStrategy> ResidualOps for Autodiff<B, C> {
    fn residual_linear(
        residual: FloatTensor<Self>,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let Some(bias) = bias else {
            return Self::float_add(residual, Self::linear_layer(x, weight, None));
        };
        let (x_tracked, weight_tracked) = (x.is_tracked(), weight.is_tracked());
        let parents = [residual.node.clone(), x.node.clone(), weight.node.clone(), bias.node.clone()];
        match ResidualLinearBackward.prepare::<C>(parents).compute_bound().stateful() {
            OpsKind::Tracked(mut prep) => {
                // `x` is only needed for the weight's gradient, and the weight for `x`'s.
                let x_state = weight_tracked.then(|| prep.checkpoint(&x));
                let weight_state = x_tracked.then(|| prep.checkpoint(&weight));
                let out = B::residual_linear(residual.primitive, x.primitive, weight.primitive, Some(bias.primitive));
                prep.finish((x_state, weight_state), out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::residual_linear(residual.primitive, x.primitive, weight.primitive, Some(bias.primitive)))
            }
        }
    }
}
