//! [`LmHeadLossOps`] on `Autodiff<B>`: the loss as one graph node whose backward hands on
//! the gradients `B` computed with it.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::FloatDType;
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, Shape, TensorMetadata};

use super::LmHeadLossOps;

/// The loss's node: its backward scales the gradients computed with the loss (`[hidden,
/// weight]`, its state) by the loss's own gradient.
#[derive(Debug)]
struct LmHeadLossBackward;

impl<B: LmHeadLossOps> Backward<B, 2> for LmHeadLossBackward {
    type State = [FloatTensor<B>; 2];

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let upstream = grads.consume::<B>(&ops.node);
        for (node, grad) in ops.parents.into_iter().zip(ops.state) {
            if let Some(node) = node {
                grads.register::<B>(node.id, scaled::<B>(grad, upstream.clone()));
            }
        }
    }
}

/// `grad` times the one-element `factor` (f32), in `grad`'s type.
fn scaled<B: Backend>(grad: FloatTensor<B>, factor: FloatTensor<B>) -> FloatTensor<B> {
    let dtype = grad.dtype();
    let factor = if factor.dtype() == dtype { factor } else { B::float_cast(factor, FloatDType::from(dtype)) };
    let ones = Shape::from(vec![1; grad.shape().num_dims()]);
    B::float_mul(grad, B::float_reshape(factor, ones))
}

/// The loss as one node keeping the gradients `B` computed with it; the gradients alone as
/// values, without a graph.
impl<B: LmHeadLossOps, C: CheckpointStrategy> LmHeadLossOps for Autodiff<B, C> {
    fn lm_head_loss(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> FloatTensor<Self> {
        let parents = [hidden.node.clone(), weight.node.clone()];
        match LmHeadLossBackward.prepare::<C>(parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let [loss, grad_hidden, grad_weight] =
                    B::lm_head_loss_grads(hidden.primitive, weight.primitive, targets, chunk);
                prep.finish([grad_hidden, grad_weight], loss)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::lm_head_loss(hidden.primitive, weight.primitive, targets, chunk))
            }
        }
    }

    fn lm_head_loss_grads(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> [FloatTensor<Self>; 3] {
        B::lm_head_loss_grads(Self::inner(hidden), Self::inner(weight), Self::int_inner(targets), chunk)
            .map(Self::from_inner)
    }
}
