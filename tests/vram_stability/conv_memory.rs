//! Device-memory bounds of `Lean<B>` convolutions, measured on a real CubeCL pool (wgpu;
//! llvmpipe in CI).
//!
//! What is measured: the pool's `bytes_reserved` after a trim. CubeCL's pool never gives
//! pages back on its own, so the reserve after an operation is the high-water mark of what
//! the operation needed, rounded up to the pool's pages. On llvmpipe the smallest pages
//! are 8 MiB, so every bound below carries a slack of two such pages ([`PAGE_SLACK`]).
//!
//! Stock Burn 0.21 on CubeCL runs convolutions as direct or implicit-GEMM kernels with no
//! column matrix, so it is not a baseline that `Lean` can undercut here; the side-by-side
//! comparison with stock lives in `benches/conv.rs`. These tests check the promise `Lean`
//! makes: the transient workspace stays within the budget, whatever the batch, and
//! nothing stays on the device between calls.

use crate::common::{exclusive_device, image_batch, wgpu_device, CLASSES};
use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::{Autodiff, Wgpu};
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module::{conv2d, conv_transpose2d};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::Distribution;
use burn_cubecl::CubeBackend;
use leanburn::backend::{conv2d_plan, conv_transpose2d_plan, ConvPlan};
use leanburn::device::{init_memory_pool, DeviceChoice, PoolLayout};
use leanburn::memory::MemorySample;
use leanburn::model::SmallCnnConfig;
use leanburn::MemoryProbe;
use leanburn::{ConvBudget, Lean};

type Cube = CubeBackend<WgpuRuntime, f32, i32, u32>;
/// `Lean` over the unfused CubeCL backend: leanburn's kernels called directly.
type B = Autodiff<Lean<Cube>>;
/// `Lean` over Burn's default (fused) wgpu backend: the same kernels as Fusion custom ops.
type Fused = Autodiff<Lean<Wgpu>>;

const MIB: u64 = 1024 * 1024;
/// Pool-page rounding: two of llvmpipe's smallest (8 MiB) pages.
const PAGE_SLACK: u64 = 16 * MIB;
const BUDGET_MIB: usize = 8;

/// 80 images of 4×32×32 through a 7×7 convolution (padding 3) to 4 channels: the full
/// column matrix would be 196 rows × 81,920 columns × 4 B = 61 MiB, more than twice the
/// bound and 7.7× the budget, while the input and the output are 1.25 MiB each. (320
/// images, 245 MiB, made the same checks; llvmpipe spent about 20 s a run in the column
/// tiles' products, 32 tiles where these are 8.)
const BATCH: usize = 80;
const CHANNELS: usize = 4;
const SIDE: usize = 32;
const KERNEL: usize = 7;

/// A stack under test: autodiff over `Lean`, on a wgpu device.
trait Stack: AutodiffBackend<Device = WgpuDevice> + MemoryProbe {}
impl<T: AutodiffBackend<Device = WgpuDevice> + MemoryProbe> Stack for T {}

fn sample(device: &WgpuDevice) -> MemorySample {
    sample_on::<B>(device)
}

fn sample_on<T: Stack>(device: &WgpuDevice) -> MemorySample {
    T::memory_sample(device).expect("wgpu memory could not be read: nothing would be measured")
}

fn image_bytes() -> u64 {
    (BATCH * CHANNELS * SIDE * SIDE * 4) as u64
}

fn full_column_bytes() -> u64 {
    (CHANNELS * KERNEL * KERNEL * BATCH * SIDE * SIDE * 4) as u64
}

/// Runs conv2d forward and backward on `B` and returns how far the reserve rose above the
/// reserve that held the input and weight, and the gradients (so they count as live).
/// `transient` (bytes) is allocated and dropped mid-way: the control's stand-in for a
/// workspace that ignores the budget.
fn reserve_rise<T: Stack>(device: &WgpuDevice, transient: Option<usize>) -> u64 {
    T::release_unused(device);
    let x =
        Tensor::<T, 4>::random([BATCH, CHANNELS, SIDE, SIDE], Distribution::Normal(0.0, 1.0), device).require_grad();
    let weight = Tensor::<T, 4>::random([CHANNELS, CHANNELS, KERNEL, KERNEL], Distribution::Normal(0.0, 0.1), device)
        .require_grad();
    let before = sample_on::<T>(device);

    let output = conv2d(x.clone(), weight.clone(), None, ConvOptions::new([1, 1], [KERNEL / 2, KERNEL / 2], [1, 1], 1));
    if let Some(bytes) = transient {
        let workspace = Tensor::<T, 1>::zeros([bytes / 4], device);
        let _ = sample_on::<T>(device);
        drop(workspace);
    }
    let grads = output.sum().backward();
    let x_grad = x.grad(&grads).expect("input gradient");
    let weight_grad = weight.grad(&grads).expect("weight gradient");
    let after = sample_on::<T>(device);
    assert!(x_grad.dims() == x.dims() && weight_grad.dims() == weight.dims());
    after.bytes_reserved.saturating_sub(before.bytes_reserved)
}

