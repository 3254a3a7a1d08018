//! Atomic checkpoints on disk.
//!
//! Layout, under the checkpoint directory:
//!
//! ```text
//! ckpt-00000120/      one finished checkpoint per saved step
//!   model.bin         the model record (Burn NamedMpk, full precision)
//!   optimizer.bin     the optimizer record (same format)
//!   trainer.bin       the trainer state and the predictor's averages (MessagePack: exact)
//!   average.bin       the weight average, as a model record, where the run keeps one
//!   trainer.json      the trainer state for people and tools: step, phase schedule, scale,
//!                     confidence, guard, config, statistics
//! latest              the name of the newest finished checkpoint
//! ```
//!
//! The state is stored twice because JSON is for reading: `serde_json` parses floats
//! best-effort (within an ulp), and a resumed run should continue bit for bit, so resuming
//! reads `trainer.bin` and only checks that `trainer.json` agrees with it.
//!
//! A checkpoint is written as `ckpt-XXXXXXXX.tmp/`, every file fsynced, then renamed into
//! place; only then is `latest` replaced (written as `latest.tmp`, fsynced, renamed). A
//! crash at any point leaves `latest` naming a complete checkpoint (or no `latest` at
//! all); leftover `.tmp` entries are ignored and cleared by the next save.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::trainer::checkpoint::state::{TrainerState, STATE_FORMAT};
use crate::trainer::error::TrainerError;

/// Finished checkpoints kept by default; older ones are removed after each save.
pub const DEFAULT_KEEP: usize = 2;

const MODEL_FILE: &str = "model.bin";
const OPTIMIZER_FILE: &str = "optimizer.bin";
const TRAINER_BIN_FILE: &str = "trainer.bin";
const STATE_FILE: &str = "trainer.json";
const AVERAGE_FILE: &str = "average.bin";
const LATEST_FILE: &str = "latest";
const PREFIX: &str = "ckpt-";
const TMP_SUFFIX: &str = ".tmp";

/// The layout version alone, read before the rest so that an older layout is named as
/// such rather than reported as corrupt.
#[derive(Deserialize)]
struct StateFormat {
    format: u32,
}

/// The encoded parts of one checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointPayload {
    /// `model.bin`.
    pub model: Vec<u8>,
    /// `optimizer.bin`.
    pub optimizer: Vec<u8>,
    /// `trainer.bin`: the exact state and the predictor, encoded by the trainer.
    pub trainer: Vec<u8>,
    /// `trainer.json`, decoded.
    pub state: TrainerState,
    /// `average.bin`: the weight average as a model record, where the run keeps one.
    pub average: Option<Vec<u8>>,
}

/// The name of the checkpoint of `step`.
pub fn checkpoint_name(step: usize) -> String {
    format!("{PREFIX}{step:08}")
}

/// The step of a finished checkpoint's directory name, if it is one.
fn step_of(name: &str) -> Option<usize> {
    let digits = name.strip_prefix(PREFIX)?;
    if digits.len() < 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), TrainerError> {
    let mut file = File::create(path).map_err(|err| TrainerError::io(path, err))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|err| TrainerError::io(path, err))
}

/// Makes a rename or a new entry in `dir` durable. Directories cannot be opened for
/// syncing everywhere; where they cannot, the rename is as durable as the platform makes it.
fn sync_dir(dir: &Path) -> Result<(), TrainerError> {
    #[cfg(unix)]
    {
        File::open(dir).and_then(|handle| handle.sync_all()).map_err(|err| TrainerError::io(dir, err))?;
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
    }
    Ok(())
}

fn remove_any(path: &Path) -> Result<(), TrainerError> {
    let result = if path.is_dir() { fs::remove_dir_all(path) } else { fs::remove_file(path) };
    match result {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(TrainerError::io(path, err)),
        _ => Ok(()),
    }
}

