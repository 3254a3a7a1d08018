//! A full step: forward and backward over every micro-batch (the selected examples when
//! selection is on), the optimizer on their mean gradient, and the real update fed to the
//! predictor.

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
        let model = self.model.take().ok_or(TrainerError::ModelLost)?;
        let count = micro_batches.len();
        // A resumed scaler without `with_precision` scales nothing: the step takes the plain path.
        let scaling = self.forward_loss.is_some();
        let loss_scale = self.state.loss_scaler.as_ref().filter(|_| scaling).map(LossScaler::scale);
        let dtype = self.precision.precision.dtype();
        // Mixed precision: one compute copy of the weights serves every micro-batch.
        let compute = self.forward_loss.map(|forward| (forward, mixed::compute_copy::<B, M>(&model, dtype)));
        let mut accumulated = MicroBatchGradients::<M>::default();
        let mut single = None;
        let mut loss_sum = None;
        let mut overflow_check: Option<Tensor<B::InnerBackend, 1>> = None;
        let selecting = self.selection.as_ref().filter(|selector| selector.config.selects_at(self.state.step));
        let selecting = selecting.map(|selector| (selector.pick, selector.config.clone()));
        let mut selection = selecting.as_ref().map(|_| SelectionCount::default());
        let mut average_probe = self.wants_average_probe().then(Vec::new);
        for batch in micro_batches {
            if let Some(kept) = average_probe.as_mut() {
                kept.push(batch.clone());
            }
            let batch = match &selecting {
                Some((pick, config)) => match pick(&model, batch, config, self.state.step) {
                    Ok(selected) => {
                        let count = selection.as_mut().expect("counted while selecting");
                        count.scored += selected.scored;
                        count.kept += selected.kept;
                        selected.batch
                    }
                    Err(err) => {
                        self.model = Some(model);
                        return Err(err);
                    }
                },
                None => batch,
            };
            let (grads, loss) = match &compute {
                Some((forward, copy)) => {
                    let loss = forward(copy, batch.cast_floats(dtype)).cast(FloatDType::F32);
                    let scale = loss_scale.unwrap_or(1.0);
                    let scaled = if scale == 1.0 { loss.clone() } else { loss.clone().mul_scalar(scale) };
                    let grads = GradientsParams::from_grads(scaled.backward(), copy);
                    let master = mixed::master_gradients::<B, M>(&model, grads, scale);
                    if let Some(check) = master.overflow_check {
                        overflow_check = Some(match overflow_check.take() {
                            Some(sum) => sum + check,
                            None => check,
                        });
                    }
                    (master.grads, loss.inner())
                }
                None if self.feedback.is_some() => {
                    let feedback = self.feedback.as_mut().expect("checked");
                    let weights = feedback.source.weights();
                    match (feedback.weigh)(&model, batch, weights) {
                        Ok(weighed) => {
                            feedback.source.record(&weighed.losses);
                            (weighed.grads, weighed.loss)
                        }
                        Err(err) => {
                            self.model = Some(model);
                            return Err(err);
                        }
                    }
                }
                None => {
                    let TrainOutput { grads, item } = <M as TrainStep>::step(&model, batch);
                    let loss = StepLoss::<B>::loss(&item).inner();
                    // Kept only when asked for; otherwise the logits go now.
                    self.output = self.keep_outputs.then_some(item);
                    (grads, loss)
                }
            };
            loss_sum = Some(match loss_sum {
                Some(sum) => sum + loss,
                None => loss,
            });
            if count == 1 {
                single = Some(grads);
            } else {
                // Each micro-batch's graph is gone once its gradients are summed.
                accumulated.add::<B>(&model, grads);
            }
        }
        // Batch norm's running statistics moved in the copy: they belong to the master.
        let model = match compute {
            Some((_, copy)) => mixed::copy_state_back::<B, M>(model, &copy),
            None => model,
        };
        let grads = match single {
            Some(grads) => grads,
            None => accumulated.mean::<B>(&model),
        };
        let mean_loss = loss_sum.map(|sum| sum.div_scalar(count as f64));
        // Data-parallel: every value below is the replicas' mean (the overflow check their
        // sum), so every replica applies the same update and takes the same decisions.
        let (model, grads, mean_loss, overflow_check) = match self.replica {
            None => (model, grads, mean_loss, overflow_check),
            Some(replica) => {
                let reduced = (|| {
                    let grads = replica.mean_gradients::<B::InnerBackend>(grads)?;
                    let mean_loss = mean_loss.map(|loss| replica.mean(loss)).transpose()?;
                    let overflow_check = overflow_check.map(|check| replica.sum(check)).transpose()?;
                    Ok::<_, TrainerError>((grads, mean_loss, overflow_check))
                })();
                match reduced {
                    Ok((grads, mean_loss, overflow_check)) => (model, grads, mean_loss, overflow_check),
                    Err(err) => {
                        self.model = Some(model);
                        return Err(err);
                    }
                }
            }
        };

        if let Some(scaler) = self.state.loss_scaler.as_mut().filter(|_| scaling) {
            // One scalar read per full step: the price of knowing whether to apply it.
            let finite = overflow_check.is_none_or(|check| check.into_scalar().elem::<f64>().is_finite());
            if scaler.update(finite) == ScaledStep::Skip {
                drop(grads);
                self.model = Some(model);
                let loss = mean_loss.map(|mean| mean.into_scalar().elem::<f64>());
                tracing::warn!(
                    step = self.state.step,
                    loss,
                    loss_scale,
                    next_scale = scaler.scale(),
                    "gradients overflowed: update skipped, loss scale lowered"
                );
                return Ok(StepOutcome {
                    loss,
                    lr: self.state.lr.at(self.state.optimizer_step),
                    optimizer_step: self.state.optimizer_step,
                    rolled_back: false,
                    alignment: None,
                    loss_scale,
                    overflow: true,
                    gain: None,
                    efficiency: None,
                    ran_full: false,
                    selection,
                });
            }
        }
        if let Some(mean) = mean_loss {
            self.losses.push(mean);
        }
        let loss = if self.loss_due() { self.read_losses() } else { None };
        if let Some(loss) = loss.filter(|loss| !loss.is_finite()) {
            drop(grads);
            self.model = Some(model);
            return Err(TrainerError::NonFiniteLoss { step: self.state.step, loss });
        }

        let optimizer_step = self.state.optimizer_step;
        let lr = self.state.lr.at(optimizer_step);
        let alignment = if !self.feeds_predictor() {
            // The baseline never predicts, and a run with prediction off does not until its
            // re-probe nears: no updates to record. The averages are dropped (stale by the
            // re-probe, and a copy of the parameters).
            if !self.predictor.is_empty() {
                self.predictor.clear();
            }
            let model = <M as TrainStep>::optimize::<B, O>(model, &mut self.optimizer, lr, grads);
            self.model = Some(model);
            None
        } else {
            // Holding the old tensors keeps them alive through the update: one transient copy.
            let before = params::collect(&model.valid());
            let model = <M as TrainStep>::optimize::<B, O>(model, &mut self.optimizer, lr, grads);
            let after = params::collect(&model.valid());
            self.model = Some(model);
            let deltas = params::differences(&after, &before);
            drop((before, after));
            let alignment = self.measure_if_due(phase, &deltas, lr);
            self.predictor.observe(&deltas, lr);
            alignment
        };
        if average_probe.is_some() {
            self.average.probe = average_probe;
        }
        self.observe_average();
        self.state.guard.probe.count_full_step();
        self.state.optimizer_step += 1;
        Ok(StepOutcome {
            loss,
            lr,
            optimizer_step,
            rolled_back: false,
            alignment,
            loss_scale,
            overflow: false,
            gain: None,
            efficiency: None,
            ran_full: false,
            selection,
        })
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
