//! One record per step, and the JSON-lines file they are appended to.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::memory::{HostMemory, InStepReading, MemorySample};
use crate::trainer::error::TrainerError;
use crate::trainer::predict::phase::Phase;

/// What one trainer step did and cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// Trainer steps taken before this one (0-based).
    pub step: usize,
    /// The optimizer step the learning rate was taken at.
    pub optimizer_step: usize,
    /// The kind of step.
    pub phase: Phase,
    /// The step's loss: before the update for a full step; for the first step of a predict
    /// block, the probe loss on its batch after the block's jump (absent on the block's
    /// other steps, which run nothing); the mean over the micro-batches with gradient
    /// accumulation.
    ///
    /// `None` when the step left its loss on the device
    /// ([`loss_every`](crate::trainer::ExecutionConfig::loss_every) above 1); the step that reads
    /// the window back reports the mean of the window's losses. In JSON an unread loss is
    /// left out and a non-finite one is written as `null` (read back as NaN).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "finite_or_null")]
    pub loss: Option<f64>,
    /// The learning rate of the step.
    pub lr: f64,
    /// Wall-clock seconds, device work included.
    pub seconds: f64,
    /// Items (examples or tokens) in the batch; in a data-parallel run, this replica's
    /// times the replicas (every replica takes an equal share).
    pub items: usize,
    /// `items / seconds`.
    pub items_per_second: f64,
    /// The device pool after the step, where the backend has one.
    pub memory: Option<MemorySample>,
    /// The process's resident memory after the step, where the backend has no device pool
    /// to read (the CPU backends): host RAM, never mixed with `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<HostMemory>,
    /// The highest pool readings taken while the step ran, with
    /// [`sample_pool_ms`](crate::trainer::ExecutionConfig::sample_pool_ms) set and a device
    /// pool to read: the peak of live allocations inside the step, which `memory` (read
    /// after the step, its activations gone) never sees. A step that left its loss on the
    /// device has none; the next step that reads its loss holds the highest readings of
    /// them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_step_peak: Option<InStepReading>,
    /// Whether the weights were moved by the predictor rather than the optimizer.
    pub predicted: bool,
    /// Whether the block's jump was rejected and its starting weights restored.
    pub rolled_back: bool,
    /// The multiplier on predicted updates after this step.
    pub scale: f64,
    /// The confidence in the predictor after this step.
    pub confidence: f64,
    /// The predict horizon after this step.
    pub horizon: usize,
    /// Cosine between the real update and the prediction, on steps that measured it.
    pub cosine: Option<f64>,
    /// `‖real update‖ / ‖applied prediction‖`, on steps that measured it.
    pub norm_ratio: Option<f64>,
    /// The loss scale this step's backward pass used, with loss scaling on
    /// ([`PrecisionConfig::loss_scale`](crate::trainer::PrecisionConfig::loss_scale)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// Whether the step's gradients overflowed, so that its update was skipped and the
    /// loss scale lowered (the optimizer and the learning-rate schedule did not move).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overflow: bool,
    /// On the first step of a predict block: the probe loss before the jump minus after it,
    /// on the same batch (the block's verified gain).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "finite_or_null")]
    pub gain: Option<f64>,
    /// On the first step of a predict block: `gain` over what the block's full steps would
    /// have gained at the recent pace, where that pace is known and positive.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "finite_or_null")]
    pub efficiency: Option<f64>,
    /// On a full step that selected its examples: how many it scored and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<SelectionCount>,
    /// Whether this was the first step of its process: its `seconds` include compiling and
    /// autotuning the kernels it launched (minutes on a GPU with a cold cache), the start-up
    /// rather than the pace of training. Absent (false) in records of earlier versions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_in_process: bool,
}

/// Examples a selecting step scored (forward only) and kept (forward and backward), over
/// its micro-batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionCount {
    pub scored: usize,
    pub kept: usize,
}

/// Serde for a present `f64` that may be NaN or infinite: JSON has no such numbers, so
/// they are written as `null` and read back as NaN. (An absent value is skipped, and
/// defaults to `None`, outside this module.)
mod finite_or_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) if value.is_finite() => serializer.serialize_f64(*value),
            _ => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
        Ok(Some(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN)))
    }
}

/// Appends [`StepReport`]s to a file, one JSON object per line, flushed line by line so a
/// crashed run still leaves every finished step on disk.
#[derive(Debug)]
pub struct JsonlWriter {
    file: File,
    path: PathBuf,
}

