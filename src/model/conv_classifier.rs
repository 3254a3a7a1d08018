//! A conv-heavy image classifier: blocks of 3×3 convolution, batch norm, ReLU and 2×2 max
//! pooling, then global average pooling and a linear head. The CNN example trains it on
//! `Autodiff<Lean<B>>`, where every convolution, forward and backward, is one of
//! leanburn's budgeted ones.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::prelude::*;

use super::classification::image_classifier;
use crate::init::materialize;

#[derive(Config, Debug)]
pub struct ConvClassifierConfig {
    #[config(default = 3)]
    pub in_channels: usize,
    /// Output channels of each block; every block halves the resolution.
    #[config(default = "vec![16, 32, 64]")]
    pub widths: Vec<usize>,
    #[config(default = 4)]
    pub classes: usize,
}

/// Conv 3×3 (no bias: batch norm's shift replaces it) → batch norm → ReLU → max pool 2×2.
#[derive(Module, Debug)]
pub struct ConvBlock<B: Backend> {
    conv: Conv2d<B>,
    norm: BatchNorm<B>,
    activation: Relu,
    pool: MaxPool2d,
}

impl<B: Backend> ConvBlock<B> {
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.pool.forward(self.activation.forward(self.norm.forward(self.conv.forward(x))))
    }
}

#[derive(Module, Debug)]
pub struct ConvClassifier<B: Backend> {
    blocks: Vec<ConvBlock<B>>,
    pool: AdaptiveAvgPool2d,
    head: Linear<B>,
}

impl ConvClassifierConfig {
    /// The smallest input side the blocks accept: each one halves it.
    pub fn min_resolution(&self) -> usize {
        1 << self.widths.len()
    }

    /// Builds the network with its parameters initialised on `device`.
    ///
    /// # Panics
    /// If `widths` is empty or any width, `in_channels` or `classes` is zero.
    pub fn init<B: Backend>(&self, device: &B::Device) -> ConvClassifier<B> {
        assert!(!self.widths.is_empty(), "a ConvClassifier needs at least one block");
        assert!(
            self.in_channels > 0 && self.classes > 0 && self.widths.iter().all(|&w| w > 0),
            "channels, widths and classes must be positive: {self:?}"
        );
        let mut channels = self.in_channels;
        let blocks = self
            .widths
            .iter()
            .map(|&width| {
                let block = ConvBlock {
                    conv: Conv2dConfig::new([channels, width], [3, 3])
                        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                        .with_bias(false)
                        .init(device),
                    norm: BatchNormConfig::new(width).init(device),
                    activation: Relu::new(),
                    pool: MaxPool2dConfig::new([2, 2]).init(),
                };
                channels = width;
                block
            })
            .collect();
        materialize(ConvClassifier {
            blocks,
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(channels, self.classes).init(device),
        })
    }
}

impl<B: Backend> ConvClassifier<B> {
    /// `images`: `[batch, channels, height, width]` → logits `[batch, classes]`.
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.blocks.iter().fold(images, |x, block| block.forward(x));
        self.head.forward(self.pool.forward(x).flatten(1, 3))
    }
}

image_classifier!(ConvClassifier);

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::module::AutodiffModule;
    use burn::tensor::Distribution;

    type B = burn::backend::Autodiff<Flex>;

    #[test]
    fn each_block_halves_the_resolution_and_the_head_sees_the_last_width() {
        let device = Default::default();
        let config = ConvClassifierConfig::new().with_widths(vec![4, 6]).with_classes(5);
        assert_eq!(config.min_resolution(), 4);
        let model = config.init::<Flex>(&device);
        let images = Tensor::<Flex, 4>::random([2, 3, 12, 12], Distribution::Normal(0.0, 1.0), &device);
        assert_eq!(model.blocks[0].forward(images.clone()).dims(), [2, 4, 6, 6]);
        assert_eq!(model.forward(images).dims(), [2, 5]);
        // conv 3·3·3·4 + bn 2·4 + conv 4·3·3·6 + bn 2·6 + head 6·5+5, plus batch norm's
        // running mean and variance, which Burn counts among a module's parameters.
        assert_eq!(model.num_params(), 108 + 8 + 216 + 12 + 35 + 2 * (4 + 6));
    }

    #[test]
    fn evaluation_counts_correct_predictions() {
        let device = Default::default();
        let model = ConvClassifierConfig::new().with_widths(vec![4]).init::<B>(&device).valid();
        let images = Tensor::<Flex, 4>::random([6, 3, 8, 8], Distribution::Normal(0.0, 1.0), &device);
        let predicted: Vec<i64> =
            model.forward(images.clone()).argmax(1).reshape([6]).into_data().convert::<i64>().to_vec().unwrap();
        // Labels equal to the predictions in the first four examples, wrong in the last two.
        let labels: Vec<i64> =
            predicted.iter().enumerate().map(|(i, &p)| if i < 4 { p } else { (p + 1) % 4 }).collect();
        let labels = Tensor::<Flex, 1, Int>::from_data(TensorData::new(labels, [6]), &device);
        let evaluation = model.evaluate([(images, labels)]);
        assert_eq!(evaluation.examples, 6);
        assert!((evaluation.accuracy - 4.0 / 6.0).abs() < 1e-12, "{evaluation:?}");
        assert!(evaluation.loss.is_finite() && evaluation.loss > 0.0);
    }
}