/// What must exist besides the workspace: the output, its gradient and the input gradient
/// (the weight gradient is a few KiB).
fn required_bytes() -> u64 {
    3 * image_bytes() + (CHANNELS * CHANNELS * KERNEL * KERNEL * 4) as u64
}

fn bound() -> u64 {
    required_bytes() + BUDGET_MIB as u64 * MIB + PAGE_SLACK
}

#[test]
fn conv_forward_and_backward_stay_within_budget_plus_required_tensors() {
    within_budget::<B>("unfused");
}

/// The same bound over Burn's fused wgpu stack, where the pixel moves are queued as
/// Fusion custom operations and run when the queue drains.
#[test]
fn fused_conv_forward_and_backward_stay_within_budget_plus_required_tensors() {
    within_budget::<Fused>("fused");
}

fn within_budget<T: Stack>(stack: &str) {
    let _guard = exclusive_device();
    let device = wgpu_device();
    ConvBudget::set_global(ConvBudget::from_mib(BUDGET_MIB));
    assert!(full_column_bytes() > 2 * bound(), "the shape must need a column matrix far over the bound");

    let rise = reserve_rise::<T>(&device, None);
    println!(
        "{stack}: full im2col would be {} MiB; reserve rose {} MiB; bound {} MiB",
        full_column_bytes() / MIB,
        rise / MIB,
        bound() / MIB
    );
    assert!(
        rise <= bound(),
        "conv fwd+bwd under an {BUDGET_MIB} MiB budget raised the reserve by {rise} B, more than \
         required tensors {} B + budget + slack {PAGE_SLACK} B",
        required_bytes()
    );
}

/// The control: a 64 MiB transient on top of the same work, what a conv ignoring the
/// budget would hold, shows up in the same measurement and breaks the same bound.
#[test]
fn control_a_workspace_over_budget_breaks_the_bound() {
    over_budget_is_caught::<B>();
}

/// The control of the fused stack's bound: a transient queued on it is seen as well.
#[test]
fn control_on_the_fused_stack_a_workspace_over_budget_breaks_the_bound() {
    over_budget_is_caught::<Fused>();
}

fn over_budget_is_caught<T: Stack>() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    ConvBudget::set_global(ConvBudget::from_mib(BUDGET_MIB));
    let rise = reserve_rise::<T>(&device, Some(64 * MIB as usize));
    assert!(
        rise > bound(),
        "a 64 MiB transient raised the reserve by only {rise} B (bound {} B): the measurement \
         would not catch a budget overrun",
        bound()
    );
}

/// After training and dropping the batch, the pool holds the parameters and Adam's two
/// moments: no convolution buffers, no cached column matrices.
#[test]
fn after_training_only_parameters_and_optimizer_state_stay_in_use() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    ConvBudget::set_global(ConvBudget::from_mib(BUDGET_MIB));
    B::release_unused(&device);
    let baseline = sample(&device).bytes_in_use;

    let mut model = SmallCnnConfig::new().with_classes(CLASSES).with_width(16).init::<B>(&device);
    let mut optimizer = AdamConfig::new().init::<B, _>();
    for step in 0..5 {
        let (images, labels) = image_batch::<B>(16, 32, step, &device);
        let loss = model.loss(images, labels);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(1e-3, model, grads);
    }
    let params = model.num_params() as u64;
    let in_use = sample(&device).bytes_in_use - baseline;
    // Parameters plus Adam's first and second moments, 4 bytes each.
    let expected = 3 * params * 4;
    // Six parameter tensors, three copies each; each allocation may be rounded up to the
    // pool's alignment.
    let slack = 3 * 6 * 256;
    println!("in use after training: {in_use} B; parameters + Adam state: {expected} B");
    assert!(
        in_use >= expected && in_use <= expected + slack,
        "after training, {in_use} B are in use; parameters + Adam state need {expected} B \
         (+ {slack} B alignment slack)"
    );
    drop((model, optimizer));
    assert_eq!(sample(&device).bytes_in_use, baseline, "dropping the model and optimizer frees everything");
}

