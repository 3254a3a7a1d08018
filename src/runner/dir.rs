//! The run directory: where a named run keeps its records, validation log, checkpoints,
//! corpus fingerprint and resolved options, and how a run starts there.

use std::fs;
use std::path::{Path, PathBuf};

use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;

use super::error::RunError;
use super::validation::{ValidationLog, ValidationPoint};
use crate::data::CorpusFingerprint;
use crate::memory::MemoryProbe;
use crate::trainer::{HybridBatch, HybridConfig, HybridModel, HybridTrainer, LrSchedule, Replica, StepReport};

/// How a run starts in its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMode {
    /// A new run; refused where the directory holds one of the same name.
    Fresh,
    /// A new run, replacing one of the same name.
    Overwrite,
    /// The run of that name continues from its latest checkpoint.
    Resume,
}

/// What [`RunDir::check_corpus`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorpusCheck {
    /// A new run: its corpus is recorded.
    Recorded,
    /// A resumed run on the corpus it trained on.
    Same,
    /// A resumed run whose directory has no corpus record, so nothing could be checked
    /// (the record is written now).
    Unrecorded,
    /// A resumed run on a different corpus, allowed by the caller: the differences.
    Changed(String),
}

/// What an earlier process of a run wrote: its step records and validations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunHistory {
    pub records: Vec<StepReport>,
    pub validations: Vec<ValidationPoint>,
}

/// A named run inside a directory (`--out`): several runs (say `hybrid` and `full`) share
/// one directory, each in files of its own name.
#[derive(Clone, Debug)]
pub struct RunDir {
    out: PathBuf,
    name: String,
    resumed: bool,
}

impl RunDir {
    /// Creates `out` if needed and checks that it is writable, then applies `start`: a
    /// fresh run is refused where a run named `name` is there, an overwrite deletes that
    /// run's files, a resume needs its checkpoint. Nothing is touched when refused.
    pub fn open(out: impl AsRef<Path>, name: &str, start: StartMode) -> Result<Self, RunError> {
        let dir = Self::existing(out, name);
        let out = &dir.out;
        let unwritable = |source| RunError::Unwritable { out: out.clone(), source };
        fs::create_dir_all(out).map_err(unwritable)?;
        let probe = out.join(".write-test");
        fs::write(&probe, b"").map_err(unwritable)?;
        let _ = fs::remove_file(&probe);
        let earlier = dir.metrics_path().exists() || dir.checkpoints_path().exists();
        match start {
            StartMode::Resume if !dir.checkpoints_path().join("latest").exists() => {
                return Err(RunError::NothingToResume { name: name.into(), checkpoints: dir.checkpoints_path() });
            }
            StartMode::Resume => return Ok(Self { resumed: true, ..dir }),
            StartMode::Fresh if earlier => {
                return Err(RunError::AlreadyHolds { out: out.clone(), name: name.into() });
            }
            StartMode::Overwrite if earlier => {
                for path in [dir.metrics_path(), dir.validation_path(), dir.corpus_path(), dir.options_path()] {
                    let _ = fs::remove_file(path);
                }
                let checkpoints = dir.checkpoints_path();
                if checkpoints.exists() {
                    fs::remove_dir_all(&checkpoints).map_err(RunError::io(checkpoints))?;
                }
            }
            _ => {}
        }
        Ok(dir)
    }

    /// The run `name` in `out` as it is, to read ([`history`](Self::history)); nothing is
    /// checked or written.
    pub fn existing(out: impl AsRef<Path>, name: &str) -> Self {
        Self { out: out.as_ref().to_path_buf(), name: name.to_string(), resumed: false }
    }

