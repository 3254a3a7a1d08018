//! The GEMMs of `Lean<B>`: every float matmul, the linear layers forward and backward, and
//! the LM head's loss, on the vendor's library where there is one.
//!
//! On CUDA, CubeCL 0.10's matmul (no Hopper `wgmma`; Burn 0.21 pins it) reaches about a
//! third of cuBLAS (70–95 against 226–314 TFLOP/s on an H200), and its autotuning was
//! most of gpt2-small's cold start. So on CUDA [`GemmOps::gemm`] runs cuBLASLt through
//! cudarc (loaded at run time: `cublaslt.rs`): Burn's row-major strided batches mapped
//! onto cuBLASLt's column-major layouts without copies where the strides allow
//! (`layout.rs`), f32 inputs computed as TF32 unless [`set_f32_gemm`] says strict, bf16 and
//! f16 with f32 accumulation. Where the library cannot be loaded, or is turned off
//! ([`set_vendor_gemm`], `LEANBURN_GEMM=cubecl`), and on every other backend, `gemm` is the
//! backend's own `float_matmul`, as before.
//!
//! CubeCL 0.10 launches its kernels on a stream no public API returns. With the `cuda-stream`
//! feature (default) the workspace's patched cubecl-cuda (`vendor/cubecl-cuda/PATCH.md`)
//! says which, and cuBLASLt is enqueued on it like one of CubeCL's kernels: no host wait.
//! Without it, or with `LEANBURN_GEMM_ORDER=host` ([`set_gemm_order`]), each call waits for
//! CubeCL's stream, runs on a stream of its own and waits for that before it returns (two
//! host synchronisations per GEMM: about a quarter of a gpt2-small step on an H200).

mod cube;
#[cfg(feature = "cuda")]
mod cublaslt;
mod fused;
pub(crate) mod layout;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(feature = "cuda")]
mod tune;

use core::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape, TensorMetadata};

use super::switch::{env_is, Switch};

/// A backend whose float matmul may run on the vendor's GEMM; see the module docs (`src/backend/gemm/mod.rs`).
pub trait GemmOps: Backend {
    /// Whether [`Self::gemm`] on `device` runs the vendor's library (cuBLASLt) rather than
    /// [`float_matmul`](burn_backend::ops::FloatTensorOps::float_matmul).
    fn vendor_gemm(device: &Self::Device) -> bool {
        let _ = device;
        false
    }

    /// Burn's `float_matmul` (`[.., m, k] · [.., k, n]`, batch dimensions broadcast): the
    /// same result, on the vendor's GEMM where [`Self::vendor_gemm`].
    fn gemm(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_matmul(lhs, rhs)
    }

    /// `op(lhs) · op(rhs)`, `op` the transpose of the last two dimensions where `transposed`
    /// (`[lhs, rhs]`) says: [`Self::gemm`] on the transposed views. Where a fused backend
    /// queues its GEMMs (CUDA), the views are taken inside the queued operation, so a
    /// transposed operand costs no operation of its own on the fusion stream.
    fn gemm_transposed(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, transposed: [bool; 2]) -> FloatTensor<Self> {
        let [lhs, rhs] = transposed_where::<Self>([lhs, rhs], transposed);
        Self::gemm(lhs, rhs)
    }

    /// `lhs · rhs + bias`, `bias` `[n]` added to every row of the product: [`Self::gemm`]
    /// then Burn's add, or, where [`gemm_fused_adds`] and cuBLASLt take the operands,
    /// one cuBLASLt call that adds the bias in its epilogue.
    fn gemm_bias(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        let rank = lhs.shape().num_dims();
        Self::float_add(Self::gemm(lhs, rhs), leading_ones::<Self>(bias, rank))
    }

    /// `sum + lhs · rhs` (`sum` of the product's shape): [`Self::gemm`] then Burn's add, or,
    /// where [`gemm_fused_adds`] and cuBLASLt take the operands, one cuBLASLt call reading
    /// `sum` as its `C` with `β = 1`.
    fn gemm_accumulate(sum: FloatTensor<Self>, lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_add(sum, Self::gemm(lhs, rhs))
    }
}

impl GemmOps for NdArray {}

