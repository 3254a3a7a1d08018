//! cuBLASLt on CubeCL's CUDA buffers, through cudarc (loaded at run time).
//!
//! One call: the operands' layout ([`gemm_layout`], an operand copied contiguous only where
//! its strides allow no layout), a contiguous output and the algorithm's workspace from
//! CubeCL's pool, their device pointers (`get_resource`, offsets included), then
//! `cublasLtMatmul` on CubeCL's own stream (the patched cubecl-cuda's `GpuResource::stream`:
//! ordered after the operands' producers and before the output's users, as a CubeCL kernel
//! is), or, in [`GemmOrder::HostWaits`], a wait for CubeCL's stream, the product on this
//! device's own stream and a wait for that. The descriptors and the heuristic's algorithm
//! are kept per layout, type and pointer alignment, so a training step's GEMMs ask the
//! heuristic once each.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use burn_backend::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::cuda::CudaRuntime;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::result as driver;
use cudarc::driver::sys as driver_sys;

use super::layout::{gemm_layout, output_shape, GemmLayout, LayoutRefusal, Operand, View};
use super::{
    count_operand_copies, count_vendor_product, f32_gemm, gemm_order, gemm_tuning, tune, vendor_gemm_enabled, F32Gemm,
    GemmOrder,
};

/// The most workspace one GEMM's algorithm may take (cuBLAS's recommendation for Hopper).
const MAX_WORKSPACE_BYTES: usize = 32 << 20;

/// The alignment, in bytes, asked of a bias the epilogue reads (others take the GEMM and
/// an add): what other users of the epilogue found needed (Marian's `prod.cpp`).
const BIAS_ALIGNMENT: u32 = 16;

/// The library's version, or why it cannot be used; probed once.
pub(super) fn library() -> &'static Result<usize, String> {
    static LIBRARY: OnceLock<Result<usize, String>> = OnceLock::new();
    LIBRARY.get_or_init(|| probe(&cudarc::get_lib_name_candidates("cublasLt")))
}

/// Loads the first of `names` that loads and asks it for its version: cudarc loads the
/// same candidates, in the same order, when the first GEMM runs.
pub(super) fn probe(names: &[String]) -> Result<usize, String> {
    type GetVersion = unsafe extern "C" fn() -> usize;
    let loaded = names.iter().find_map(|name| {
        // SAFETY: loading a shared library runs its initialisers; cuBLASLt's are the vendor's.
        unsafe { libloading::Library::new(name) }.ok().map(|library| (name, library))
    });
    let Some((name, library)) = loaded else {
        return Err(format!(
            "cuBLASLt not found (tried {}); add the CUDA toolkit's lib64 directory, or pip's \
             nvidia/cu13/lib, to LD_LIBRARY_PATH",
            names.join(", ")
        ));
    };
    // SAFETY: `cublasLtGetVersion` takes nothing and returns a size_t.
    let version = unsafe { library.get::<GetVersion>(b"cublasLtGetVersion\0").map(|get| get()) };
    version.map_err(|_| format!("{name} loaded but has no cublasLtGetVersion: not cuBLASLt"))
}

/// Whether [`gemm`] runs cuBLASLt for tensors of runtime `R`.
pub(super) fn serves<R: CubeRuntime>() -> bool {
    core::any::TypeId::of::<R>() == core::any::TypeId::of::<CudaRuntime>() && vendor_gemm_enabled() && library().is_ok()
}

