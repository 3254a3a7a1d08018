//! The trainer itself: its state, its builders and its accessors. What a step runs is in
//! [`steps`](super::steps); saving and resuming in [`checkpoint`](super::checkpoint).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor};
use burn::train::TrainStep;

use super::averaging::{AverageConfig, AverageState, WeightAverage};
use super::checkpoint::files::DEFAULT_KEEP;
use super::checkpoint::persist;
use super::checkpoint::state::TrainerState;
use super::config::HybridConfig;
use super::error::TrainerError;
use super::execution::ExecutionConfig;
use super::loss_window::LossWindow;
use super::lr::LrSchedule;
use super::precision::{LossScaler, PrecisionConfig};
use super::predict::phase::Phase;
use super::predict::predictor::UpdatePredictor;
use super::replica::Replica;
use super::reports::statistics::TrainerStatistics;
use super::reports::step_report::JsonlWriter;
use super::selection::feedback::{weighed_step, ExampleFeedback, Feedback};
use super::selection::pick::{select_examples, Selector};
use super::selection::{ExampleLosses, SelectableBatch, SelectionConfig};
use super::step::{ForwardLoss, HybridBatch, HybridModel};
use super::steps::in_step::InStepSampling;
use crate::memory::MemoryProbe;

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
    /// Per-example weights and losses with the data side (`with_example_feedback`).
    pub(super) feedback: Option<Feedback<B, M, T>>,
    /// The weight average's tensors (`with_weight_average`; its books are in `state`).
    pub(crate) average: WeightAverage<B::InnerBackend, T>,
    /// The pool read during steps, with `sample_pool_ms` set (started by the first step).
    pub(super) in_step: Option<InStepSampling>,
    /// Whether this process has taken a step (its first one's record says so).
    pub(super) stepped: bool,
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

    /// The one place a trainer starts: resumed from the newest checkpoint in
    /// `resume_from` ([`resume`](Self::resume); `config` and `lr` are then the
    /// checkpoint's, and the arguments are not used), or new ([`new`](Self::new)) when it is
    /// `None`. The runner and the burn-train strategy both start their trainers here.
    pub fn start(
        model: M,
        optimizer: O,
        config: HybridConfig,
        lr: LrSchedule,
        device: B::Device,
        resume_from: Option<&Path>,
    ) -> Result<Self, TrainerError> {
        match resume_from {
            Some(dir) => Self::resume(model, optimizer, dir, device),
            None => Self::new(model, optimizer, config, lr, device),
        }
    }

    /// Rebuilds a trainer from the newest checkpoint in `dir`.
    ///
    /// `model_template` and `optimizer` must be built the way the saved ones were (same
    /// architecture, same optimizer type); their values are replaced by the saved ones.
    /// The run continues exactly where it stopped: same step, phase, horizon, scale,
    /// confidence, running loss, predictor and learning-rate position. Step records are
    /// not written until [`with_metrics_appended`](Self::with_metrics_appended) is called.
    pub fn resume(
        model_template: M,
        optimizer: O,
        dir: impl AsRef<Path>,
        device: B::Device,
    ) -> Result<Self, TrainerError> {
        let loaded = persist::load::<B, M, O>(model_template, optimizer, dir.as_ref(), &device)?;
        let mut trainer = Self::assemble(loaded.model, loaded.optimizer, loaded.state, loaded.predictor, device);
        trainer.average.params = loaded.average;
        Ok(trainer)
    }

    /// Writes a checkpoint of the current step into `dir` and returns its directory. The
    /// layout (`ckpt-XXXXXXXX/` with `model.bin`, `optimizer.bin`, `trainer.bin`,
    /// `trainer.json`, `average.bin` with a weight average, and a `latest` pointer) is
    /// described in `docs/trainer.md`; each checkpoint appears atomically, and only the
    /// newest two are kept (see [`with_checkpoints_kept`](Self::with_checkpoints_kept)).
    ///
    /// The weights are always verified ones: a predict block's jump is judged within the
    /// step that makes it, and the block's later steps do not move the weights. Reads
    /// every tensor back to the host (a sync).
    pub fn save_checkpoint(&self, dir: impl AsRef<Path>) -> Result<PathBuf, TrainerError> {
        let parts = persist::Saving {
            model: self.model.as_ref().ok_or(TrainerError::ModelLost)?,
            optimizer: &self.optimizer,
            state: self.state(),
            predictor: self.predictor.to_record(),
            average: self.averaged_model(),
        };
        persist::save::<B, M, O>(dir.as_ref(), parts, self.keep_checkpoints)
    }

    /// Everything about the trainer that is not a tensor.
    pub(crate) fn state(&self) -> TrainerState {
        TrainerState { statistics: self.statistics(), ..self.state.clone() }
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
            feedback: None,
            average: WeightAverage::new(),
            in_step: None,
            stepped: false,
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

    /// Weighs each example in full steps' losses as the data side says, and gives it
    /// back each example's loss from the step's own forward pass ([`ExampleFeedback`]):
    /// what InfoBatch needs ([`IdxSampler::with_info_batch`](crate::data::IdxSampler::with_info_batch)).
    /// Each micro-batch's loss is then `mean(weights · losses)` over the model's
    /// [`ExampleLosses`] on the autodiff model, and the step reads the losses back (one
    /// small sync). Full steps only, on the plain path: a step fails with
    /// [`ConfigError::ExampleFeedback`](super::ConfigError::ExampleFeedback), running
    /// nothing, where the run predicts, selects or trains in mixed precision.
    pub fn with_example_feedback(mut self, feedback: impl ExampleFeedback + 'static) -> Self
    where
        M: ExampleLosses<B, Input = T>,
    {
        self.feedback = Some(Feedback { source: Box::new(feedback), weigh: weighed_step::<B, M, T> });
        self
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
}
