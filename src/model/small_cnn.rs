//! A small convolutional classifier: two 3×3 conv + ReLU layers, global average pooling
//! and a linear head. Small enough to train on llvmpipe in CI, conv-heavy enough that the
//! autodiff graph retains convolution inputs, which is what the memory tests look for.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::prelude::*;

use super::classification::image_classifier;
use crate::init::materialize;

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

    /// Mean cross-entropy of the logits against integer class `labels`.
    pub fn loss(&self, images: Tensor<B, 4>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = super::logits_in_f32(self.forward(images));
        CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, labels)
    }
}

image_classifier!(SmallCnn);