/// `lhs · rhs` on cuBLASLt, or the operands back where it does not serve them (another
/// runtime, the library absent or off, an element type it is not used for, a batch that
/// does not fold into one stride).
pub(super) fn gemm<R: CubeRuntime>(lhs: CubeTensor<R>, rhs: CubeTensor<R>) -> Result<CubeTensor<R>, Refused<R>> {
    if !serves::<R>() || lhs.dtype != rhs.dtype || DataKind::of(lhs.dtype).is_none() {
        return Err(Box::new((lhs, rhs)));
    }
    let (lhs, rhs) = (runtime_cast::<R, CudaRuntime>(lhs), runtime_cast::<R, CudaRuntime>(rhs));
    match cuda_gemm(lhs, rhs, None) {
        Ok(product) => Ok(runtime_cast::<CudaRuntime, R>(product)),
        Err(operands) => {
            let (lhs, rhs, _) = *operands;
            Err(Box::new((runtime_cast::<CudaRuntime, R>(lhs), runtime_cast::<CudaRuntime, R>(rhs))))
        }
    }
}

/// `lhs · rhs + bias` (`bias` `[n]`, every row) in one cuBLASLt call, the bias added in
/// its epilogue (`CUBLASLT_EPILOGUE_BIAS`), or the operands back where that call does not
/// take them: as [`gemm`], and also a bias of another type, not contiguous, not aligned
/// to 16 bytes, or a batched product (the bias is added to one matrix).
pub(super) fn gemm_bias<R: CubeRuntime>(
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
    bias: CubeTensor<R>,
) -> Result<CubeTensor<R>, RefusedWithAddend<R>> {
    let columns = rhs.meta.shape().as_slice().last().copied();
    let takes = serves::<R>()
        && lhs.dtype == rhs.dtype
        && bias.dtype == lhs.dtype
        && DataKind::of(lhs.dtype).is_some()
        && bias.meta.shape().as_slice().len() == 1
        && Some(bias.meta.shape().as_slice()[0]) == columns
        && bias.is_contiguous();
    if !takes {
        return Err(Box::new((lhs, rhs, bias)));
    }
    gemm_adding(lhs, rhs, bias, Extra::Bias)
}

/// `sum + lhs · rhs` (`sum` contiguous, of the product's shape) in one cuBLASLt call,
/// `sum` read as its `C` with `β = 1`, or the operands back (`sum` first) where that call
/// does not take them: as [`gemm`], and also a `sum` of another type, shape or layout.
pub(super) fn gemm_accumulate<R: CubeRuntime>(
    sum: CubeTensor<R>,
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
) -> Result<CubeTensor<R>, RefusedWithAddend<R>> {
    let shape = output_shape(lhs.meta.shape().as_slice(), rhs.meta.shape().as_slice());
    let takes = serves::<R>()
        && lhs.dtype == rhs.dtype
        && sum.dtype == lhs.dtype
        && DataKind::of(lhs.dtype).is_some()
        && shape.as_deref() == Some(sum.meta.shape().as_slice())
        && sum.is_contiguous();
    if !takes {
        return Err(Box::new((sum, lhs, rhs)));
    }
    gemm_adding(lhs, rhs, sum, Extra::Sum).map_err(|operands| {
        let (lhs, rhs, sum) = *operands;
        Box::new((sum, lhs, rhs))
    })
}

/// `lhs · rhs` plus `addend` (as `extra` says) on cuBLASLt, or `(lhs, rhs, addend)` back.
fn gemm_adding<R: CubeRuntime>(
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
    addend: CubeTensor<R>,
    extra: fn(CubeTensor<CudaRuntime>) -> Extra,
) -> Result<CubeTensor<R>, RefusedWithAddend<R>> {
    let cast = runtime_cast::<R, CudaRuntime>;
    match cuda_gemm(cast(lhs), cast(rhs), Some(extra(cast(addend)))) {
        Ok(product) => Ok(runtime_cast::<CudaRuntime, R>(product)),
        Err(operands) => {
            let (lhs, rhs, extra) = *operands;
            let back = runtime_cast::<CudaRuntime, R>;
            Err(Box::new((back(lhs), back(rhs), back(extra.expect("an addend was given").tensor()))))
        }
    }
}

/// What a cuBLASLt call adds to its product.
enum Extra {
    /// `[n]`, every row, in the epilogue.
    Bias(CubeTensor<CudaRuntime>),
    /// Of the product's shape, as `C` with `β = 1`.
    Sum(CubeTensor<CudaRuntime>),
}

