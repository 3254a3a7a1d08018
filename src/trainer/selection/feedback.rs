//! Per-example weights in a full step's loss, and the step's own per-example losses given
//! back: what a data-side selection such as InfoBatch (Qin et al., arXiv 2303.04947) needs
//! from the trainer. It leaves learned examples out of an epoch by the loss each had when
//! last trained on, so it scores nothing itself: the training forward pass gives the losses.

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};

use super::scoring::ExampleLosses;
use crate::trainer::error::TrainerError;

/// The data side of a full step's per-example loss: the weights of each micro-batch's
/// examples, taken as the step trains on it (in the order the batches were handed out),
/// and their losses given back after its forward pass. Implemented by a shared
/// [`IdxSampler`](crate::data::IdxSampler) (InfoBatch).
pub trait ExampleFeedback: Send {
    /// The weights of the examples of the micro-batch the step trains on now, in batch
    /// order; `None`: each counts 1 (the plain mean).
    fn weights(&mut self) -> Option<Vec<f32>>;

    /// That micro-batch's examples' losses, unweighted, in batch order.
    fn record(&mut self, losses: &[f32]);
}

/// A micro-batch's weighted step: its gradients, its loss (the unweighted mean of its
/// examples', as a plain step reports) and each example's loss.
pub(crate) struct Weighed<B: AutodiffBackend> {
    pub grads: GradientsParams,
    pub loss: Tensor<B::InnerBackend, 1>,
    pub losses: Vec<f32>,
}

/// Runs [`weighed_step`] for the trainer's model and batch types.
pub(crate) type Weigh<B, M, T> = fn(&M, T, Option<Vec<f32>>) -> Result<Weighed<B>, TrainerError>;

/// The trainer's feedback and the weighted step for its types (set by
/// `HybridTrainer::with_example_feedback`, where the bounds are known).
pub(crate) struct Feedback<B: AutodiffBackend, M, T> {
    pub source: Box<dyn ExampleFeedback>,
    pub weigh: Weigh<B, M, T>,
}

/// Forward and backward on `batch` with the loss `mean(weights · losses)` (the plain mean
/// without weights), reading each example's loss back (one sync). Fails, running no
/// backward pass, where the weights and the model's losses differ in number.
pub(crate) fn weighed_step<B, M, T>(model: &M, batch: T, weights: Option<Vec<f32>>) -> Result<Weighed<B>, TrainerError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + ExampleLosses<B, Input = T>,
{
    let losses = model.example_losses(batch);
    let examples = losses.dims()[0];
    let objective = match weights {
        Some(weights) if weights.len() != examples => {
            return Err(TrainerError::ExampleLosses { examples: weights.len(), losses: examples });
        }
        Some(weights) => {
            let weights = Tensor::<B, 1>::from_data(TensorData::new(weights, [examples]), &losses.device());
            (losses.clone() * weights.cast(losses.dtype())).mean()
        }
        None => losses.clone().mean(),
    };
    let grads = GradientsParams::from_grads(objective.backward(), model);
    let losses = losses.inner();
    let loss = losses.clone().mean();
    let losses = losses.into_data().convert::<f32>().to_vec().unwrap_or_default();
    Ok(Weighed { grads, loss, losses })
}
