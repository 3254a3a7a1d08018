//! What a run tells its caller as it goes.

use std::path::Path;

use super::validation::ValidationPoint;
use crate::memory::PoolVerdict;
use crate::trainer::{AverageVerdict, StepReport};

/// One thing that happened in a run, told to the callback of
/// [`Runner::run`](super::Runner::run) as it happens.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// A resumed run moved its batch source past the `batches` its first `first` steps
    /// took, in `seconds` ([`BatchSource::skip`](super::BatchSource::skip)); before
    /// [`RunEvent::Started`].
    Resumed { first: usize, batches: usize, seconds: f64 },
    /// The run begins (or resumes) after `first` steps and ends at `steps`.
    Started { first: usize, steps: usize },
    /// A step finished.
    Step {
        record: &'a StepReport,
        /// The newest loss read back (steps that left theirs on the device have none).
        last_loss: Option<f64>,
        /// Items per second of this process's steps after its first (whose time is
        /// mostly compiling and tuning kernels on a GPU); until then, of the whole run.
        items_per_second: f64,
    },
    /// The model was validated (at step 0 of a new run, then on the cadence).
    Validated {
        point: &'a ValidationPoint,
        /// Items per second as in [`RunEvent::Step`].
        items_per_second: f64,
    },
    /// The weight average was verified against the live weights (before a validation).
    AverageVerified { verdict: &'a AverageVerdict },
    /// A checkpoint was saved.
    Checkpointed { step: usize, path: &'a Path },
    /// The device pool has kept far more than it uses for long: trimming may help.
    PoolBloated { step: usize, verdict: PoolVerdict },
}