impl GemmOps for Flex {}

/// Autodiff's matmul node: its forward and backward products are the inner backend's
/// `float_matmul` (on `Lean`, [`GemmOps::gemm`]).
impl<B: GemmOps, C: CheckpointStrategy> GemmOps for Autodiff<B, C> {}

/// [`GemmOps::gemm`] on `Tensor`s.
pub(crate) fn gemm<B: GemmOps, const D: usize>(lhs: Tensor<B, D>, rhs: Tensor<B, D>) -> Tensor<B, D> {
    let product = B::gemm(lhs.into_primitive().tensor(), rhs.into_primitive().tensor());
    Tensor::from_primitive(TensorPrimitive::Float(product))
}

/// [`GemmOps::gemm_transposed`] on `Tensor`s.
pub(crate) fn gemm_transposed<B: GemmOps, const D: usize>(
    lhs: Tensor<B, D>,
    rhs: Tensor<B, D>,
    transposed: [bool; 2],
) -> Tensor<B, D> {
    let product = B::gemm_transposed(lhs.into_primitive().tensor(), rhs.into_primitive().tensor(), transposed);
    Tensor::from_primitive(TensorPrimitive::Float(product))
}

/// `tensors` with their last two dimensions swapped where `transposed` says.
fn transposed_where<B: Backend>(tensors: [FloatTensor<B>; 2], transposed: [bool; 2]) -> [FloatTensor<B>; 2] {
    let mut flags = transposed.into_iter();
    tensors.map(|tensor| match flags.next() {
        Some(true) => {
            let rank = tensor.shape().num_dims();
            B::float_swap_dims(tensor, rank - 2, rank - 1)
        }
        _ => tensor,
    })
}

/// [`GemmOps::gemm_accumulate`] on `Tensor`s: `sum + lhs · rhs`.
pub(crate) fn gemm_accumulate<B: GemmOps, const D: usize>(
    sum: Tensor<B, D>,
    lhs: Tensor<B, D>,
    rhs: Tensor<B, D>,
) -> Tensor<B, D> {
    let [sum, lhs, rhs] = [sum, lhs, rhs].map(|tensor| tensor.into_primitive().tensor());
    Tensor::from_primitive(TensorPrimitive::Float(B::gemm_accumulate(sum, lhs, rhs)))
}

/// Burn's `linear` (`x · weight + bias`, `weight` `[d_in, d_out]`) with its product on
/// [`GemmOps::gemm`].
pub(crate) fn linear<B: GemmOps>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
) -> FloatTensor<B> {
    let rank = x.shape().num_dims();
    let weight = leading_ones::<B>(weight, rank);
    match bias {
        Some(bias) => B::gemm_bias(x, weight, bias),
        None => B::gemm(x, weight),
    }
}

/// Burn's `linear_x_backward`: `output_grad · weightᵀ`, the transpose a view.
pub(crate) fn linear_x_backward<B: GemmOps>(weight: FloatTensor<B>, output_grad: FloatTensor<B>) -> FloatTensor<B> {
    let rank = output_grad.shape().num_dims();
    B::gemm_transposed(output_grad, leading_ones::<B>(weight, rank), [false, true])
}

/// Burn's `linear_weight_backward`: `xᵀ · output_grad` over all leading dimensions at once
/// (`[d_in, d_out]`), one GEMM where Burn's default multiplies per batch entry and sums.
pub(crate) fn linear_weight_backward<B: GemmOps>(x: FloatTensor<B>, output_grad: FloatTensor<B>) -> FloatTensor<B> {
    let rows = |tensor: FloatTensor<B>| {
        let shape = tensor.shape();
        let width = shape[shape.num_dims() - 1];
        B::float_reshape(tensor, Shape::new([shape.num_elements() / width.max(1), width]))
    };
    B::gemm_transposed(rows(x), rows(output_grad), [true, false])
}

/// `tensor` with size-1 dimensions put in front up to `rank`.
pub(super) fn leading_ones<B: Backend>(tensor: FloatTensor<B>, rank: usize) -> FloatTensor<B> {
    let shape = tensor.shape();
    if shape.num_dims() >= rank {
        return tensor;
    }
    let mut dims = vec![1; rank - shape.num_dims()];
    dims.extend(shape.iter().copied());
    B::float_reshape(tensor, Shape::from(dims))
}

