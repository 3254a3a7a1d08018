//! Models leanburn ships: small, deterministic ones for the examples and memory tests.

mod small_cnn;

pub use small_cnn::{SmallCnn, SmallCnnConfig};
