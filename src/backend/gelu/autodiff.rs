//! `exact_gelu` on `Autodiff<B>`: Burn's own GELU node (kept or recomputed by the
//! checkpointing strategy, as Burn's), with the exact derivative (`GeluOps::exact_gelu_backward`) as its backward.
//! `bias_gelu`: one node where `B` has the kernels (memory-bound and recomputable as
//! Burn's GELU; its backward `B::bias_gelu_backward` and the bias's column sums), else the
//! add's node and `exact_gelu`'s.

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
use burn_backend::{Backend, TensorMetadata};

use super::{add_bias, bias_fits, GeluOps};

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

#[derive(Debug)]
struct BiasGeluBackward;

impl<B: GeluOps> Backward<B, 2> for BiasGeluBackward {
    /// The input's and the bias's nodes: kept or recomputed, as the strategy decides.
    type State = (NodeId, NodeId);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_bias] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let x: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state.0);
        let bias: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state.1);
        let pre_activation_grad = B::bias_gelu_backward(x, bias, grad);
        if let Some(node) = node_bias {
            // Burn's linear layer's bias gradient (leanburn's column sums on `Lean`).
            grads.register::<B>(node.id, B::linear_bias_backward(pre_activation_grad.clone()));
        }
        if let Some(node) = node_x {
            grads.register::<B>(node.id, pre_activation_grad);
        }
    }
}

/// Recomputes `bias_gelu` from its inputs, for a checkpointing strategy that drops it (as
/// Burn's GELU node: a memory-bound op is recomputed rather than kept).
#[derive(Debug, Clone)]
struct RetroBiasGelu<B: Backend> {
    x: NodeId,
    bias: NodeId,
    _backend: PhantomData<B>,
}

impl<B: GeluOps> RetroForward for RetroBiasGelu<B> {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let x = states.get_state::<FloatTensor<B>>(&self.x);
        let bias = states.get_state::<FloatTensor<B>>(&self.bias);
        states.save(out_node, B::bias_gelu(x, bias))
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

    /// One node where `B` has the kernels; else the add's node and `exact_gelu`'s (on
    /// Flex, say, the add and its one-pass GELU forward and backward: a node here would
    /// add the bias again in the backward).
    fn bias_gelu(x: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        let fits = B::gelu_kernel(x.primitive.dtype()) && bias_fits(&x.primitive.shape(), &bias.primitive.shape());
        if !fits {
            return Self::exact_gelu(add_bias::<Self>(x, bias));
        }
        let retro = RetroBiasGelu::<B> { x: x.node.id, bias: bias.node.id, _backend: PhantomData };
        match BiasGeluBackward
            .prepare::<C>([x.node.clone(), bias.node.clone()])
            .memory_bound()
            .retro_forward(retro)
            .parents([&x, &bias])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (prep.checkpoint(&x), prep.checkpoint(&bias));
                prep.finish(state, B::bias_gelu(x.primitive, bias.primitive))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::bias_gelu(x.primitive, bias.primitive)),
        }
    }

    fn gelu_kernel(dtype: burn_backend::DType) -> bool {
        B::gelu_kernel(dtype)
    }
}
