//! Selection: a backward pass only for the examples that need it (Selective-Backprop,
//! Jiang et al., arXiv 1910.00762).
//!
//! With selection on, a full step first scores every example of its batch by its own loss,
//! forward only, on the inner model (`model.valid()`: no autodiff graph), then runs the
//! usual forward and backward pass on the selected examples alone. A step on `n`
//! candidates costs about `F + 3kF` for a kept fraction `k`, against `3F`; and the
//! backward pass holds the activations of `k · n` examples, so a larger candidate batch
//! fits the memory a full batch took.
//!
//! Which examples: the [`SelectionRule`]; when: the steps in
//! [`SelectionConfig::from_step`]`..`[`until_step`](SelectionConfig::until_step), with
//! every [`full_every`](SelectionConfig::full_every)-th of them a whole batch (as
//! Composer's `interrupt`). Predicted steps never select: they have no backward pass.
//! The model's inner module gives the scores ([`ExampleLosses`]), the batch gives the
//! selected rows ([`SelectableBatch`]).

pub(crate) mod feedback;
pub(crate) mod pick;
mod scoring;
#[cfg(test)]
mod training_tests;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::config::ConfigError;

pub use feedback::ExampleFeedback;
pub use scoring::{ExampleLosses, SelectableBatch};

/// Which of a batch's examples a selecting step trains on, from their losses.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionRule {
    /// The `keep` fraction of the batch with the highest losses (at least one example), in
    /// `(0, 1]`.
    TopFraction { keep: f64 },
    /// Selective-Backprop's rule: each example is kept with probability `r^beta`, where `r`
    /// in `(0, 1]` is its loss's rank in the batch over the batch size (the highest loss has
    /// rank 1 and is always kept; `beta = 0` keeps every example; larger `beta` keeps
    /// fewer: about `1 / (beta + 1)` of them). `beta` at least 0, finite.
    LossPower { beta: f64 },
}

/// When and how full steps select their examples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectionConfig {
    /// Which examples are trained on.
    pub rule: SelectionRule,
    /// The first trainer step (0-based) that selects. Default 0.
    pub from_step: usize,
    /// The first step that no longer selects; `None`: to the end. Default `None`.
    pub until_step: Option<usize>,
    /// Every this many selecting steps, one trains on its whole batch (counted from
    /// `from_step`); 0 never does. Default 0.
    pub full_every: usize,
    /// Seeds the random choices of [`SelectionRule::LossPower`], with the step: a resumed
    /// run chooses as the uninterrupted one would. Default 0.
    pub seed: u64,
}

impl SelectionConfig {
    /// `rule` over every step.
    pub fn new(rule: SelectionRule) -> Self {
        Self { rule, from_step: 0, until_step: None, full_every: 0, seed: 0 }
    }

    /// Selects on steps `from..until` (0-based; `until` exclusive, `None` to the end).
    pub fn with_steps(mut self, from: usize, until: Option<usize>) -> Self {
        self.from_step = from;
        self.until_step = until;
        self
    }

