//! Totals over a run: how many steps of each kind, what they cost, what memory they saw.

use serde::{Deserialize, Serialize};

use crate::trainer::predict::phase::Phase;
use crate::trainer::reports::step_report::StepReport;

/// Running totals over every step a trainer has taken (checkpointed with it).
///
/// "Full" timings cover every step with a backward pass: warmup, full and correct steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainerStatistics {
    /// Steps taken.
    pub steps: usize,
    /// Warmup steps taken.
    pub warmup_steps: usize,
    /// Full steps taken (between blocks, cooldowns included).
    pub full_steps: usize,
    /// Predicted steps taken, rolled back or not.
    pub predict_steps: usize,
    /// Correct steps taken.
    pub correct_steps: usize,
    /// Predicted steps the guard rejected.
    pub rollbacks: usize,
    /// `predict_steps / steps`.
    pub predicted_share: f64,
    /// Seconds spent in steps with a backward pass.
    pub full_seconds: f64,
    /// Seconds spent in predicted steps.
    pub predict_seconds: f64,
    /// Mean seconds of a step with a backward pass.
    pub mean_full_seconds: Option<f64>,
    /// Mean seconds of a predicted step.
    pub mean_predict_seconds: Option<f64>,
    /// `mean_predict_seconds / mean_full_seconds`: what a predicted step costs relative to
    /// a full one.
    pub predict_cost_ratio: Option<f64>,
    /// Items (examples or tokens) in all batches.
    pub total_items: u64,
    /// The highest `bytes_in_use` any step reported.
    pub peak_bytes_in_use: Option<u64>,
    /// The process's peak resident memory (host RAM) as of the last step that read it,
    /// where the backend has no device pool ([`StepReport::host_memory`]).
    #[serde(default)]
    pub peak_resident_bytes: Option<u64>,
    /// The last loss read back (see [`StepReport::loss`]).
    pub last_loss: Option<f64>,
    /// The guard's running full-step loss.
    pub running_loss: Option<f64>,
    /// Device bytes of the predictor's state, as of the last step.
    pub predictor_bytes: usize,
    /// The largest rollback snapshot held so far, in bytes.
    pub snapshot_bytes: usize,
    /// Device bytes of the weight average (one copy of the parameters, batch norm's
    /// statistics included), as of the last step; 0 without one.
    #[serde(default)]
    pub average_bytes: usize,
    /// Times the trainer trimmed the device pool ([`TrimPolicy`](crate::trainer::TrimPolicy)).
    #[serde(default)]
    pub trims: usize,
    /// Reserved bytes those trims handed back to the device.
    #[serde(default)]
    pub trimmed_bytes: u64,
    /// Full steps skipped because their gradients overflowed (loss scaling).
    #[serde(default)]
    pub overflow_steps: usize,
    /// Examples selecting steps scored forward only, and those they trained on.
    #[serde(default)]
    pub scored_examples: u64,
    #[serde(default)]
    pub selected_examples: u64,
}

impl TrainerStatistics {
    /// Adds one step.
    pub fn observe(&mut self, record: &StepReport) {
        self.steps += 1;
        match record.phase {
            Phase::Warmup => self.warmup_steps += 1,
            Phase::Full => self.full_steps += 1,
            Phase::Predict => self.predict_steps += 1,
            Phase::Correct => self.correct_steps += 1,
        }
        if record.rolled_back {
            self.rollbacks += 1;
        }
        if record.overflow {
            self.overflow_steps += 1;
        }
        if record.phase.is_full() {
            self.full_seconds += record.seconds;
        } else {
            self.predict_seconds += record.seconds;
        }
        self.total_items += record.items as u64;
        if let Some(memory) = record.memory {
            self.peak_bytes_in_use =
                Some(self.peak_bytes_in_use.map_or(memory.bytes_in_use, |peak| peak.max(memory.bytes_in_use)));
        }
        if let Some(host) = record.host_memory {
            self.peak_resident_bytes = Some(self.peak_resident_bytes.unwrap_or(0).max(host.peak_resident));
        }
        if record.loss.is_some() {
            self.last_loss = record.loss;
        }
        if let Some(selection) = record.selection {
            self.scored_examples += selection.scored as u64;
            self.selected_examples += selection.kept as u64;
        }
        self.refresh();
    }

