//! A step's bodies: [`HybridTrainer::step`] runs the current phase's step
//! ([`full`] or [`predict`]) and keeps the books: its record, the phase schedule, the pool
//! trims, the metrics line. [`average`]: the weight average's updates and verification.

mod average;
mod full;
pub(super) mod in_step;
mod predict;

use in_step::InStepSampling;

use std::time::Instant;

use burn::optim::Optimizer;
use burn::tensor::backend::{AutodiffBackend, Backend};

use super::config::ConfigError;
use super::error::TrainerError;
use super::hybrid::HybridTrainer;
use super::params::Alignment;
use super::predict::phase::Phase;
use super::reports::step_report::{SelectionCount, StepReport};
use super::step::{HybridBatch, HybridModel};
use crate::memory::MemoryProbe;

/// What a step's body hands back to [`HybridTrainer::step`].
struct StepOutcome {
    /// `None` when the loss stayed on the device.
    loss: Option<f64>,
    lr: f64,
    optimizer_step: usize,
    rolled_back: bool,
    alignment: Option<Alignment>,
    /// The loss scale the backward pass used.
    loss_scale: Option<f64>,
    /// Whether the gradients overflowed and the update was skipped.
    overflow: bool,
    /// A block's verified gain and efficiency, on its first step.
    gain: Option<f64>,
    efficiency: Option<f64>,
    /// A rejected block's first step that trained as a full step after all.
    ran_full: bool,
    /// A full step that selected its examples: how many.
    selection: Option<SelectionCount>,
}

impl StepOutcome {
    /// A step at `lr` and `optimizer_step` that read no loss and did nothing else of note.
    fn at(lr: f64, optimizer_step: usize) -> Self {
        Self {
            loss: None,
            lr,
            optimizer_step,
            rolled_back: false,
            alignment: None,
            loss_scale: None,
            overflow: false,
            gain: None,
            efficiency: None,
            ran_full: false,
            selection: None,
        }
    }
}

