//! The run loop.

use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;

use super::dir::RunDir;
use super::error::RunError;
use super::event::RunEvent;
use super::outcome::RunOutcome;
use super::settings::RunSettings;
use super::source::BatchSource;
use super::stop::StopRequest;
use super::validation::{Validation, ValidationLog, ValidationPoint};
use crate::memory::{MemoryMonitor, MemoryProbe};
use crate::trainer::{HybridBatch, HybridModel, HybridTrainer, Weights};

/// Trains a [`HybridTrainer`] up to [`RunSettings::steps`]: validation, checkpoints and
/// memory on the settings' cadence, in a [`RunDir`] when given one.
#[derive(Clone, Debug)]
pub struct Runner<'a> {
    settings: RunSettings,
    dir: Option<&'a RunDir>,
    /// A data-parallel replica other than 0: steps only.
    follower: bool,
    /// Read after every step.
    stop: Option<StopRequest>,
}

impl<'a> Runner<'a> {
    /// A run that writes nothing: no validation log, no checkpoints (settings that ask
    /// for checkpoints are refused by [`run`](Self::run)).
    pub fn new(settings: RunSettings) -> Self {
        Self { settings, dir: None, follower: false, stop: None }
    }

    /// The run of a data-parallel replica other than 0 (see
    /// [`data_parallel`](super::data_parallel)): it steps in lockstep with replica 0, which
    /// validates and checkpoints for the run; it validates nothing, writes nothing, and
    /// ignores the settings' validation and checkpoint cadences.
    pub fn follower(settings: RunSettings) -> Self {
        Self { settings, dir: None, follower: true, stop: None }
    }

    /// Writes the validation log and the checkpoints into `dir` (the trainer writes its
    /// step records there when started by [`RunDir::start_trainer`]).
    pub fn in_dir(mut self, dir: &'a RunDir) -> Self {
        self.dir = Some(dir);
        self
    }

