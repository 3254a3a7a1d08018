//! A small convolutional classifier: two 3×3 conv + ReLU layers, global average pooling
//! and a linear head. Small enough to train on llvmpipe in CI, conv-heavy enough that the
//! autodiff graph retains convolution inputs, which is what the memory tests look for.

use crate::init::materialize;
use crate::trainer::ForwardLoss;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

#[derive(Config, Debug)]
pub struct SmallCnnConfig {
    #[config(default = 3)]
    pub in_channels: usize,
    #[config(default = 8)]
    pub width: usize,
    #[config(default = 4)]
    pub classes: usize,
}

#[derive(Module, Debug)]
pub struct SmallCnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: AdaptiveAvgPool2d,
    head: Linear<B>,
    activation: Relu,
}

impl SmallCnnConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> SmallCnn<B> {
        let conv = |c_in, c_out| {
            Conv2dConfig::new([c_in, c_out], [3, 3]).with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1)).init(device)
        };
        materialize(SmallCnn {
            conv1: conv(self.in_channels, self.width),
            conv2: conv(self.width, self.width),
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(self.width, self.classes).init(device),
            activation: Relu::new(),
        })
    }
}

impl<B: Backend> SmallCnn<B> {
    /// `images`: `[batch, channels, height, width]` → logits `[batch, classes]`.
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.activation.forward(self.conv1.forward(images));
        let x = self.activation.forward(self.conv2.forward(x));
        let x = self.pool.forward(x);
        self.head.forward(x.flatten(1, 3))
    }

    /// Logits and mean cross-entropy, as Burn's learners expect them.
    pub fn classify(&self, images: Tensor<B, 4>, labels: Tensor<B, 1, Int>) -> ClassificationOutput<B> {
        let output = self.forward(images);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(super::logits_in_f32(output.clone()), labels.clone());
        ClassificationOutput::new(loss, output, labels)
    }

    /// Mean cross-entropy of the logits against integer class `labels`.
    pub fn loss(&self, images: Tensor<B, 4>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = super::logits_in_f32(self.forward(images));
        CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, labels)
    }
}

/// Forward + backward on `(images, labels)`, for `HybridTrainer` and Burn's learners.
/// The mean cross-entropy, for mixed-precision training.
impl<B: AutodiffBackend> ForwardLoss<B> for SmallCnn<B> {
    type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);

    fn forward_loss(&self, (images, labels): Self::Input) -> Tensor<B, 1> {
        self.loss(images, labels)
    }
}

impl<B: AutodiffBackend> TrainStep for SmallCnn<B> {
    type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);
    type Output = ClassificationOutput<B>;

    fn step(&self, (images, labels): Self::Input) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(images, labels);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

/// Forward only, on any backend (the trainer's predict steps run it on the inner one).
impl<B: Backend> InferenceStep for SmallCnn<B> {
    type Input = (Tensor<B, 4>, Tensor<B, 1, Int>);
    type Output = ClassificationOutput<B>;

    fn step(&self, (images, labels): Self::Input) -> ClassificationOutput<B> {
        self.classify(images, labels)
    }
}
