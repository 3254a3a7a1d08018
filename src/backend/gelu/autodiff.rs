//! `exact_gelu` on `Autodiff<B>`: Burn's own GELU node (kept or recomputed by the
//! checkpointing strategy, as Burn's), with the exact derivative (`GeluOps::exact_gelu_backward`) as its backward.

use core::marker::PhantomData;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::retro_forward::RetroForward;
use burn::backend::autodiff::checkpoint::state::BackwardStates;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{unary, Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn_backend::tensor::FloatTensor;
use burn_backend::Backend;

use super::GeluOps;

#[derive(Debug)]
struct ExactGeluBackward;

impl<B: GeluOps> Backward<B, 1> for ExactGeluBackward {
    /// The input's node: its value is kept or recomputed, as the strategy decides.
    type State = NodeId;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let input: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state);
        unary::<B, _>(ops.parents, ops.node, grads, |grad| B::exact_gelu_backward(input, grad));
    }
}

/// Recomputes the GELU from its input, for a checkpointing strategy that drops it.
#[derive(Debug, Clone)]
struct RetroExactGelu<B: Backend> {
    input: NodeId,
    _backend: PhantomData<B>,
}

impl<B: GeluOps> RetroForward for RetroExactGelu<B> {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let input = states.get_state::<FloatTensor<B>>(&self.input);
        states.save(out_node, B::exact_gelu(input))
    }
}

impl<B: GeluOps, C: CheckpointStrategy> GeluOps for Autodiff<B, C> {
    fn exact_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let retro = RetroExactGelu::<B> { input: x.node.id, _backend: PhantomData };
        match ExactGeluBackward
            .prepare::<C>([x.node.clone()])
            .memory_bound()
            .retro_forward(retro)
            .parents([&x])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = prep.checkpoint(&x);
                prep.finish(state, B::exact_gelu(x.primitive.clone()))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::exact_gelu(x.primitive)),
        }
    }
}
