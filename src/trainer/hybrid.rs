//! The trainer: runs each step as its phase says and keeps the books.

use std::marker::PhantomData;
use std::path::Path;
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, ElementConversion, FloatDType, Tensor};
use burn::train::{InferenceStep, TrainOutput, TrainStep};

use super::accumulation::MicroBatchGradients;
use super::averaging::{AverageConfig, AverageState, WeightAverage};
use super::checkpoint::files::DEFAULT_KEEP;
use super::checkpoint::state::TrainerState;
use super::config::HybridConfig;
use super::error::TrainerError;
use super::execution::ExecutionConfig;
use super::loss_window::LossWindow;
use super::lr::LrSchedule;
use super::params::{self, Alignment, ParamUpdates};
use super::precision::mixed::{self, CastParams};
use super::precision::{LossScaler, PrecisionConfig, ScaledStep};
use super::predict::calibration::{confidence_after, evidence, jump_scale, scale_after};
use super::predict::guard::RollbackReason;
use super::predict::phase::Phase;
use super::predict::predictor::UpdatePredictor;
use super::predict::snapshot::Snapshot;
use super::replica::Replica;
use super::reports::statistics::TrainerStatistics;
use super::reports::step_report::SelectionCount;
use super::reports::step_report::{JsonlWriter, StepReport};
use super::selection::pick::{select_examples, Selector};
use super::selection::{ExampleLosses, SelectableBatch, SelectionConfig};
use super::step::{ForwardLoss, HybridBatch, HybridModel, StepLoss};
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

/// Alternates full training steps with predicted ones; see the [module docs](super).
///
/// `B` is the autodiff backend, `M` the model on it, `O` a Burn optimizer for `M`, and `T`
/// the batch type its [`TrainStep`] takes.
pub struct HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep,
{
    /// Out of the trainer only while a step moves it through the optimizer or predictor.
    pub(super) model: Option<M>,
    pub(super) optimizer: O,
    /// The run's books, shared by a new run and a resumed one, and checkpointed whole.
    pub(super) state: TrainerState,
    pub(super) predictor: UpdatePredictor<B::InnerBackend>,
    pub(super) device: B::Device,
    pub(super) metrics: Option<JsonlWriter>,
    pub(super) keep_checkpoints: usize,
    pub(super) execution: ExecutionConfig,
    pub(super) precision: PrecisionConfig,
    /// The model's [`ForwardLoss`], set when steps take the mixed-precision path.
    pub(super) forward_loss: Option<fn(&M, T) -> Tensor<B, 1>>,
    /// Full-step losses not yet read back.
    pub(super) losses: LossWindow<B::InnerBackend>,
    /// The batches every block is probed on: the first block's micro-batches, kept for
    /// the run (not checkpointed: a resumed run takes its next block's).
    pub(super) probe_set: Option<Vec<T>>,
    /// Whether the caller gave the probe set (`with_probe_set`).
    pub(super) probe_set_given: bool,
    /// Whether full steps keep their [`TrainStep`] output (`with_train_outputs`).
    pub(super) keep_outputs: bool,
    /// The last full step's output, until taken.
    pub(super) output: Option<<M as TrainStep>::Output>,
    /// This trainer's place in a data-parallel run (`with_replica`).
    pub(super) replica: Option<Replica>,
    /// Which examples full steps train on (`with_selection`); not checkpointed.
    pub(super) selection: Option<Selector<M, T>>,
    /// The weight average's tensors (`with_weight_average`; its books are in `state`).
    pub(crate) average: WeightAverage<B::InnerBackend, T>,
    pub(super) batch: PhantomData<fn(T)>,
}

