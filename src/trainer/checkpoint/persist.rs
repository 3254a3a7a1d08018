//! Saving a trainer's parts to a checkpoint and loading them back: the model, the
//! optimizer, the books with the predictor, and the weight average. `HybridTrainer`'s
//! `save_checkpoint` and `resume` hand them over and take them back.
//!
//! Model, optimizer, and the trainer state with the predictor, are encoded with Burn's
//! `NamedMpkBytesRecorder` at full precision: its decoder reports corrupt bytes as an
//! error, where the bincode recorder would panic, and MessagePack keeps every float
//! exact. The state is also written to `trainer.json` for people (see [`files`]).

use std::path::{Path, PathBuf};

use burn::module::{AutodiffModule, Module};
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use crate::trainer::checkpoint::files::{self, CheckpointPayload};
use crate::trainer::checkpoint::fit;
use crate::trainer::checkpoint::state::TrainerState;
use crate::trainer::error::TrainerError;
use crate::trainer::params;
use crate::trainer::predict::predictor::{PredictorState, UpdatePredictor};

type CheckpointRecorder = NamedMpkBytesRecorder<FullPrecisionSettings>;

/// The content of `trainer.bin`.
#[derive(Serialize, Deserialize)]
struct TrainerBinary {
    state: TrainerState,
    predictor: PredictorState,
}

/// What a checkpoint is written from.
pub(crate) struct Saving<'a, M, O> {
    pub model: &'a M,
    pub optimizer: &'a O,
    /// Everything about the trainer that is not a tensor.
    pub state: TrainerState,
    pub predictor: PredictorState,
    /// The model with the weight average's values, where the run keeps one.
    pub average: Option<M>,
}

/// What a checkpoint gives back.
pub(crate) struct Loaded<B: AutodiffBackend, M, O> {
    pub model: M,
    pub optimizer: O,
    pub state: TrainerState,
    pub predictor: UpdatePredictor<B::InnerBackend>,
    /// The weight average's tensors, where the run kept one.
    pub average: Option<params::ParamTensors<B::InnerBackend>>,
}

/// Writes a checkpoint of `parts` into `dir` (keeping the newest `keep`) and returns its
/// directory. Reads every tensor back to the host (a sync).
pub(crate) fn save<B, M, O>(dir: &Path, parts: Saving<'_, M, O>, keep: usize) -> Result<PathBuf, TrainerError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    let recorder = CheckpointRecorder::default();
    let model_record = <M as Module<B>>::into_record(parts.model.clone());
    let model = <CheckpointRecorder as Recorder<B>>::record(&recorder, model_record, ())?;
    let optimizer_record = <O as Optimizer<M, B>>::to_record(parts.optimizer);
    let optimizer = <CheckpointRecorder as Recorder<B>>::record(&recorder, optimizer_record, ())?;
    let binary = TrainerBinary { state: parts.state.clone(), predictor: parts.predictor };
    let trainer = <CheckpointRecorder as Recorder<B>>::save_item(&recorder, binary, ())?;
    let average = match parts.average {
        Some(average) => Some(<CheckpointRecorder as Recorder<B>>::record(&recorder, average.into_record(), ())?),
        None => None,
    };
    let payload = CheckpointPayload { model, optimizer, trainer, state: parts.state, average };
    files::save(dir, &payload, keep)
}

/// Loads the newest checkpoint in `dir` into `model_template` and `optimizer`: a missing,
/// corrupt or inconsistent part, or a model of another shape, is a
/// [`TrainerError::Checkpoint`] naming the file.
pub(crate) fn load<B, M, O>(
    model_template: M,
    optimizer: O,
    dir: &Path,
    device: &B::Device,
) -> Result<Loaded<B, M, O>, TrainerError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    let (path, payload) = files::load_latest(dir)?;
    let CheckpointPayload { model, optimizer: optimizer_bytes, trainer, state: readable, average } = payload;
    let undecodable = |file: &str, err: burn::record::RecorderError| {
        TrainerError::checkpoint(path.join(file), format!("cannot be decoded: {err}"))
    };
    let mut trainer_bytes = trainer;
    let binary: TrainerBinary =
        <CheckpointRecorder as Recorder<B>>::load_item(&CheckpointRecorder::default(), &mut trainer_bytes)
            .map_err(|err| undecodable("trainer.bin", err))?;
    let TrainerBinary { state, predictor } = binary;
    if state.step != readable.step || state.optimizer_step != readable.optimizer_step {
        return Err(TrainerError::checkpoint(
            &path,
            format!("trainer.bin (step {}) and trainer.json (step {}) disagree", state.step, readable.step),
        ));
    }
    state.config.validate()?;
    state.lr.validate()?;

    // A record of another model is refused before Burn's loader, which would panic.
    let load_model = |template: M, file: &str, bytes: Vec<u8>| {
        fit::check_fits::<B, M>(&template, &bytes, &path.join(file))?;
        let recorder = CheckpointRecorder::default();
        let record = <CheckpointRecorder as Recorder<B>>::load::<<M as Module<B>>::Record>(&recorder, bytes, device)
            .map_err(|err| undecodable(file, err))?;
        Ok::<M, TrainerError>(template.load_record(record))
    };
    // The weight average is a model record too, loaded into a copy of the template.
    let average = match average.filter(|_| state.average.is_some()) {
        Some(bytes) => Some(params::collect(&load_model(model_template.clone(), "average.bin", bytes)?.valid())),
        None => None,
    };
    let model = load_model(model_template, "model.bin", model)?;
    let recorder = CheckpointRecorder::default();
    let optimizer_record =
        <CheckpointRecorder as Recorder<B>>::load::<<O as Optimizer<M, B>>::Record>(&recorder, optimizer_bytes, device)
            .map_err(|err| undecodable("optimizer.bin", err))?;
    let optimizer = <O as Optimizer<M, B>>::load_record(optimizer, optimizer_record);
    let predictor = UpdatePredictor::from_record(predictor, device);
    tracing::info!(checkpoint = %path.display(), step = state.step, phase = %state.schedule.current(), "resumed");
    Ok(Loaded { model, optimizer, state, predictor, average })
}
