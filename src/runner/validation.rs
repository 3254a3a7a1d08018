//! Validation results and the run's validation log (CSV, read back by column name;
//! `weights` says which weights a run with a weight average validated).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RunError;
use crate::trainer::Weights;

/// A validation result: the loss, and the accuracy for classifiers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    pub loss: f64,
    pub accuracy: Option<f64>,
}

impl fmt::Display for Validation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "validation loss {:.4}", self.loss)?;
        match self.accuracy {
            Some(accuracy) => write!(f, ", accuracy {:.1}%", accuracy * 100.0),
            None => Ok(()),
        }
    }
}

/// A validation at a step, after `train_seconds` of training.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationPoint {
    pub step: usize,
    pub train_seconds: f64,
    pub validation: Validation,
    /// Which weights were validated, where the run keeps a weight average: the ones its
    /// newest verification chose (`None` without an average).
    #[serde(default)]
    pub weights: Option<Weights>,
}

const STEP: &str = "step";
const SECONDS: &str = "train_seconds";
const LOSS: &str = "validation_loss";
const ACCURACY: &str = "validation_accuracy";
const WEIGHTS: &str = "weights";

fn header(point: &ValidationPoint) -> String {
    let accuracy = if point.validation.accuracy.is_some() { format!(",{ACCURACY}") } else { String::new() };
    let weights = if point.weights.is_some() { format!(",{WEIGHTS}") } else { String::new() };
    format!("{STEP},{SECONDS},{LOSS}{accuracy}{weights}\n")
}

fn line(point: &ValidationPoint) -> String {
    let accuracy = point.validation.accuracy.map_or(String::new(), |a| format!(",{a}"));
    let weights = point.weights.map_or(String::new(), |w| format!(",{}", w.name()));
    format!("{},{},{}{accuracy}{weights}\n", point.step, point.train_seconds, point.validation.loss)
}

fn weights_named(name: &str) -> Option<Weights> {
    [Weights::Live, Weights::Average].into_iter().find(|w| w.name() == name)
}

/// The validation log: `step,train_seconds,validation_loss[,validation_accuracy]`, one
/// line a validation, appended as the run goes.
pub(super) struct ValidationLog {
    path: PathBuf,
    file: File,
    /// Whether the file has its header (an empty file gets one with the first line).
    headed: bool,
}

impl ValidationLog {
    /// Opens `path` for appending (a resumed run continues its log).
    pub(super) fn append(path: &Path) -> Result<Self, RunError> {
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(RunError::io(path))?;
        let headed = file.metadata().map_err(RunError::io(path))?.len() > 0;
        Ok(Self { path: path.to_path_buf(), file, headed })
    }

    pub(super) fn write(&mut self, point: &ValidationPoint) -> Result<(), RunError> {
        let mut text = if self.headed { String::new() } else { header(point) };
        self.headed = true;
        text += &line(point);
        self.file.write_all(text.as_bytes()).map_err(RunError::io(&self.path))
    }

    /// The whole log of `points`, header first (empty without points).
    pub(super) fn render(points: &[ValidationPoint]) -> String {
        points.first().map_or(String::new(), header) + &points.iter().map(line).collect::<String>()
    }

    /// Every point in the log at `path`, columns found by their header names; an absent
    /// file is an empty log.
    pub(super) fn read(path: &Path) -> Result<Vec<ValidationPoint>, RunError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(RunError::io(path)(err)),
        };
        let mut lines = text.lines();
        let Some(header) = lines.next() else { return Ok(Vec::new()) };
        let columns: Vec<&str> = header.split(',').collect();
        let corrupt = |line: usize, reason: String| RunError::Corrupt { path: path.to_path_buf(), line, reason };
        let column = |name: &str| columns.iter().position(|c| *c == name);
        let (Some(step), Some(seconds), Some(loss)) = (column(STEP), column(SECONDS), column(LOSS)) else {
            return Err(corrupt(1, format!("expected the columns {STEP}, {SECONDS} and {LOSS}, got `{header}`")));
        };
        let accuracy = column(ACCURACY);
        let weights = column(WEIGHTS);
        lines
            .enumerate()
            .filter(|(_, line)| !line.is_empty())
            .map(|(index, line)| {
                let fields: Vec<&str> = line.split(',').collect();
                let field = |at: usize| -> Result<&str, RunError> {
                    fields.get(at).copied().ok_or_else(|| corrupt(index + 2, format!("too few fields in `{line}`")))
                };
                let number = |at: usize| -> Result<f64, RunError> {
                    let text = field(at)?;
                    text.parse().map_err(|_| corrupt(index + 2, format!("`{text}` is not a number")))
                };
                let weights = weights
                    .map(|at| {
                        let name = field(at)?;
                        weights_named(name).ok_or_else(|| corrupt(index + 2, format!("`{name}` names no weights")))
                    })
                    .transpose()?;
                Ok(ValidationPoint {
                    step: number(step)? as usize,
                    train_seconds: number(seconds)?,
                    validation: Validation { loss: number(loss)?, accuracy: accuracy.map(number).transpose()? },
                    weights,
                })
            })
            .collect()
    }
}
