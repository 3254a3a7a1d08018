//! What a selecting step does: score the batch on the inner model, keep the chosen rows.

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use super::scoring::{ExampleLosses, SelectableBatch};
use super::SelectionConfig;
use crate::trainer::error::TrainerError;

/// A batch after selection, and how many of its examples were kept.
pub(crate) struct Selected<T> {
    pub batch: T,
    pub kept: usize,
    pub scored: usize,
}

/// Scores a batch and keeps the chosen examples (see [`select_examples`]).
pub(crate) type Pick<M, T> = fn(&M, T, &SelectionConfig, usize) -> Result<Selected<T>, TrainerError>;

/// The trainer's selection: its configuration and the scoring function for its model and
/// batch types (set by `HybridTrainer::with_selection`, where the bounds are known).
pub(crate) struct Selector<M, T> {
    pub config: SelectionConfig,
    pub pick: Pick<M, T>,
}

/// Scores `batch` on `model.valid()` (one read-back of the losses) and keeps what
/// `config` chooses at `step`; the whole batch, untouched, where it keeps every example.
/// Fails, changing nothing, where the model scores another number of examples than the
/// batch holds.
pub(crate) fn select_examples<B, M, T>(
    model: &M,
    batch: T,
    config: &SelectionConfig,
    step: usize,
) -> Result<Selected<T>, TrainerError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    M::InnerModule: ExampleLosses<B::InnerBackend, Input = T::Inner>,
    T: SelectableBatch<B>,
{
    let losses = model.valid().example_losses(batch.clone().into_inner());
    let losses: Vec<f64> = losses.into_data().convert::<f64>().to_vec().unwrap_or_default();
    let scored = batch.examples();
    if losses.len() != scored {
        return Err(TrainerError::ExampleLosses { examples: scored, losses: losses.len() });
    }
    let chosen = config.choose(&losses, step);
    let kept = chosen.len();
    let batch = if kept == scored { batch } else { batch.select(&chosen) };
    Ok(Selected { batch, kept, scored })
}
