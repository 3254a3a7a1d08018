//! The strategy: burn-train's epochs and events around `HybridTrainer::step`.

use std::path::PathBuf;

use burn::data::dataloader::Progress;
use burn::lr_scheduler::LrScheduler;
use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent, LearningCheckpointer,
    LearningComponentsMarker, SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainStep,
    TrainingComponents, TrainingItem, ValidLoader,
};

use burn::train::metric::store::EventStoreClient;

use super::telemetry::StepTelemetry;
use crate::memory::MemoryProbe;
use crate::trainer::{
    ExecutionConfig, HybridBatch, HybridConfig, HybridModel, HybridTrainer, LrSchedule, TrainerError,
};

/// Trains a burn-train [`Learner`]'s model with a [`HybridTrainer`]: full and predicted
/// steps over each epoch of the training loader, burn-train's events for every full step
/// and every validation batch, Burn's checkpointer and early stopping at each epoch's end.
///
/// `optimizer` and `lr` are what the trainer uses (a `Learner` keeps its own private);
/// give the `Learner` the same optimizer, and [`ScheduledLr`](crate::trainer::ScheduledLr)
/// of the same schedule, so that what Burn's checkpointer saves matches.
pub struct HybridStrategy<B: AutodiffBackend, O> {
    device: B::Device,
    optimizer: O,
    config: HybridConfig,
    lr: LrSchedule,
    execution: ExecutionConfig,
    checkpoints: Option<PathBuf>,
    telemetry: StepTelemetry,
}

impl<B: AutodiffBackend, O> HybridStrategy<B, O> {
    /// Trains on `device` with `optimizer`, the hybrid `config` and the schedule `lr`.
    pub fn new(device: B::Device, optimizer: O, config: HybridConfig, lr: LrSchedule) -> Self {
        Self {
            device,
            optimizer,
            config,
            lr,
            execution: ExecutionConfig::default(),
            checkpoints: None,
            telemetry: StepTelemetry::new(),
        }
    }

    /// How steps execute; burn-train's `grads_accumulation(n)`, when set, overrides the
    /// accumulation.
    pub fn with_execution(mut self, execution: ExecutionConfig) -> Self {
        self.execution = execution;
        self
    }

    /// Saves the trainer's own checkpoint (model, optimizer, hybrid state and predictor)
    /// into `dir` at the end of every epoch, and resumes from its newest when burn-train
    /// resumes (`SupervisedTraining::checkpoint(epoch)`): Burn's checkpoint lacks the
    /// hybrid state.
    pub fn with_checkpoints(mut self, dir: impl Into<PathBuf>) -> Self {
        self.checkpoints = Some(dir.into());
        self
    }

    /// What the strategy saw of its steps; its metrics go to `SupervisedTraining`.
    pub fn telemetry(&self) -> StepTelemetry {
        self.telemetry.clone()
    }

    /// The trainer of `model`, resumed from its newest checkpoint where burn-train resumes;
    /// burn-train's `grads_accumulation(n)`, when set, overrides the accumulation.
    fn trainer<M, T>(
        &self,
        model: M,
        resume: bool,
        accumulation: Option<usize>,
    ) -> Result<HybridTrainer<B, M, O, T>, TrainerError>
    where
        B: MemoryProbe,
        M: HybridModel<B, T>,
        O: Optimizer<M, B> + Clone,
        T: HybridBatch<B>,
    {
        let resume_from = self.checkpoints.as_deref().filter(|dir| resume && dir.join("latest").exists());
        if resume && resume_from.is_none() {
            tracing::warn!(
                "resuming without a leanburn checkpoint (HybridStrategy::with_checkpoints): the model comes from \
                 Burn's checkpoint, the optimizer and the hybrid state start afresh"
            );
        }
        let optimizer = self.optimizer.clone();
        let (config, lr, device) = (self.config.clone(), self.lr.clone(), self.device.clone());
        let trainer = HybridTrainer::start(model, optimizer, config, lr, device, resume_from)?;
        let execution = accumulation.map_or(self.execution, |steps| self.execution.with_accumulation_steps(steps));
        Ok(trainer.with_execution(execution)?.with_train_outputs())
    }

    /// One epoch of full and predicted steps over `train`, in groups of micro-batches (a
    /// short last group is left out): burn-train's event for every step that kept its
    /// output; a batch with a non-finite loss skipped, any other error stops training.
    fn train_epoch<LR, M, T>(
        &self,
        trainer: &mut HybridTrainer<B, M, O, T>,
        train: &TrainLoader<LearningComponentsMarker<B, LR, M, O>>,
        global: &Progress,
        events: &mut SupervisedTrainingEventProcessor<LearningComponentsMarker<B, LR, M, O>>,
        interrupter: &Interrupter,
    ) where
        B: MemoryProbe,
        LR: LrScheduler + 'static,
        M: HybridModel<B, T> + TrainStep<Input = T> + AutodiffModule<B> + core::fmt::Display + 'static,
        M::InnerModule: InferenceStep,
        O: Optimizer<M, B> + 'static,
        T: HybridBatch<B>,
    {
        let micro_batches = trainer.execution().accumulation_steps;
        let mut batches = train.iter();
        let mut iteration = 0;
        while !interrupter.should_stop() {
            let group: Vec<T> = batches.by_ref().take(micro_batches).collect();
            if group.len() < micro_batches {
                break;
            }
            iteration += 1;
            let progress = batches.progress();
            match trainer.step_accumulated(group) {
                Ok(record) => {
                    self.telemetry.observe(&record);
                    if let Some(output) = trainer.take_train_output() {
                        let item =
                            TrainingItem::new(output, progress, global.clone(), Some(iteration), Some(record.lr));
                        events.process_train(LearnerEvent::ProcessedItem(item));
                    }
                }
                Err(err @ TrainerError::NonFiniteLoss { .. }) => {
                    tracing::warn!(%err, "batch skipped");
                }
                Err(err) => {
                    tracing::error!(%err, "training stopped");
                    interrupter.stop(Some(&format!("HybridStrategy: {err}")));
                }
            }
        }
    }
}