/// Writes the checkpoint of `step` into `dir` atomically, points `latest` at it, and
/// removes finished checkpoints beyond the newest `keep` (at least one is always kept).
///
/// Saving a step that already has a checkpoint replaces it; that replacement (unlike a
/// new checkpoint) has a moment where the old copy is gone and the new one not yet in
/// place.
pub fn save(dir: &Path, payload: &CheckpointPayload, keep: usize) -> Result<PathBuf, TrainerError> {
    let step = payload.state.step;
    fs::create_dir_all(dir).map_err(|err| TrainerError::io(dir, err))?;
    let name = checkpoint_name(step);
    let staging = dir.join(format!("{name}{TMP_SUFFIX}"));
    let target = dir.join(&name);
    remove_any(&staging)?;
    fs::create_dir(&staging).map_err(|err| TrainerError::io(&staging, err))?;

    let state = serde_json::to_vec_pretty(&payload.state)
        .map_err(|err| TrainerError::checkpoint(&staging, format!("cannot encode {STATE_FILE}: {err}")))?;
    write_synced(&staging.join(MODEL_FILE), &payload.model)?;
    write_synced(&staging.join(OPTIMIZER_FILE), &payload.optimizer)?;
    write_synced(&staging.join(TRAINER_BIN_FILE), &payload.trainer)?;
    write_synced(&staging.join(STATE_FILE), &state)?;
    if let Some(average) = &payload.average {
        write_synced(&staging.join(AVERAGE_FILE), average)?;
    }
    sync_dir(&staging)?;

    remove_any(&target)?;
    fs::rename(&staging, &target).map_err(|err| TrainerError::io(&target, err))?;
    sync_dir(dir)?;

    let latest_staging = dir.join(format!("{LATEST_FILE}{TMP_SUFFIX}"));
    write_synced(&latest_staging, format!("{name}\n").as_bytes())?;
    let latest = dir.join(LATEST_FILE);
    fs::rename(&latest_staging, &latest).map_err(|err| TrainerError::io(&latest, err))?;
    sync_dir(dir)?;

    prune(dir, &name, keep)?;
    Ok(target)
}

/// Removes finished checkpoints older than the newest `keep`, never the current one, and
/// any half-written `ckpt-*.tmp` left by an earlier crash.
fn prune(dir: &Path, current: &str, keep: usize) -> Result<(), TrainerError> {
    let mut finished: Vec<(usize, PathBuf, String)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(|err| TrainerError::io(dir, err))? {
        let Ok(entry) = entry else { continue };
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with(PREFIX) && name.ends_with(TMP_SUFFIX) {
            remove_any(&entry.path())?;
        } else if let Some(step) = step_of(&name).filter(|_| entry.path().is_dir()) {
            finished.push((step, entry.path(), name));
        }
    }
    finished.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    for (_, path, name) in finished.into_iter().skip(keep.max(1)) {
        if name != current {
            remove_any(&path)?;
        }
    }
    Ok(())
}

fn read_part(checkpoint: &Path, file: &str) -> Result<Vec<u8>, TrainerError> {
    let path = checkpoint.join(file);
    fs::read(&path).map_err(|err| {
        let reason = if err.kind() == std::io::ErrorKind::NotFound {
            format!("{file} is missing")
        } else {
            format!("{file} cannot be read: {err}")
        };
        TrainerError::checkpoint(checkpoint, reason)
    })
}