impl Extra {
    fn tensor(self) -> CubeTensor<CudaRuntime> {
        match self {
            Self::Bias(tensor) | Self::Sum(tensor) => tensor,
        }
    }

    fn kind(&self) -> AddendKind {
        match self {
            Self::Bias(_) => AddendKind::Bias,
            Self::Sum(_) => AddendKind::Sum,
        }
    }
}

/// The operands of a product cuBLASLt does not take, handed back.
pub(super) type Refused<R> = Box<(CubeTensor<R>, CubeTensor<R>)>;

/// The same for a product with a bias or a sum (in the order the caller gave them).
pub(super) type RefusedWithAddend<R> = Box<(CubeTensor<R>, CubeTensor<R>, CubeTensor<R>)>;

/// The operands handed back by [`cuda_gemm`], what it was to add with them.
type RefusedOperands = Box<(CubeTensor<CudaRuntime>, CubeTensor<CudaRuntime>, Option<Extra>)>;

/// `tensor` as a tensor of runtime `To`, which is its runtime (checked by the caller).
fn runtime_cast<From: CubeRuntime, To: CubeRuntime>(tensor: CubeTensor<From>) -> CubeTensor<To> {
    let any: Box<dyn Any> = Box::new(tensor);
    *any.downcast::<CubeTensor<To>>().expect("the runtimes were checked to be the same")
}