impl<B, M, O, T> HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// Runs one step of the current phase on one batch and returns its record; with
    /// [`accumulation_steps`](super::ExecutionConfig::accumulation_steps) above 1 use
    /// [`step_accumulated`](Self::step_accumulated).
    ///
    /// On [`TrainerError::NonFiniteLoss`] nothing changed: not the model, not the
    /// optimizer, not the schedule; the caller may skip the batch or stop. A rejected
    /// predicted step is not an error: its record says `rolled_back`. An error writing the
    /// metrics line is returned after the step has been applied.
    pub fn step(&mut self, batch: T) -> Result<StepReport, TrainerError> {
        self.step_accumulated([batch])
    }

    /// Runs one step of the current phase over
    /// [`accumulation_steps`](super::ExecutionConfig::accumulation_steps) micro-batches: one
    /// optimizer update (or one predicted update) for all of them. Errors as
    /// [`step`](Self::step), and with [`TrainerError::MicroBatches`] (nothing run) when
    /// the count is wrong.
    ///
    /// The micro-batches are taken one at a time: give a lazy iterator (say, one that
    /// moves host batches to the device in `map`) and only one is on the device at once.
    pub fn step_accumulated<I>(&mut self, micro_batches: I) -> Result<StepReport, TrainerError>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: ExactSizeIterator,
    {
        let micro_batches = micro_batches.into_iter();
        self.check_step(micro_batches.len())?;
        // An output is the step's own: a failed or predicted step leaves none behind.
        self.output = None;
        let phase = self.state.schedule.current();
        let span = tracing::info_span!(
            "step",
            step = self.state.step,
            phase = %phase,
            loss = tracing::field::Empty,
            rolled_back = tracing::field::Empty
        );
        let _entered = span.enter();

        self.begin_in_step_sampling();
        let mut items = 0;
        let micro_batches = micro_batches.inspect(|batch| items += batch.items());
        let started = Instant::now();
        let outcome = match phase {
            Phase::Predict => self.predict_step(micro_batches),
            _ => self.full_step(phase, micro_batches),
        };
        // A step that failed changed nothing, and leaves no output either.
        let outcome = outcome.inspect_err(|_| self.output = None)?;
        let record = self.close_step(phase, outcome, items, started);
        if let Some(loss) = record.loss {
            span.record("loss", loss);
        }
        span.record("rolled_back", record.rolled_back);
        tracing::debug!(
            loss = record.loss,
            lr = record.lr,
            seconds = record.seconds,
            bytes_in_use = record.memory.map(|m| m.bytes_in_use),
            "step done"
        );
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.write(&record)?;
        }
        Ok(record)
    }

    /// Runs `stage` on the model taken out of the trainer and puts back the model it hands
    /// back, whatever else it returns: a stage cannot lose the model on any path.
    fn with_model<R>(
        &mut self,
        stage: impl FnOnce(&mut Self, M) -> (M, Result<R, TrainerError>),
    ) -> Result<R, TrainerError> {
        let model = self.model.take().ok_or(TrainerError::ModelLost)?;
        let (model, result) = stage(self, model);
        self.model = Some(model);
        result
    }

    /// Refuses a step that cannot run (nothing run): the wrong number of micro-batches, or
    /// per-example feedback in a run it cannot follow. A predict phase without a ready
    /// predictor (unreachable through the gate; a hand-edited checkpoint could get here)
    /// falls back to full steps.
    fn check_step(&mut self, micro_batches: usize) -> Result<(), TrainerError> {
        if micro_batches != self.execution.accumulation_steps {
            return Err(TrainerError::MicroBatches { expected: self.execution.accumulation_steps, got: micro_batches });
        }
        if let Some(conflict) = self.feedback_conflict() {
            return Err(ConfigError::ExampleFeedback(conflict).into());
        }
        if self.state.schedule.current() == Phase::Predict && !self.predictor.is_ready() {
            self.state.schedule.rollback(&self.state.config);
        }
        Ok(())
    }

    /// The books after a step's body ran `phase`: its time (the device synced where the
    /// step read its loss), the phase schedule, the pool trim, and its record.
    fn close_step(&mut self, phase: Phase, outcome: StepOutcome, items: usize, started: Instant) -> StepReport {
        // A rejected block's step trained as a full step: its record says so.
        let phase = if outcome.ran_full { Phase::Full } else { phase };
        // A step that left its loss on the device does not wait for the device either:
        // its time is what the host spent queueing, and the reading step pays the rest.
        let synced = outcome.loss.is_some();
        if synced {
            if let Err(err) = <B as Backend>::sync(&self.device) {
                tracing::warn!(%err, "device sync after the step failed");
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let items = items * self.replica.map_or(1, |replica| replica.replicas());
        if !outcome.rolled_back {
            self.advance_schedule();
        }
        if self.execution.trims_after(self.state.step, phase, self.state.schedule.current()) {
            self.trim();
        }
        let memory = if synced { B::memory_sample(&self.device) } else { None };
        let host_memory = if synced && memory.is_none() { crate::memory::process_memory() } else { None };
        let in_step_peak = self.in_step.as_mut().and_then(|sampling| sampling.end_step(synced));
        let record = StepReport {
            seconds,
            items,
            items_per_second: if seconds > 0.0 { items as f64 / seconds } else { 0.0 },
            memory,
            host_memory,
            in_step_peak,
            ..self.record_of(phase, &outcome)
        };
        self.state.step += 1;
        self.stepped = true;
        self.state.statistics.observe(&record);
        record
    }

    /// Starts, restarts (a new period) or stops reading the pool during steps, as the
    /// execution settings say, and starts this step's readings. Started here, not when the
    /// settings are given, so that the reader follows the thread the steps run on.
    fn begin_in_step_sampling(&mut self) {
        match (self.execution.sample_pool_ms, &self.in_step) {
            (Some(ms), Some(sampling)) if sampling.period_ms() == ms => {}
            (Some(ms), _) => self.in_step = Some(InStepSampling::start::<B>(&self.device, ms)),
            (None, _) => self.in_step = None,
        }
        if let Some(sampling) = self.in_step.as_mut() {
            sampling.begin_step();
        }
    }

    /// Moves the phase schedule on after a step that was not rolled back. No block while
    /// the predictor is empty or the learning rate still warms up. With prediction off the
    /// predictor may be empty: the gate is closed anyway, and its full steps count towards
    /// the re-probe (by which the predictor is refilled).
    fn advance_schedule(&mut self) {
        let warm = self.state.optimizer_step >= self.state.lr.warmup_steps();
        let off = self.state.confidence < self.state.config.min_confidence;
        let gate = if warm && (self.predictor.is_ready() || off) { self.state.confidence } else { f64::NAN };
        self.state.schedule.advance(&self.state.config, gate);
    }

    /// The record of a step that ran `phase`, as the outcome and the trainer's books give
    /// it, before its time, items and memory are known.
    fn record_of(&self, phase: Phase, outcome: &StepOutcome) -> StepReport {
        StepReport {
            step: self.state.step,
            optimizer_step: outcome.optimizer_step,
            phase,
            loss: outcome.loss,
            lr: outcome.lr,
            seconds: 0.0,
            items: 0,
            items_per_second: 0.0,
            memory: None,
            host_memory: None,
            in_step_peak: None,
            predicted: phase == Phase::Predict,
            rolled_back: outcome.rolled_back,
            scale: self.state.scale,
            confidence: self.state.confidence,
            horizon: self.state.schedule.horizon(),
            cosine: outcome.alignment.map(|a| a.cosine),
            norm_ratio: outcome.alignment.map(|a| a.norm_ratio),
            loss_scale: outcome.loss_scale,
            overflow: outcome.overflow,
            gain: outcome.gain,
            efficiency: outcome.efficiency,
            selection: outcome.selection,
            first_in_process: !self.stepped,
        }
    }

    /// What in this run per-example feedback cannot follow, if it is on: predicted steps
    /// train on no example, a selecting step on a subset, and the mixed-precision path
    /// scales its own loss.
    fn feedback_conflict(&self) -> Option<&'static str> {
        self.feedback.as_ref()?;
        if !self.state.config.is_all_full() {
            Some("predicts steps (use the all-full mode)")
        } else if self.selection.is_some() {
            Some("also selects examples")
        } else if self.forward_loss.is_some() {
            Some("trains in mixed precision")
        } else {
            None
        }
    }

    fn trim(&mut self) {
        let report = crate::memory::trim::<B>(&self.device);
        self.state.statistics.trims += 1;
        self.state.statistics.trimmed_bytes += report.released_bytes().unwrap_or(0);
        tracing::debug!(step = self.state.step, released = report.released_bytes(), "pool trimmed");
    }

    /// Reads back the full-step losses still on the device and feeds their mean to the
    /// guard's running loss. Returns the mean, `None` when there were none.
    fn read_losses(&mut self) -> Option<f64> {
        let (mean, _) = self.losses.read()?;
        self.state.guard.observe_full(mean);
        Some(mean)
    }

    /// Whether the full step just queued must read its loss back now.
    fn loss_due(&self) -> bool {
        self.losses.steps() >= self.execution.loss_every
            || (!self.state.config.is_all_full() && self.state.schedule.is_last_of_phase())
    }
}
