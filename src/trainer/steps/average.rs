//! The trainer's side of the weight average: folding updates in, building the averaged
//! model, and verifying it against the live weights forward only, with the probes the
//! predict step scores its jumps by.

use std::time::Instant;

use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;
use burn::train::TrainStep;

use crate::memory::MemoryProbe;
use crate::trainer::averaging::{AverageVerdict, Weights};
use crate::trainer::error::TrainerError;
use crate::trainer::hybrid::HybridTrainer;
use crate::trainer::params::{self, blend};
use crate::trainer::predict::snapshot::Snapshot;
use crate::trainer::step::{HybridBatch, HybridModel};

impl<B, M, O, T> HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// The model with the weight average's values: its parameters and, where the model
    /// has batch norm, its running statistics (averaged too, or recomputed by the last
    /// verification with [`statistics_passes`](crate::trainer::averaging::AverageConfig::statistics_passes)).
    /// A copy of its own: running it in training mode leaves the live model's statistics
    /// alone. `None` without an average or before its first update. Evaluate it forward
    /// only (`valid()`).
    pub fn averaged_model(&self) -> Option<M> {
        let params = self.average.params.as_ref()?;
        // Burn's running statistics are shared between a module's clones and `map`
        // writes into them in place: restore into a copy made through the inner module,
        // whose statistics are new cells.
        let detached = M::from_inner(self.model.as_ref()?.valid());
        Some(Snapshot::Device(params.clone()).restore::<B, M>(detached))
    }

    /// The model the run stands by: the average where the newest verification chose it,
    /// the live model otherwise (and without an average).
    pub fn chosen_model(&self) -> M {
        let standing = self.state.average.as_ref().map(|books| books.standing());
        match standing.filter(|w| *w == Weights::Average).and_then(|_| self.averaged_model()) {
            Some(average) => average,
            None => self.model().clone(),
        }
    }

    /// Scores the live weights and the average forward only (eval mode, on the inner
    /// model) on the same probe batches: those given to
    /// [`with_probe_set`](Self::with_probe_set), else the micro-batches of the average's
    /// first full step (of this process). The average is chosen only where its loss is
    /// lower; then, with a [`pull`](crate::trainer::averaging::AverageConfig::pull), the live weights move
    /// toward it. Recomputes the average's batch-norm statistics first where configured.
    /// Every replica of a data-parallel run must call it at the same step.
    ///
    /// `Ok(None)`, and nothing done, without an average, before its first update, or
    /// before a probe batch was kept.
    pub fn verify_average(&mut self) -> Result<Option<AverageVerdict>, TrainerError> {
        let started = Instant::now();
        let Some(config) = self.state.average.as_ref().map(|books| books.config.clone()) else { return Ok(None) };
        let probe = match (self.probe_set_given, &self.probe_set, &self.average.probe) {
            (true, Some(given), _) => given.clone(),
            (_, _, Some(kept)) => kept.clone(),
            _ => return Ok(None),
        };
        let Some(mut average) = self.averaged_model() else { return Ok(None) };
        if config.statistics_passes > 0 {
            average = recompute_statistics(average, &probe, config.statistics_passes);
            // The recomputed statistics become the average's (the weights are unchanged).
            self.average.params = Some(params::collect(&average.valid()));
        }
        let live_model = self.model.as_ref().ok_or(TrainerError::ModelLost)?;
        let live = self.probe(live_model, &probe)?;
        let on_average = self.probe(&average, &probe)?;
        drop(average);
        let chosen = if on_average < live { Weights::Average } else { Weights::Live };
        let pulled = chosen == Weights::Average && config.pull > 0.0;
        if pulled {
            self.pull_toward_average(config.pull)?;
        }
        let verdict = AverageVerdict {
            step: self.state.step,
            live,
            average: on_average,
            chosen,
            pulled,
            seconds: started.elapsed().as_secs_f64(),
        };
        let books = self.state.average.as_mut().expect("read above");
        books.verified += 1;
        books.chosen += usize::from(chosen == Weights::Average);
        books.last = Some(verdict);
        tracing::info!(
            step = verdict.step,
            live = verdict.live,
            average = verdict.average,
            chosen = chosen.name(),
            pulled,
            "weight average verified"
        );
        Ok(Some(verdict))
    }

    /// Folds the weights as they are now into the average, where one is kept and due.
    pub(in crate::trainer) fn observe_average(&mut self) {
        let (Some(books), Some(model)) = (self.state.average.as_mut(), self.model.as_ref()) else { return };
        if self.state.step < books.config.start_step {
            return;
        }
        self.average.observe(params::collect(&model.valid()), books.config.decay);
        books.observed += 1;
    }

    /// Whether the full step about to run keeps its micro-batches as the average's probe
    /// batches: the average is kept and due, and nothing else serves.
    pub(in crate::trainer) fn wants_average_probe(&self) -> bool {
        self.state.average.as_ref().is_some_and(|books| self.state.step >= books.config.start_step)
            && self.average.probe.is_none()
            && !self.probe_set_given
    }

    /// `w ← (1 − pull) · w + pull · a` on the live model (its batch-norm statistics too);
    /// the optimizer's state is left as it is.
    fn pull_toward_average(&mut self, pull: f64) -> Result<(), TrainerError> {
        let average = self.average.params.as_ref().expect("verified against it");
        let model = self.model.take().ok_or(TrainerError::ModelLost)?;
        let pulled = blend(&params::collect(&model.valid()), average, 1.0 - pull);
        self.model = Some(Snapshot::Device(pulled).restore::<B, M>(model));
        Ok(())
    }
}

/// Batch norm's running statistics for `model`'s weights: `passes` training-mode forward
/// passes over `batches` (Burn updates the statistics in training mode only, which on an
/// autodiff backend is every forward pass). The training step's gradients are dropped.
fn recompute_statistics<B, M, T>(model: M, batches: &[T], passes: usize) -> M
where
    B: AutodiffBackend,
    M: HybridModel<B, T>,
    T: HybridBatch<B>,
{
    for _ in 0..passes {
        for batch in batches {
            drop(<M as TrainStep>::step(&model, batch.clone()));
        }
    }
    model
}