/// One image whose own workspace is about 4× the budget: 10 channels of 128 × 128 through a
/// 7 × 7 convolution (padding 3) to 10 channels, (490 + 2 · 10) rows × 16,384 pixels × 4 B =
/// 31.9 MiB against 8 MiB.
const TILED: ([usize; 4], [usize; 4]) = ([1, 10, 128, 128], [10, 10, 7, 7]);

/// A second wgpu device whose pool is laid out in exclusive pages: each allocation is its
/// own buffer of its own size, so the reserve counts what was allocated, without the
/// 8 to 128 MiB pages of the default layout, which would hide an 8 MiB budget.
fn exact_pool_device() -> WgpuDevice {
    static INIT: std::sync::Once = std::sync::Once::new();
    let device = WgpuDevice::Cpu;
    INIT.call_once(|| {
        let backend = DeviceChoice::wgpu(device.clone(), "the tiling tests' own device");
        init_memory_pool(&backend, PoolLayout::ExclusivePages).expect("a fresh wgpu device takes a pool layout");
    });
    device
}

/// conv2d forward and both gradients of [`TILED`] on `B`: how far the reserve rose above
/// the one that held the input and weight. `transient` as in [`reserve_rise`].
fn tiled_reserve_rise<T: Stack>(device: &WgpuDevice, transient: Option<usize>) -> u64 {
    // Once unmeasured first: with cold caches, compiling and autotuning the tiles' kernels
    // holds buffers of its own (in a cold CI run the reserve rose 21.7 MB without this).
    tiled_work::<T>(device, None);
    T::release_unused(device);
    tiled_work::<T>(device, transient)
}

/// conv2d forward and both gradients of [`TILED`]: the reserve's rise over the one that
/// held the input and weight.
fn tiled_work<T: Stack>(device: &WgpuDevice, transient: Option<usize>) -> u64 {
    let (x_dims, w_dims) = TILED;
    let x = Tensor::<T, 4>::random(x_dims, Distribution::Normal(0.0, 1.0), device).require_grad();
    let weight = Tensor::<T, 4>::random(w_dims, Distribution::Normal(0.0, 0.1), device).require_grad();
    let before = sample_on::<T>(device);
    let output = conv2d(x.clone(), weight.clone(), None, ConvOptions::new([1, 1], [3, 3], [1, 1], 1));
    if let Some(bytes) = transient {
        let workspace = Tensor::<T, 1>::zeros([bytes / 4], device);
        let _ = sample_on::<T>(device);
        drop(workspace);
    }
    let grads = output.sum().backward();
    let (x_grad, weight_grad) =
        (x.grad(&grads).expect("input gradient"), weight.grad(&grads).expect("weight gradient"));
    let after = sample_on::<T>(device);
    assert!(x_grad.dims() == x_dims && weight_grad.dims() == w_dims);
    after.bytes_reserved.saturating_sub(before.bytes_reserved)
}

/// The output, its gradient and the input gradient of [`TILED`], plus the weight gradient,
/// plus the budget, plus 2 MiB for what the tiles add around it (the input gradient is
/// copied when a tile's gradient is added into it; measured on llvmpipe: a rise of
/// 10.9 MiB, 0.5 MiB above the plan's workspace and the required tensors).
fn tiled_bound() -> u64 {
    let (x_dims, w_dims) = TILED;
    let image = x_dims.iter().product::<usize>() as u64 * 4;
    3 * image + w_dims.iter().product::<usize>() as u64 * 4 + BUDGET_MIB as u64 * MIB + 2 * MIB
}

/// Sets the budget and returns the plan `Lean` follows for [`TILED`].
fn tiled_plan() -> ConvPlan {
    ConvBudget::set_global(ConvBudget::from_mib(BUDGET_MIB));
    let (x_dims, w_dims) = TILED;
    conv2d_plan::<Cube>(x_dims, w_dims, &ConvOptions::new([1, 1], [3, 3], [1, 1], 1), 4)
}

/// Row tiles: one image whose column matrix alone needs about 4× the budget is cut into
/// tiles of output rows, and the reserve stays within the budget plus required tensors.
#[test]
fn one_image_over_the_budget_runs_in_row_tiles_within_it() {
    row_tiles_within_budget::<B>("unfused");
}

/// The row tiles over Burn's fused wgpu stack.
#[test]
fn fused_one_image_over_the_budget_runs_in_row_tiles_within_it() {
    row_tiles_within_budget::<Fused>("fused");
}

