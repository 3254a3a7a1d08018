//! The network the flags ask for: plain conv blocks or ResNet-18's layout, and whose
//! convolutions run.

use clap::ValueEnum;
use leanburn::model::{ConvClassifierConfig, ResNetConfig};

use crate::common::{bad_input, Failure};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Net {
    Plain,
    Resnet18,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConvPath {
    Lean,
    Stock,
}

/// The network `--net` and `--widths` ask for, checked.
#[derive(Clone, Debug)]
pub enum NetConfig {
    Plain(ConvClassifierConfig),
    ResNet(ResNetConfig),
}

impl NetConfig {
    pub fn new(net: Net, widths: Option<Vec<usize>>, classes: usize, channels: usize) -> Result<Self, Failure> {
        if let Some(widths) = &widths {
            if widths.is_empty() || widths.contains(&0) {
                return Err(bad_input(format!("--widths must be positive channel counts, got {widths:?}")));
            }
        }
        Ok(match net {
            Net::Plain => {
                let config = ConvClassifierConfig::new().with_classes(classes).with_in_channels(channels);
                Self::Plain(match widths {
                    Some(widths) => config.with_widths(widths),
                    None => config,
                })
            }
            Net::Resnet18 => {
                let config = ResNetConfig::new().with_classes(classes).with_in_channels(channels);
                Self::ResNet(match widths {
                    Some(widths) => config.with_widths(widths),
                    None => config,
                })
            }
        })
    }

    pub fn widths(&self) -> &[usize] {
        match self {
            Self::Plain(config) => &config.widths,
            Self::ResNet(config) => &config.widths,
        }
    }

    pub fn min_resolution(&self) -> usize {
        match self {
            Self::Plain(config) => config.min_resolution(),
            Self::ResNet(config) => config.min_resolution(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Plain(config) => format!("conv net (widths {:?})", config.widths),
            Self::ResNet(config) => format!("ResNet-18-style net (stage widths {:?})", config.widths),
        }
    }

    /// Refuses an image side the network would shrink below one pixel: `resolution` is
    /// `--resolution`, or the side of `--data`'s images (`from_data`).
    pub fn check_resolution(&self, resolution: usize, from_data: bool) -> Result<(), Failure> {
        if resolution < self.min_resolution() {
            return Err(bad_input(format!(
                "{} {} is too small for {} {}: at least {}",
                if from_data { "the --data images' side" } else { "--resolution" },
                resolution,
                self.widths().len(),
                match self {
                    NetConfig::Plain(_) => "blocks, which halve it each",
                    NetConfig::ResNet(_) => "stages (the stem divides it by 4, each later stage by 2)",
                },
                self.min_resolution()
            )));
        }
        Ok(())
    }
}
