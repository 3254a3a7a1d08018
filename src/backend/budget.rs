//! The convolution workspace cap, and how it turns into a batch chunk size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The most bytes a `Lean` convolution may hold in transient workspace (column matrices,
/// GEMM results and their reshaped copies) at once. The batch is cut into chunks so that
/// one chunk's workspace fits; a single image that does not fit is run alone.
///
/// Process-wide, because a Burn backend is a type, not a value: set it with
/// [`ConvBudget::set_global`] or the environment variable `LEANBURN_CONV_WORKSPACE_MB`
/// (read once, at the first convolution). Default: 64 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvBudget {
    bytes: usize,
}

/// 0 = not set in code; the environment or the default applies.
static GLOBAL_BYTES: AtomicUsize = AtomicUsize::new(0);
static FROM_ENV: OnceLock<ConvBudget> = OnceLock::new();

/// Why a budget could not be read from the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("LEANBURN_CONV_WORKSPACE_MB must be a whole number of MiB ≥ 1, got '{0}'")]
pub struct InvalidBudget(pub String);

impl ConvBudget {
    pub const DEFAULT_MIB: usize = 64;
    pub const ENV: &'static str = "LEANBURN_CONV_WORKSPACE_MB";

    /// A budget of `bytes` (at least 1).
    pub fn from_bytes(bytes: usize) -> Self {
        Self { bytes: bytes.max(1) }
    }

    pub fn from_mib(mib: usize) -> Self {
        Self::from_bytes(mib.saturating_mul(1024 * 1024))
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Parses the environment variable's value.
    pub fn parse_mib(value: &str) -> Result<Self, InvalidBudget> {
        match value.trim().parse::<usize>() {
            Ok(mib) if mib >= 1 => Ok(Self::from_mib(mib)),
            _ => Err(InvalidBudget(value.to_string())),
        }
    }

    /// The budget in force: set in code, else from the environment, else the default.
    /// An unparsable environment value is reported once and the default used.
    pub fn current() -> Self {
        match GLOBAL_BYTES.load(Ordering::Relaxed) {
            0 => *FROM_ENV.get_or_init(|| match std::env::var(Self::ENV) {
                Ok(value) => Self::parse_mib(&value).unwrap_or_else(|err| {
                    tracing::warn!(%err, "using the default convolution workspace budget");
                    Self::default()
                }),
                Err(_) => Self::default(),
            }),
            bytes => Self::from_bytes(bytes),
        }
    }

    /// Sets the budget for every later convolution in this process.
    pub fn set_global(budget: ConvBudget) {
        GLOBAL_BYTES.store(budget.bytes, Ordering::Relaxed);
    }

    /// Images per chunk when each image needs `bytes_per_image` of workspace: as many as
    /// fit, at least 1, at most `batch`.
    pub fn chunk(&self, batch: usize, bytes_per_image: usize) -> usize {
        (self.bytes / bytes_per_image.max(1)).clamp(1, batch.max(1))
    }
}

impl Default for ConvBudget {
    fn default() -> Self {
        Self::from_mib(Self::DEFAULT_MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_is_what_fits_bounded_by_the_batch_and_at_least_one() {
        let budget = ConvBudget::from_mib(8);
        assert_eq!(budget.chunk(64, 1024 * 1024), 8);
        assert_eq!(budget.chunk(4, 1024 * 1024), 4);
        assert_eq!(budget.chunk(64, 100 * 1024 * 1024), 1);
        assert_eq!(budget.chunk(64, 3 * 1024 * 1024), 2);
    }

    #[test]
    fn environment_values_are_validated() {
        assert_eq!(ConvBudget::parse_mib(" 8 "), Ok(ConvBudget::from_mib(8)));
        assert!(ConvBudget::parse_mib("0").is_err());
        assert!(ConvBudget::parse_mib("lots").is_err());
        assert!(ConvBudget::parse_mib("-3").is_err());
    }
}