fn cuda_gemm(
    mut lhs: CubeTensor<CudaRuntime>,
    mut rhs: CubeTensor<CudaRuntime>,
    extra: Option<Extra>,
) -> Result<CubeTensor<CudaRuntime>, RefusedOperands> {
    let layout = loop {
        let lhs_view = View::new(lhs.meta.shape(), lhs.meta.strides());
        let rhs_view = View::new(rhs.meta.shape(), rhs.meta.strides());
        match gemm_layout(lhs_view, rhs_view) {
            Ok(layout) => break layout,
            Err(LayoutRefusal::LhsStrides | LayoutRefusal::LhsBatch) if !lhs.is_contiguous() => {
                count_operand_copies(1);
                lhs = into_contiguous(lhs)
            }
            Err(LayoutRefusal::RhsStrides | LayoutRefusal::RhsBatch) if !rhs.is_contiguous() => {
                count_operand_copies(1);
                rhs = into_contiguous(rhs)
            }
            Err(_) => return Err(Box::new((lhs, rhs, extra))),
        }
    };
    let shape = output_shape(lhs.meta.shape().as_slice(), rhs.meta.shape().as_slice())
        .expect("a layout was found, so the shapes multiply");
    let (client, device, dtype) = (lhs.client.clone(), lhs.device.clone(), lhs.dtype);
    let output = empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::from(shape), dtype);
    let pointer = |tensor: &CubeTensor<CudaRuntime>| {
        let resource = client.get_resource(tensor.handle.clone()).expect("cuBLASLt: CubeCL gives the buffer's address");
        (resource.resource().ptr, resource)
    };
    // The resources are held until the product is done: their buffers stay theirs.
    let (a, _a) = pointer(&rhs);
    let (b, _b) = pointer(&lhs);
    let (d, _d) = pointer(&output);
    let addend = extra.as_ref().map_or(AddendKind::None, Extra::kind);
    let extra_resource = extra.as_ref().map(|extra| match extra {
        Extra::Bias(tensor) | Extra::Sum(tensor) => pointer(tensor),
    });
    let e = extra_resource.as_ref().map_or(0, |(ptr, _)| *ptr);
    if addend == AddendKind::Bias && (layout.batch > 1 || alignment(e) < BIAS_ALIGNMENT) {
        return Err(Box::new((lhs, rhs, extra)));
    }
    let kind = DataKind::of(dtype).expect("checked by the caller");
    // C is D, or the sum: the heuristic is told the lesser alignment of the two.
    let c_and_d = if addend == AddendKind::Sum { alignment(d).min(alignment(e)) } else { alignment(d) };
    let key = PlanKey { layout, kind, f32: f32_gemm(), align: [alignment(a), alignment(b), c_and_d], addend };
    // The patched cubecl-cuda's `GpuResource::stream`: the stream CubeCL's kernels of this
    // thread run on (null where unknown).
    #[cfg(feature = "cuda-stream")]
    let cubecl_stream = _d.resource().stream;
    #[cfg(not(feature = "cuda-stream"))]
    let cubecl_stream: driver_sys::CUstream = std::ptr::null_mut();
    let on_cubecl_stream = gemm_order() == GemmOrder::CubeclStream && !cubecl_stream.is_null();
    if !on_cubecl_stream {
        // CubeCL's stream has the operands' producers on it: wait for them.
        cubecl::future::block_on(client.sync()).expect("CubeCL's stream failed before a cuBLASLt GEMM");
    }
    let context = device_context(device.index);
    let mut context = context.lock().expect("a cuBLASLt call panicked on this device");
    // Enqueued after the operands' producers, before the output's users; the buffers (the
    // workspace too) go back to CubeCL's pool for work on the same stream only.
    let stream = if on_cubecl_stream { cubecl_stream } else { context.stream };
    if addend != AddendKind::None && !context.can_plan(&key) {
        // No algorithm for this bias or sum: the GEMM and an add (its plan made here, so a
        // plan that adds is never tuned).
        return Err(Box::new((lhs, rhs, extra)));
    }
    if gemm_tuning() && !context.plans.contains_key(&key) {
        let scratch = client.empty(MAX_WORKSPACE_BYTES);
        let scratch = client.get_resource(scratch).expect("cuBLASLt: CubeCL gives the workspace's address");
        context.tune(&key, [a, b, d, e], scratch.resource().ptr, stream);
    }
    let plan = context.plan(&key);
    let workspace = (plan.workspace > 0).then(|| client.empty(plan.workspace));
    let workspace_ptr = workspace.as_ref().map_or((0, None), |handle| {
        let resource = client.get_resource(handle.clone()).expect("cuBLASLt: CubeCL gives the workspace's address");
        (resource.resource().ptr, Some(resource))
    });
    context.run(&plan, [a, b, d, e], workspace_ptr.0, stream);
    count_vendor_product();
    if !on_cubecl_stream {
        // SAFETY: the context's own stream, live for the life of the process.
        unsafe { driver::stream::synchronize(context.stream) }
            .unwrap_or_else(|err| panic!("a cuBLASLt GEMM failed: {err:?}"));
    }
    Ok(output)
}

/// An element type cuBLASLt computes here: inputs, output and scale types, compute type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum DataKind {
    F32,
    F16,
    Bf16,
}

impl DataKind {
    fn of(dtype: DType) -> Option<Self> {
        match dtype {
            DType::F32 => Some(Self::F32),
            DType::F16 => Some(Self::F16),
            DType::BF16 => Some(Self::Bf16),
            _ => None,
        }
    }

    fn data_type(self) -> sys::cudaDataType {
        match self {
            Self::F32 => sys::cudaDataType::CUDA_R_32F,
            Self::F16 => sys::cudaDataType::CUDA_R_16F,
            Self::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        }
    }

    /// f32 accumulation always; f32 products as TF32 unless strict.
    fn compute_type(self, f32: F32Gemm) -> sys::cublasComputeType_t {
        match (self, f32) {
            (Self::F32, F32Gemm::Tf32) => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            _ => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        }
    }
}

/// The largest power of two up to 256 that divides `address`: what the heuristic is told
/// the operand guarantees (it assumes 256 unless told).
fn alignment(address: u64) -> u32 {
    if address == 0 {
        256
    } else {
        1u32 << address.trailing_zeros().min(8)
    }
}

