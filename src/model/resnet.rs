//! A ResNet-18-style image classifier (He et al., 2016): a 7×7 stride-2 stem with max
//! pooling, four stages of two basic blocks (two 3×3 convolutions with batch norm and a
//! shortcut), stride-2 downsampling at the start of stages 2–4 with a 1×1 projection on the
//! shortcut, then global average pooling and a linear head. With the default widths
//! (64, 128, 256, 512) it is ResNet-18's layout; the CNN example trains it on
//! `Autodiff<Lean<B>>` as `--net resnet18`.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::prelude::*;

use super::classification::image_classifier;
use crate::init::materialize;

#[derive(Config, Debug)]
pub struct ResNetConfig {
    #[config(default = 3)]
    pub in_channels: usize,
    /// Channels of each stage; every stage after the first halves the resolution.
    #[config(default = "vec![64, 128, 256, 512]")]
    pub widths: Vec<usize>,
    /// Basic blocks per stage (ResNet-18: 2).
    #[config(default = 2)]
    pub blocks_per_stage: usize,
    #[config(default = 4)]
    pub classes: usize,
}

/// A convolution without bias (batch norm's shift replaces it) followed by batch norm.
#[derive(Module, Debug)]
pub struct ConvNorm<B: Backend> {
    conv: Conv2d<B>,
    norm: BatchNorm<B>,
}

impl<B: Backend> ConvNorm<B> {
    fn new(channels: [usize; 2], kernel: usize, stride: usize, device: &B::Device) -> Self {
        let pad = kernel / 2;
        Self {
            conv: Conv2dConfig::new(channels, [kernel, kernel])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                .with_bias(false)
                .init(device),
            norm: BatchNormConfig::new(channels[1]).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.norm.forward(self.conv.forward(x))
    }
}

/// Two 3×3 convolutions with batch norm, added to the shortcut: the input itself, or its
/// 1×1 projection where the block changes width or resolution.
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    first: ConvNorm<B>,
    second: ConvNorm<B>,
    projection: Option<ConvNorm<B>>,
    activation: Relu,
}

impl<B: Backend> BasicBlock<B> {
    fn new(channels: [usize; 2], stride: usize, device: &B::Device) -> Self {
        let projection =
            (stride != 1 || channels[0] != channels[1]).then(|| ConvNorm::new(channels, 1, stride, device));
        Self {
            first: ConvNorm::new(channels, 3, stride, device),
            second: ConvNorm::new([channels[1], channels[1]], 3, 1, device),
            projection,
            activation: Relu::new(),
        }
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let shortcut = match &self.projection {
            Some(projection) => projection.forward(x.clone()),
            None => x.clone(),
        };
        let y = self.second.forward(self.activation.forward(self.first.forward(x)));
        self.activation.forward(y + shortcut)
    }
}

#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    stem: ConvNorm<B>,
    stem_pool: MaxPool2d,
    blocks: Vec<BasicBlock<B>>,
    activation: Relu,
    pool: AdaptiveAvgPool2d,
    head: Linear<B>,
}

impl ResNetConfig {
    /// The smallest input side: the stem divides it by 4, each later stage by 2.
    pub fn min_resolution(&self) -> usize {
        4 << self.widths.len().saturating_sub(1)
    }

    /// Builds the network with its parameters initialised on `device`.
    ///
    /// # Panics
    /// If `widths` is empty or any width, `in_channels`, `blocks_per_stage` or `classes`
    /// is zero.
    pub fn init<B: Backend>(&self, device: &B::Device) -> ResNet<B> {
        assert!(!self.widths.is_empty(), "a ResNet needs at least one stage");
        assert!(
            self.in_channels > 0 && self.classes > 0 && self.blocks_per_stage > 0 && self.widths.iter().all(|&w| w > 0),
            "channels, widths, blocks and classes must be positive: {self:?}"
        );
        let mut channels = self.widths[0];
        let mut blocks = Vec::with_capacity(self.widths.len() * self.blocks_per_stage);
        for (stage, &width) in self.widths.iter().enumerate() {
            for block in 0..self.blocks_per_stage {
                let stride = if stage > 0 && block == 0 { 2 } else { 1 };
                blocks.push(BasicBlock::new([channels, width], stride, device));
                channels = width;
            }
        }
        materialize(ResNet {
            stem: ConvNorm::new([self.in_channels, self.widths[0]], 7, 2, device),
            stem_pool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            blocks,
            activation: Relu::new(),
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(channels, self.classes).init(device),
        })
    }
}

impl<B: Backend> ResNet<B> {
    /// `images`: `[batch, channels, height, width]` → logits `[batch, classes]`.
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.stem_pool.forward(self.activation.forward(self.stem.forward(images)));
        let x = self.blocks.iter().fold(x, |x, block| block.forward(x));
        self.head.forward(self.pool.forward(x).flatten(1, 3))
    }
}

image_classifier!(ResNet);

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::Distribution;

    #[test]
    fn resnet18_has_resnet18s_parameters_and_downsamples_by_32() {
        let device = Default::default();
        let config = ResNetConfig::new().with_classes(1000);
        assert_eq!(config.min_resolution(), 32);
        let model = config.init::<Flex>(&device);
        // torchvision's resnet18 has 11,689,512 trainable parameters; Burn also counts
        // batch norm's running mean and variance (2 per channel of its 20 batch norms).
        let norm_channels: usize =
            64 + 4 * 64 + (128 * 2 + 128 + 128 * 2) + (256 * 2 + 256 + 256 * 2) + (512 * 2 + 512 + 512 * 2);
        assert_eq!(model.num_params(), 11_689_512 + 2 * norm_channels);
    }

    #[test]
    fn stages_halve_the_resolution_and_blocks_keep_the_shortcut_shape() {
        let device = Default::default();
        let model =
            ResNetConfig::new().with_widths(vec![4, 8]).with_blocks_per_stage(1).with_classes(3).init::<Flex>(&device);
        assert_eq!(model.blocks.len(), 2);
        assert!(model.blocks[0].projection.is_none() && model.blocks[1].projection.is_some());
        let images = Tensor::<Flex, 4>::random([2, 3, 16, 16], Distribution::Normal(0.0, 1.0), &device);
        // Stem 16 → 8, its pool → 4; stage 2 → 2.
        let stem = model.stem_pool.forward(model.stem.forward(images.clone()));
        assert_eq!(stem.dims(), [2, 4, 4, 4]);
        assert_eq!(model.blocks[1].forward(model.blocks[0].forward(stem)).dims(), [2, 8, 2, 2]);
        assert_eq!(model.forward(images).dims(), [2, 3]);
    }
}