/// One pass of the inner `model` (no autodiff graph) over `valid`: burn-train's event for
/// every batch.
fn validate_epoch<B, LR, M, O>(
    model: &M::InnerModule,
    valid: &ValidLoader<LearningComponentsMarker<B, LR, M, O>>,
    global: &Progress,
    events: &mut SupervisedTrainingEventProcessor<LearningComponentsMarker<B, LR, M, O>>,
    interrupter: &Interrupter,
) where
    B: AutodiffBackend,
    LR: LrScheduler + 'static,
    M: TrainStep + AutodiffModule<B> + core::fmt::Display + 'static,
    M::InnerModule: InferenceStep,
    O: Optimizer<M, B> + 'static,
{
    let mut batches = valid.iter();
    let mut iteration = 0;
    while let Some(batch) = batches.next() {
        iteration += 1;
        let item = TrainingItem::new(model.step(batch), batches.progress(), global.clone(), Some(iteration), None);
        events.process_valid(LearnerEvent::ProcessedItem(item));
        if interrupter.should_stop() {
            break;
        }
    }
}

/// The end of an epoch on disk: the trainer's checkpoint (what `--resume` reads), and
/// Burn's checkpointer's, given the trainer's model and optimizer through the `Learner`.
/// A trainer checkpoint that cannot be written stops the training.
fn save_epoch<B, LR, M, O, T>(
    strategy: &HybridStrategy<B, O>,
    trainer: &HybridTrainer<B, M, O, T>,
    learner: &mut Learner<LearningComponentsMarker<B, LR, M, O>>,
    checkpointer: Option<&mut LearningCheckpointer<LearningComponentsMarker<B, LR, M, O>>>,
    epoch: usize,
    event_store: &EventStoreClient,
    interrupter: &Interrupter,
) where
    B: AutodiffBackend + MemoryProbe,
    LR: LrScheduler + 'static,
    M: HybridModel<B, T> + TrainStep<Input = T> + AutodiffModule<B> + core::fmt::Display + 'static,
    M::InnerModule: InferenceStep,
    O: Optimizer<M, B> + 'static,
    T: HybridBatch<B>,
{
    if let Some(dir) = &strategy.checkpoints {
        if let Err(err) = trainer.save_checkpoint(dir) {
            tracing::error!(%err, "checkpoint failed");
            interrupter.stop(Some(&format!("HybridStrategy: checkpoint: {err}")));
        }
    }
    if let Some(checkpointer) = checkpointer {
        learner.load_model(trainer.model().clone().into_record());
        learner.load_optim(trainer.optimizer().to_record());
        checkpointer.checkpoint(learner, epoch, event_store);
    }
}

impl<B, LR, M, O, T> SupervisedLearningStrategy<LearningComponentsMarker<B, LR, M, O>> for HybridStrategy<B, O>
where
    B: AutodiffBackend + MemoryProbe,
    LR: LrScheduler + 'static,
    M: HybridModel<B, T> + TrainStep<Input = T> + AutodiffModule<B> + core::fmt::Display + 'static,
    M::InnerModule: InferenceStep,
    O: Optimizer<M, B> + Clone + 'static,
    T: HybridBatch<B>,
{
    fn fit(
        &self,
        components: TrainingComponents<LearningComponentsMarker<B, LR, M, O>>,
        mut learner: Learner<LearningComponentsMarker<B, LR, M, O>>,
        train: TrainLoader<LearningComponentsMarker<B, LR, M, O>>,
        valid: ValidLoader<LearningComponentsMarker<B, LR, M, O>>,
        starting_epoch: usize,
    ) -> (M, SupervisedTrainingEventProcessor<LearningComponentsMarker<B, LR, M, O>>) {
        let TrainingComponents {
            num_epochs,
            checkpointer: mut burn_checkpointer,
            grad_accumulation,
            interrupter,
            mut early_stopping,
            mut event_processor,
            event_store,
            ..
        } = components;
        let train = train.to_device(&self.device);
        let valid = valid.to_device(&self.device);
        learner.fork(&self.device);
        let mut trainer = match self.trainer(learner.model(), starting_epoch > 1, grad_accumulation) {
            Ok(trainer) => trainer,
            // `fit` cannot return an error: a trainer that cannot be built is a setup mistake.
            Err(err) => panic!("HybridStrategy: cannot start the trainer: {err}"),
        };
        for epoch in starting_epoch..=num_epochs {
            let global = Progress::new(epoch, num_epochs);
            self.train_epoch::<LR, M, T>(&mut trainer, &train, &global, &mut event_processor, &interrupter);
            event_processor.process_train(LearnerEvent::EndEpoch(epoch));
            if interrupter.should_stop() {
                tracing::info!(reason = interrupter.get_message(), "training interrupted");
                break;
            }
            validate_epoch::<B, LR, M, O>(
                &trainer.model().valid(),
                &valid,
                &global,
                &mut event_processor,
                &interrupter,
            );
            event_processor.process_valid(LearnerEvent::EndEpoch(epoch));

            save_epoch(self, &trainer, &mut learner, burn_checkpointer.as_mut(), epoch, &event_store, &interrupter);
            if early_stopping.as_mut().is_some_and(|stopping| stopping.should_stop(epoch, &event_store)) {
                break;
            }
            if interrupter.should_stop() {
                break;
            }
        }
        (trainer.into_model(), event_processor)
    }
}