/// What one cached plan answers for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    layout: GemmLayout,
    kind: DataKind,
    f32: F32Gemm,
    /// Alignment of A, B, and C and D (the lesser of the two where C is not D).
    align: [u32; 3],
    /// What the call adds: a bias vector in the epilogue (`CUBLASLT_EPILOGUE_BIAS`) or a
    /// sum as `C` (`β = 1`), its address given per call.
    addend: AddendKind,
}

/// What a plan's calls add to the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum AddendKind {
    None,
    Bias,
    Sum,
}

/// The descriptors and the heuristic's algorithm for one [`PlanKey`].
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    /// What the calls add (a bias's address is set on `desc` per call).
    addend: AddendKind,
    /// A, B and D (C has D's layout: D itself with β = 0, or the sum).
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
    workspace: usize,
}

/// One device's handle, stream and plans.
struct DeviceContext {
    context: driver_sys::CUcontext,
    stream: driver_sys::CUstream,
    handle: sys::cublasLtHandle_t,
    plans: HashMap<PlanKey, Arc<Plan>>,
    /// Keys with a bias epilogue the heuristic had no algorithm for (those products take
    /// the GEMM and an add).
    refused: HashSet<PlanKey>,
}

// SAFETY: the raw handles are only used under the context's mutex, with the device's
// primary context made current first.
unsafe impl Send for DeviceContext {}
// SAFETY: a plan's descriptors are read-only once made, and only used under that mutex.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

/// The context of CUDA device `ordinal`, made at its first GEMM.
fn device_context(ordinal: usize) -> Arc<Mutex<DeviceContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<Mutex<DeviceContext>>>>> = OnceLock::new();
    let mut contexts = CONTEXTS.get_or_init(Default::default).lock().expect("no panic while listing devices");
    contexts.entry(ordinal).or_insert_with(|| Arc::new(Mutex::new(DeviceContext::new(ordinal)))).clone()
}

impl DeviceContext {
    fn new(ordinal: usize) -> Self {
        let fail = |what: &str, err: &dyn std::fmt::Debug| -> ! {
            panic!("cuBLASLt on CUDA device {ordinal}: {what} failed: {err:?}")
        };
        // SAFETY: the device exists (CubeCL made a tensor on it); its primary context is the
        // one CubeCL allocates in, retained here for the life of the process.
        unsafe {
            let device = driver::device::get(ordinal as i32).unwrap_or_else(|e| fail("cuDeviceGet", &e));
            let context = driver::primary_ctx::retain(device).unwrap_or_else(|e| fail("cuDevicePrimaryCtxRetain", &e));
            driver::ctx::set_current(context).unwrap_or_else(|e| fail("cuCtxSetCurrent", &e));
            let stream = driver::stream::create(driver::stream::StreamKind::NonBlocking)
                .unwrap_or_else(|e| fail("cuStreamCreate", &e));
            let handle = lt::create_handle().unwrap_or_else(|e| fail("cublasLtCreate", &e));
            Self { context, stream, handle, plans: HashMap::new(), refused: HashSet::new() }
        }
    }

    /// The plan for `key`, asking the heuristic the first time.
    /// Whether `key` has a plan, made now where it has none yet; `false` (remembered) where
    /// the heuristic has no algorithm for it.
    fn can_plan(&mut self, key: &PlanKey) -> bool {
        if self.plans.contains_key(key) {
            return true;
        }
        if self.refused.contains(key) {
            return false;
        }
        // SAFETY: as in `plan`.
        match unsafe { make_plan(self.handle, key, 1) } {
            Ok((plan, _)) => {
                self.plans.insert(key.clone(), Arc::new(plan));
                true
            }
            Err(_) => {
                self.refused.insert(key.clone());
                false
            }
        }
    }

