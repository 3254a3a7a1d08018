//! Predict blocks: the update predictor, the phase schedule, the block guard and its
//! calibration, and the rollback snapshot.

pub(crate) mod calibration;
pub(crate) mod guard;
pub(crate) mod phase;
pub(crate) mod predictor;
pub(crate) mod snapshot;