impl<B, M, O, T> HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// A trainer at step 0 (warmup first). Fails if `config` or `lr` breaks a rule.
    pub fn new(
        model: M,
        optimizer: O,
        config: HybridConfig,
        lr: LrSchedule,
        device: B::Device,
    ) -> Result<Self, TrainerError> {
        config.validate()?;
        lr.validate()?;
        let predictor = UpdatePredictor::new(config.ema_decay, config.predictor_precision);
        // Eager weights: a block snapshot or a caller's clone must see the values trained.
        let model = crate::init::materialize(model);
        Ok(Self::assemble(model, optimizer, TrainerState::new(config, lr), predictor, device))
    }

    /// A trainer around a run's books, new or resumed. What is not in the books (metrics
    /// file, execution, precision, checkpoints kept) starts at its default; the `with_*`
    /// builders set it.
    pub(super) fn assemble(
        model: M,
        optimizer: O,
        state: TrainerState,
        predictor: UpdatePredictor<B::InnerBackend>,
        device: B::Device,
    ) -> Self {
        Self {
            model: Some(model),
            optimizer,
            state,
            predictor,
            device,
            metrics: None,
            keep_checkpoints: DEFAULT_KEEP,
            execution: ExecutionConfig::default(),
            precision: PrecisionConfig::default(),
            forward_loss: None,
            losses: LossWindow::default(),
            probe_set: None,
            probe_set_given: false,
            keep_outputs: false,
            output: None,
            replica: None,
            selection: None,
            average: WeightAverage::new(),
            batch: PhantomData,
        }
    }

    /// Keeps each full step's [`TrainStep`] output (the last micro-batch's, with
    /// accumulation) for [`take_train_output`](Self::take_train_output): what burn-train's
    /// metrics read. Off by default, since the output (the logits) then outlives its step.
    /// Steps on the mixed-precision path ([`with_precision`](Self::with_precision) with a
    /// [`ForwardLoss`](super::ForwardLoss)) and predicted steps have none.
    pub fn with_train_outputs(mut self) -> Self {
        self.keep_outputs = true;
        self
    }

    /// The output of the latest full step since the last call, where it kept one.
    pub fn take_train_output(&mut self) -> Option<<M as TrainStep>::Output> {
        self.output.take()
    }

    /// Sets how steps are executed: gradient accumulation, loss read-back, pool trimming.
    /// Fails if `execution` breaks a rule.
    pub fn with_execution(mut self, execution: ExecutionConfig) -> Result<Self, TrainerError> {
        execution.validate()?;
        self.execution = execution;
        Ok(self)
    }

    /// How steps are executed.
    pub fn execution(&self) -> &ExecutionConfig {
        &self.execution
    }

    /// Sets the precision full and predicted steps compute in, and loss scaling; see
    /// [`Precision`](super::Precision). The model the optimizer updates stays in its own
    /// (f32) precision. Fails if `precision` breaks a rule, or with
    /// [`TrainerError::UnsupportedPrecision`] if the backend cannot compute in it on this
    /// device. After [`resume`](Self::resume) the checkpoint's loss scale is kept.
    pub fn with_precision(mut self, precision: PrecisionConfig) -> Result<Self, TrainerError>
    where
        M: ForwardLoss<B, Input = T>,
    {
        precision.validate()?;
        let dtype = DType::from(precision.precision.dtype());
        if !<B as Backend>::supports_dtype(&self.device, dtype) {
            return Err(TrainerError::UnsupportedPrecision { precision: precision.precision });
        }
        self.state.loss_scaler = match (precision.loss_scale, self.state.loss_scaler.take()) {
            (Some(config), Some(resumed)) => Some(resumed.with_config(config)),
            (Some(config), None) => Some(LossScaler::new(config)),
            (None, _) => None,
        };
        self.forward_loss =
            precision.is_mixed().then_some(<M as ForwardLoss<B>>::forward_loss as fn(&M, T) -> Tensor<B, 1>);
        self.precision = precision;
        Ok(self)
    }

    /// The precision steps compute in.
    pub fn precision(&self) -> &PrecisionConfig {
        &self.precision
    }

    /// The loss scaler, with loss scaling on.
    pub fn loss_scaler(&self) -> Option<&LossScaler> {
        self.state.loss_scaler.as_ref()
    }

    /// Writes every step's record to a new JSON-lines file at `path` (truncating it).
    pub fn with_metrics(mut self, path: impl AsRef<Path>) -> Result<Self, TrainerError> {
        self.metrics = Some(JsonlWriter::create(path)?);
        Ok(self)
    }

    /// Appends every step's record to the JSON-lines file at `path`, as a resumed run does.
    pub fn with_metrics_appended(mut self, path: impl AsRef<Path>) -> Result<Self, TrainerError> {
        self.metrics = Some(JsonlWriter::append(path)?);
        Ok(self)
    }

    /// Probes every predict block on `batches` (the *probe set*): held-out batches, in
    /// eval mode, before and after each jump, and also where each verdict leaves the
    /// weights, which gives the pace of the full steps between blocks on the same data.
    /// Without it the first block's micro-batches become the probe set. It is not in
    /// checkpoints: give a resumed run the same set and it continues bit for bit;
    /// without one, the resumed run takes its next block's and measures the pace anew.
    /// Fails with [`TrainerError::EmptyProbeSet`] on an empty set.
    pub fn with_probe_set(mut self, batches: Vec<T>) -> Result<Self, TrainerError> {
        if batches.is_empty() {
            return Err(TrainerError::EmptyProbeSet);
        }
        self.probe_set = Some(batches);
        self.probe_set_given = true;
        Ok(self)
    }

    /// Makes this trainer one replica of a data-parallel run: each replica steps on its
    /// own share of every batch, and the gradients, the losses every decision reads (the
    /// guard's running loss, a block's probe losses, the loss scaler's overflow check)
    /// are averaged over the replicas, so they all apply the same updates and take the
    /// same decisions. Give every replica a copy of one model (and the same configuration,
    /// schedule and optimizer); the replicas check here that their parameters match and
    /// that they start after the same step, and fail with [`TrainerError::Replica`]
    /// otherwise. Every
    /// replica must call this and then step in lockstep: a reduction waits for all of
    /// them. [`runner::data_parallel`](crate::runner::data_parallel) runs the replicas.
    pub fn with_replica(mut self, replica: Replica) -> Result<Self, TrainerError> {
        replica.check_same_parameters::<B, M>(self.model(), &self.device)?;
        replica.check_same_step::<B::InnerBackend>(self.steps_taken(), &self.device)?;
        self.replica = Some(replica);
        Ok(self)
    }

    /// This trainer's place in a data-parallel run, if it is in one.
    pub fn replica(&self) -> Option<&Replica> {
        self.replica.as_ref()
    }

    /// Full steps in `config`'s range score their batch's examples forward only, on the
    /// inner model, and train on those `config`'s rule chooses (see [`SelectionConfig`]).
    /// The step records say how many were scored and kept, the statistics the share. Not
    /// in checkpoints: give a resumed run the same configuration, and it chooses as the
    /// uninterrupted run would. Fails if `config` breaks a rule.
    pub fn with_selection(mut self, config: SelectionConfig) -> Result<Self, TrainerError>
    where
        M::InnerModule: ExampleLosses<B::InnerBackend, Input = T::Inner>,
        T: SelectableBatch<B>,
    {
        config.validate()?;
        self.selection = Some(Selector { config, pick: select_examples::<B, M, T> });
        Ok(self)
    }

    /// The selection full steps make, if any.
    pub fn selection(&self) -> Option<&SelectionConfig> {
        self.selection.as_ref().map(|selector| &selector.config)
    }

    /// Keeps an exponential moving average of the weights (see [`AverageConfig`]): after
    /// every step that changed them, from `config.start_step` on. [`averaged_model`]
    /// gives the model with the average's weights, [`verify_average`](Self::verify_average)
    /// chooses between it and the live weights, checkpoints save it, and a resumed run
    /// continues it exactly (call this again after [`resume`](Self::resume); a new
    /// `config` takes over the resumed average). Costs one copy of the parameters on the
    /// device. Fails if `config` breaks a rule.
    ///
    /// [`averaged_model`]: Self::averaged_model
    pub fn with_weight_average(mut self, config: AverageConfig) -> Result<Self, TrainerError> {
        config.validate()?;
        self.state.average = Some(match self.state.average.take() {
            Some(resumed) => AverageState { config, ..resumed },
            None => AverageState::new(config),
        });
        Ok(self)
    }

    /// The weight average's configuration and the updates it has seen, if kept.
    pub fn weight_average(&self) -> Option<&AverageState> {
        self.state.average.as_ref()
    }

    /// Keeps the newest `keep` checkpoints (at least one) when saving; default 2.
    pub fn with_checkpoints_kept(mut self, keep: usize) -> Self {
        self.keep_checkpoints = keep.max(1);
        self
    }

    /// The model as it is now.
    ///
    /// # Panics
    ///
    /// Only if an earlier step panicked (and the panic was caught) while the model was out
    /// of the trainer.
    pub fn model(&self) -> &M {
        self.model.as_ref().expect("the model is only missing after a step panicked")
    }

    /// Hands the model back.
    ///
    /// # Panics
    ///
    /// As [`model`](Self::model).
    pub fn into_model(self) -> M {
        self.model.expect("the model is only missing after a step panicked")
    }

    /// The optimizer and its state.
    pub fn optimizer(&self) -> &O {
        &self.optimizer
    }

    /// The phase of the next step.
    pub fn phase(&self) -> Phase {
        self.state.schedule.current()
    }

    /// Steps taken.
    pub fn steps_taken(&self) -> usize {
        self.state.step
    }

    /// The learning-rate schedule's position.
    pub fn optimizer_step(&self) -> usize {
        self.state.optimizer_step
    }

    /// The multiplier on predicted updates.
    pub fn scale(&self) -> f64 {
        self.state.scale
    }

    /// The confidence in the predictor, in `[0, 1]`.
    pub fn confidence(&self) -> f64 {
        self.state.confidence
    }

    /// Predict steps the next block will have.
    pub fn horizon(&self) -> usize {
        self.state.schedule.horizon()
    }

    /// The configuration.
    pub fn config(&self) -> &HybridConfig {
        &self.state.config
    }

    /// The update predictor: what the next predict step will apply is
    /// `scale() · predictor().predict(lr_schedule().at(optimizer_step()))`.
    pub fn predictor(&self) -> &UpdatePredictor<B::InnerBackend> {
        &self.predictor
    }

    /// The learning-rate schedule.
    pub fn lr_schedule(&self) -> &LrSchedule {
        &self.state.lr
    }

    /// The device batches and tensors live on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Passes over one step without learning from it: the step counter and the
    /// learning-rate position move on; the weights, the optimizer, the predictor and the
    /// phase schedule stay as they are, and no record is written. `benches/trainer`'s
    /// *skip* ablation replays a hybrid run's schedule this way, with its predicted steps
    /// left out; a caller may also pass over a batch it cannot use while keeping the
    /// schedule where a run with that batch would be.
    pub fn skip_step(&mut self) {
        self.state.step += 1;
        self.state.optimizer_step += 1;
    }

    /// Totals so far, with the predictor's current size and the running loss.
    pub fn statistics(&self) -> TrainerStatistics {
        let mut statistics = self.state.statistics.clone();
        statistics.running_loss = self.state.guard.running();
        statistics.predictor_bytes = self.predictor.bytes();
        statistics.average_bytes = self.average.params.as_ref().map_or(0, |params| params.bytes());
        statistics
    }

    /// Runs one step of the current phase on one batch and returns its record; with
    /// [`accumulation_steps`](ExecutionConfig::accumulation_steps) above 1 use
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
    /// [`accumulation_steps`](ExecutionConfig::accumulation_steps) micro-batches: one
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
        if micro_batches.len() != self.execution.accumulation_steps {
            return Err(TrainerError::MicroBatches {
                expected: self.execution.accumulation_steps,
                got: micro_batches.len(),
            });
        }
        if self.state.schedule.current() == Phase::Predict && !self.predictor.is_ready() {
            // Unreachable through the gate, which needs a ready predictor; a hand-edited
            // checkpoint could get here. Fall back to full steps.
            self.state.schedule.rollback(&self.state.config);
        }
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

        let mut items = 0;
        let micro_batches = micro_batches.inspect(|batch| items += batch.items());
        let started = Instant::now();
        let outcome = match phase {
            Phase::Predict => self.predict_step(micro_batches),
            _ => self.full_step(phase, micro_batches),
        };
        // A step that failed changed nothing, and leaves no output either.
        let outcome = outcome.inspect_err(|_| self.output = None)?;
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
            // No block while the predictor is empty or the learning rate still warms up. With
            // prediction off the predictor may be empty: the gate is closed anyway, and its
            // full steps count towards the re-probe (by which the predictor is refilled).
            let warm = self.state.optimizer_step >= self.state.lr.warmup_steps();
            let off = self.state.confidence < self.state.config.min_confidence;
            let gate = if warm && (self.predictor.is_ready() || off) { self.state.confidence } else { f64::NAN };
            self.state.schedule.advance(&self.state.config, gate);
        }
        if self.execution.trims_after(self.state.step, phase, self.state.schedule.current()) {
            self.trim();
        }
        let memory = if synced { B::memory_sample(&self.device) } else { None };
        let host_memory = if synced && memory.is_none() { crate::memory::host_memory() } else { None };

        let record = StepReport {
            step: self.state.step,
            optimizer_step: outcome.optimizer_step,
            phase,
            loss: outcome.loss,
            lr: outcome.lr,
            seconds,
            items,
            items_per_second: if seconds > 0.0 { items as f64 / seconds } else { 0.0 },
            memory,
            host_memory,
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
        };
        self.state.step += 1;
        self.state.statistics.observe(&record);
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

    /// Asks the device pool to release what it keeps unused, and counts what it gave back.
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

    /// Forward and backward over every micro-batch, then the optimizer on their mean
    /// gradient; then the real update feeds the predictor.
    fn full_step(
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

    /// A predict step. The block's first step applies the whole block's predicted
    /// displacement at once, `scale · Σ lr · m` over its `h` steps, and verifies it: the
    /// same micro-batches, in eval mode on the inner model, before and after the jump. The
    /// guard keeps the jump only if it gained enough (see [`LossGuard::judge_block`]);
    /// otherwise the block's starting weights are restored exactly and the step trains on
    /// its micro-batches as a full step, so a rejected block costs its two probe forwards
    /// and no progress. A kept block's other steps run nothing: the data and the
    /// learning-rate position move on.
    fn predict_step(&mut self, micro_batches: impl ExactSizeIterator<Item = T>) -> Result<StepOutcome, TrainerError> {
        let optimizer_step = self.state.optimizer_step;
        let lr = self.state.lr.at(optimizer_step);
        let coasting = StepOutcome {
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
        };
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

        let model = self.model.take().ok_or(TrainerError::ModelLost)?;
        let snapshot = Snapshot::take(&model.valid(), self.state.config.snapshot);
        self.state.statistics.snapshot_bytes = self.state.statistics.snapshot_bytes.max(snapshot.bytes());
        let before = match self.probe(&model, &probe_set) {
            Ok(loss) => loss,
            Err(err) => {
                self.model = Some(model);
                return Err(err);
            }
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
        let after = self.probe(&model, &probe_set);
        drop(probe_set);
        let after = match after {
            Ok(loss) => loss,
            Err(err) => {
                self.model = Some(snapshot.restore::<B, M>(model));
                return Err(err);
            }
        };

        let verdict = self.state.guard.judge_block(before, after, steps);
        // Where the verdict leaves the weights: the jump, or the block's start restored.
        self.state.guard.probe.mark(if verdict.keep { after } else { before });
        // A block with no pace to be judged against says nothing for or against prediction.
        let unpaired = matches!(verdict.reason, Some(RollbackReason::Unpaired { .. }));
        if !unpaired {
            self.state.confidence = confidence_after(self.state.confidence, &verdict, self.state.schedule.is_reprobe());
            self.state.scale = scale_after(self.state.scale, &verdict, &self.state.config);
        }
        let gain = verdict.gain.is_finite().then_some(verdict.gain);
        if verdict.keep {
            drop((snapshot, batches));
            self.model = Some(model);
            self.observe_average();
            self.state.optimizer_step += 1;
            self.state.schedule.calibrate(&self.state.config, evidence(&verdict));
            self.state.awaiting_calibration = true;
            tracing::debug!(
                step = self.state.step,
                before,
                after,
                steps,
                efficiency = verdict.efficiency,
                "predict block kept"
            );
            return Ok(StepOutcome { loss: Some(after), gain, efficiency: verdict.efficiency, ..coasting });
        }
        let reason = verdict.reason.unwrap_or(RollbackReason::NonFinite(after));
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
        self.model = Some(snapshot.restore::<B, M>(model));
        let full = self.full_step(Phase::Full, batches.into_iter())?;
        Ok(StepOutcome { rolled_back: true, gain, efficiency: verdict.efficiency, ran_full: true, ..full })
    }

    /// The mean loss of `batches` on the inner model, in the compute precision; in a
    /// data-parallel run, the mean of every replica's.
    pub(super) fn probe(&self, model: &M, batches: &[T]) -> Result<f64, TrainerError> {
        let mixed = self.forward_loss.is_some();
        let dtype = self.precision.precision.dtype();
        let inner = if mixed { model.valid().map(&mut CastParams(dtype)) } else { model.valid() };
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

/// Full steps the predictor is fed before a re-probe: twice the moving average's time
/// constant `1 / (1 − ema_decay)` (20 at the default 0.9), which leaves the average
/// `ema_decay^refill` (12%) of its first observation.
fn predictor_refill(config: &HybridConfig) -> usize {
    ((2.0 / (1.0 - config.ema_decay)).ceil() as usize).max(1)
}
