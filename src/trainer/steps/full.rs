//! A full step, as stages that read top to bottom: each micro-batch's forward and backward
//! ([`passes`](HybridTrainer::passes): the selected examples, the compute precision, the
//! data side's weights), the replicas' all-reduce, loss scaling's overflow check, the loss
//! read back, the optimizer with the predictor's books, and the books of the average and
//! the guard. The model is out of the trainer only inside [`with_model`](HybridTrainer::with_model).

use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, FloatDType, Tensor};
use burn::train::{TrainOutput, TrainStep};

use super::StepOutcome;
use crate::memory::MemoryProbe;
use crate::trainer::accumulation::MicroBatchGradients;
use crate::trainer::config::HybridConfig;
use crate::trainer::error::TrainerError;
use crate::trainer::hybrid::HybridTrainer;
use crate::trainer::params::{self, Alignment, ParamUpdates};
use crate::trainer::precision::mixed;
use crate::trainer::precision::{LossScaler, ScaledStep};
use crate::trainer::predict::phase::Phase;
use crate::trainer::reports::step_report::SelectionCount;
use crate::trainer::step::{HybridBatch, HybridModel, StepLoss};

type InnerTensor<B> = Tensor<<B as AutodiffBackend>::InnerBackend, 1>;

/// What a step's micro-batches gave: their mean gradient and loss, and with loss scaling the
/// sum of their overflow checks (each replica's own until [`all_reduce`](HybridTrainer::all_reduce)).
struct Gradients<B: AutodiffBackend> {
    grads: GradientsParams,
    mean_loss: Option<InnerTensor<B>>,
    overflow_check: Option<InnerTensor<B>>,
}

/// The forward and backward passes of a full step, and what they leave for the stages after.
struct Passes<B: AutodiffBackend, M, T> {
    gradients: Gradients<B>,
    /// Examples scored and kept, where the step selected.
    selection: Option<SelectionCount>,
    /// The loss scale of the backward passes, with loss scaling on.
    loss_scale: Option<f64>,
    /// The compute copy of mixed precision: its batch-norm statistics belong to the master.
    compute: Option<M>,
    /// The micro-batches, kept as the weight average's probe batches where it wants them.
    average_probe: Option<Vec<T>>,
}

/// What a full step did with the model.
enum Applied<T> {
    /// The optimizer updated it; the average's probe batches, if kept.
    Updated(StepOutcome, Option<Vec<T>>),
    /// Loss scaling found the gradients overflowed: nothing moved.
    Skipped(StepOutcome),
}

