//! Training precision: which float type the forward and backward passes compute in, and
//! how the loss is scaled so that half-precision gradients neither underflow nor go
//! unnoticed when they overflow.
//!
//! The scheme is the one of Micikevicius et al., *Mixed Precision Training* (2018), and of
//! PyTorch's `GradScaler`: the model the optimizer updates (the *master* weights) and the
//! optimizer state stay in f32, so updates far below half precision's resolution are not
//! rounded away; each full step computes on a half-precision copy of the weights, made
//! with one cast per parameter at the model boundary, and its gradients are cast back to
//! f32 once per parameter. No op in between casts.

pub(crate) mod mixed;

use serde::{Deserialize, Serialize};

use crate::trainer::config::ConfigError;
use burn::tensor::FloatDType;

/// The float type the forward and backward passes compute in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Everything in f32 (the default).
    #[default]
    F32,
    /// Compute in bfloat16: f32's range with 8 bits of mantissa. Needs no loss scaling.
    Bf16,
    /// Compute in IEEE half precision: 11 bits of mantissa, largest finite value 65,504.
    /// Small gradients underflow to zero and large ones overflow, so it is trained with a
    /// loss scaler (`LossScaler`).
    F16,
}

impl Precision {
    /// Burn's float type for this precision.
    pub fn dtype(self) -> FloatDType {
        match self {
            Precision::F32 => FloatDType::F32,
            Precision::Bf16 => FloatDType::BF16,
            Precision::F16 => FloatDType::F16,
        }
    }

    /// Bytes of one value.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 | Precision::F16 => 2,
        }
    }

    /// The name used on command lines and in records (`f32`, `bf16`, `f16`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a [`LossScaler`] moves its scale; the defaults are PyTorch's `GradScaler`'s.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScaleConfig {
    /// The scale of the first step. Default 65,536 (2¹⁶).
    pub initial_scale: f64,
    /// The scale is multiplied by this after `growth_interval` steps in a row without an
    /// overflow. Above 1. Default 2.
    pub growth_factor: f64,
    /// The scale is multiplied by this after a step whose gradients overflowed. In (0, 1).
    /// Default 0.5.
    pub backoff_factor: f64,
    /// Overflow-free steps before the scale grows. At least 1. Default 2,000.
    pub growth_interval: usize,
}

impl Default for LossScaleConfig {
    fn default() -> Self {
        Self { initial_scale: 65_536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2_000 }
    }
}

impl LossScaleConfig {
    /// Checks every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.initial_scale.is_finite() && self.initial_scale > 0.0) {
            return Err(ConfigError::LossScale { field: "initial_scale", value: self.initial_scale });
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return Err(ConfigError::LossScale { field: "growth_factor", value: self.growth_factor });
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return Err(ConfigError::LossScale { field: "backoff_factor", value: self.backoff_factor });
        }
        if self.growth_interval < 1 {
            return Err(ConfigError::LossScale { field: "growth_interval", value: 0.0 });
        }
        Ok(())
    }

    /// Sets [`initial_scale`](Self::initial_scale).
    pub fn with_initial_scale(mut self, value: f64) -> Self {
        self.initial_scale = value;
        self
    }

    /// Sets [`growth_interval`](Self::growth_interval).
    pub fn with_growth_interval(mut self, value: usize) -> Self {
        self.growth_interval = value;
        self
    }
}

/// The precision a trainer computes in, and its loss scaling.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecisionConfig {
    /// The float type of the forward and backward passes.
    pub precision: Precision,
    /// Dynamic loss scaling; `None` for none. [`PrecisionConfig::new`] turns it on for
    /// f16 only (bf16 and f32 have f32's range), but any precision may use it.
    pub loss_scale: Option<LossScaleConfig>,
}

impl PrecisionConfig {
    /// `precision`, with loss scaling (PyTorch's defaults) when it is f16.
    pub fn new(precision: Precision) -> Self {
        Self { precision, loss_scale: (precision == Precision::F16).then(LossScaleConfig::default) }
    }

    /// Sets [`loss_scale`](Self::loss_scale).
    pub fn with_loss_scale(mut self, value: Option<LossScaleConfig>) -> Self {
        self.loss_scale = value;
        self
    }

    /// Checks every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match &self.loss_scale {
            Some(scale) => scale.validate(),
            None => Ok(()),
        }
    }

    /// Whether steps take the mixed-precision path (a compute copy of the weights, the
    /// trainer's own backward pass); plain f32 without loss scaling does not.
    pub fn is_mixed(&self) -> bool {
        self.precision != Precision::F32 || self.loss_scale.is_some()
    }
}