    fn plan(&mut self, key: &PlanKey) -> Arc<Plan> {
        if let Some(plan) = self.plans.get(key) {
            return plan.clone();
        }
        // SAFETY: the descriptors are created and set with the sizes of the values given.
        let (plan, _) = unsafe { make_plan(self.handle, key, 1) }
            .unwrap_or_else(|err| panic!("cuBLASLt has no algorithm for {key:?}: {err:?}"));
        let plan = Arc::new(plan);
        self.plans.insert(key.clone(), plan.clone());
        plan
    }

    /// Makes `key`'s plan with the fastest of the heuristic's candidates, each timed on
    /// `stream` at the live addresses `[a, b, d, addend]` (`d` is overwritten) with `scratch`
    /// ([`MAX_WORKSPACE_BYTES`]) as its workspace.
    fn tune(&mut self, key: &PlanKey, addresses: [u64; 4], scratch: u64, stream: driver_sys::CUstream) {
        // SAFETY: as in `plan`.
        let (mut plan, candidates) = unsafe { make_plan(self.handle, key, TUNE_CANDIDATES) }
            .unwrap_or_else(|err| panic!("cuBLASLt has no algorithm for {key:?}: {err:?}"));
        let candidates: Vec<_> = candidates.into_iter().filter(|c| c.workspaceSize <= MAX_WORKSPACE_BYTES).collect();
        let fastest = tune::fastest(candidates.len(), stream, |i| {
            let trial = Plan { algo: candidates[i].algo, workspace: candidates[i].workspaceSize, ..plan };
            self.run(&trial, addresses, scratch, stream);
        });
        if let Some(fastest) = fastest {
            plan.algo = candidates[fastest].algo;
            plan.workspace = candidates[fastest].workspaceSize;
        }
        self.plans.insert(key.clone(), Arc::new(plan));
    }

    /// Enqueues `D = op(A)·op(B)`, plus the bias or the sum at `addend` where the plan adds
    /// one (0 otherwise), at the device addresses `[a, b, d, addend]` on `stream`.
    fn run(&self, plan: &Plan, [a, b, d, addend]: [u64; 4], workspace: u64, stream: driver_sys::CUstream) {
        // C is D with β = 0, or the sum with β = 1.
        let (alpha, beta, c) = match plan.addend {
            AddendKind::Sum => (1.0f32, 1.0f32, addend),
            _ => (1.0f32, 0.0f32, d),
        };
        let [a_layout, b_layout, d_layout] = plan.layouts;
        // SAFETY: the addresses are live CubeCL buffers of the layouts' extents (held by the
        // caller until this returns), the workspace holds `plan.workspace` bytes, and the
        // caller orders the stream with every later use of the buffers (CubeCL's own stream,
        // or a host wait).
        unsafe {
            driver::ctx::set_current(self.context).expect("cuCtxSetCurrent before a cuBLASLt GEMM");
            if plan.addend == AddendKind::Bias {
                // The descriptor is this plan's, used under the context's mutex only.
                let attribute = sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER;
                set(|buf, size| lt::set_matmul_desc_attribute(plan.desc, attribute, buf, size), &addend)
                    .unwrap_or_else(|err| panic!("cuBLASLt: setting the bias pointer failed: {err:?}"));
            }
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                a as *const c_void,
                a_layout,
                b as *const c_void,
                b_layout,
                c as *const c_void,
                d_layout,
                d as *mut c_void,
                d_layout,
                &plan.algo,
                workspace as *mut c_void,
                plan.workspace,
                stream as sys::cudaStream_t,
            )
            .unwrap_or_else(|err| panic!("cublasLtMatmul failed: {err:?}"));
        }
    }
}

/// How many of the heuristic's candidates [`DeviceContext::tune`] times.
const TUNE_CANDIDATES: usize = 8;