impl<B, M, O, T> HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// Forward and backward over every micro-batch, then the optimizer on their mean
    /// gradient; then the real update feeds the predictor.
    pub(super) fn full_step(
        &mut self,
        phase: Phase,
        micro_batches: impl ExactSizeIterator<Item = T>,
    ) -> Result<StepOutcome, TrainerError> {
        let applied = self.with_model(|trainer, model| match trainer.passes(&model, micro_batches) {
            Ok(passes) => trainer.apply(model, phase, passes),
            Err(err) => (model, Err(err)),
        })?;
        match applied {
            Applied::Skipped(outcome) => Ok(outcome),
            Applied::Updated(outcome, average_probe) => {
                if average_probe.is_some() {
                    self.average.probe = average_probe;
                }
                self.observe_average();
                self.state.guard.probe.count_full_step();
                self.state.optimizer_step += 1;
                Ok(outcome)
            }
        }
    }

    /// Every stage after the passes, in order, on the model: the compute copy's state back,
    /// the all-reduce, the overflow check, the loss, the optimizer.
    fn apply(&mut self, model: M, phase: Phase, passes: Passes<B, M, T>) -> (M, Result<Applied<T>, TrainerError>) {
        let Passes { gradients, selection, loss_scale, compute, average_probe } = passes;
        let model = match compute {
            Some(copy) => mixed::copy_state_back::<B, M>(model, &copy),
            None => model,
        };
        let gradients = match self.all_reduce(gradients) {
            Ok(gradients) => gradients,
            Err(err) => return (model, Err(err)),
        };
        if let Some(skipped) = self.skip_overflowed(&gradients, loss_scale, selection) {
            return (model, Ok(Applied::Skipped(skipped)));
        }
        let loss = match self.step_loss(gradients.mean_loss) {
            Ok(loss) => loss,
            Err(err) => return (model, Err(err)),
        };
        let optimizer_step = self.state.optimizer_step;
        let lr = self.state.lr.at(optimizer_step);
        let (model, alignment) = self.optimize(model, phase, gradients.grads, lr);
        let outcome = StepOutcome { loss, alignment, loss_scale, selection, ..StepOutcome::at(lr, optimizer_step) };
        (model, Ok(Applied::Updated(outcome, average_probe)))
    }

    /// Forward and backward over each micro-batch, one graph at a time: the mean gradient
    /// and loss, and what the later stages need.
    fn passes(
        &mut self,
        model: &M,
        micro_batches: impl ExactSizeIterator<Item = T>,
    ) -> Result<Passes<B, M, T>, TrainerError> {
        let count = micro_batches.len();
        // A resumed scaler without `with_precision` scales nothing: the step takes the plain path.
        let scaling = self.forward_loss.is_some();
        let loss_scale = self.state.loss_scaler.as_ref().filter(|_| scaling).map(LossScaler::scale);
        // Mixed precision: one compute copy of the weights serves every micro-batch.
        let dtype = self.precision.precision.dtype();
        let compute = self.forward_loss.map(|_| mixed::compute_copy::<B, M>(model, dtype));
        let mut average_probe = self.wants_average_probe().then(Vec::new);
        let (mut selection, mut loss_sum, mut overflow_check) = (None, None, None);
        let mut accumulated = MicroBatchGradients::<M>::default();
        let mut single = None;
        for batch in micro_batches {
            if let Some(kept) = average_probe.as_mut() {
                kept.push(batch.clone());
            }
            let batch = self.selected(model, batch, &mut selection)?;
            let (grads, loss, check) = match &compute {
                Some(copy) => self.mixed_pass(model, copy, batch, loss_scale),
                None => self.plain_pass(model, batch).map(|(grads, loss)| (grads, loss, None))?,
            };
            loss_sum = Some(match loss_sum {
                Some(sum) => sum + loss,
                None => loss,
            });
            if let Some(check) = check {
                overflow_check = Some(match overflow_check.take() {
                    Some(sum) => sum + check,
                    None => check,
                });
            }
            if count == 1 {
                single = Some(grads);
            } else {
                // Each micro-batch's graph is gone once its gradients are summed.
                accumulated.add::<B>(model, grads);
            }
        }
        let grads = single.unwrap_or_else(|| accumulated.mean::<B>(model));
        let mean_loss = loss_sum.map(|sum: InnerTensor<B>| sum.div_scalar(count as f64));
        let gradients = Gradients { grads, mean_loss, overflow_check };
        Ok(Passes { gradients, selection, loss_scale, compute, average_probe })
    }

    /// The micro-batch's examples that selection keeps where it selects at this step
    /// (counted into `count`), else the micro-batch.
    fn selected(&self, model: &M, batch: T, count: &mut Option<SelectionCount>) -> Result<T, TrainerError> {
        let step = self.state.step;
        let Some(selector) = self.selection.as_ref().filter(|selector| selector.config.selects_at(step)) else {
            return Ok(batch);
        };
        let selected = (selector.pick)(model, batch, &selector.config, step)?;
        let count = count.get_or_insert_with(SelectionCount::default);
        count.scored += selected.scored;
        count.kept += selected.kept;
        Ok(selected.batch)
    }

    /// One micro-batch on the compute copy: with loss scaling (`scale`) the loss scaled for
    /// the backward pass and the gradients unscaled onto the master's parameters, with their
    /// overflow check; without, the gradients onto the master's parameters alone.
    fn mixed_pass(
        &self,
        master: &M,
        copy: &M,
        batch: T,
        scale: Option<f64>,
    ) -> (GradientsParams, InnerTensor<B>, Option<InnerTensor<B>>) {
        let forward = self.forward_loss.expect("the mixed-precision path has its forward loss");
        let loss = forward(copy, batch.cast_floats(self.precision.precision.dtype())).cast(FloatDType::F32);
        let scaled = match scale {
            Some(scale) if scale != 1.0 => loss.clone().mul_scalar(scale),
            _ => loss.clone(),
        };
        let grads = GradientsParams::from_grads(scaled.backward(), copy);
        let master = mixed::master_gradients::<B, M>(master, grads, scale);
        (master.grads, loss.inner(), master.overflow_check)
    }

    /// One micro-batch in the model's precision: weighed by the data side's per-example
    /// weights (its losses handed back) where it gives them, else Burn's train step (its
    /// output kept where asked for).
    fn plain_pass(&mut self, model: &M, batch: T) -> Result<(GradientsParams, InnerTensor<B>), TrainerError> {
        if let Some(feedback) = self.feedback.as_mut() {
            let weights = feedback.source.weights();
            let weighed = (feedback.weigh)(model, batch, weights)?;
            feedback.source.record(&weighed.losses);
            return Ok((weighed.grads, weighed.loss));
        }
        let TrainOutput { grads, item } = <M as TrainStep>::step(model, batch);
        let loss = StepLoss::<B>::loss(&item).inner();
        // Kept only when asked for; otherwise the logits go now.
        self.output = self.keep_outputs.then_some(item);
        Ok((grads, loss))
    }

    /// Data-parallel: the replicas' mean gradient and loss and the sum of their overflow
    /// checks, so every replica applies the same update and takes the same decisions.
    fn all_reduce(&self, gradients: Gradients<B>) -> Result<Gradients<B>, TrainerError> {
        let Some(replica) = self.replica else {
            return Ok(gradients);
        };
        let Gradients { grads, mean_loss, overflow_check } = gradients;
        Ok(Gradients {
            grads: replica.mean_gradients::<B::InnerBackend>(grads)?,
            mean_loss: mean_loss.map(|loss| replica.mean(loss)).transpose()?,
            overflow_check: overflow_check.map(|check| replica.sum(check)).transpose()?,
        })
    }

    /// With loss scaling: the outcome of a step whose gradients overflowed (its update
    /// skipped, the scale lowered), `None` where the update goes ahead. One scalar read per
    /// full step: the price of knowing whether to apply it.
    fn skip_overflowed(
        &mut self,
        gradients: &Gradients<B>,
        loss_scale: Option<f64>,
        selection: Option<SelectionCount>,
    ) -> Option<StepOutcome> {
        let scaling = self.forward_loss.is_some();
        let scaler = self.state.loss_scaler.as_mut().filter(|_| scaling)?;
        let check = gradients.overflow_check.clone();
        let finite = check.is_none_or(|check| check.into_scalar().elem::<f64>().is_finite());
        if scaler.update(finite) != ScaledStep::Skip {
            return None;
        }
        let next_scale = scaler.scale();
        let loss = gradients.mean_loss.clone().map(|mean| mean.into_scalar().elem::<f64>());
        tracing::warn!(
            step = self.state.step,
            loss,
            loss_scale,
            next_scale,
            "gradients overflowed: update skipped, loss scale lowered"
        );
        let (optimizer_step, lr) = (self.state.optimizer_step, self.state.lr.at(self.state.optimizer_step));
        Some(StepOutcome { loss, loss_scale, overflow: true, selection, ..StepOutcome::at(lr, optimizer_step) })
    }

    /// Queues the step's mean loss and reads the window back where it is due: the loss, or
    /// `None` while it stays on the device. A non-finite loss is an error, before anything moved.
    fn step_loss(&mut self, mean_loss: Option<InnerTensor<B>>) -> Result<Option<f64>, TrainerError> {
        if let Some(mean) = mean_loss {
            self.losses.push(mean);
        }
        let loss = if self.loss_due() { self.read_losses() } else { None };
        match loss.filter(|loss| !loss.is_finite()) {
            Some(loss) => Err(TrainerError::NonFiniteLoss { step: self.state.step, loss }),
            None => Ok(loss),
        }
    }

    /// The optimizer's update at `lr`, recorded for the predictor where it is fed.
    fn optimize(&mut self, model: M, phase: Phase, grads: GradientsParams, lr: f64) -> (M, Option<Alignment>) {
        if !self.feeds_predictor() {
            // The baseline never predicts, and a run with prediction off does not until its
            // re-probe nears: no updates to record. The averages are dropped (stale by the
            // re-probe, and a copy of the parameters).
            if !self.predictor.is_empty() {
                self.predictor.clear();
            }
            return (<M as TrainStep>::optimize::<B, O>(model, &mut self.optimizer, lr, grads), None);
        }
        // Holding the old tensors keeps them alive through the update: one transient copy.
        let before = params::collect(&model.valid());
        let model = <M as TrainStep>::optimize::<B, O>(model, &mut self.optimizer, lr, grads);
        let after = params::collect(&model.valid());
        let deltas = params::differences(&after, &before);
        drop((before, after));
        let alignment = self.measure_if_due(phase, &deltas, lr);
        self.predictor.observe(&deltas, lr);
        (model, alignment)
    }

    /// Whether a full step records its update for the predictor: never in the all-full
    /// baseline; with prediction off, only over the last [`predictor_refill`] full steps
    /// before the re-probe, so the average is fresh by then and the bookkeeping (a pass
    /// over the parameters per step) and the averages' memory are saved meanwhile.
    fn feeds_predictor(&self) -> bool {
        let (config, confidence) = (&self.state.config, self.state.confidence);
        if config.is_all_full() || self.state.schedule.is_off_for_good(config, confidence) {
            return false;
        }
        match self.state.schedule.full_steps_until_reprobe(config, confidence) {
            Some(left) => left <= predictor_refill(config),
            None => true,
        }
    }

    /// On the first correct step after a kept block, compares the real update with the
    /// prediction for this step and records the cosine and norm ratio. Diagnostic only:
    /// the cosine mostly measures the optimizer's momentum (which carries the direction
    /// from before the block into this step), so nothing is steered by it; blocks are
    /// judged on their verified gain instead.
    fn measure_if_due(&mut self, phase: Phase, deltas: &ParamUpdates<B::InnerBackend>, lr: f64) -> Option<Alignment> {
        if !(phase == Phase::Correct && self.state.awaiting_calibration) {
            return None;
        }
        self.state.awaiting_calibration = false;
        if !self.predictor.is_ready() {
            return None;
        }
        let predicted = self.predictor.predict(lr);
        let raw = params::alignment(deltas, &predicted)?;
        // Relative to what a predict step applies: scale · lr · m.
        Some(Alignment { cosine: raw.cosine, norm_ratio: raw.norm_ratio / self.state.scale })
    }
}

/// Full steps the predictor is fed before a re-probe: twice the moving average's time
/// constant `1 / (1 − ema_decay)` (20 at the default 0.9), which leaves the average
/// `ema_decay^refill` (12%) of its first observation.
fn predictor_refill(config: &HybridConfig) -> usize {
    ((2.0 / (1.0 - config.ema_decay)).ceil() as usize).max(1)
}
