//! `lean_layer_norm` on `Autodiff<B>`: one graph node, its backward one op on `B`.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn_backend::ops::ModuleOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::TensorMetadata;

use super::LayerNormOps;

/// What the backward pass needs: the input, γ, and each row's mean and `1/σ`.
type State<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

#[derive(Debug)]
struct LeanLayerNormBackward;

impl<B: LayerNormOps> Backward<B, 3> for LeanLayerNormBackward {
    type State = State<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, mean, rstd) = ops.state;
        let gradients = B::lean_layer_norm_backward(x, gamma, mean, rstd, grad);
        for (node, grad) in ops.parents.into_iter().zip(gradients) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: LayerNormOps, C: CheckpointStrategy> LayerNormOps for Autodiff<B, C> {
    fn lean_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        // Without kernels the node buys nothing, and without β it would have two parents:
        // Burn's composed LayerNorm serves both.
        let beta = match beta {
            Some(beta) if B::fused_layer_norm(x.primitive.dtype()) => beta,
            beta => return Self::layer_norm(x, gamma, beta, epsilon),
        };
        let parents = [x.node.clone(), gamma.node.clone(), beta.node.clone()];
        match LeanLayerNormBackward.prepare::<C>(parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let [y, mean, rstd] = B::lean_layer_norm_forward(
                    x.primitive.clone(),
                    gamma.primitive.clone(),
                    Some(beta.primitive),
                    epsilon,
                );
                prep.finish((x.primitive, gamma.primitive, mean, rstd), y)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::lean_layer_norm(x.primitive, gamma.primitive, Some(beta.primitive), epsilon))
            }
        }
    }

    fn fused_layer_norm(dtype: burn_backend::DType) -> bool {
        B::fused_layer_norm(dtype)
    }
}
