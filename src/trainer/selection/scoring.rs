//! What a model and its batches implement for selection: one loss per example, forward
//! only, and a batch of chosen examples.

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{BasicOps, Int, Tensor, TensorData, TensorKind};

use crate::trainer::step::HybridBatch;

/// A module that scores each example of a batch by its own loss, forward only. Implement
/// it for the *inner* module (what `model.valid()` returns): selection scores there, so
/// no autodiff graph is built.
pub trait ExampleLosses<B: Backend> {
    /// The batch, as the inner module takes it.
    type Input;

    /// One loss per example, `[examples]`, each what the training loss would be on that
    /// example alone (a sequence's mean token loss, an image's cross-entropy).
    fn example_losses(&self, batch: Self::Input) -> Tensor<B, 1>;
}

/// A batch whose examples can be picked out.
pub trait SelectableBatch<B: AutodiffBackend>: HybridBatch<B> {
    /// Examples in the batch (its first dimension).
    fn examples(&self) -> usize;

    /// The batch of the examples at `indices` (ascending, each below [`examples`](Self::examples)).
    fn select(self, indices: &[usize]) -> Self;
}

/// The rows of `tensor` at `indices`, along the first dimension.
fn rows<B: Backend, const D: usize, K: TensorKind<B> + BasicOps<B>>(
    tensor: Tensor<B, D, K>,
    indices: &[usize],
) -> Tensor<B, D, K> {
    let ids: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [indices.len()]), &tensor.device());
    tensor.select(0, ids)
}

impl<B: AutodiffBackend, const D: usize> SelectableBatch<B> for Tensor<B, D> {
    fn examples(&self) -> usize {
        self.dims()[0]
    }

    fn select(self, indices: &[usize]) -> Self {
        rows(self, indices)
    }
}

impl<B: AutodiffBackend, const D: usize> SelectableBatch<B> for Tensor<B, D, Int> {
    fn examples(&self) -> usize {
        self.dims()[0]
    }

    fn select(self, indices: &[usize]) -> Self {
        rows(self, indices)
    }
}

/// Inputs and targets: the same examples of both.
impl<B, X, Y> SelectableBatch<B> for (X, Y)
where
    B: AutodiffBackend,
    X: SelectableBatch<B>,
    Y: SelectableBatch<B>,
{
    fn examples(&self) -> usize {
        self.0.examples()
    }

    fn select(self, indices: &[usize]) -> Self {
        (self.0.select(indices), self.1.select(indices))
    }
}