    /// Of the examples selecting steps scored, the share they trained on; `None` where no
    /// step selected.
    pub fn selected_share(&self) -> Option<f64> {
        (self.scored_examples > 0).then(|| self.selected_examples as f64 / self.scored_examples as f64)
    }

    /// The number of steps with a backward pass.
    pub fn backward_steps(&self) -> usize {
        self.warmup_steps + self.full_steps + self.correct_steps
    }

    fn refresh(&mut self) {
        let mean = |seconds: f64, steps: usize| (steps > 0).then(|| seconds / steps as f64);
        self.predicted_share = if self.steps == 0 { 0.0 } else { self.predict_steps as f64 / self.steps as f64 };
        self.mean_full_seconds = mean(self.full_seconds, self.backward_steps());
        self.mean_predict_seconds = mean(self.predict_seconds, self.predict_steps);
        self.predict_cost_ratio = match (self.mean_predict_seconds, self.mean_full_seconds) {
            (Some(predict), Some(full)) if full > 0.0 => Some(predict / full),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemorySample;

    fn record(phase: Phase, seconds: f64, in_use: u64, rolled_back: bool) -> StepReport {
        StepReport {
            selection: None,
            first_in_process: false,
            step: 0,
            optimizer_step: 0,
            phase,
            loss: Some(1.0),
            lr: 1e-3,
            seconds,
            items: 4,
            items_per_second: 4.0 / seconds,
            memory: Some(MemorySample { bytes_in_use: in_use, bytes_reserved: in_use, allocations: 1 }),
            host_memory: None,
            in_step_peak: None,
            predicted: phase == Phase::Predict,
            rolled_back,
            scale: 1.0,
            confidence: 0.5,
            horizon: 3,
            cosine: None,
            norm_ratio: None,
            loss_scale: None,
            overflow: false,
            gain: None,
            efficiency: None,
        }
    }

    #[test]
    fn counts_times_and_peaks() {
        let mut stats = TrainerStatistics::default();
        stats.observe(&record(Phase::Warmup, 1.0, 100, false));
        stats.observe(&record(Phase::Full, 3.0, 300, false));
        stats.observe(&record(Phase::Predict, 0.5, 200, false));
        stats.observe(&record(Phase::Predict, 0.5, 250, true));
        assert_eq!(stats.steps, 4);
        assert_eq!((stats.warmup_steps, stats.full_steps, stats.predict_steps), (1, 1, 2));
        assert_eq!(stats.rollbacks, 1);
        assert_eq!(stats.predicted_share, 0.5);
        assert_eq!(stats.mean_full_seconds, Some(2.0));
        assert_eq!(stats.mean_predict_seconds, Some(0.5));
        assert_eq!(stats.predict_cost_ratio, Some(0.25));
        assert_eq!(stats.total_items, 16);
        assert_eq!(stats.peak_bytes_in_use, Some(300));
        assert_eq!(stats.peak_resident_bytes, None, "device figures never count as host memory");
    }

    #[test]
    fn empty_statistics_have_no_means() {
        let stats = TrainerStatistics::default();
        assert_eq!(stats.mean_full_seconds, None);
        assert_eq!(stats.predict_cost_ratio, None);
    }

    #[test]
    fn host_memory_peaks_apart_from_device_memory() {
        let mut stats = TrainerStatistics::default();
        for (resident, peak) in [(10, 40), (30, 50), (20, 50)] {
            let host = crate::memory::HostMemory { resident, peak_resident: peak };
            stats.observe(&StepReport { memory: None, host_memory: Some(host), ..record(Phase::Full, 1.0, 0, false) });
        }
        assert_eq!(stats.peak_resident_bytes, Some(50));
        assert_eq!(stats.peak_bytes_in_use, None, "host memory never counts as device memory");
    }
}