/// Creates `key`'s descriptors and asks the heuristic for up to `count` algorithms, best
/// first: the plan with the first, and all of them.
unsafe fn make_plan(
    handle: sys::cublasLtHandle_t,
    key: &PlanKey,
    count: usize,
) -> Result<(Plan, Vec<sys::cublasLtMatmulHeuristicResult_t>), lt::CublasError> {
    use sys::cublasLtMatmulDescAttributes_t as Desc;
    use sys::cublasLtMatmulPreferenceAttributes_t as Pref;
    let layout = &key.layout;
    let desc = lt::create_matmul_desc(key.kind.compute_type(key.f32), sys::cudaDataType::CUDA_R_32F)?;
    for (attribute, operand) in
        [(Desc::CUBLASLT_MATMUL_DESC_TRANSA, layout.a), (Desc::CUBLASLT_MATMUL_DESC_TRANSB, layout.b)]
    {
        let op: i32 = operand.transpose.into();
        set(|buf, size| lt::set_matmul_desc_attribute(desc, attribute, buf, size), &op)?;
    }
    if key.addend == AddendKind::Bias {
        // The bias has D's type (the default) and D's rows: Burn's columns.
        let epilogue = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS;
        set(
            |buf, size| lt::set_matmul_desc_attribute(desc, Desc::CUBLASLT_MATMUL_DESC_EPILOGUE, buf, size),
            &epilogue,
        )?;
    }
    let layouts = [layout.a, layout.b, layout.d].map(|operand| matrix_layout(key.kind, operand, layout.batch));
    let [a, b, d] = [layouts[0]?, layouts[1]?, layouts[2]?];
    let preference = lt::create_matmul_pref()?;
    let max = MAX_WORKSPACE_BYTES as u64;
    set(
        |buf, size| {
            lt::set_matmul_pref_attribute(preference, Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, buf, size)
        },
        &max,
    )?;
    let alignments = [
        (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align[0]),
        (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align[1]),
        (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align[2]),
        (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align[2]),
    ];
    for (attribute, bytes) in alignments {
        set(|buf, size| lt::set_matmul_pref_attribute(preference, attribute, buf, size), &bytes)?;
    }
    let mut results = vec![core::mem::zeroed::<sys::cublasLtMatmulHeuristicResult_t>(); count];
    let mut found = 0;
    let asked = sys::cublasLtMatmulAlgoGetHeuristic(
        handle,
        desc,
        a,
        b,
        d,
        d,
        preference,
        count as i32,
        results.as_mut_ptr(),
        &mut found,
    )
    .result();
    lt::destroy_matmul_pref(preference)?;
    asked?;
    results.truncate(found.max(0) as usize);
    results.retain(|result| result.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    let Some(first) = results.first() else {
        return Err(lt::CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED));
    };
    let plan = Plan { desc, addend: key.addend, layouts: [a, b, d], algo: first.algo, workspace: first.workspaceSize };
    Ok((plan, results))
}

/// One operand's matrix layout, batched where `batch > 1`.
unsafe fn matrix_layout(
    kind: DataKind,
    operand: Operand,
    batch: u64,
) -> Result<sys::cublasLtMatrixLayout_t, lt::CublasError> {
    use sys::cublasLtMatrixLayoutAttribute_t as Attr;
    let layout = lt::create_matrix_layout(kind.data_type(), operand.rows, operand.cols, operand.ld)?;
    if batch > 1 {
        let count = i32::try_from(batch).expect("a GEMM batch fits cuBLASLt's int");
        set(
            |buf, size| lt::set_matrix_layout_attribute(layout, Attr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, buf, size),
            &count,
        )?;
        let stride = operand.batch_stride;
        set(
            |buf, size| {
                lt::set_matrix_layout_attribute(layout, Attr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, buf, size)
            },
            &stride,
        )?;
    }
    Ok(layout)
}

/// Passes `value` to a cuBLASLt attribute setter as a buffer and its size.
fn set<T>(
    setter: impl FnOnce(*const c_void, usize) -> Result<(), lt::CublasError>,
    value: &T,
) -> Result<(), lt::CublasError> {
    setter((value as *const T).cast(), core::mem::size_of::<T>())
}