/// How f32 GEMMs compute on the vendor's library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum F32Gemm {
    /// TF32 tensor cores (10-bit mantissa products, f32 accumulation): what CubeCL's own
    /// matmul does on CUDA and PyTorch's `allow_tf32`. The default.
    Tf32,
    /// f32 products throughout (PyTorch's default `matmul` precision "highest").
    Strict,
}

impl fmt::Display for F32Gemm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tf32 => "TF32",
            Self::Strict => "strict f32",
        })
    }
}

static VENDOR: Switch = Switch::unset();
static STRICT: Switch = Switch::unset();
static HOST_ORDER: Switch = Switch::unset();
static TUNE: Switch = Switch::unset();
static FUSED_ADDS: Switch = Switch::unset();

/// Folds the adds after two kinds of GEMM into cuBLASLt's call, process-wide: the linear
/// layers' biases ([`GemmOps::gemm_bias`], `CUBLASLT_EPILOGUE_BIAS`) and the LM head loss's
/// weight gradient summed over its chunks ([`GemmOps::gemm_accumulate`], `β = 1`), each
/// where a kernel after the GEMM added them. Off by default (`LEANBURN_GEMM_ADDS=fused`
/// turns it on) until it has been timed on a GPU; it changes nothing where the GEMMs are
/// not cuBLASLt's.
pub fn set_gemm_fused_adds(enabled: bool) {
    FUSED_ADDS.set(enabled);
}

/// Whether cuBLASLt adds the biases and the loss's gradient sums (see
/// [`set_gemm_fused_adds`]).
pub fn gemm_fused_adds() -> bool {
    FUSED_ADDS.get(|| env_is("LEANBURN_GEMM_ADDS", "fused"))
}

/// Whether a new cuBLASLt plan times the heuristic's candidates and keeps the fastest
/// (`LEANBURN_GEMM_TUNE=1`; off by default, the heuristic's first choice: not yet measured).
pub(crate) fn gemm_tuning() -> bool {
    TUNE.get(|| env_is("LEANBURN_GEMM_TUNE", "1"))
}

/// How a cuBLASLt GEMM is ordered with CubeCL's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmOrder {
    /// Enqueued on CubeCL's own stream (the patched cubecl-cuda says which): no host wait.
    /// The default where the build has the `cuda-stream` feature.
    CubeclStream,
    /// A host wait for CubeCL's stream before, the GEMM on a stream of its own, a host wait
    /// for that after (`LEANBURN_GEMM_ORDER=host`; the only order without `cuda-stream`).
    HostWaits,
}

/// Sets how cuBLASLt GEMMs are ordered with CubeCL's kernels, process-wide; without the
/// `cuda-stream` feature every order is [`GemmOrder::HostWaits`].
pub fn set_gemm_order(order: GemmOrder) {
    HOST_ORDER.set(order == GemmOrder::HostWaits);
}

/// How cuBLASLt GEMMs are ordered with CubeCL's kernels now.
pub fn gemm_order() -> GemmOrder {
    if cfg!(feature = "cuda-stream") && !HOST_ORDER.get(|| env_is("LEANBURN_GEMM_ORDER", "host")) {
        GemmOrder::CubeclStream
    } else {
        GemmOrder::HostWaits
    }
}

impl fmt::Display for GemmOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CubeclStream => "on CubeCL's stream",
            Self::HostWaits => "with host waits",
        })
    }
}

/// Turns the vendor's GEMM on or off for the whole process (default on; off when the
/// environment has `LEANBURN_GEMM=cubecl`). Off, every GEMM is the backend's own matmul.
pub fn set_vendor_gemm(enabled: bool) {
    VENDOR.set(enabled);
}

/// Sets how f32 GEMMs compute on the vendor's library, process-wide (default TF32;
/// `LEANBURN_F32_GEMM=strict` in the environment makes it strict).
pub fn set_f32_gemm(precision: F32Gemm) {
    STRICT.set(precision == F32Gemm::Strict);
}

