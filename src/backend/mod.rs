//! `Lean<B>`: a backend that is `B` in every respect, so that leanburn can swap in its own
//! kernels one op at a time.
//!
//! Why a backend and not a module: Burn's modules call `B::conv2d` and friends through
//! the `Backend` trait, and `Autodiff<B>` calls `B::conv2d_x_backward` /
//! `B::conv2d_weight_backward` for the gradients. Replacing those calls is only possible
//! by owning the backend type. `Lean<B>` wraps any backend, keeps `B`'s tensor primitives,
//! device and element types unchanged, and forwards every op, so `Autodiff<Lean<Cuda>>` is
//! a drop-in for `Autodiff<Cuda>`: same models, same optimisers, same records, with the
//! ops leanburn cares about (the 2-D convolutions, see `ops/module.rs`) in one place.
//!
//! Because the primitives are `B`'s own, tensors need no conversion between `Lean<B>` and
//! `B`; only the few structs generic over the backend (`TensorPrimitive<B>`,
//! `MaxPool2dWithIndices<B>`, `TransactionPrimitive<B>`, ...) are rebuilt, in the op files
//! that return them.
//!
//! Not forwarded: `burn_backend::distributed::DistributedBackend`. It exists only under
//! Burn's non-default `distributed` feature, which this crate does not enable; with that
//! feature on, `Autodiff<Lean<B>>` would need `Lean<B>: DistributedBackend` as well.

use core::fmt;
use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, BackendTypes, DType, DTypeUsageSet, ExecutionError, TensorData};

use crate::memory::{MemoryProbe, MemorySample};

/// Runs `$body` with `$F` the Rust element type of a float `DType` the kernels are compiled
/// for (see [`has_kernels`]).
macro_rules! with_float_type {
    ($dtype:expr, $F:ident => $body:expr) => {
        match $dtype {
            burn_backend::DType::F32 => {
                type $F = f32;
                $body
            }
            burn_backend::DType::F16 => {
                type $F = half::f16;
                $body
            }
            burn_backend::DType::BF16 => {
                type $F = half::bf16;
                $body
            }
            other => unreachable!("no leanburn kernel for {other:?}"),
        }
    };
}

/// Whether leanburn's kernels are compiled for this element type; others take the
/// composed path.
pub(crate) fn has_kernels(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// `tensor` as the element-wise kernels read it: contiguous and of `dtype` (a copy only
/// where it is not).
pub(crate) fn contiguous_of<R: burn_cubecl::CubeRuntime>(
    tensor: burn_cubecl::tensor::CubeTensor<R>,
    dtype: DType,
) -> burn_cubecl::tensor::CubeTensor<R> {
    let tensor = if tensor.dtype == dtype { tensor } else { burn_cubecl::kernel::cast(tensor, dtype) };
    if tensor.is_contiguous() {
        tensor
    } else {
        burn_cubecl::kernel::into_contiguous(tensor)
    }
}

mod attention;
mod bias_grad;
mod budget;
mod conv;
mod cpu_rows;
mod custom_op;
mod embedding;
mod gelu;
pub(crate) mod gemm;
mod layer_norm;
mod linear;
mod lm_head_loss;
mod ops;
pub(crate) mod optimizer;
mod residual;
mod switch;

pub(crate) use attention::split_packed_heads;
pub use attention::{
    attention_path, attention_workspace, lean_attention, lean_attention_packed, set_attention_path,
    set_attention_workspace, AttentionOps, AttentionPath, DEFAULT_ATTENTION_WORKSPACE_BYTES,
};
pub use bias_grad::BiasGradOps;
pub use budget::{ConvBudget, InvalidBudget};
pub use conv::{conv2d_plan, conv_transpose2d_plan, ChunkedConv, ConvPlan};
pub use embedding::EmbeddingOps;
pub use gelu::{bias_gelu, exact_gelu, gelu_derivative, GeluOps};
pub(crate) use gemm::gemm;
pub use gemm::{
    f32_gemm, gemm_fused_adds, gemm_operand_copies, gemm_order, set_f32_gemm, set_gemm_fused_adds, set_gemm_order,
    set_vendor_gemm, vendor_gemm, vendor_gemm_products, F32Gemm, GemmOps, GemmOrder, VendorGemm,
};
pub use layer_norm::{layer_norm, LayerNormOps};
pub(crate) use linear::linear;
pub use linear::{LinearGrads, LinearOps};
pub use lm_head_loss::LmHeadLossOps;
pub(crate) use lm_head_loss::{lm_head_loss, lm_head_token_losses, total as lm_head_loss_total};
pub use optimizer::{AdamWParam, AdamWStep, OptimizerOps};
pub use residual::{residual_linear, ResidualOps};

/// A backend that forwards every op to `B`: the base leanburn replaces ops on.
///
/// Use it under autodiff as `Autodiff<Lean<B>>`; see the [module docs](self).
pub struct Lean<B>(PhantomData<B>);

/// `Lean` over Burn's default CUDA backend (`Fusion<CubeBackend<CudaRuntime, ..>>`).
#[cfg(feature = "cuda")]
pub type LeanCuda = Lean<burn::backend::Cuda>;

/// `Lean` over Burn's default wgpu backend.
pub type LeanWgpu = Lean<burn::backend::Wgpu>;

// Written by hand: derives would require `B: Clone` / `B: Default` / `B: Debug`.
impl<B> Clone for Lean<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Lean<B> {}

impl<B> Default for Lean<B> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<B> fmt::Debug for Lean<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lean<{}>", core::any::type_name::<B>())
    }
}

