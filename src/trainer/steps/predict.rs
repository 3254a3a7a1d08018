//! A predict step: a block's first step jumps by the predicted displacement and verifies
//! the jump forward only, before and after, on the probe set; the block's other steps run
//! nothing. Also the probe itself, which the weight average's verification shares.

use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, FloatDType};
use burn::train::InferenceStep;

use super::StepOutcome;
use crate::memory::MemoryProbe;
use crate::trainer::error::TrainerError;
use crate::trainer::hybrid::HybridTrainer;
use crate::trainer::params;
use crate::trainer::precision::mixed::cast_params;
use crate::trainer::predict::calibration::{confidence_after, evidence, jump_scale, scale_after};
use crate::trainer::predict::guard::RollbackReason;
use crate::trainer::predict::phase::Phase;
use crate::trainer::predict::snapshot::Snapshot;
use crate::trainer::step::{HybridBatch, HybridModel, StepLoss};

/// A block's jump: the probe loss before and after it, and the weights from before.
struct Jump<B: AutodiffBackend> {
    before: f64,
    after: f64,
    snapshot: Snapshot<B::InnerBackend>,
}

impl<B, M, O, T> HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// A predict step. The block's first step applies the whole block's predicted
    /// displacement at once, `scale · Σ lr · m` over its `h` steps, and verifies it: the
    /// same micro-batches, in eval mode on the inner model, before and after the jump. The
    /// guard keeps the jump only if it gained enough (see [`LossGuard::judge_block`]);
    /// otherwise the block's starting weights are restored exactly and the step trains on
    /// its micro-batches as a full step, so a rejected block costs its two probe forwards
    /// and no progress. A kept block's other steps run nothing: the data and the
    /// learning-rate position move on.
    pub(super) fn predict_step(
        &mut self,
        micro_batches: impl ExactSizeIterator<Item = T>,
    ) -> Result<StepOutcome, TrainerError> {
        let optimizer_step = self.state.optimizer_step;
        let coasting = StepOutcome::at(self.state.lr.at(optimizer_step), optimizer_step);
        if !self.state.schedule.is_first_of_phase() {
            micro_batches.for_each(drop);
            self.state.optimizer_step += 1;
            return Ok(coasting);
        }
        // The running loss includes every full step (normally read already, as the last
        // step of its phase).
        self.read_losses();
        let steps = self.state.schedule.steps_left();
        let rates: f64 = (0..steps).map(|j| self.state.lr.at(optimizer_step + j)).sum();
        // Trained on if the block is rejected (and the run's probe set if none is held).
        let batches: Vec<T> = micro_batches.collect();
        if self.probe_set.is_none() {
            // A new probe set: readings on another one do not pair with it.
            self.state.guard.probe.reset();
        }
        let probe_set = self.probe_set.get_or_insert_with(|| batches.clone()).clone();
        let jump = self.with_model(|trainer, model| trainer.jump(model, &probe_set, rates))?;
        drop(probe_set);
        self.settle_block(jump, steps, batches, coasting)
    }

    /// Jumps `model` by the block's predicted displacement (`rates`: the block's learning
    /// rates summed), probing before and after: the jumped model, or on an error the
    /// model as it was.
    fn jump(&mut self, model: M, probe_set: &[T], rates: f64) -> (M, Result<Jump<B>, TrainerError>) {
        let snapshot = Snapshot::take(&model.valid(), self.state.config.snapshot);
        self.state.statistics.snapshot_bytes = self.state.statistics.snapshot_bytes.max(snapshot.bytes());
        let before = match self.probe(&model, probe_set) {
            Ok(loss) => loss,
            Err(err) => return (model, Err(err)),
        };
        if !before.is_finite() && !self.probe_set_given {
            // A probe set the model cannot score would reject every block: take the next
            // block's instead.
            self.probe_set = None;
        }
        self.state.guard.probe.read_start(before);
        self.state.scale = jump_scale(self.state.scale, self.state.schedule.is_reprobe(), &self.state.config);
        let prediction = self.predictor.predict(rates);
        let model = params::apply_update::<B, M>(model, &prediction, self.state.scale);
        drop(prediction);
        match self.probe(&model, probe_set) {
            Ok(after) => (model, Ok(Jump { before, after, snapshot })),
            Err(err) => (snapshot.restore::<B, M>(model), Err(err)),
        }
    }

    /// The guard's verdict on a block's jump, and what follows: a kept jump moves the
    /// books on; a rejected one restores the block's start and trains the step's
    /// `batches` as a full step.
    fn settle_block(
        &mut self,
        jump: Jump<B>,
        steps: usize,
        batches: Vec<T>,
        coasting: StepOutcome,
    ) -> Result<StepOutcome, TrainerError> {
        let Jump { before, after, snapshot } = jump;
        let verdict = self.state.guard.judge_block(before, after, steps);
        // Where the verdict leaves the weights: the jump, or the block's start restored.
        self.state.guard.probe.mark(if verdict.keep { after } else { before });
        // A block with no pace to be judged against says nothing for or against prediction.
        let unpaired = matches!(verdict.reason, Some(RollbackReason::Unpaired { .. }));
        if !unpaired {
            self.state.confidence = confidence_after(self.state.confidence, &verdict, self.state.schedule.is_reprobe());
            self.state.scale = scale_after(self.state.scale, &verdict, &self.state.config);
        }
        let (gain, efficiency) = (verdict.gain.is_finite().then_some(verdict.gain), verdict.efficiency);
        if verdict.keep {
            drop((snapshot, batches));
            self.observe_average();
            self.state.optimizer_step += 1;
            self.state.schedule.calibrate(&self.state.config, evidence(&verdict));
            self.state.awaiting_calibration = true;
            tracing::debug!(step = self.state.step, before, after, steps, efficiency, "predict block kept");
            return Ok(StepOutcome { loss: Some(after), gain, efficiency, ..coasting });
        }
        self.reject_block(verdict.reason.unwrap_or(RollbackReason::NonFinite(after)), unpaired);
        self.with_model(|_, model| (snapshot.restore::<B, M>(model), Ok(())))?;
        let full = self.full_step(Phase::Full, batches.into_iter())?;
        Ok(StepOutcome { rolled_back: true, gain, efficiency, ran_full: true, ..full })
    }

    /// Moves the schedule past a rejected block: postponed where there was nothing to judge
    /// it against (the first block on its probe set), rolled back otherwise.
    fn reject_block(&mut self, reason: RollbackReason, unpaired: bool) {
        if unpaired {
            self.state.schedule.postpone(&self.state.config);
            tracing::info!(
                step = self.state.step,
                %reason,
                "first block on this probe set: nothing to judge it against yet; the step trains as a full step"
            );
        } else {
            self.state.schedule.rollback(&self.state.config);
            tracing::warn!(
                step = self.state.step,
                %reason,
                confidence = self.state.confidence,
                scale = self.state.scale,
                "predicted block rolled back; the step trains as a full step"
            );
        }
    }

    /// The mean loss of `batches` on the inner model, in the compute precision; in a
    /// data-parallel run, the mean of every replica's.
    pub(in crate::trainer) fn probe(&self, model: &M, batches: &[T]) -> Result<f64, TrainerError> {
        let mixed = self.forward_loss.is_some();
        let dtype = self.precision.precision.dtype();
        let inner = if mixed { cast_params(model.valid(), dtype) } else { model.valid() };
        let mut loss_sum = None;
        for batch in batches {
            let batch = if mixed { batch.clone().cast_floats(dtype) } else { batch.clone() };
            let output = <M::InnerModule as InferenceStep>::step(&inner, batch.into_inner());
            let loss = StepLoss::<B::InnerBackend>::loss(&output).cast(FloatDType::F32);
            drop(output);
            loss_sum = Some(match loss_sum {
                Some(sum) => sum + loss,
                None => loss,
            });
        }
        let mean = loss_sum.map(|sum| sum.div_scalar(batches.len() as f64));
        let mean = match (self.replica, mean) {
            (Some(replica), Some(mean)) => Some(replica.mean(mean)?),
            (_, mean) => mean,
        };
        Ok(mean.map_or(f64::NAN, |mean| mean.into_scalar().elem::<f64>()))
    }
}