/// How f32 GEMMs compute on the vendor's library now.
pub fn f32_gemm() -> F32Gemm {
    if STRICT.get(|| env_is("LEANBURN_F32_GEMM", "strict")) {
        F32Gemm::Strict
    } else {
        F32Gemm::Tf32
    }
}

/// Whether the vendor's GEMM is switched on (it may still be unavailable).
pub(crate) fn vendor_gemm_enabled() -> bool {
    VENDOR.get(|| !env_is("LEANBURN_GEMM", "cubecl"))
}

static OPERAND_COPIES: AtomicUsize = AtomicUsize::new(0);

/// Operands copied contiguous for cuBLASLt so far, process-wide: where it multiplies, the
/// copies its call made (an operand with neither a unit row nor a unit column stride, or
/// whose batch does not step through one stride, as attention's heads split from each
/// row); for `Lean`'s GEMMs on CubeCL backends without it (CubeCL's matmul, e.g. on wgpu),
/// the copies its layouts would have needed for the same products. A diagnostic of a step's memory
/// traffic beside its kernels: `gpt2_parts --parts kernels` prints it per step.
pub fn gemm_operand_copies() -> usize {
    OPERAND_COPIES.load(Ordering::Relaxed)
}

static VENDOR_PRODUCTS: AtomicUsize = AtomicUsize::new(0);

/// Products the vendor's library (cuBLASLt) has computed so far, process-wide: one per call
/// of it, none for a product that fell back to CubeCL's matmul (a layout, type or addend
/// it does not take) nor where it is off or absent. What tells a check on a GPU which of
/// its products reached the vendor, where comparing bits with CubeCL's cannot (two GEMMs
/// accumulating in f32 may round a reduced-precision product to the same bits).
pub fn vendor_gemm_products() -> usize {
    VENDOR_PRODUCTS.load(Ordering::Relaxed)
}

/// Counts one more [`vendor_gemm_products`].
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn count_vendor_product() {
    VENDOR_PRODUCTS.fetch_add(1, Ordering::Relaxed);
}

/// Counts `copies` more [`gemm_operand_copies`].
pub(crate) fn count_operand_copies(copies: usize) {
    OPERAND_COPIES.fetch_add(copies, Ordering::Relaxed);
    #[cfg(test)]
    tests::COPIES_HERE.with(|here| here.set(here.get() + copies));
}

/// Which GEMM leanburn's ops run on CUDA devices, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VendorGemm {
    /// cuBLASLt, at this version (`cublasLtGetVersion`: 130002 is 13.0.2).
    CublasLt {
        version: usize,
        f32: F32Gemm,
        order: GemmOrder,
        /// Whether it adds the linear layers' biases and the loss's gradient sums
        /// ([`set_gemm_fused_adds`]).
        fused_adds: bool,
    },
    /// CubeCL's matmul, for this reason.
    CubeCl(String),
}

impl fmt::Display for VendorGemm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CublasLt { version, f32, order, fused_adds } => write!(
                f,
                "Lean's GEMMs on cuBLASLt {}.{}.{} (f32 as {f32}, {order}{})",
                version / 10_000,
                version / 100 % 100,
                version % 100,
                if *fused_adds { ", adding the biases and the loss's gradient sums" } else { "" }
            ),
            Self::CubeCl(why) => write!(f, "Lean's GEMMs on CubeCL's matmul ({why})"),
        }
    }
}

/// Which GEMM CUDA devices get: cuBLASLt where it loads and is switched on.
pub fn vendor_gemm() -> VendorGemm {
    if !vendor_gemm_enabled() {
        return VendorGemm::CubeCl("cuBLASLt turned off: LEANBURN_GEMM=cubecl or set_vendor_gemm(false)".into());
    }
    #[cfg(feature = "cuda")]
    {
        match cublaslt::library() {
            Ok(version) => VendorGemm::CublasLt {
                version: *version,
                f32: f32_gemm(),
                order: gemm_order(),
                fused_adds: gemm_fused_adds(),
            },
            Err(why) => VendorGemm::CubeCl(why.clone()),
        }
    }
    #[cfg(not(feature = "cuda"))]
    VendorGemm::CubeCl("this build has no CUDA support (feature `cuda` off)".into())
}
