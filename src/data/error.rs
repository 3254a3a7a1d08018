//! What can go wrong while reading a corpus, tokenizing it and cutting it into batches.

use std::path::PathBuf;

use super::split::Split;

/// An error of the data pipeline.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The corpus path (or the Cargo registry directory) does not exist.
    #[error("corpus path {} does not exist", .path.display())]
    NotFound {
        /// The missing file or directory.
        path: PathBuf,
    },
    /// A file or directory could not be read.
    #[error("I/O error on {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Nothing readable was found: every candidate file was empty or not UTF-8.
    #[error("no UTF-8 text in {}: {skipped} non-UTF-8 files skipped", .path.display())]
    NoText {
        /// The file or directory that was read.
        path: PathBuf,
        /// How many files were skipped because they are not valid UTF-8.
        skipped: usize,
    },
    /// A split holds fewer tokens than one window (`seq_len + 1` tokens) needs.
    #[error(
        "the {split} split has {available} tokens, but one window needs {needed}; \
         use a larger corpus or a shorter sequence length"
    )]
    CorpusTooShort {
        /// Tokens in the split.
        available: usize,
        /// Tokens one window needs (`seq_len + 1`).
        needed: usize,
        /// The split that is too short.
        split: Split,
    },
    /// An argument is out of range (a zero batch or sequence length, a validation
    /// fraction outside `(0, 1)`, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The tokenizer could not be built, or could not decode a token sequence.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
}

impl DataError {
    /// An [`Io`](Self::Io) error about `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io { path: path.into(), source }
    }

    /// An [`InvalidArgument`](Self::InvalidArgument) error.
    pub fn invalid(message: impl Into<String>) -> Self {
        DataError::InvalidArgument(message.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_path_and_the_numbers() {
        let err = DataError::NoText { path: PathBuf::from("/tmp/corpus"), skipped: 3 };
        assert_eq!(err.to_string(), "no UTF-8 text in /tmp/corpus: 3 non-UTF-8 files skipped");

        let err = DataError::CorpusTooShort { available: 5, needed: 9, split: Split::Validation };
        let message = err.to_string();
        assert!(message.starts_with("the validation split has 5 tokens, but one window needs 9"), "{message}");

        let err = DataError::io("/nowhere", std::io::Error::other("boom"));
        assert_eq!(err.to_string(), "I/O error on /nowhere: boom");
        assert!(std::error::Error::source(&err).is_some());
    }
}
