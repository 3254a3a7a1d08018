//! A tokenized corpus split into a training and a validation part, both on the host.

use super::error::DataError;
use super::split::Split;

/// The token stream of a corpus, cut once into a training part and the validation part
/// that follows it. Contiguous (not shuffled), so no validation window overlaps a
/// training one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenDataset {
    train: Vec<u32>,
    validation: Vec<u32>,
}

impl TokenDataset {
    /// Splits `tokens`: the last `validation_fraction` of them (rounded to the nearest
    /// token) become the validation part, the rest the training part.
    ///
    /// Fails if the fraction is not strictly between 0 and 1, or if either part would be
    /// empty.
    pub fn split(mut tokens: Vec<u32>, validation_fraction: f64) -> Result<Self, DataError> {
        // Written so that NaN is out of range too.
        let in_range = validation_fraction > 0.0 && validation_fraction < 1.0;
        if !in_range {
            return Err(DataError::invalid(format!(
                "the validation fraction must be strictly between 0 and 1, \
                 got {validation_fraction}"
            )));
        }
        let total = tokens.len();
        let validation_len = (total as f64 * validation_fraction).round() as usize;
        if validation_len == 0 || validation_len >= total {
            let empty = if validation_len == 0 { Split::Validation } else { Split::Train };
            return Err(DataError::invalid(format!(
                "{total} tokens with validation fraction {validation_fraction} \
                 leave an empty {empty} split"
            )));
        }
        let validation = tokens.split_off(total - validation_len);
        Ok(Self { train: tokens, validation })
    }

    /// [`split`](Self::split), refusing a split too short to give one window of `window`
    /// tokens (a window reads `window + 1` tokens: inputs and the targets shifted by one).
    pub fn split_for_windows(tokens: Vec<u32>, validation_fraction: f64, window: usize) -> Result<Self, DataError> {
        let count = tokens.len();
        let data = Self::split(tokens, validation_fraction)
            .map_err(|e| DataError::invalid(format!("the corpus has {count} tokens, too few to train on ({e})")))?;
        for split in [Split::Train, Split::Validation] {
            let tokens = data.get(split).len();
            if tokens <= window {
                return Err(DataError::invalid(format!(
                    "the {split} split has {tokens} tokens, too few for one window of {window}; give more text or \
                     shorter windows"
                )));
            }
        }
        Ok(data)
    }

    /// The training tokens.
    pub fn train(&self) -> &[u32] {
        &self.train
    }

    /// The validation tokens.
    pub fn validation(&self) -> &[u32] {
        &self.validation
    }

    /// The tokens of one split.
    pub fn get(&self, split: Split) -> &[u32] {
        match split {
            Split::Train => &self.train,
            Split::Validation => &self.validation,
        }
    }

    /// Tokens in both splits together.
    pub fn len(&self) -> usize {
        self.train.len() + self.validation.len()
    }

    /// Whether the dataset holds no tokens (never true for one built by
    /// [`split`](Self::split)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The two parts, training first.
    pub fn into_parts(self) -> (Vec<u32>, Vec<u32>) {
        (self.train, self.validation)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_split_for_windows_holds_a_window_on_each_side() {
        let data = TokenDataset::split_for_windows((0..100).collect(), 0.1, 8).unwrap();
        assert_eq!((data.train().len(), data.validation().len()), (90, 10));
        // Control: ten validation tokens cannot give a window of ten.
        let err = TokenDataset::split_for_windows((0..100).collect(), 0.1, 10).unwrap_err().to_string();
        assert!(err.contains("validation split has 10 tokens, too few for one window of 10"), "{err}");
        let err = TokenDataset::split_for_windows(vec![1], 0.1, 1).unwrap_err().to_string();
        assert!(err.contains("the corpus has 1 tokens, too few"), "{err}");
    }

    use super::*;

    #[test]
    fn the_last_fraction_becomes_validation() {
        let dataset = TokenDataset::split((0..100).collect(), 0.1).expect("split");
        assert_eq!(dataset.train().len(), 90);
        assert_eq!(dataset.validation().len(), 10);
        assert_eq!(dataset.len(), 100);
        assert!(!dataset.is_empty());
        assert_eq!(dataset.train(), (0..90).collect::<Vec<u32>>().as_slice());
        assert_eq!(dataset.get(Split::Validation), &[90, 91, 92, 93, 94, 95, 96, 97, 98, 99]);
        assert_eq!(dataset.get(Split::Train), dataset.train());

        let (train, validation) = TokenDataset::split((0..7).collect(), 0.5).expect("split").into_parts();
        // 3.5 rounds to 4.
        assert_eq!((train.len(), validation.len()), (3, 4));
    }

    #[test]
    fn fractions_outside_the_open_unit_interval_are_rejected() {
        for fraction in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
            let err = TokenDataset::split((0..100).collect(), fraction).unwrap_err();
            assert!(matches!(err, DataError::InvalidArgument(_)), "{fraction}: {err}");
        }
    }

    #[test]
    fn an_empty_part_is_rejected() {
        // 10 × 0.01 rounds to 0 validation tokens.
        let err = TokenDataset::split((0..10).collect(), 0.01).unwrap_err();
        assert!(err.to_string().contains("empty validation split"), "{err}");
        // 10 × 0.99 rounds to 10: nothing left to train on.
        let err = TokenDataset::split((0..10).collect(), 0.99).unwrap_err();
        assert!(err.to_string().contains("empty train split"), "{err}");
        assert!(TokenDataset::split(Vec::new(), 0.5).is_err());
    }

    #[test]
    fn splits_display_in_lower_case() {
        assert_eq!(Split::Train.to_string(), "train");
        assert_eq!(Split::Validation.to_string(), "validation");
    }
}
