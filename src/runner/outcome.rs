//! What a finished run saw.

use std::path::PathBuf;

use super::validation::{Validation, ValidationPoint};
use crate::memory::{MemoryReport, MemorySample};
use crate::trainer::{StepReport, TrainerStatistics};

/// A finished run: every step record and validation of the run (those of earlier
/// processes of a resumed run first), its totals and its memory.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// One record per step, from the run's first step.
    pub records: Vec<StepReport>,
    /// Every validation, from the run's first.
    pub validations: Vec<ValidationPoint>,
    /// Seconds of training (validation and checkpoints not counted), across resumes.
    pub train_seconds: f64,
    /// Items (tokens, images) trained on, across resumes.
    pub items_seen: usize,
    /// The step and directory of the newest checkpoint this process saved.
    pub last_checkpoint: Option<(usize, PathBuf)>,
    /// The trainer's totals at the end.
    pub statistics: TrainerStatistics,
    /// What the memory monitor saw in this process: peaks, the leak fit over the steps
    /// after the settle period, the pool's health (or the host's memory).
    pub memory: MemoryReport,
    /// The first device-pool reading after the settle period: the baseline growth is
    /// judged from.
    pub settled: Option<MemorySample>,
}

impl RunOutcome {
    /// The newest validation.
    pub fn validation(&self) -> Option<Validation> {
        self.validations.last().map(|point| point.validation)
    }

    /// Items per second of training, every step's time counted (the first step of each
    /// process with its kernel compilation and autotuning).
    pub fn items_per_second(&self) -> f64 {
        self.items_seen as f64 / self.train_seconds.max(1e-9)
    }

    /// Items per second over the steps that were not a process's first: the pace of
    /// training once its kernels are compiled and tuned. `None` before such a step.
    pub fn steady_items_per_second(&self) -> Option<f64> {
        let steady = self.records.iter().filter(|r| !r.first_in_process);
        let (items, seconds) = steady.fold((0, 0.0), |(items, seconds), r| (items + r.items, seconds + r.seconds));
        (seconds > 0.0).then(|| items as f64 / seconds)
    }

    /// This process's first step, whose time is mostly start-up (compiling and autotuning
    /// the kernels it launched) on a GPU.
    pub fn first_step(&self) -> Option<&StepReport> {
        self.records.iter().rev().find(|r| r.first_in_process)
    }

    /// The mean of the last `count` losses read on full steps.
    pub fn recent_train_loss(&self, count: usize) -> Option<f64> {
        let recent: Vec<f64> =
            self.records.iter().rev().filter(|r| !r.predicted).filter_map(|r| r.loss).take(count).collect();
        (!recent.is_empty()).then(|| recent.iter().sum::<f64>() / recent.len() as f64)
    }
}
