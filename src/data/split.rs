//! The two parts of a tokenized corpus.

use std::fmt;

/// Which part of a [`TokenDataset`](super::TokenDataset) a window comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// The training tokens (the start of the corpus).
    Train,
    /// The held-out validation tokens (the end of the corpus).
    Validation,
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Validation => "validation",
        })
    }
}
