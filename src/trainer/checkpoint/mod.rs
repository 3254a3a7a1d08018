//! Checkpoints: the run's books ([`state`]), atomic checkpoint files on disk ([`files`]),
//! saving and resuming a trainer ([`persist`]), and the check that a saved model fits
//! the one it is loaded into ([`fit`]).

pub(crate) mod files;
pub(crate) mod fit;
pub(crate) mod persist;
pub(crate) mod state;