impl<B: Backend> BackendTypes for Lean<B> {
    type Device = B::Device;

    type FloatTensorPrimitive = B::FloatTensorPrimitive;
    type FloatElem = B::FloatElem;

    type IntTensorPrimitive = B::IntTensorPrimitive;
    type IntElem = B::IntElem;

    type BoolTensorPrimitive = B::BoolTensorPrimitive;
    type BoolElem = B::BoolElem;

    type QuantizedTensorPrimitive = B::QuantizedTensorPrimitive;
}

impl<B: ChunkedConv> Backend for Lean<B> {
    fn ad_enabled(device: &Self::Device) -> bool {
        B::ad_enabled(device)
    }

    fn memory_persistent_allocations<Output: Send, Input: Send, Func: Fn(Input) -> Output + Send>(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        B::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        B::memory_cleanup(device)
    }

    // Wrapped, so logs and memory reports say which stack actually ran.
    fn name(device: &Self::Device) -> String {
        format!("lean<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        B::staging(data, device)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        B::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        B::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }
}

// `DeviceChoice::run` needs memory telemetry on the training stack and its inner backend.
impl<B: MemoryProbe + ChunkedConv> MemoryProbe for Lean<B> {
    fn memory_sample(device: &Self::Device) -> Option<MemorySample> {
        B::memory_sample(device)
    }

    fn release_unused(device: &Self::Device) {
        B::release_unused(device)
    }

    fn pool_reader(device: &Self::Device) -> Option<crate::memory::PoolReader> {
        B::pool_reader(device)
    }
}

/// `B`'s GEMM (the vendor's where `B` has it): every matmul of `Lean` goes there.
impl<B: ChunkedConv> GemmOps for Lean<B> {
    fn vendor_gemm(device: &Self::Device) -> bool {
        B::vendor_gemm(device)
    }

    fn gemm(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        B::gemm(lhs, rhs)
    }

    fn gemm_transposed(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, transposed: [bool; 2]) -> FloatTensor<Self> {
        B::gemm_transposed(lhs, rhs, transposed)
    }

    fn gemm_bias(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        B::gemm_bias(lhs, rhs, bias)
    }

    fn gemm_accumulate(sum: FloatTensor<Self>, lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        B::gemm_accumulate(sum, lhs, rhs)
    }
}

/// What leanburn's transformer models need of a backend beyond Burn's ops: attention whose
/// backward keeps no scores, GELU with its exact derivative, LayerNorm whose backward is
/// one op, the residual add after a linear layer as one op, and the LM head's loss with its
/// gradients chunk by chunk. Every backend leanburn runs (Flex, ndarray, CubeCL, Fusion,
/// `Lean`) and `Autodiff` over them has all five.
pub trait TransformerOps: AttentionOps + GeluOps + LayerNormOps + LmHeadLossOps + ResidualOps {}

impl<B: AttentionOps + GeluOps + LayerNormOps + LmHeadLossOps + ResidualOps> TransformerOps for B {}
