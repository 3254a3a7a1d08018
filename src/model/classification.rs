//! What the image classifiers share: the loss on logits, the evaluation loop, and their
//! training and inference steps for `HybridTrainer` and Burn's learners.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::prelude::*;
use burn::train::ClassificationOutput;

/// Mean loss and accuracy over a held-out set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    pub loss: f64,
    pub accuracy: f64,
    pub examples: usize,
}

/// `logits` `[batch, classes]` and the mean cross-entropy (in f32) against `labels`.
pub(crate) fn classification<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> ClassificationOutput<B> {
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(super::logits_in_f32(logits.clone()), labels.clone());
    ClassificationOutput::new(loss, logits, labels)
}

/// Each image's cross-entropy (in f32), `[batch]`: what selection scores examples by.
pub(crate) fn example_cross_entropy<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let count = labels.dims()[0];
    let log_probabilities = burn::tensor::activation::log_softmax(super::logits_in_f32(logits), 1);
    log_probabilities.gather(1, labels.reshape([count, 1])).reshape([count]).neg()
}

/// Mean loss and accuracy of `classify` over `batches`.
pub(crate) fn evaluate<B: Backend>(
    batches: impl IntoIterator<Item = (Tensor<B, 4>, Tensor<B, 1, Int>)>,
    classify: impl Fn(Tensor<B, 4>, Tensor<B, 1, Int>) -> ClassificationOutput<B>,
) -> Evaluation {
    let (mut loss, mut correct, mut seen) = (0.0, 0usize, 0usize);
    for (images, labels) in batches {
        let count = labels.dims()[0];
        let output = classify(images, labels);
        let predicted = output.output.argmax(1).reshape([count]);
        let hits: i64 = predicted.equal(output.targets).int().sum().into_scalar().elem();
        let batch_loss: f64 = output.loss.into_scalar().elem();
        loss += batch_loss * count as f64;
        correct += hits as usize;
        seen += count;
    }
    Evaluation { loss: loss / seen.max(1) as f64, accuracy: correct as f64 / seen.max(1) as f64, examples: seen }
}

/// For an image classifier with a `forward(images) -> logits` method: `classify` (logits
/// and mean cross-entropy), `evaluate` (mean loss and accuracy), and the steps the trainer
/// and Burn's learners call: `ForwardLoss` (for mixed precision), `TrainStep` (forward +
/// backward), `InferenceStep` (forward only, on any backend: the trainer's predict steps
/// run it on the inner one) and `ExampleLosses` (each image's loss, for selection).
macro_rules! image_classifier {
    ($model:ident) => {
        impl<B: Backend> $model<B> {
            /// Logits and mean cross-entropy against integer class `labels`.
            pub fn classify(
                &self,
                images: Tensor<B, 4>,
                labels: Tensor<B, 1, Int>,
            ) -> burn::train::ClassificationOutput<B> {
                $crate::model::classification::classification(self.forward(images), labels)
            }

            /// Mean loss and accuracy over `batches` (call it on the inner backend,
            /// `model.valid()`, so no graph is built and batch norm uses its running
            /// statistics).
            pub fn evaluate(
                &self,
                batches: impl IntoIterator<Item = (Tensor<B, 4>, Tensor<B, 1, Int>)>,
            ) -> $crate::model::Evaluation {
                $crate::model::classification::evaluate(batches, |images, labels| self.classify(images, labels))
            }
        }

        impl<B: burn::tensor::backend::AutodiffBackend> $crate::trainer::ForwardLoss<B> for $model<B> {
            type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);

            fn forward_loss(&self, (images, labels): Self::Input) -> Tensor<B, 1> {
                self.classify(images, labels).loss
            }
        }

        impl<B: burn::tensor::backend::AutodiffBackend> burn::train::TrainStep for $model<B> {
            type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);
            type Output = burn::train::ClassificationOutput<B>;

            fn step(&self, (images, labels): Self::Input) -> burn::train::TrainOutput<Self::Output> {
                let item = self.classify(images, labels);
                burn::train::TrainOutput::new(self, item.loss.backward(), item)
            }
        }

        impl<B: Backend> $crate::trainer::ExampleLosses<B> for $model<B> {
            type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);

            fn example_losses(&self, (images, labels): Self::Input) -> Tensor<B, 1> {
                $crate::model::classification::example_cross_entropy(self.forward(images), labels)
            }
        }

        impl<B: Backend> burn::train::InferenceStep for $model<B> {
            type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);
            type Output = burn::train::ClassificationOutput<B>;

            fn step(&self, (images, labels): Self::Input) -> Self::Output {
                self.classify(images, labels)
            }
        }
    };
}

pub(crate) use image_classifier;