fn row_tiles_within_budget<T: Stack>(stack: &str) {
    let _guard = exclusive_device();
    let device = exact_pool_device();
    let plan = tiled_plan();
    assert!(plan.workspace_bytes_per_image >= 4 * plan.budget_bytes - plan.budget_bytes / 8, "{plan:?}");
    assert!(plan.row_tiles > 1 && plan.fits_budget(), "{plan:?}");

    let rise = tiled_reserve_rise::<T>(&device, None);
    println!("{stack}: {plan:?}; reserve rose {rise} B; bound {} B", tiled_bound());
    assert!(rise <= tiled_bound(), "row tiles raised the reserve by {rise} B, bound {} B", tiled_bound());
}

/// The control: one image's untiled workspace as a transient on top of the same work
/// breaks the same bound, so the measurement would catch a convolution that does not tile.
#[test]
fn control_an_untiled_image_breaks_the_row_tile_bound() {
    let _guard = exclusive_device();
    let device = exact_pool_device();
    let plan = tiled_plan();
    let rise = tiled_reserve_rise::<B>(&device, Some(plan.workspace_bytes_per_image));
    println!("with an untiled image's workspace: reserve rose {rise} B; bound {} B", tiled_bound());
    assert!(rise > tiled_bound(), "an untiled workspace raised the reserve by only {rise} B");
}

/// `conv_transpose2d` of [`TILED`]'s shapes on the inner stack `T` (no autodiff), run once
/// unmeasured first: the reserve's rise over the one that held the input and weight.
fn transposed_tiled_rise<T: Backend<Device = WgpuDevice> + MemoryProbe>(
    device: &WgpuDevice,
    transient: Option<usize>,
) -> u64 {
    let work = |transient: Option<usize>| {
        let (x_dims, w_dims) = TILED;
        let x = Tensor::<T, 4>::random(x_dims, Distribution::Normal(0.0, 1.0), device);
        let weight = Tensor::<T, 4>::random(w_dims, Distribution::Normal(0.0, 0.1), device);
        T::memory_sample(device).expect("wgpu memory");
        let before = T::memory_sample(device).expect("wgpu memory");
        if let Some(bytes) = transient {
            let workspace = Tensor::<T, 1>::zeros([bytes / 4], device);
            let _ = T::memory_sample(device);
            drop(workspace);
        }
        let out = conv_transpose2d(x, weight, None, ConvTransposeOptions::new([1, 1], [3, 3], [0, 0], [1, 1], 1));
        let after = T::memory_sample(device).expect("wgpu memory");
        assert_eq!(out.dims(), x_dims);
        after.bytes_reserved.saturating_sub(before.bytes_reserved)
    };
    work(None);
    T::release_unused(device);
    work(transient)
}

/// The plan of [`TILED`]'s transposed convolution (its adjoint conv2d's).
fn transposed_tiled_plan() -> ConvPlan {
    ConvBudget::set_global(ConvBudget::from_mib(BUDGET_MIB));
    let (x_dims, w_dims) = TILED;
    conv_transpose2d_plan::<Cube>(x_dims, w_dims, &ConvTransposeOptions::new([1, 1], [3, 3], [0, 0], [1, 1], 1), 4)
        .expect("Lean runs this transposed convolution")
}

/// `conv_transpose2d` tiles too: one image whose column matrix needs about 4× the budget
/// stays within [`tiled_bound`], on the unfused and the fused stack.
#[test]
fn one_transposed_image_over_the_budget_runs_in_row_tiles_within_it() {
    let _guard = exclusive_device();
    let device = exact_pool_device();
    let plan = transposed_tiled_plan();
    assert!(plan.row_tiles > 1 && plan.fits_budget(), "{plan:?}");
    for (stack, rise) in [
        ("unfused", transposed_tiled_rise::<Lean<Cube>>(&device, None)),
        ("fused", transposed_tiled_rise::<Lean<Wgpu>>(&device, None)),
    ] {
        println!("conv_transpose2d, {stack}: {plan:?}; reserve rose {rise} B; bound {} B", tiled_bound());
        assert!(rise <= tiled_bound(), "{stack}: row tiles raised the reserve by {rise} B, bound {} B", tiled_bound());
    }
}

/// The control: the untiled workspace as a transient on top of the same transposed
/// convolution breaks the same bound.
#[test]
fn control_an_untiled_transposed_image_breaks_the_row_tile_bound() {
    let _guard = exclusive_device();
    let device = exact_pool_device();
    let plan = transposed_tiled_plan();
    let rise = transposed_tiled_rise::<Lean<Cube>>(&device, Some(plan.workspace_bytes_per_image));
    println!("conv_transpose2d with an untiled image's workspace: reserve rose {rise} B; bound {} B", tiled_bound());
    assert!(rise > tiled_bound(), "an untiled workspace raised the reserve by only {rise} B");
}