/// Reads the checkpoint `latest` names in `dir`: every part must be present and
/// `trainer.json` must parse and agree with the directory's step. The model, optimizer
/// and trainer bytes are returned as they are, for the trainer to decode.
pub fn load_latest(dir: &Path) -> Result<(PathBuf, CheckpointPayload), TrainerError> {
    let latest = dir.join(LATEST_FILE);
    let name = fs::read_to_string(&latest).map_err(|err| {
        let reason = if err.kind() == std::io::ErrorKind::NotFound {
            "no checkpoint here: `latest` is missing".to_string()
        } else {
            format!("`latest` cannot be read: {err}")
        };
        TrainerError::checkpoint(&latest, reason)
    })?;
    let name = name.trim();
    let step = step_of(name)
        .ok_or_else(|| TrainerError::checkpoint(&latest, format!("`latest` names {name:?}, not a checkpoint")))?;
    let checkpoint = dir.join(name);
    if !checkpoint.is_dir() {
        return Err(TrainerError::checkpoint(&checkpoint, "`latest` names a checkpoint that does not exist"));
    }
    let model = read_part(&checkpoint, MODEL_FILE)?;
    let optimizer = read_part(&checkpoint, OPTIMIZER_FILE)?;
    let trainer = read_part(&checkpoint, TRAINER_BIN_FILE)?;
    let state_bytes = read_part(&checkpoint, STATE_FILE)?;
    let corrupt =
        |err: serde_json::Error| TrainerError::checkpoint(&checkpoint, format!("{STATE_FILE} is corrupt: {err}"));
    let StateFormat { format } = serde_json::from_slice(&state_bytes).map_err(corrupt)?;
    if format != STATE_FORMAT {
        return Err(TrainerError::checkpoint(
            &checkpoint,
            format!("{STATE_FILE} has format {format}, this build reads {STATE_FORMAT}"),
        ));
    }
    let state: TrainerState = serde_json::from_slice(&state_bytes).map_err(corrupt)?;
    if state.step != step {
        return Err(TrainerError::checkpoint(
            &checkpoint,
            format!("{STATE_FILE} is for step {}, the directory for step {step}", state.step),
        ));
    }
    for (file, bytes) in [(MODEL_FILE, &model), (OPTIMIZER_FILE, &optimizer), (TRAINER_BIN_FILE, &trainer)] {
        if bytes.is_empty() {
            return Err(TrainerError::checkpoint(&checkpoint, format!("{file} is empty")));
        }
    }
    // Only where the run keeps a weight average.
    let average = if state.average.is_some() { Some(read_part(&checkpoint, AVERAGE_FILE)?) } else { None };
    Ok((checkpoint, CheckpointPayload { model, optimizer, trainer, state, average }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::config::HybridConfig;
    use crate::trainer::lr::LrSchedule;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("leanburn-ckpt-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn payload(step: usize) -> CheckpointPayload {
        let config = HybridConfig::default();
        CheckpointPayload {
            model: vec![1, 2, 3, step as u8],
            optimizer: vec![4, 5],
            trainer: vec![6],
            state: TrainerState {
                step,
                optimizer_step: step,
                ..TrainerState::new(config, LrSchedule::Constant { lr: 1e-3 })
            },
            average: None,
        }
    }

    #[test]
    fn saves_and_loads_the_latest() {
        let dir = scratch("roundtrip");
        let path = save(&dir, &payload(7), DEFAULT_KEEP).expect("save");
        assert_eq!(path, dir.join("ckpt-00000007"));
        let (loaded_path, loaded) = load_latest(&dir).expect("load");
        assert_eq!(loaded_path, path);
        assert_eq!(loaded, payload(7));
        assert!(!dir.join("ckpt-00000007.tmp").exists());
        assert!(!dir.join("latest.tmp").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn keeps_only_the_newest() {
        let dir = scratch("keep");
        for step in [1, 2, 3, 4] {
            save(&dir, &payload(step), 2).expect("save");
        }
        assert!(!dir.join("ckpt-00000001").exists());
        assert!(!dir.join("ckpt-00000002").exists());
        assert!(dir.join("ckpt-00000003").exists());
        assert!(dir.join("ckpt-00000004").exists());
        assert_eq!(load_latest(&dir).expect("load").1.state.step, 4);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_crash_before_the_rename_leaves_the_previous_checkpoint() {
        let dir = scratch("crash");
        save(&dir, &payload(1), DEFAULT_KEEP).expect("save");
        // A half-written later checkpoint, as a crash would leave it.
        fs::create_dir_all(dir.join("ckpt-00000002.tmp")).expect("mkdir");
        fs::write(dir.join("ckpt-00000002.tmp").join(MODEL_FILE), b"partial").expect("write");
        assert_eq!(load_latest(&dir).expect("load").1.state.step, 1);
        fs::create_dir_all(dir.join("ckpt-00000009.tmp")).expect("mkdir");
        // The next save clears them.
        save(&dir, &payload(2), DEFAULT_KEEP).expect("save");
        assert!(!dir.join("ckpt-00000002.tmp").exists());
        assert!(!dir.join("ckpt-00000009.tmp").exists());
        assert_eq!(load_latest(&dir).expect("load").1.state.step, 2);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_or_corrupt_parts_are_reported() {
        let dir = scratch("corrupt");
        let message = load_latest(&dir).expect_err("empty dir").to_string();
        assert!(message.contains("latest"), "{message}");

        let path = save(&dir, &payload(3), DEFAULT_KEEP).expect("save");
        fs::remove_file(path.join(OPTIMIZER_FILE)).expect("remove");
        let message = load_latest(&dir).expect_err("missing part").to_string();
        assert!(message.contains("optimizer.bin is missing"), "{message}");

        let path = save(&dir, &payload(3), DEFAULT_KEEP).expect("save");
        fs::write(path.join(STATE_FILE), b"{ not json").expect("write");
        let message = load_latest(&dir).expect_err("corrupt state").to_string();
        assert!(message.contains("trainer.json is corrupt"), "{message}");

        // An older layout (its fields no longer parse) is named by its version.
        let path = save(&dir, &payload(3), DEFAULT_KEEP).expect("save");
        fs::write(path.join(STATE_FILE), br#"{"format": 1, "step": 3, "config": {"loss_tolerance": 0.1}}"#)
            .expect("write");
        let message = load_latest(&dir).expect_err("old format").to_string();
        assert!(message.contains("has format 1, this build reads 2"), "{message}");

        fs::write(dir.join(LATEST_FILE), b"../elsewhere\n").expect("write");
        let message = load_latest(&dir).expect_err("bad latest").to_string();
        assert!(message.contains("not a checkpoint"), "{message}");
        let _ = fs::remove_dir_all(&dir);
    }
}
