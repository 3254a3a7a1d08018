//! How a model plugs into the trainer.
//!
//! The trainer speaks Burn's own conventions: the autodiff model implements
//! [`TrainStep`](burn::train::TrainStep) (forward + backward), its inner module implements
//! [`InferenceStep`](burn::train::InferenceStep) (forward only). Two small traits here fill
//! the gaps: a batch must be movable to the inner backend, and an output must expose its
//! loss.

use burn::module::AutodiffModule;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Int, Tensor};
use burn::train::{
    ClassificationOutput, InferenceStep, MultiLabelClassificationOutput, RegressionOutput, SequenceOutput, TrainStep,
};

/// A model the trainer can train on batches `T`: Burn's [`TrainStep`] on the autodiff
/// model and [`InferenceStep`] on its inner module (what a predict block's probe runs),
/// both with outputs that carry their loss. Implemented for every model that has those;
/// it only names the bounds once.
pub trait HybridModel<B: AutodiffBackend, T: HybridBatch<B>>:
    AutodiffModule<B, InnerModule: InferenceStep<Input = T::Inner, Output: StepLoss<B::InnerBackend>>>
    + TrainStep<Input = T, Output: StepLoss<B>>
{
}

impl<B, T, M> HybridModel<B, T> for M
where
    B: AutodiffBackend,
    T: HybridBatch<B>,
    M: AutodiffModule<B, InnerModule: InferenceStep<Input = T::Inner, Output: StepLoss<B::InnerBackend>>>
        + TrainStep<Input = T, Output: StepLoss<B>>,
{
}

/// A training batch that can also be given to the inner (non-autodiff) model.
///
/// A predict block's probe runs the inner module, so its batch must live on
/// `B::InnerBackend`. Data tensors carry no graph, so moving them is free: use
/// [`Tensor::inner`] on each field. `Clone` because the probe runs a batch twice, and a
/// rejected block trains on it after all (tensor clones share their data).
pub trait HybridBatch<B: AutodiffBackend>: Clone + Send + 'static {
    /// The same batch on `B::InnerBackend`.
    type Inner: Send + 'static;

    /// Moves the batch to the inner backend.
    fn into_inner(self) -> Self::Inner;

    /// Number of items (examples, or tokens) in the batch, for throughput.
    fn items(&self) -> usize;

    /// The batch with its float tensors cast to `dtype`: mixed-precision steps feed the
    /// model its inputs in the compute precision. Integer data (token ids, labels) is
    /// left alone, which is what the default does.
    fn cast_floats(self, dtype: FloatDType) -> Self
    where
        Self: Sized,
    {
        let _ = dtype;
        self
    }
}

/// A model whose forward pass yields its scalar loss, for the trainer to run the backward
/// pass itself. Mixed precision needs this (the loss is cast to f32 and multiplied by the
/// loss scale before the backward pass, which [`TrainStep`](burn::train::TrainStep) does
/// not let a caller do); a model's `TrainStep` is naturally written in terms of it.
pub trait ForwardLoss<B: AutodiffBackend> {
    /// The batch.
    type Input;

    /// The mean loss over `input`, shape `[1]`, with its autodiff graph.
    fn forward_loss(&self, input: Self::Input) -> Tensor<B, 1>;
}

/// An output that carries a scalar loss tensor (shape `[1]`).
pub trait StepLoss<B: Backend> {
    /// The loss of the step (a cheap clone of the tensor; reading it is up to the caller).
    fn loss(&self) -> Tensor<B, 1>;
}

impl<B: Backend> StepLoss<B> for ClassificationOutput<B> {
    fn loss(&self) -> Tensor<B, 1> {
        self.loss.clone()
    }
}

impl<B: Backend> StepLoss<B> for MultiLabelClassificationOutput<B> {
    fn loss(&self) -> Tensor<B, 1> {
        self.loss.clone()
    }
}

impl<B: Backend> StepLoss<B> for RegressionOutput<B> {
    fn loss(&self) -> Tensor<B, 1> {
        self.loss.clone()
    }
}

impl<B: Backend> StepLoss<B> for SequenceOutput<B> {
    fn loss(&self) -> Tensor<B, 1> {
        self.loss.clone()
    }
}

impl<B: Backend> StepLoss<B> for Tensor<B, 1> {
    fn loss(&self) -> Tensor<B, 1> {
        self.clone()
    }
}

/// A float tensor is a batch of `dims[0]` items.
impl<B: AutodiffBackend, const D: usize> HybridBatch<B> for Tensor<B, D> {
    type Inner = Tensor<B::InnerBackend, D>;

    fn into_inner(self) -> Self::Inner {
        self.inner()
    }

    fn items(&self) -> usize {
        self.dims().first().copied().unwrap_or(0)
    }

    fn cast_floats(self, dtype: FloatDType) -> Self {
        self.cast(dtype)
    }
}

/// An integer tensor (token ids, labels) is a batch of `dims[0]` items.
impl<B: AutodiffBackend, const D: usize> HybridBatch<B> for Tensor<B, D, Int> {
    type Inner = Tensor<B::InnerBackend, D, Int>;

    fn into_inner(self) -> Self::Inner {
        self.inner()
    }

    fn items(&self) -> usize {
        self.dims().first().copied().unwrap_or(0)
    }
}

/// Inputs and targets: the items are the inputs'.
impl<B, X, Y> HybridBatch<B> for (X, Y)
where
    B: AutodiffBackend,
    X: HybridBatch<B>,
    Y: HybridBatch<B>,
{
    type Inner = (X::Inner, Y::Inner);

    fn into_inner(self) -> Self::Inner {
        (self.0.into_inner(), self.1.into_inner())
    }

    fn items(&self) -> usize {
        self.0.items()
    }

    fn cast_floats(self, dtype: FloatDType) -> Self {
        (self.0.cast_floats(dtype), self.1.cast_floats(dtype))
    }
}