impl Default for PrecisionConfig {
    fn default() -> Self {
        Self::new(Precision::F32)
    }
}

/// What a [`LossScaler`] says about a step's gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaledStep {
    /// All finite: unscale and apply them.
    Apply,
    /// Some overflowed: skip the update; the scale was lowered.
    Skip,
}

/// Dynamic loss scaling, as PyTorch's `GradScaler`: the loss is multiplied by
/// [`scale`](Self::scale) before the backward pass, the gradients divided by it after. A
/// step whose gradients hold an infinity or NaN is skipped and the scale backs off; after
/// `growth_interval` clean steps in a row it grows again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    config: LossScaleConfig,
    scale: f64,
    clean_steps: usize,
    overflows: usize,
}

impl LossScaler {
    /// A scaler at `config.initial_scale`.
    pub(crate) fn new(config: LossScaleConfig) -> Self {
        Self { scale: config.initial_scale, config, clean_steps: 0, overflows: 0 }
    }

    /// The same scale and counts under new settings (a resumed run's scaler).
    pub(crate) fn with_config(mut self, config: LossScaleConfig) -> Self {
        self.config = config;
        self
    }

    /// The factor the next step's loss is multiplied by.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Steps skipped for overflowed gradients so far.
    pub fn overflows(&self) -> usize {
        self.overflows
    }

    /// Takes in whether the gradients of a step were all finite, moves the scale, and says
    /// whether to apply them.
    pub(crate) fn update(&mut self, finite: bool) -> ScaledStep {
        if !finite {
            self.overflows += 1;
            self.clean_steps = 0;
            // Never to zero: a scale that small would hide every gradient.
            self.scale = (self.scale * self.config.backoff_factor).max(f64::MIN_POSITIVE);
            return ScaledStep::Skip;
        }
        self.clean_steps += 1;
        if self.clean_steps >= self.config.growth_interval {
            self.clean_steps = 0;
            let grown = self.scale * self.config.growth_factor;
            if grown.is_finite() {
                self.scale = grown;
            }
        }
        ScaledStep::Apply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_backs_off_on_overflow_and_grows_after_clean_steps() {
        let config = LossScaleConfig::default().with_initial_scale(1024.0).with_growth_interval(3);
        let mut scaler = LossScaler::new(config);
        assert_eq!(scaler.update(false), ScaledStep::Skip);
        assert_eq!(scaler.scale(), 512.0);
        assert_eq!(scaler.update(true), ScaledStep::Apply);
        assert_eq!(scaler.update(true), ScaledStep::Apply);
        assert_eq!(scaler.scale(), 512.0, "two clean steps are not yet an interval");
        assert_eq!(scaler.update(true), ScaledStep::Apply);
        assert_eq!(scaler.scale(), 1024.0);
        // An overflow restarts the count.
        scaler.update(true);
        scaler.update(false);
        scaler.update(true);
        scaler.update(true);
        assert_eq!(scaler.scale(), 512.0);
        assert_eq!(scaler.overflows(), 2);
    }

    #[test]
    fn the_scale_never_reaches_zero_or_infinity() {
        let mut low = LossScaler::new(LossScaleConfig::default().with_initial_scale(1e-300));
        for _ in 0..100 {
            low.update(false);
        }
        assert!(low.scale() > 0.0);
        let mut high = LossScaler::new(LossScaleConfig::default().with_initial_scale(1e300).with_growth_interval(1));
        for _ in 0..100 {
            high.update(true);
        }
        assert!(high.scale().is_finite());
    }

    #[test]
    fn only_f16_scales_by_default_and_bad_settings_are_named() {
        assert!(PrecisionConfig::new(Precision::F16).loss_scale.is_some());
        assert!(PrecisionConfig::new(Precision::Bf16).loss_scale.is_none());
        assert!(!PrecisionConfig::default().is_mixed());
        assert!(PrecisionConfig::new(Precision::Bf16).is_mixed());
        let bad = LossScaleConfig { backoff_factor: 1.0, ..LossScaleConfig::default() };
        assert_eq!(
            PrecisionConfig::new(Precision::F16).with_loss_scale(Some(bad)).validate(),
            Err(ConfigError::LossScale { field: "backoff_factor", value: 1.0 })
        );
        let bad = LossScaleConfig::default().with_growth_interval(0);
        assert!(bad.validate().is_err());
        assert_eq!(Precision::Bf16.to_string(), "bf16");
    }
}
