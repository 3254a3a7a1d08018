//! InfoBatch (Qin et al., arXiv 2303.04947): each epoch leaves out part of the examples the
//! model has already learned, judged by the loss each had at its last training forward
//! pass, and weighs up the learned ones it keeps so that the epoch's expected gradient is
//! unchanged.
//!
//! At the start of an epoch, with `mean` the mean of the examples' recorded losses, every
//! example whose loss is below `mean` is left out with probability `prune`; the ones kept
//! of those count `1 / (1 - prune)` in the loss. Examples with a loss at or above the mean,
//! or none recorded yet, are always kept with weight 1. From the `anneal_step`-th batch on
//! every epoch is whole again (the paper's annealing: the end of training sees all the
//! data, unweighted). The losses come from the training steps themselves, so no pass is
//! added: the trainer hands them back through
//! [`ExampleFeedback`](crate::trainer::ExampleFeedback).

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::error::DataError;

/// How much InfoBatch leaves out, and until when.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InfoBatchConfig {
    /// The probability that an example with a loss below the epoch's mean is left out, in
    /// `[0, 1)`. The paper's default is 0.5.
    pub prune: f64,
    /// The first batch (0-based, counted over the whole run) from which every epoch is
    /// whole again; `None`: never. The paper anneals over the last 12.5% of training.
    pub anneal_step: Option<usize>,
}

impl InfoBatchConfig {
    /// Fails if `prune` is outside `[0, 1)`.
    pub fn validate(&self) -> Result<(), DataError> {
        if !(self.prune >= 0.0 && self.prune < 1.0) {
            return Err(DataError::invalid(format!("InfoBatch's prune ratio must be in [0, 1), got {}", self.prune)));
        }
        Ok(())
    }
}

/// What InfoBatch did over the epochs planned so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InfoBatchCount {
    /// Epochs planned.
    pub epochs: usize,
    /// Of those, epochs that left examples out.
    pub pruned_epochs: usize,
    /// Examples the planned epochs held (every example once per epoch).
    pub examples: usize,
    /// Of those, examples left out.
    pub left_out: usize,
}

impl InfoBatchCount {
    /// The share of examples left out, 0 before any epoch.
    pub fn left_out_share(&self) -> f64 {
        if self.examples == 0 {
            0.0
        } else {
            self.left_out as f64 / self.examples as f64
        }
    }
}

/// InfoBatch's books: each example's latest loss, the batches handed out and not yet
/// trained on, and the count of what was left out.
#[derive(Clone, Debug)]
pub struct InfoBatch {
    config: InfoBatchConfig,
    /// Each example's loss at its latest training step; NaN: none yet.
    scores: Vec<f32>,
    /// The batches handed out, in order, not yet trained on: their examples and weights.
    issued: VecDeque<(Vec<usize>, Vec<f32>)>,
    /// The batch the current step trains on.
    training: Option<Vec<usize>>,
    /// Batches handed out so far.
    batches: usize,
    count: InfoBatchCount,
}

impl InfoBatch {
    /// Books for `examples` examples, none scored yet. Fails if `config` breaks a rule.
    pub fn new(examples: usize, config: InfoBatchConfig) -> Result<Self, DataError> {
        config.validate()?;
        Ok(Self {
            config,
            scores: vec![f32::NAN; examples],
            issued: VecDeque::new(),
            training: None,
            batches: 0,
            count: InfoBatchCount::default(),
        })
    }

    pub fn config(&self) -> &InfoBatchConfig {
        &self.config
    }

    /// What was left out so far.
    pub fn count(&self) -> InfoBatchCount {
        self.count
    }

    /// Whether the next batch is past the annealing point (every epoch whole).
    pub fn annealing(&self) -> bool {
        self.config.anneal_step.is_some_and(|step| self.batches >= step)
    }

    /// The next epoch: the examples kept, in a shuffled order, each with its weight in the
    /// loss.
    pub fn plan_epoch(&mut self, rng: &mut SmallRng) -> Vec<(usize, f32)> {
        let prune = if self.annealing() { 0.0 } else { self.config.prune };
        let (sum, seen) =
            self.scores.iter().filter(|s| !s.is_nan()).fold((0.0f64, 0usize), |(sum, n), &s| (sum + s as f64, n + 1));
        let mean = if seen == 0 { f64::NEG_INFINITY } else { sum / seen as f64 };
        let up = (1.0 / (1.0 - prune)) as f32;
        let mut plan = Vec::with_capacity(self.scores.len());
        for (example, &score) in self.scores.iter().enumerate() {
            let learned = prune > 0.0 && !score.is_nan() && (score as f64) < mean;
            if !learned {
                plan.push((example, 1.0));
            } else if rng.random::<f64>() >= prune {
                plan.push((example, up));
            }
        }
        plan.shuffle(rng);
        self.count.epochs += 1;
        self.count.examples += self.scores.len();
        let left_out = self.scores.len() - plan.len();
        self.count.left_out += left_out;
        self.count.pruned_epochs += usize::from(left_out > 0);
        plan
    }

    /// Notes a batch handed out for training: `examples` with their `weights`.
    pub fn issue(&mut self, examples: Vec<usize>, weights: Vec<f32>) {
        self.batches += 1;
        self.issued.push_back((examples, weights));
    }

    /// The weights of the oldest batch handed out and not yet trained on, which the step
    /// now training takes; `None` when no batch is waiting.
    pub fn next_weights(&mut self) -> Option<Vec<f32>> {
        let (examples, weights) = self.issued.pop_front()?;
        self.training = Some(examples);
        Some(weights)
    }

