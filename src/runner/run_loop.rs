//! The run loop ([`Runner::run`]): what a run carries from step to step, and what it does
//! after each.

use std::path::PathBuf;

use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;

use super::error::RunError;
use super::event::RunEvent;
use super::outcome::RunOutcome;
use super::run::Runner;
use super::source::BatchSource;
use super::stop::StopRequest;
use super::validation::{Validation, ValidationLog, ValidationPoint};
use crate::memory::{MemoryMonitor, MemoryProbe};
use crate::trainer::{HybridBatch, HybridModel, HybridTrainer, Weights};

impl Runner<'_> {
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
        let first = self.first_step(trainer.steps_taken())?;
        let micro_batches = trainer.execution().accumulation_steps;
        if first > 0 {
            skip_taken(&mut batches, first, micro_batches, &mut on_event)?;
        }
        let mut run = RunLoop::open(self, trainer, first)?;
        on_event(RunEvent::Started { first, steps: self.settings.steps });
        if run.leads() && first == 0 && self.settings.eval_every.is_some() {
            run.validate(0, &mut validate, &mut on_event)?;
        }
        for step in first + 1..=self.settings.steps {
            let drawn = draw(&mut batches, micro_batches, step)?;
            run.step(step, drawn.into_iter().map(&to_device), &mut on_event)?;
            run.after_step(step, &mut validate, &mut on_event)?;
        }
        Ok(run.finish())
    }

    /// The settings checked, and the step the run starts after: the trainer's steps taken,
    /// short of the settings' end.
    fn first_step(&self, taken: usize) -> Result<usize, RunError> {
        let settings = &self.settings;
        settings.validate()?;
        if settings.checkpoint_every.is_some() && self.dir.is_none() && !self.follower {
            return Err(RunError::Settings("checkpoints need a run directory (Runner::in_dir)".into()));
        }
        if taken >= settings.steps {
            let out = self.dir.map_or_else(Default::default, |dir| dir.out().to_path_buf());
            return Err(RunError::AlreadyFinished { out, taken, steps: settings.steps });
        }
        Ok(taken)
    }
}

/// Moves a resumed run's `batches` past what its first `first` steps took, so the stream
/// continues where the earlier steps left it.
fn skip_taken<S: BatchSource>(
    batches: &mut S,
    first: usize,
    micro_batches: usize,
    on_event: &mut impl FnMut(RunEvent<'_>),
) -> Result<(), RunError>
where
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = std::time::Instant::now();
    let skipped = first * micro_batches;
    batches.skip(skipped).map_err(|err| RunError::Data { step: first, source: err.into() })?;
    on_event(RunEvent::Resumed { first, batches: skipped, seconds: started.elapsed().as_secs_f64() });
    Ok(())
}

/// The host batches of `step`'s micro-batches.
fn draw<S: BatchSource>(batches: &mut S, micro_batches: usize, step: usize) -> Result<Vec<S::Batch>, RunError>
where
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let next = |_| batches.next_batch().map_err(|err| RunError::Data { step, source: err.into() });
    (0..micro_batches).map(next).collect()
}

/// A run in progress: the trainer, and what the run carries from step to step.
struct RunLoop<'r, B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    T: HybridBatch<B>,
{
    runner: &'r Runner<'r>,
    trainer: &'r mut HybridTrainer<B, M, O, T>,
    /// The step this process started after.
    first: usize,
    outcome: RunOutcome,
    monitor: MemoryMonitor<B>,
    log: Option<ValidationLog>,
    /// Items and seconds of the steps after this process's first (the progress's pace).
    steady: (usize, f64),
    /// The newest loss read back.
    last_loss: Option<f64>,
}