    pub fn out(&self) -> &Path {
        &self.out
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the run continues from a checkpoint.
    pub fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// One [`StepReport`] per line (JSON).
    pub fn metrics_path(&self) -> PathBuf {
        self.out.join(format!("metrics-{}.jsonl", self.name))
    }

    /// `step,train_seconds,validation_loss[,validation_accuracy]`.
    pub fn validation_path(&self) -> PathBuf {
        self.out.join(format!("validation-{}.csv", self.name))
    }

    /// The trainer's checkpoints (`latest` names the newest).
    pub fn checkpoints_path(&self) -> PathBuf {
        self.out.join(format!("checkpoints-{}", self.name))
    }

    /// The corpus the run trains on ([`CorpusFingerprint`]).
    pub fn corpus_path(&self) -> PathBuf {
        self.out.join(format!("corpus-{}.json", self.name))
    }

    /// The run's resolved options, written by the caller.
    pub fn options_path(&self) -> PathBuf {
        self.out.join(format!("config-{}.json", self.name))
    }

    /// The run's trainer: resumed from the latest checkpoint (appending to the step
    /// records, after dropping any written past the checkpoint by a process that did not
    /// get to save again), or new from `config` and `lr` (writing them afresh).
    pub fn start_trainer<B, M, O, T>(
        &self,
        model: M,
        optimizer: O,
        config: HybridConfig,
        lr: LrSchedule,
        device: B::Device,
    ) -> Result<HybridTrainer<B, M, O, T>, RunError>
    where
        B: AutodiffBackend + MemoryProbe,
        M: HybridModel<B, T>,
        O: Optimizer<M, B>,
        T: HybridBatch<B>,
    {
        let resume_from = self.resume_from();
        let trainer = HybridTrainer::start(model, optimizer, config, lr, device, resume_from.as_deref())
            .map_err(RunError::Start)?;
        let trainer = if self.resumed {
            self.cut_history_at(trainer.steps_taken())?;
            trainer.with_metrics_appended(self.metrics_path())
        } else {
            trainer.with_metrics(self.metrics_path())
        };
        trainer.map_err(RunError::Start)
    }

    /// The trainer of one replica of a data-parallel run: replica 0 starts as
    /// [`start_trainer`](Self::start_trainer) does (and writes the step records); the
    /// others resume from the same checkpoint, or start new, writing nothing. Every one is
    /// then made a replica ([`HybridTrainer::with_replica`]).
    #[allow(clippy::too_many_arguments)]
    pub fn start_replica_trainer<B, M, O, T>(
        &self,
        replica: Replica,
        model: M,
        optimizer: O,
        config: HybridConfig,
        lr: LrSchedule,
        device: B::Device,
    ) -> Result<HybridTrainer<B, M, O, T>, RunError>
    where
        B: AutodiffBackend + MemoryProbe,
        M: HybridModel<B, T>,
        O: Optimizer<M, B>,
        T: HybridBatch<B>,
    {
        let trainer = if replica.is_leader() {
            self.start_trainer(model, optimizer, config, lr, device)?
        } else {
            let resume_from = self.resume_from();
            HybridTrainer::start(model, optimizer, config, lr, device, resume_from.as_deref())
                .map_err(RunError::Start)?
        };
        trainer.with_replica(replica).map_err(RunError::Start)
    }

    /// Where a resumed run's trainer resumes from: its checkpoints; `None` for a new run.
    fn resume_from(&self) -> Option<PathBuf> {
        self.resumed.then(|| self.checkpoints_path())
    }

    /// Records the corpus of a new run; checks a resumed run's against its record,
    /// refusing a different one unless `allow_change`.
    pub fn check_corpus(&self, corpus: &CorpusFingerprint, allow_change: bool) -> Result<CorpusCheck, RunError> {
        let path = self.corpus_path();
        let check = match (self.resumed, CorpusFingerprint::load(&path)?) {
            (false, _) => CorpusCheck::Recorded,
            (true, None) => CorpusCheck::Unrecorded,
            (true, Some(earlier)) => match corpus.differences(&earlier) {
                differences if differences.is_empty() => return Ok(CorpusCheck::Same),
                differences if allow_change => CorpusCheck::Changed(differences.join("; ")),
                differences => return Err(RunError::CorpusChanged { differences: differences.join("; ") }),
            },
        };
        corpus.save(&path)?;
        Ok(check)
    }

    /// Drops the step records and validations of steps after `taken` (steps a stopped
    /// process ran past its last checkpoint, which the resumed run runs again).
    fn cut_history_at(&self, taken: usize) -> Result<(), RunError> {
        let history = self.history()?;
        let records: Vec<&StepReport> = history.records.iter().filter(|r| r.step < taken).collect();
        if records.len() < history.records.len() {
            let mut text = String::new();
            for record in records {
                text += &serde_json::to_string(record)
                    .map_err(|err| RunError::Io { path: self.metrics_path(), source: std::io::Error::other(err) })?;
                text.push('\n');
            }
            replace(&self.metrics_path(), &text)?;
        }
        let validations: Vec<ValidationPoint> =
            history.validations.iter().copied().filter(|point| point.step <= taken).collect();
        if validations.len() < history.validations.len() {
            replace(&self.validation_path(), &ValidationLog::render(&validations))?;
        }
        Ok(())
    }

    /// The step records and validations in the directory (empty where there are none).
    pub fn history(&self) -> Result<RunHistory, RunError> {
        let path = self.metrics_path();
        let records = match fs::read_to_string(&path) {
            Ok(text) => text
                .lines()
                .enumerate()
                .filter(|(_, line)| !line.trim().is_empty())
                .map(|(index, line)| {
                    serde_json::from_str(line).map_err(|err| RunError::Corrupt {
                        path: path.clone(),
                        line: index + 1,
                        reason: err.to_string(),
                    })
                })
                .collect::<Result<_, _>>()?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(err) => return Err(RunError::io(path)(err)),
        };
        Ok(RunHistory { records, validations: ValidationLog::read(&self.validation_path())? })
    }
}

/// Writes `text` to `path` through a temporary file and a rename, so a crash leaves the
/// old file or the new one.
fn replace(path: &Path, text: &str) -> Result<(), RunError> {
    let temporary = path.with_extension("tmp");
    fs::write(&temporary, text).map_err(RunError::io(&temporary))?;
    fs::rename(&temporary, path).map_err(RunError::io(path))
}