    pub fn with_full_every(mut self, every: usize) -> Self {
        self.full_every = every;
        self
    }

    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Checks the rule's parameter and the step range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field: &'static str, value: f64| Err(ConfigError::Selection { field, value });
        match self.rule {
            SelectionRule::TopFraction { keep } if !(keep > 0.0 && keep <= 1.0) => return fail("keep", keep),
            SelectionRule::LossPower { beta } if !(beta.is_finite() && beta >= 0.0) => return fail("beta", beta),
            _ => {}
        }
        if self.until_step.is_some_and(|until| until <= self.from_step) {
            return fail("until_step", self.until_step.unwrap_or(0) as f64);
        }
        Ok(())
    }

    /// Whether step `step` (0-based) selects.
    pub fn selects_at(&self, step: usize) -> bool {
        let active = step >= self.from_step && self.until_step.is_none_or(|until| step < until);
        let whole = self.full_every > 0 && (step - self.from_step.min(step) + 1).is_multiple_of(self.full_every);
        active && !whole
    }

    /// The indices (ascending) of the examples to train on, given every example's loss;
    /// `step` seeds the random rule. Non-finite losses count as the highest.
    pub fn choose(&self, losses: &[f64], step: usize) -> Vec<usize> {
        let n = losses.len();
        if n == 0 {
            return Vec::new();
        }
        // Indices by loss, highest first (NaN first: a broken example is not hidden).
        let key = |i: usize| if losses[i].is_nan() { f64::INFINITY } else { losses[i] };
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
        let mut chosen: Vec<usize> = match self.rule {
            SelectionRule::TopFraction { keep } => {
                let k = ((keep * n as f64).ceil() as usize).clamp(1, n);
                order[..k].to_vec()
            }
            SelectionRule::LossPower { beta } => {
                let mut rng = SmallRng::seed_from_u64(self.seed ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                order
                    .iter()
                    .enumerate()
                    .filter(|&(rank, _)| {
                        let r = (n - rank) as f64 / n as f64;
                        rank == 0 || rng.random::<f64>() < r.powf(beta)
                    })
                    .map(|(_, &i)| i)
                    .collect()
            }
        };
        chosen.sort_unstable();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_fraction_keeps_the_highest_losses_in_batch_order() {
        let config = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.5 });
        assert_eq!(config.choose(&[0.1, 3.0, 0.5, 2.0], 0), vec![1, 3]);
        // At least one, rounding up.
        let few = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.01 });
        assert_eq!(few.choose(&[0.1, 3.0, 0.5], 0), vec![1]);
        assert_eq!(config.choose(&[1.0, f64::NAN, 2.0], 0), vec![1, 2], "NaN counts as the highest");
    }

    #[test]
    fn loss_power_keeps_the_highest_always_and_about_one_over_beta_plus_one() {
        let losses: Vec<f64> = (0..1000).map(|i| (i * 7919 % 1000) as f64).collect();
        let highest = losses.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        for (beta, expected) in [(0.0, 1.0), (1.0, 0.5), (3.0, 0.25)] {
            let config = SelectionConfig::new(SelectionRule::LossPower { beta }).with_seed(7);
            let chosen = config.choose(&losses, 11);
            assert!(chosen.contains(&highest));
            let share = chosen.len() as f64 / losses.len() as f64;
            assert!((share - expected).abs() < 0.05, "beta {beta}: kept {share}");
            assert_eq!(chosen, config.choose(&losses, 11), "the same step chooses the same");
            // Higher losses are kept more often: the top half holds most of the chosen.
            let top_half = chosen.iter().filter(|&&i| losses[i] >= 500.0).count();
            assert!(beta == 0.0 || top_half as f64 > 0.6 * chosen.len() as f64, "beta {beta}");
        }
    }

    #[test]
    fn steps_and_whole_batches() {
        let config =
            SelectionConfig::new(SelectionRule::TopFraction { keep: 0.5 }).with_steps(4, Some(10)).with_full_every(3);
        let selecting: Vec<usize> = (0..12).filter(|&s| config.selects_at(s)).collect();
        // Steps 4..10, every third of them (6, 9) a whole batch.
        assert_eq!(selecting, vec![4, 5, 7, 8]);
        assert!(config.validate().is_ok());
        for bad in [
            SelectionConfig::new(SelectionRule::TopFraction { keep: 0.0 }),
            SelectionConfig::new(SelectionRule::TopFraction { keep: 1.5 }),
            SelectionConfig::new(SelectionRule::LossPower { beta: -1.0 }),
            SelectionConfig::new(SelectionRule::LossPower { beta: f64::NAN }),
            SelectionConfig::new(SelectionRule::TopFraction { keep: 0.5 }).with_steps(5, Some(5)),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