impl<'r, B, M, O, T> RunLoop<'r, B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// The run after `first` steps: the earlier steps' records and validations read back
    /// from the run directory, the validation log opened, the training totals carried
    /// across resumes by the checkpointed statistics.
    fn open(
        runner: &'r Runner<'r>,
        trainer: &'r mut HybridTrainer<B, M, O, T>,
        first: usize,
    ) -> Result<Self, RunError> {
        let history = match runner.dir {
            Some(dir) if first > 0 => dir.history()?,
            _ => Default::default(),
        };
        let log = match (runner.dir, runner.settings.eval_every) {
            (Some(dir), Some(_)) => Some(ValidationLog::append(&dir.validation_path())?),
            _ => None,
        };
        let monitor = MemoryMonitor::<B>::new(trainer.device().clone(), runner.settings.leak_window);
        let resumed = trainer.statistics();
        let outcome = RunOutcome {
            records: history.records,
            validations: history.validations,
            train_seconds: resumed.full_seconds + resumed.predict_seconds,
            items_seen: resumed.total_items as usize,
            last_checkpoint: None,
            statistics: resumed,
            memory: monitor.report(),
            settled: None,
        };
        let last_loss = outcome.records.iter().rev().find_map(|r| r.loss);
        Ok(Self { runner, trainer, first, outcome, monitor, log, steady: (0, 0.0), last_loss })
    }

    /// Whether this process validates and checkpoints for the run (not a follower).
    fn leads(&self) -> bool {
        !self.runner.follower
    }

    /// Trains `step` on its micro-batches and books it: totals, memory (growth judged once
    /// the settle period is over), the pace, its record.
    fn step(
        &mut self,
        step: usize,
        micro_batches: impl ExactSizeIterator<Item = T>,
        on_event: &mut impl FnMut(RunEvent<'_>),
    ) -> Result<(), RunError> {
        let record = self.trainer.step_accumulated(micro_batches).map_err(|source| RunError::Step { step, source })?;
        let outcome = &mut self.outcome;
        self.last_loss = record.loss.or(self.last_loss);
        outcome.train_seconds += record.seconds;
        outcome.items_seen += record.items;
        let settled = step > self.first + self.runner.settings.settle;
        if step == self.first + self.runner.settings.settle + 1 {
            // Growth is judged from here on: optimizer state, autotune and pools have settled.
            self.monitor.restart_leak_window();
        }
        // The pool is judged against the steps' settled reserve, once there is one.
        let bloated = self.monitor.observe(step as u64, record.memory, record.host_memory);
        if bloated && settled {
            on_event(RunEvent::PoolBloated { step, verdict: self.monitor.pool_health().verdict() });
        }
        if settled && outcome.settled.is_none() {
            outcome.settled = record.memory;
        }
        if !record.first_in_process {
            self.steady = (self.steady.0 + record.items, self.steady.1 + record.seconds);
        }
        on_event(RunEvent::Step { record: &record, last_loss: self.last_loss, items_per_second: self.pace() });
        self.outcome.records.push(record);
        Ok(())
    }

    /// What follows a step on the settings' cadences: the weight average verified and the
    /// model validated, a checkpoint, and the stop, where one was requested.
    fn after_step(
        &mut self,
        step: usize,
        validate: &mut impl FnMut(&M) -> Validation,
        on_event: &mut impl FnMut(RunEvent<'_>),
    ) -> Result<(), RunError> {
        let settings = &self.runner.settings;
        if settings.validates_at(step) && self.trainer.weight_average().is_some() {
            self.verify_average(step, on_event)?;
        }
        if self.leads() && settings.validates_at(step) {
            self.validate(step, validate, on_event)?;
        }
        if self.leads() && settings.checkpoints_at(step) {
            let path = self.save_checkpoint(step, on_event)?;
            self.outcome.last_checkpoint = Some((step, path));
        }
        match self.runner.stop.as_ref().filter(|_| self.leads()).and_then(StopRequest::requested) {
            Some(signal) => Err(self.stopped(step, signal, on_event)),
            None => Ok(()),
        }
    }

    /// Every replica verifies (their probe losses are averaged); the time it takes counts
    /// as training, since choosing the average is part of the method.
    fn verify_average(&mut self, step: usize, on_event: &mut impl FnMut(RunEvent<'_>)) -> Result<(), RunError> {
        let verdict = self.trainer.verify_average().map_err(|source| RunError::Step { step, source })?;
        if let Some(verdict) = verdict {
            self.outcome.train_seconds += verdict.seconds;
            on_event(RunEvent::AverageVerified { verdict: &verdict });
        }
        Ok(())
    }

    /// Validates the model the run stands by: with a weight average, whichever of it and
    /// the live weights the newest verification chose.
    fn validate(
        &mut self,
        step: usize,
        validate: &mut impl FnMut(&M) -> Validation,
        on_event: &mut impl FnMut(RunEvent<'_>),
    ) -> Result<(), RunError> {
        let weights = self.trainer.weight_average().map(|books| books.standing());
        let validation = match weights {
            Some(Weights::Average) => validate(&self.trainer.chosen_model()),
            _ => validate(self.trainer.model()),
        };
        let point = ValidationPoint { step, train_seconds: self.outcome.train_seconds, validation, weights };
        if let Some(log) = self.log.as_mut() {
            log.write(&point)?;
        }
        on_event(RunEvent::Validated { point: &point, items_per_second: self.pace() });
        self.outcome.validations.push(point);
        Ok(())
    }

    /// Saves a checkpoint of `step` into the run directory and tells it.
    fn save_checkpoint(&mut self, step: usize, on_event: &mut impl FnMut(RunEvent<'_>)) -> Result<PathBuf, RunError> {
        let dir = self.runner.dir.expect("checked by first_step: checkpoints have a directory");
        let path = self
            .trainer
            .save_checkpoint(dir.checkpoints_path())
            .map_err(|source| RunError::Checkpoint { step, source })?;
        on_event(RunEvent::Checkpointed { step, path: &path });
        Ok(path)
    }

    /// The run stopped after `step` on `signal`: its checkpoint, saved now with checkpoints
    /// on where the cadence did not save this step already.
    fn stopped(&mut self, step: usize, signal: i32, on_event: &mut impl FnMut(RunEvent<'_>)) -> RunError {
        let checkpoint = match &self.outcome.last_checkpoint {
            Some((saved, path)) if *saved == step => Some(path.clone()),
            _ if self.runner.dir.is_some() && self.runner.settings.checkpoint_every.is_some() => {
                match self.save_checkpoint(step, on_event) {
                    Ok(path) => Some(path),
                    Err(err) => return err,
                }
            }
            _ => None,
        };
        RunError::Stopped { step, signal, checkpoint }
    }

    /// Items per second of this process's steps after its first, or the whole run's before
    /// it has any.
    fn pace(&self) -> f64 {
        let (items, seconds) = self.steady;
        if seconds > 0.0 {
            items as f64 / seconds
        } else {
            self.outcome.items_per_second()
        }
    }

    /// The outcome, with the trainer's totals and the memory monitor's report.
    fn finish(mut self) -> RunOutcome {
        self.outcome.statistics = self.trainer.statistics();
        self.outcome.memory = self.monitor.report();
        self.outcome
    }
}
