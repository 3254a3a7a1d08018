//! The update predictor: what the optimizer would do next, per parameter.
//!
//! It keeps, for every float parameter, an exponential moving average of the real update
//! divided by the learning rate it was made with, `m ← decay·m + (1−decay)·Δ/lr`. Storing
//! updates per unit of learning rate means a schedule that changes the rate between the
//! observation and the prediction is honoured: the guess for a step at rate `lr` is
//! `lr·m`. The cost is one tensor the size of each parameter (half that with
//! [`PredictorPrecision::Half`]).

use std::collections::BTreeMap;

use burn::module::ParamId;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::trainer::config::PredictorPrecision;
use crate::trainer::params::{float_dtype, tensor_bytes, ParamUpdates};

#[derive(Clone, Debug)]
struct Entry<B: Backend> {
    /// The moving average of `Δ / lr`, in the storage type.
    mean: Tensor<B, 1>,
    /// The float type of the updates (and of the predictions handed out).
    dtype: FloatDType,
}

/// Per-parameter moving average of the optimizer's update per unit learning rate.
#[derive(Clone, Debug)]
pub struct UpdatePredictor<B: Backend> {
    entries: BTreeMap<ParamId, Entry<B>>,
    decay: f64,
    precision: PredictorPrecision,
    observations: u64,
}

/// One parameter's stored average, in host memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictorEntry {
    /// The parameter's id ([`ParamId::val`]).
    pub id: u64,
    /// The float type predictions are handed out in.
    pub dtype: DType,
    /// The stored average (1-D, in the storage type).
    pub data: TensorData,
}

/// The predictor's state, for checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictorState {
    /// Updates observed so far.
    pub observations: u64,
    /// Weight of the old average.
    pub decay: f64,
    /// Storage type.
    pub precision: PredictorPrecision,
    /// One entry per parameter, in id order.
    pub entries: Vec<PredictorEntry>,
}

impl<B: Backend> UpdatePredictor<B> {
    /// An empty predictor.
    pub(crate) fn new(decay: f64, precision: PredictorPrecision) -> Self {
        Self { entries: BTreeMap::new(), decay, precision, observations: 0 }
    }

    /// Folds in the real update `deltas` of a step taken at learning rate `lr`.
    ///
    /// A parameter seen for the first time starts at `Δ/lr`. A step with a rate that is
    /// zero or not finite says nothing about the update per unit rate and is skipped.
    pub(crate) fn observe(&mut self, deltas: &ParamUpdates<B>, lr: f64) {
        if !(lr.is_finite() && lr > 0.0) {
            tracing::debug!(lr, "update not observed: learning rate is not positive");
            return;
        }
        for (id, delta) in deltas {
            let Some(dtype) = float_dtype(delta.dtype()) else {
                continue;
            };
            let per_lr = delta.clone().mul_scalar(1.0 / lr);
            let mean = match self.entries.remove(id) {
                Some(entry) if entry.mean.shape() == delta.shape() => {
                    entry.mean.cast(dtype).mul_scalar(self.decay).add(per_lr.mul_scalar(1.0 - self.decay))
                }
                _ => per_lr,
            };
            let mean = self.stored(mean);
            self.entries.insert(*id, Entry { mean, dtype });
        }
        self.observations += 1;
    }

    /// The predicted update of every parameter for one step at learning rate `lr`,
    /// `lr·m`, in the parameters' own float type. Any extra scale is applied by whoever
    /// applies the update.
    pub fn predict(&self, lr: f64) -> ParamUpdates<B> {
        self.entries.iter().map(|(id, entry)| (*id, entry.mean.clone().cast(entry.dtype).mul_scalar(lr))).collect()
    }

