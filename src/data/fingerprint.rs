//! What a run trained on, recorded so that a resumed run can tell whether it continues on
//! the same text. The default corpus is whatever the Cargo registry holds, and that changes
//! whenever Cargo unpacks a crate.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::corpus::Corpus;
use super::error::DataError;

/// The text a run reads and how it is tokenized.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorpusFingerprint {
    /// Where the text was read from (informative: the same text elsewhere is the same data).
    pub source: String,
    /// Files read.
    pub files: usize,
    /// Bytes of text, separators included.
    pub bytes: usize,
    /// SHA-256 of the text, in hex.
    pub sha256: String,
    /// The tokenizer's encoding.
    pub tokenizer: String,
}

impl CorpusFingerprint {
    /// The fingerprint of `corpus` as tokenized by the encoding named `tokenizer`.
    pub fn new(corpus: &Corpus, tokenizer: &str) -> Self {
        let digest = Sha256::digest(corpus.text.as_bytes());
        Self {
            source: corpus.source.to_string(),
            files: corpus.files,
            bytes: corpus.bytes,
            sha256: digest.iter().map(|byte| format!("{byte:02x}")).collect(),
            tokenizer: tokenizer.to_string(),
        }
    }

    /// How this fingerprint differs from `earlier`, one phrase per difference; empty when
    /// the data is the same (the text and the tokenizer; not where the text lies).
    pub fn differences(&self, earlier: &Self) -> Vec<String> {
        let mut differences = Vec::new();
        if self.files != earlier.files {
            differences.push(format!("{} files, then {}", earlier.files, self.files));
        }
        if self.bytes != earlier.bytes {
            differences.push(format!("{} bytes, then {}", earlier.bytes, self.bytes));
        }
        if self.sha256 != earlier.sha256 {
            differences.push(format!("text SHA-256 {:.12}…, then {:.12}…", earlier.sha256, self.sha256));
        }
        if self.tokenizer != earlier.tokenizer {
            differences.push(format!("tokenizer {}, then {}", earlier.tokenizer, self.tokenizer));
        }
        if !differences.is_empty() && self.source != earlier.source {
            differences.push(format!("read from {}, then {}", earlier.source, self.source));
        }
        differences
    }

    /// Writes the fingerprint as JSON.
    pub fn save(&self, path: &Path) -> Result<(), DataError> {
        let json = serde_json::to_string_pretty(self).expect("strings and numbers serialise");
        fs::write(path, json + "\n").map_err(|err| DataError::io(path, err))
    }

    /// Reads a fingerprint written by [`save`](Self::save); `None` if there is no file.
    pub fn load(path: &Path) -> Result<Option<Self>, DataError> {
        match fs::read_to_string(path) {
            Ok(json) => serde_json::from_str(&json).map(Some).map_err(|err| {
                DataError::io(
                    path,
                    std::io::Error::new(ErrorKind::InvalidData, format!("not a corpus fingerprint: {err}")),
                )
            }),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            Err(err) => Err(DataError::io(path, err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::CorpusSource;

    fn corpus(text: &str, files: usize, path: &str) -> Corpus {
        Corpus {
            text: text.into(),
            files,
            skipped_non_utf8: 0,
            bytes: text.len(),
            source: CorpusSource::Path(path.into()),
        }
    }

    #[test]
    fn the_same_text_is_the_same_data_wherever_it_lies() {
        let a = CorpusFingerprint::new(&corpus("one two three", 2, "/a"), "r50k_base");
        let moved = CorpusFingerprint::new(&corpus("one two three", 2, "/b"), "r50k_base");
        assert_eq!(a.sha256.len(), 64);
        assert!(moved.differences(&a).is_empty(), "{:?}", moved.differences(&a));
    }

    #[test]
    fn changed_text_files_or_tokenizer_are_named() {
        let a = CorpusFingerprint::new(&corpus("one two three", 2, "/a"), "r50k_base");
        // Same size, different text: only the hash tells.
        let edited = CorpusFingerprint::new(&corpus("one two thref", 2, "/a"), "r50k_base");
        let differences = edited.differences(&a);
        assert_eq!(differences.len(), 1, "{differences:?}");
        assert!(differences[0].starts_with("text SHA-256"), "{differences:?}");
        let grown = CorpusFingerprint::new(&corpus("one two three four", 3, "/c"), "cl100k_base");
        let text = grown.differences(&a).join("; ");
        for needle in ["2 files, then 3", "13 bytes, then 18", "tokenizer r50k_base, then cl100k_base", "read from /a"]
        {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }

    #[test]
    fn saved_fingerprints_load_back_and_a_missing_file_is_none() {
        let dir = std::env::temp_dir().join(format!("leanburn-fingerprint-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("corpus.json");
        assert_eq!(CorpusFingerprint::load(&path).unwrap(), None);
        let a = CorpusFingerprint::new(&corpus("text", 1, "/a"), "r50k_base");
        a.save(&path).unwrap();
        assert_eq!(CorpusFingerprint::load(&path).unwrap(), Some(a));
        fs::write(&path, "not json").unwrap();
        assert!(CorpusFingerprint::load(&path).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