    /// Stops the run after the step during which `stop` is requested: that step is
    /// finished, validated if due, and checkpointed (with checkpoints on, where it was
    /// not due anyway), and [`run`](Self::run) returns [`RunError::Stopped`]. Not for a
    /// data-parallel replica, whose replicas must stop at the same step: a follower
    /// ignores it.
    pub fn with_stop(mut self, stop: StopRequest) -> Self {
        self.stop = Some(stop);
        self
    }

    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }

    /// Trains from the trainer's current step up to the settings' end.
    ///
    /// Each step takes [`accumulation_steps`](crate::trainer::ExecutionConfig) host
    /// batches from `batches` (a closure returning the next one, or any [`BatchSource`]),
    /// moved to the device one at a time by `to_device`. A resumed run first moves the
    /// source past the batches its earlier steps took ([`BatchSource::skip`]; a closure
    /// draws and drops them), so the stream continues as if uninterrupted. `validate` scores the model (before the
    /// first step of a new run, then on the cadence and at the end); `on_event` hears
    /// every step, validation and checkpoint as it happens.
    ///
    /// With a weight average (`HybridTrainer::with_weight_average`), each validation is
    /// preceded by [`HybridTrainer::verify_average`], and `validate` scores the weights it
    /// chose (the point's `weights` says which); its seconds count as training.
    pub fn run<B, M, O, T, H, S>(
        &self,
        trainer: &mut HybridTrainer<B, M, O, T>,
        mut batches: S,
        to_device: impl Fn(H) -> T,
        mut validate: impl FnMut(&M) -> Validation,
        mut on_event: impl FnMut(RunEvent<'_>),
    ) -> Result<RunOutcome, RunError>
    where
        B: AutodiffBackend + MemoryProbe,
        M: HybridModel<B, T>,
        O: Optimizer<M, B>,
        T: HybridBatch<B>,
        S: BatchSource<Batch = H>,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let settings = &self.settings;
        settings.validate()?;
        if settings.checkpoint_every.is_some() && self.dir.is_none() && !self.follower {
            return Err(RunError::Settings("checkpoints need a run directory (Runner::in_dir)".into()));
        }
        let first = trainer.steps_taken();
        if first >= settings.steps {
            let out = self.dir.map_or_else(Default::default, |dir| dir.out().to_path_buf());
            return Err(RunError::AlreadyFinished { out, taken: first, steps: settings.steps });
        }
        let micro_batches = trainer.execution().accumulation_steps;
        if first > 0 {
            // The stream continues where the earlier steps left it.
            let started = std::time::Instant::now();
            let skipped = first * micro_batches;
            batches.skip(skipped).map_err(|err| RunError::Data { step: first, source: err.into() })?;
            on_event(RunEvent::Resumed { first, batches: skipped, seconds: started.elapsed().as_secs_f64() });
        }
        let mut draw = |step: usize| batches.next_batch().map_err(|err| RunError::Data { step, source: err.into() });

        let history = match self.dir {
            Some(dir) if first > 0 => dir.history()?,
            _ => Default::default(),
        };
        let mut log = match (self.dir, settings.eval_every) {
            (Some(dir), Some(_)) => Some(ValidationLog::append(&dir.validation_path())?),
            _ => None,
        };
        let mut monitor = MemoryMonitor::<B>::new(trainer.device().clone(), settings.leak_window);
        // Training time and items so far, carried across resumes by the checkpointed statistics.
        let resumed = trainer.statistics();
        let mut outcome = RunOutcome {
            records: history.records,
            validations: history.validations,
            train_seconds: resumed.full_seconds + resumed.predict_seconds,
            items_seen: resumed.total_items as usize,
            last_checkpoint: None,
            statistics: resumed,
            memory: monitor.report(),
            settled: None,
        };
        on_event(RunEvent::Started { first, steps: settings.steps });

        // Validates the model the run stands by: with a weight average, whichever of it
        // and the live weights the newest verification chose.
        let mut validate_now = |step: usize, trainer: &HybridTrainer<B, M, O, T>, outcome: &mut RunOutcome| {
            let weights = trainer.weight_average().map(|books| books.standing());
            let validation = match weights {
                Some(Weights::Average) => validate(&trainer.chosen_model()),
                _ => validate(trainer.model()),
            };
            let point = ValidationPoint { step, train_seconds: outcome.train_seconds, validation, weights };
            if let Some(log) = log.as_mut() {
                log.write(&point)?;
            }
            outcome.validations.push(point);
            Ok::<(), RunError>(())
        };
        let leads = !self.follower;
        if leads && first == 0 && settings.eval_every.is_some() {
            validate_now(0, trainer, &mut outcome)?;
            tell_validated(&outcome, outcome.items_per_second(), &mut on_event);
        }

        // Items and seconds of the steps after this process's first (the progress's pace).
        let mut steady = (0, 0.0);
        let mut last_loss = outcome.records.iter().rev().find_map(|r| r.loss);
        for step in first + 1..=settings.steps {
            let batches = (0..micro_batches).map(|_| draw(step)).collect::<Result<Vec<H>, RunError>>()?;
            let record = trainer
                .step_accumulated(batches.into_iter().map(&to_device))
                .map_err(|source| RunError::Step { step, source })?;
            last_loss = record.loss.or(last_loss);
            outcome.train_seconds += record.seconds;
            outcome.items_seen += record.items;
            if step == first + settings.settle + 1 {
                // Growth is judged from here on: optimizer state, autotune and pools have settled.
                monitor.restart_leak_window();
            }
            // The pool is judged against the steps' settled reserve, once there is one.
            let bloated = monitor.observe(step as u64, record.memory, record.host_memory);
            if bloated && step > first + settings.settle {
                on_event(RunEvent::PoolBloated { step, verdict: monitor.pool_health().verdict() });
            }
            if step > first + settings.settle && outcome.settled.is_none() {
                outcome.settled = record.memory;
            }
            if !record.first_in_process {
                steady = (steady.0 + record.items, steady.1 + record.seconds);
            }
            on_event(RunEvent::Step { record: &record, last_loss, items_per_second: pace(steady, &outcome) });
            outcome.records.push(record);

            if settings.validates_at(step) && trainer.weight_average().is_some() {
                // Every replica verifies (their probe losses are averaged); the time it takes
                // counts as training, since choosing the average is part of the method.
                let verdict = trainer.verify_average().map_err(|source| RunError::Step { step, source })?;
                if let Some(verdict) = verdict {
                    outcome.train_seconds += verdict.seconds;
                    on_event(RunEvent::AverageVerified { verdict: &verdict });
                }
            }
            if leads && settings.validates_at(step) {
                validate_now(step, trainer, &mut outcome)?;
                tell_validated(&outcome, pace(steady, &outcome), &mut on_event);
            }
            if leads && settings.checkpoints_at(step) {
                let dir = self.dir.expect("checked above: checkpoints have a directory");
                let path = trainer
                    .save_checkpoint(dir.checkpoints_path())
                    .map_err(|source| RunError::Checkpoint { step, source })?;
                on_event(RunEvent::Checkpointed { step, path: &path });
                outcome.last_checkpoint = Some((step, path));
            }
            if let Some(signal) = self.stop.as_ref().filter(|_| leads).and_then(StopRequest::requested) {
                let checkpoint = match (self.dir, &outcome.last_checkpoint) {
                    (_, Some((saved, path))) if *saved == step => Some(path.clone()),
                    (Some(dir), _) if settings.checkpoint_every.is_some() => {
                        let path = trainer
                            .save_checkpoint(dir.checkpoints_path())
                            .map_err(|source| RunError::Checkpoint { step, source })?;
                        on_event(RunEvent::Checkpointed { step, path: &path });
                        Some(path)
                    }
                    _ => None,
                };
                return Err(RunError::Stopped { step, signal, checkpoint });
            }
        }
        outcome.statistics = trainer.statistics();
        outcome.memory = monitor.report();
        Ok(outcome)
    }
}

/// Items per second of `steady`'s `(items, seconds)`, or the whole run's before it has any.
fn pace((items, seconds): (usize, f64), outcome: &RunOutcome) -> f64 {
    if seconds > 0.0 {
        items as f64 / seconds
    } else {
        outcome.items_per_second()
    }
}

fn tell_validated(outcome: &RunOutcome, items_per_second: f64, on_event: &mut impl FnMut(RunEvent<'_>)) {
    let point = outcome.validations.last().expect("just validated");
    on_event(RunEvent::Validated { point, items_per_second });
}
