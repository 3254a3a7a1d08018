//! Checkpoints: the run's books ([`state`]), atomic checkpoint files on disk ([`files`]),
//! and saving and resuming a trainer ([`persist`]).

pub(crate) mod files;
pub(crate) mod persist;
pub(crate) mod state;
