//! Saving a trainer to a checkpoint and resuming one from it.
//!
//! Model, optimizer, and the trainer state with the predictor, are encoded with Burn's
//! `NamedMpkBytesRecorder` at full precision: its decoder reports corrupt bytes as an
//! error, where the bincode recorder would panic, and MessagePack keeps every float
//! exact. The state is also written to `trainer.json` for people (see [`files`]).

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use crate::memory::MemoryProbe;
use crate::trainer::checkpoint::files::{self, CheckpointPayload};
use crate::trainer::checkpoint::fit;
use crate::trainer::checkpoint::state::TrainerState;
use crate::trainer::error::TrainerError;
use crate::trainer::hybrid::HybridTrainer;
use crate::trainer::params;
use crate::trainer::predict::predictor::{PredictorState, UpdatePredictor};
use crate::trainer::step::{HybridBatch, HybridModel};

type CheckpointRecorder = NamedMpkBytesRecorder<FullPrecisionSettings>;

/// The content of `trainer.bin`.
#[derive(Serialize, Deserialize)]
struct TrainerBinary {
    state: TrainerState,
    predictor: PredictorState,
}

impl<B, M, O, T> HybridTrainer<B, M, O, T>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    /// Everything about the trainer that is not a tensor.
    pub(crate) fn state(&self) -> TrainerState {
        TrainerState { statistics: self.statistics(), ..self.state.clone() }
    }

    /// Writes a checkpoint of the current step into `dir` and returns its directory. The
    /// layout (`ckpt-XXXXXXXX/` with `model.bin`, `optimizer.bin`, `trainer.bin`,
    /// `trainer.json`, `average.bin` with a weight average, and a `latest` pointer) is described in `docs/trainer.md`; each
    /// checkpoint appears atomically, and only the newest two are kept (see
    /// [`with_checkpoints_kept`](Self::with_checkpoints_kept)).
    ///
    /// The weights are always verified ones: a predict block's jump is judged within the
    /// step that makes it, and the block's later steps do not move the weights. Reads
    /// every tensor back to the host (a sync).
    pub fn save_checkpoint(&self, dir: impl AsRef<Path>) -> Result<PathBuf, TrainerError> {
        let dir = dir.as_ref();
        let model = self.model.as_ref().ok_or(TrainerError::ModelLost)?;
        let recorder = CheckpointRecorder::default();
        let model_record = <M as Module<B>>::into_record(model.clone());
        let model = <CheckpointRecorder as Recorder<B>>::record(&recorder, model_record, ())?;
        let optimizer_record = <O as Optimizer<M, B>>::to_record(&self.optimizer);
        let optimizer = <CheckpointRecorder as Recorder<B>>::record(&recorder, optimizer_record, ())?;
        let state = self.state();
        let binary = TrainerBinary { state: state.clone(), predictor: self.predictor.to_record() };
        let trainer = <CheckpointRecorder as Recorder<B>>::save_item(&recorder, binary, ())?;
        let average = match self.averaged_model() {
            Some(average) => Some(<CheckpointRecorder as Recorder<B>>::record(&recorder, average.into_record(), ())?),
            None => None,
        };
        let payload = CheckpointPayload { model, optimizer, trainer, state, average };
        files::save(dir, &payload, self.keep_checkpoints)
    }

    /// Rebuilds a trainer from the newest checkpoint in `dir`.
    ///
    /// `model_template` and `optimizer` must be built the way the saved ones were (same
    /// architecture, same optimizer type); their values are replaced by the saved ones.
    /// The run continues exactly where it stopped: same step, phase, horizon, scale,
    /// confidence, running loss, predictor and learning-rate position. Step records are
    /// not written until [`with_metrics_appended`](Self::with_metrics_appended) is called.
    pub fn resume(
        model_template: M,
        optimizer: O,
        dir: impl AsRef<Path>,
        device: B::Device,
    ) -> Result<Self, TrainerError> {
        let (path, payload) = files::load_latest(dir.as_ref())?;
        let CheckpointPayload { model, optimizer: optimizer_bytes, trainer, state: readable, average } = payload;
        let undecodable = |file: &str, err: burn::record::RecorderError| {
            TrainerError::checkpoint(path.join(file), format!("cannot be decoded: {err}"))
        };
        let mut trainer_bytes = trainer;
        let binary: TrainerBinary =
            <CheckpointRecorder as Recorder<B>>::load_item(&CheckpointRecorder::default(), &mut trainer_bytes)
                .map_err(|err| undecodable("trainer.bin", err))?;
        let TrainerBinary { state, predictor: predictor_state } = binary;
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
            let record =
                <CheckpointRecorder as Recorder<B>>::load::<<M as Module<B>>::Record>(&recorder, bytes, &device)
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
        let optimizer_record = <CheckpointRecorder as Recorder<B>>::load::<<O as Optimizer<M, B>>::Record>(
            &recorder,
            optimizer_bytes,
            &device,
        )
        .map_err(|err| undecodable("optimizer.bin", err))?;
        let optimizer = <O as Optimizer<M, B>>::load_record(optimizer, optimizer_record);
        let predictor = UpdatePredictor::from_record(predictor_state, &device);

        tracing::info!(
            checkpoint = %path.display(),
            step = state.step,
            phase = %state.schedule.current(),
            "resumed"
        );
        let mut trainer = Self::assemble(model, optimizer, state, predictor, device);
        trainer.average.params = average;
        Ok(trainer)
    }
}
