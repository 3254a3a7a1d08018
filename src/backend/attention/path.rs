//! Which attention `Lean<B>` trains with: the inner backend's fused kernels, or blocks of
//! query rows whose products run on `Lean`'s GEMMs.

use core::fmt;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// How `Lean<B>` computes the training forward and backward of
/// [`lean_attention`](super::lean_attention).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// The inner backend's fused kernels (leanburn-kernels' `attention` on the CubeCL
    /// backends: no `T × T` buffer, scalar f32 products) where it has them for the inputs,
    /// the blocks of [`AttentionPath::Gemm`] elsewhere. The default where the GEMMs are not
    /// the vendor's (every backend but CUDA with cuBLASLt).
    Kernels,
    /// Blocks of query rows within [`attention_workspace`](super::attention_workspace):
    /// the scores, `P·V` and the backward's products on [`GemmOps::gemm`](crate::backend::GemmOps::gemm)
    /// (cuBLASLt's tensor cores on CUDA), each block's softmax and log-sum-exp one op
    /// between them (`AttentionOps::lean_attention_block_softmax`: a kernel on the CubeCL
    /// backends, one pass per row on Flex), in f32 for half-precision inputs. Each block's
    /// transient buffers are score-sized: a larger workspace means fewer, larger GEMMs.
    /// The default where the GEMMs are the vendor's.
    Gemm,
}

impl fmt::Display for AttentionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kernels => "the fused attention kernels",
            Self::Gemm => "attention in blocks on Lean's GEMMs",
        })
    }
}

const UNSET: u8 = 0;
const KERNELS: u8 = 1;
const GEMM: u8 = 2;

/// What [`set_attention_path`] or the environment chose; [`UNSET`]: the device decides.
static CHOSEN: AtomicU8 = AtomicU8::new(UNSET);
static ENVIRONMENT: OnceLock<u8> = OnceLock::new();

/// Sets `Lean`'s [`AttentionPath`] for the whole process, on every device (by default each
/// device gets the one [`attention_path`] names).
pub fn set_attention_path(path: AttentionPath) {
    CHOSEN.store(if path == AttentionPath::Gemm { GEMM } else { KERNELS }, Ordering::Relaxed);
}

/// `Lean`'s [`AttentionPath`] on a device whose GEMMs are the vendor's (`vendor_gemm`:
/// cuBLASLt on CUDA) or not: the one set with [`set_attention_path`] or by
/// `LEANBURN_ATTENTION=gemm|kernels`, else [`AttentionPath::Gemm`] where the GEMMs are the
/// vendor's (on an H200, 2026-11-28: a gpt2-small step's attention 52 ms on cuBLASLt's
/// tensor cores against 79 in the scalar kernels; docs/benchmarks.md) and
/// [`AttentionPath::Kernels`] elsewhere.
pub fn attention_path(vendor_gemm: bool) -> AttentionPath {
    let chosen = match CHOSEN.load(Ordering::Relaxed) {
        UNSET => *ENVIRONMENT.get_or_init(|| match std::env::var("LEANBURN_ATTENTION") {
            Ok(value) if value.eq_ignore_ascii_case("gemm") => GEMM,
            Ok(value) if value.eq_ignore_ascii_case("kernels") => KERNELS,
            _ => UNSET,
        }),
        chosen => chosen,
    };
    resolve(chosen, vendor_gemm)
}

/// The path `chosen` names, else the device's default.
fn resolve(chosen: u8, vendor_gemm: bool) -> AttentionPath {
    match chosen {
        GEMM => AttentionPath::Gemm,
        KERNELS => AttentionPath::Kernels,
        _ if vendor_gemm => AttentionPath::Gemm,
        _ => AttentionPath::Kernels,
    }
}

#[cfg(test)]
mod tests {
    use super::{resolve, AttentionPath, GEMM, KERNELS, UNSET};

    #[test]
    fn the_blocks_on_the_gemms_are_the_default_only_where_the_gemms_are_the_vendors() {
        assert_eq!(resolve(UNSET, true), AttentionPath::Gemm);
        assert_eq!(resolve(UNSET, false), AttentionPath::Kernels, "control: CubeCL's own matmul keeps the kernels");
        // A choice wins on every device.
        for vendor_gemm in [true, false] {
            assert_eq!(resolve(KERNELS, vendor_gemm), AttentionPath::Kernels);
            assert_eq!(resolve(GEMM, vendor_gemm), AttentionPath::Gemm);
        }
    }
}