    /// Records each example's loss from the step now training, in its batch's order.
    /// Losses past the batch's length, or without a batch, are ignored.
    pub fn record(&mut self, losses: &[f32]) {
        if let Some(examples) = self.training.take() {
            for (&example, &loss) in examples.iter().zip(losses) {
                self.scores[example] = loss;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn books(examples: usize, prune: f64, anneal_step: Option<usize>) -> InfoBatch {
        InfoBatch::new(examples, InfoBatchConfig { prune, anneal_step }).unwrap()
    }

    /// Records `loss(i)` for every example, as steps would.
    fn score(info: &mut InfoBatch, loss: impl Fn(usize) -> f32) {
        let all: Vec<usize> = (0..info.scores.len()).collect();
        info.issue(all.clone(), vec![1.0; all.len()]);
        info.next_weights();
        info.record(&all.iter().map(|&i| loss(i)).collect::<Vec<_>>());
    }

    #[test]
    fn an_unscored_epoch_keeps_everything_unweighted() {
        let mut info = books(100, 0.5, None);
        let mut plan = info.plan_epoch(&mut SmallRng::seed_from_u64(1));
        assert!(plan.iter().all(|&(_, w)| w == 1.0));
        plan.sort_by_key(|&(i, _)| i);
        assert_eq!(plan.iter().map(|&(i, _)| i).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
        assert_eq!(info.count().left_out, 0);
    }

    #[test]
    fn learned_examples_are_left_out_at_the_ratio_and_the_kept_weighed_up() {
        // Losses 0..999: the 500 below the mean (499.5) are the learned ones.
        let mut info = books(1000, 0.5, None);
        score(&mut info, |i| i as f32);
        let plan = info.plan_epoch(&mut SmallRng::seed_from_u64(2));
        let learned_kept: Vec<_> = plan.iter().filter(|&&(i, _)| i < 500).collect();
        assert!(plan.iter().filter(|&&(i, _)| i >= 500).all(|&(_, w)| w == 1.0), "the rest keep weight 1");
        assert_eq!(plan.iter().filter(|&&(i, _)| i >= 500).count(), 500, "every unlearned example kept");
        assert!(learned_kept.iter().all(|&&(_, w)| w == 2.0), "the kept learned count 1 / (1 - 0.5)");
        let share = learned_kept.len() as f64 / 500.0;
        assert!((share - 0.5).abs() < 0.07, "kept {share} of the learned");
        assert_eq!(info.count().left_out, 1000 - plan.len());
        // The plan is shuffled, not in example order.
        assert!(plan.windows(2).any(|w| w[0].0 > w[1].0));
    }

    #[test]
    fn the_weighed_up_loss_is_the_whole_epochs_in_expectation() {
        // The epoch's total loss over many draws of the plan equals the unpruned total.
        let mut info = books(200, 0.7, None);
        score(&mut info, |i| ((i * 37) % 200) as f32 / 10.0);
        let whole: f64 = info.scores.iter().map(|&s| s as f64).sum();
        let mut rng = SmallRng::seed_from_u64(3);
        let draws = 2000;
        let mean: f64 = (0..draws)
            .map(|_| info.plan_epoch(&mut rng).iter().map(|&(i, w)| w as f64 * info.scores[i] as f64).sum::<f64>())
            .sum::<f64>()
            / draws as f64;
        assert!((mean / whole - 1.0).abs() < 0.01, "weighted {mean} against {whole}");
        // Control: the same plans without the weights fall well short of it.
        let unweighted: f64 = info.plan_epoch(&mut rng).iter().map(|&(i, _)| info.scores[i] as f64).sum();
        assert!(unweighted < 0.9 * whole);
    }

    #[test]
    fn annealing_makes_every_epoch_whole_from_its_step() {
        let mut info = books(50, 0.5, Some(3));
        score(&mut info, |i| i as f32);
        assert!(info.plan_epoch(&mut SmallRng::seed_from_u64(4)).len() < 50);
        info.issue(vec![0], vec![1.0]);
        assert!(!info.annealing(), "batches 0 and 1 handed out: the next is batch 2");
        info.issue(vec![0], vec![1.0]);
        let plan = info.plan_epoch(&mut SmallRng::seed_from_u64(4));
        assert!(info.annealing());
        assert_eq!(plan.len(), 50);
        assert!(plan.iter().all(|&(_, w)| w == 1.0));
    }

    #[test]
    fn losses_go_to_the_batch_being_trained_in_the_order_handed_out() {
        let mut info = books(6, 0.5, None);
        info.issue(vec![4, 1], vec![1.0, 2.0]);
        info.issue(vec![0, 5], vec![2.0, 1.0]);
        assert_eq!(info.next_weights(), Some(vec![1.0, 2.0]));
        info.record(&[0.4, 0.1]);
        assert_eq!(info.next_weights(), Some(vec![2.0, 1.0]));
        info.record(&[0.0, 0.5]);
        assert_eq!(info.next_weights(), None);
        info.record(&[9.0]);
        let expected = [0.0, 0.1, f32::NAN, f32::NAN, 0.4, 0.5];
        for (got, want) in info.scores.iter().zip(expected) {
            assert!(got == &want || (got.is_nan() && want.is_nan()), "{:?}", info.scores);
        }
    }

    #[test]
    fn a_ratio_outside_zero_to_one_is_refused() {
        for prune in [-0.1, 1.0, f64::NAN] {
            assert!(InfoBatch::new(10, InfoBatchConfig { prune, anneal_step: None }).is_err(), "{prune}");
        }
    }
}