    /// Forgets every average (and frees them): the next observation starts afresh.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.observations = 0;
    }

    /// Whether at least one update has been observed.
    pub fn is_ready(&self) -> bool {
        self.observations > 0 && !self.entries.is_empty()
    }

    /// Updates observed so far.
    pub fn observations(&self) -> u64 {
        self.observations
    }

    /// Parameters tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no parameter is tracked yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Device bytes the stored averages occupy.
    pub fn bytes(&self) -> usize {
        self.entries.values().map(|entry| tensor_bytes(&entry.mean)).sum()
    }

    /// Storage type.
    pub fn precision(&self) -> PredictorPrecision {
        self.precision
    }

    /// Reads the state back to host memory (a device-to-host copy of every average).
    pub(crate) fn to_record(&self) -> PredictorState {
        PredictorState {
            observations: self.observations,
            decay: self.decay,
            precision: self.precision,
            entries: self
                .entries
                .iter()
                .map(|(id, entry)| PredictorEntry {
                    id: id.val(),
                    dtype: entry.dtype.into(),
                    data: entry.mean.clone().into_data(),
                })
                .collect(),
        }
    }

    /// Rebuilds a predictor on `device` from a saved state, bit for bit.
    pub(crate) fn from_record(state: PredictorState, device: &B::Device) -> Self {
        let entries = state
            .entries
            .into_iter()
            .filter_map(|entry| {
                let dtype = float_dtype(entry.dtype)?;
                let stored = entry.data.dtype;
                let mean = Tensor::<B, 1>::from_data(entry.data, (device, stored));
                Some((ParamId::from(entry.id), Entry { mean, dtype }))
            })
            .collect();
        Self { entries, decay: state.decay, precision: state.precision, observations: state.observations }
    }

    fn stored(&self, mean: Tensor<B, 1>) -> Tensor<B, 1> {
        match self.precision {
            PredictorPrecision::Full => mean,
            PredictorPrecision::Half => mean.cast(FloatDType::F16),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::flex::FlexDevice;
    use burn::backend::Flex;

    const DEVICE: FlexDevice = FlexDevice;

    fn updates(values: &[f32]) -> ParamUpdates<Flex> {
        let mut map = ParamUpdates::new();
        map.insert(ParamId::from(7), Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), &DEVICE));
        map
    }

    fn predicted(predictor: &UpdatePredictor<Flex>, lr: f64) -> Vec<f32> {
        let prediction = predictor.predict(lr);
        prediction[&ParamId::from(7)].clone().into_data().to_vec::<f32>().expect("f32")
    }

    fn assert_close(actual: &[f32], expected: &[f32]) {
        assert_eq!(actual.len(), expected.len());
        for (a, e) in actual.iter().zip(expected) {
            assert!((a - e).abs() < 1e-5, "{actual:?} vs {expected:?}");
        }
    }

    #[test]
    fn first_observation_is_the_update_per_unit_rate() {
        let mut predictor = UpdatePredictor::<Flex>::new(0.9, PredictorPrecision::Full);
        assert!(!predictor.is_ready());
        predictor.observe(&updates(&[0.2, -0.4]), 0.1);
        assert!(predictor.is_ready());
        assert_eq!(predictor.observations(), 1);
        // Same rate: the same update back.
        assert_close(&predicted(&predictor, 0.1), &[0.2, -0.4]);
        // Half the rate: half the update.
        assert_close(&predicted(&predictor, 0.05), &[0.1, -0.2]);
    }

    #[test]
    fn later_observations_are_averaged() {
        let mut predictor = UpdatePredictor::<Flex>::new(0.5, PredictorPrecision::Full);
        predictor.observe(&updates(&[1.0]), 1.0);
        predictor.observe(&updates(&[3.0]), 1.0);
        assert_close(&predicted(&predictor, 1.0), &[2.0]);
        // Rate changes are divided out before averaging.
        predictor.observe(&updates(&[4.0]), 2.0);
        assert_close(&predicted(&predictor, 1.0), &[2.0]);
    }

    #[test]
    fn zero_rate_steps_are_skipped() {
        let mut predictor = UpdatePredictor::<Flex>::new(0.5, PredictorPrecision::Full);
        predictor.observe(&updates(&[1.0]), 0.0);
        assert!(!predictor.is_ready());
        assert_eq!(predictor.observations(), 0);
    }

    #[test]
    fn reports_its_memory() {
        let mut predictor = UpdatePredictor::<Flex>::new(0.9, PredictorPrecision::Full);
        predictor.observe(&updates(&[1.0, 2.0, 3.0]), 1.0);
        assert_eq!(predictor.bytes(), 3 * 4);
        assert_eq!(predictor.len(), 1);
    }

    #[test]
    fn round_trips_through_a_record() {
        let mut predictor = UpdatePredictor::<Flex>::new(0.9, PredictorPrecision::Full);
        predictor.observe(&updates(&[0.25, -1.5]), 0.5);
        predictor.observe(&updates(&[0.75, 0.5]), 0.25);
        let state = predictor.to_record();
        assert_eq!(state.entries.len(), 1);
        assert_eq!(state.entries[0].id, 7);

        let json = serde_json::to_string(&state).expect("serialise");
        let back: PredictorState = serde_json::from_str(&json).expect("deserialise");
        let restored = UpdatePredictor::<Flex>::from_record(back, &DEVICE);
        assert_eq!(restored.observations(), 2);
        assert_eq!(predicted(&restored, 0.3), predicted(&predictor, 0.3));
    }
}