impl JsonlWriter {
    /// Creates (or truncates) the file at `path`, and its parent directories.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, TrainerError> {
        Self::open(path.as_ref(), false)
    }

    /// Opens the file at `path` for appending (creating it if needed), as a resumed run
    /// does.
    pub fn append(path: impl AsRef<Path>) -> Result<Self, TrainerError> {
        Self::open(path.as_ref(), true)
    }

    fn open(path: &Path, append: bool) -> Result<Self, TrainerError> {
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|err| TrainerError::io(parent, err))?;
        }
        let mut options = OpenOptions::new();
        options.create(true);
        if append {
            options.append(true);
        } else {
            options.write(true).truncate(true);
        }
        let file = options.open(path).map_err(|err| TrainerError::io(path, err))?;
        Ok(Self { file, path: path.to_path_buf() })
    }

    /// Writes one record as one line and flushes it.
    pub fn write(&mut self, record: &StepReport) -> Result<(), TrainerError> {
        let mut line =
            serde_json::to_string(record).map_err(|err| TrainerError::io(&self.path, std::io::Error::other(err)))?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|err| TrainerError::io(&self.path, err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: usize, loss: f64) -> StepReport {
        StepReport {
            selection: None,
            first_in_process: false,
            step,
            optimizer_step: step,
            phase: Phase::Predict,
            loss: Some(loss),
            lr: 1e-3,
            seconds: 0.5,
            items: 8,
            items_per_second: 16.0,
            memory: Some(MemorySample { bytes_in_use: 1, bytes_reserved: 2, allocations: 3 }),
            host_memory: None,
            // Odd steps read the pool during the step (written and read back), even ones not.
            in_step_peak: (step % 2 == 1).then_some(InStepReading { peak_in_use: 5, peak_reserved: 8, readings: 13 }),
            predicted: true,
            rolled_back: !loss.is_finite(),
            scale: 1.0,
            confidence: 0.5,
            horizon: 3,
            cosine: None,
            norm_ratio: Some(1.25),
            loss_scale: None,
            overflow: false,
            gain: None,
            efficiency: None,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("leanburn-jsonl-{}-{name}", std::process::id())).join("steps.jsonl")
    }

    fn read(path: &Path) -> Vec<StepReport> {
        std::fs::read_to_string(path)
            .expect("read")
            .lines()
            .map(|line| serde_json::from_str(line).expect("one record per line"))
            .collect()
    }

    #[test]
    fn writes_one_line_per_record_and_appends() {
        let path = scratch("append");
        let mut writer = JsonlWriter::create(&path).expect("create");
        writer.write(&record(0, 2.0)).expect("write");
        writer.write(&record(1, 1.5)).expect("write");
        drop(writer);
        let mut writer = JsonlWriter::append(&path).expect("append");
        writer.write(&record(2, 1.25)).expect("write");
        assert_eq!(read(&path), vec![record(0, 2.0), record(1, 1.5), record(2, 1.25)]);

        // `create` starts over.
        let mut writer = JsonlWriter::create(&path).expect("create");
        writer.write(&record(9, 1.0)).expect("write");
        assert_eq!(read(&path), vec![record(9, 1.0)]);
        let _ = std::fs::remove_dir_all(path.parent().expect("parent"));
    }

    #[test]
    fn non_finite_losses_are_null_in_json_and_nan_when_read() {
        let line = serde_json::to_string(&record(3, f64::NAN)).expect("serialise");
        assert!(line.contains("\"loss\":null"), "{line}");
        let back: StepReport = serde_json::from_str(&line).expect("deserialise");
        assert!(back.loss.is_some_and(f64::is_nan) && back.rolled_back);
    }

    #[test]
    fn an_unread_loss_is_left_out_and_read_back_as_none() {
        let unread = StepReport { loss: None, ..record(4, 1.0) };
        let line = serde_json::to_string(&unread).expect("serialise");
        assert!(!line.contains("\"loss\""), "{line}");
        let back: StepReport = serde_json::from_str(&line).expect("deserialise");
        assert_eq!(back, unread);
    }

    #[test]
    fn io_errors_name_the_path() {
        let path = scratch("bad").join("is-a-directory");
        std::fs::create_dir_all(&path).expect("mkdir");
        let message = JsonlWriter::create(&path).expect_err("a directory").to_string();
        assert!(message.contains("is-a-directory"), "{message}");
        let _ = std::fs::remove_dir_all(scratch("bad").parent().expect("parent"));
    }
}
