//! The op traits of [`Lean`](super::Lean), one file each, every method forwarded to `B`.
//!
//! Nothing is left to a trait's default body: `Backend` impls override defaults with their
//! own kernels (fused, vendor, batched), and a default on `Lean<B>` would silently replace
//! that kernel with Burn's generic composition. Counted against Burn 0.21.0's traits:
//!
//! | trait            | methods |
//! |------------------|---------|
//! | `FloatTensorOps` | 124     |
//! | `IntTensorOps`   | 104     |
//! | `BoolTensorOps`  | 39      |
//! | `ModuleOps`      | 56      |
//! | `ActivationOps`  | 14      |
//! | `QTensorOps`     | 80      |
//! | `TransactionOps` | 1       |
//!
//! A Burn upgrade that adds a method compiles without complaint if the new method has a
//! default body, so the counts above are worth re-checking on every upgrade.

mod forward;

mod activation;
mod bool;
mod float;
mod int;
mod module;
mod quantized;
mod transaction;
