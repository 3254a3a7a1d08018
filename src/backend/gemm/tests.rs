//! The GEMM layout against a column-major reference on the CPU, the queued GEMM on wgpu,
//! the linear layers' GEMM forms on Flex, and the library probe.
//!
//! The layout test runs what a column-major library computes for a layout (ops, leading
//! dimensions, batch strides, over the operands' own buffers) in f64 and compares it with
//! Burn's product over the same strided views, element for element: both sum the same
//! products in the same order, so they must agree exactly. Its control corrupts each
//! layout found (a transpose flag, a leading dimension, a batch stride) and requires the
//! comparison to catch it.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use burn::backend::Flex;
use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use burn_backend::ops::{FloatTensorOps, ModuleOps};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::layout::{gemm_layout, operand_copies, output_shape, GemmLayout, LayoutRefusal, Operand, View};
use super::{linear, linear_weight_backward, linear_x_backward, GemmOps};

thread_local! {
    /// Set by a test to take the Fusion custom operation on a backend without the vendor's
    /// GEMM (`fused.rs`).
    pub(crate) static QUEUE_GEMM: Cell<bool> = const { Cell::new(false) };
    /// Set by a test to have this thread's CubeCL backends say their GEMMs are the
    /// vendor's (`cube.rs`).
    pub(crate) static VENDOR_LAYOUTS: Cell<bool> = const { Cell::new(false) };
    /// The operand copies counted on this thread ([`super::gemm_operand_copies`]'s share):
    /// what a test reads where other tests multiply at the same time.
    pub(crate) static COPIES_HERE: Cell<usize> = const { Cell::new(0) };
}

/// A strided view over a flat buffer.
#[derive(Clone, Debug)]
struct Strided {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
    buffer: Vec<f64>,
}

impl Strided {
    fn at(&self, index: &[usize]) -> f64 {
        let flat: usize = index.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
        self.buffer[self.offset + flat]
    }

    fn view(&self) -> View<'_> {
        View { shape: &self.shape, strides: &self.strides }
    }
}

/// How one operand's matrix is laid out in memory.
#[derive(Clone, Copy, Debug)]
enum Storage {
    /// Row-major, rows padded by this many elements (0: contiguous).
    Rows(usize),
    /// A transposed view: column-major, columns padded by this many elements.
    Columns(usize),
    /// Every other element of a row-major buffer: no copy-free layout.
    Gapped,
}

/// A `batch × rows × cols` view with `storage` and per-dimension batch broadcasting.
fn strided(batch: &[usize], rows: usize, cols: usize, storage: Storage, rng: &mut SmallRng) -> Strided {
    let (row_stride, col_stride, matrix) = match storage {
        Storage::Rows(pad) => (cols + pad, 1, rows * (cols + pad)),
        Storage::Columns(pad) => (1, rows + pad, cols * (rows + pad)),
        Storage::Gapped => (2 * cols, 2, 2 * rows * cols),
    };
    let mut strides = vec![0; batch.len()];
    let mut extent = matrix.max(1);
    for dim in (0..batch.len()).rev() {
        strides[dim] = if batch[dim] == 1 && rng.random_bool(0.3) { rng.random_range(0..5) } else { extent };
        extent *= batch[dim];
    }
    strides.extend([row_stride, col_stride]);
    let offset = rng.random_range(0..4);
    let buffer = (0..offset + extent + 8).map(|_| rng.random_range(-4..=4) as f64).collect();
    let mut shape = batch.to_vec();
    shape.extend([rows, cols]);
    Strided { shape, strides, offset, buffer }
}

/// Burn's `lhs · rhs` over the strided views: a contiguous `[.., m, n]`.
fn row_major_product(lhs: &Strided, rhs: &Strided) -> Vec<f64> {
    let out = output_shape(&lhs.shape, &rhs.shape).expect("the case's shapes multiply");
    let rank = out.len();
    let (m, n, k) = (out[rank - 2], out[rank - 1], lhs.shape[rank - 1]);
    let batches: usize = out[..rank - 2].iter().product();
    let mut product = Vec::with_capacity(batches * m * n);
    for flat in 0..batches {
        let index = unflatten(flat, &out[..rank - 2]);
        let pick =
            |view: &Strided| index.iter().zip(&view.shape).map(|(&i, &size)| if size == 1 { 0 } else { i }).collect();
        let (l, r): (Vec<usize>, Vec<usize>) = (pick(lhs), pick(rhs));
        for i in 0..m {
            for j in 0..n {
                let sum =
                    (0..k).map(|p| lhs.at(&[&l[..], &[i, p]].concat()) * rhs.at(&[&r[..], &[p, j]].concat())).sum();
                product.push(sum);
            }
        }
    }
    product
}

fn unflatten(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut index = vec![0; dims.len()];
    for dim in (0..dims.len()).rev() {
        index[dim] = flat % dims[dim];
        flat /= dims[dim];
    }
    index
}

/// What a column-major library computes for `layout`, `A` and `B` read from the start of
/// the views' elements in their buffers; `None` where the layout's dimensions do not hold
/// the product's (`op(A)` `m × k`, `op(B)` `k × n`, `D` `m × n`) or a read leaves the
/// declared matrix or the buffer.
fn column_major_product(layout: &GemmLayout, a: &[f64], b: &[f64]) -> Option<Vec<f64>> {
    let read = |buffer: &[f64], operand: &Operand, batch: u64, row: u64, col: u64| -> Option<f64> {
        let (r, c) = if operand.transpose { (col, row) } else { (row, col) };
        // The library reads the stored matrix as the layout declares it, ld included.
        if r >= operand.rows || c >= operand.cols || operand.ld < operand.rows.max(1) as i64 {
            return None;
        }
        let at = batch as i64 * operand.batch_stride + r as i64 + c as i64 * operand.ld;
        buffer.get(usize::try_from(at).ok()?).copied()
    };
    let d = &layout.d;
    if d.transpose || (d.rows, d.cols) != (layout.m, layout.n) || d.ld < d.rows as i64 {
        return None;
    }
    let mut product = vec![f64::NAN; (layout.batch as i64 * d.batch_stride) as usize];
    for batch in 0..layout.batch {
        for i in 0..layout.m {
            for j in 0..layout.n {
                let mut sum = 0.0;
                for p in 0..layout.k {
                    sum += read(a, &layout.a, batch, i, p)? * read(b, &layout.b, batch, p, j)?;
                }
                product[(batch as i64 * d.batch_stride + i as i64 + j as i64 * d.ld) as usize] = sum;
            }
        }
    }
    Some(product)
}

/// One random product: batch dimensions (0 to 2, each maybe broadcast on one side), sizes
/// 1 to 6, each operand in a random storage.
fn random_case(rng: &mut SmallRng) -> (Strided, Strided) {
    let dims = rng.random_range(0..=2);
    let out_batch: Vec<usize> = (0..dims).map(|_| rng.random_range(1..=3)).collect();
    let broadcast =
        |rng: &mut SmallRng| out_batch.iter().map(|&d| if rng.random_bool(0.3) { 1 } else { d }).collect::<Vec<_>>();
    let (lhs_batch, rhs_batch) = (broadcast(rng), broadcast(rng));
    let (m, k, n) = (rng.random_range(1..=6), rng.random_range(1..=6), rng.random_range(1..=6));
    let storage = |rng: &mut SmallRng| match rng.random_range(0..5) {
        0 | 1 => Storage::Rows(rng.random_range(0..2) * 3),
        2 | 3 => Storage::Columns(rng.random_range(0..2) * 2),
        _ => Storage::Gapped,
    };
    let (lhs_storage, rhs_storage) = (storage(rng), storage(rng));
    (strided(&lhs_batch, m, k, lhs_storage, rng), strided(&rhs_batch, k, n, rhs_storage, rng))
}

/// The ways a wrong layout could be wrong, one at a time.
fn corruptions(layout: &GemmLayout) -> Vec<GemmLayout> {
    let mut wrong = Vec::new();
    for which in 0..2 {
        let mut flipped = layout.clone();
        let operand = if which == 0 { &mut flipped.a } else { &mut flipped.b };
        operand.transpose = !operand.transpose;
        core::mem::swap(&mut operand.rows, &mut operand.cols);
        wrong.push(flipped);
        let mut ld = layout.clone();
        if which == 0 { &mut ld.a } else { &mut ld.b }.ld += 1;
        wrong.push(ld);
    }
    let mut shape = layout.clone();
    core::mem::swap(&mut shape.a.rows, &mut shape.a.cols);
    wrong.push(shape);
    if layout.batch > 1 {
        let mut batch = layout.clone();
        batch.a.batch_stride += 1;
        wrong.push(batch);
    }
    wrong
}

/// The column-major product of `layout` over the cases' buffers.
fn try_product(layout: &GemmLayout, lhs: &Strided, rhs: &Strided) -> Option<Vec<f64>> {
    column_major_product(layout, &rhs.buffer[rhs.offset..], &lhs.buffer[lhs.offset..])
}

#[test]
fn every_layout_found_computes_burns_product_and_corrupted_ones_do_not() {
    let mut rng = SmallRng::seed_from_u64(51);
    let (mut found, mut caught, mut corrupted) = (0, 0, 0);
    for _ in 0..600 {
        let (lhs, rhs) = random_case(&mut rng);
        let Ok(layout) = gemm_layout(lhs.view(), rhs.view()) else { continue };
        found += 1;
        let expected = row_major_product(&lhs, &rhs);
        assert_eq!(try_product(&layout, &lhs, &rhs).as_ref(), Some(&expected), "{lhs:?} · {rhs:?} as {layout:?}");
        for wrong in corruptions(&layout) {
            corrupted += 1;
            caught += usize::from(try_product(&wrong, &lhs, &rhs).as_ref() != Some(&expected));
        }
    }
    assert!(found >= 200, "only {found} of 600 cases had a layout");
    // A corruption can be invisible (a flipped 1 × 1 operand, an unused batch stride on a
    // broadcast side); most are not.
    assert!(caught * 10 >= corrupted * 8, "the comparison caught {caught} of {corrupted} corrupted layouts");
}

#[test]
fn layouts_are_refused_where_a_copy_or_another_path_is_needed() {
    let mut rng = SmallRng::seed_from_u64(7);
    let gapped = strided(&[], 3, 4, Storage::Gapped, &mut rng);
    let plain = strided(&[], 4, 5, Storage::Rows(0), &mut rng);
    assert_eq!(gemm_layout(gapped.view(), plain.view()), Err(LayoutRefusal::LhsStrides));
    let plain_lhs = strided(&[], 5, 3, Storage::Rows(0), &mut rng);
    assert_eq!(gemm_layout(plain_lhs.view(), gapped.view()), Err(LayoutRefusal::RhsStrides));
    // A batch expanded on its inner dimension only has no single stride; its contiguous
    // copy has one.
    let shape = [2, 3, 4, 4];
    let expanded = View { shape: &shape, strides: &[16, 0, 4, 1] };
    let whole = View { shape: &shape, strides: &[48, 16, 4, 1] };
    assert_eq!(gemm_layout(expanded, whole), Err(LayoutRefusal::LhsBatch));
    assert_eq!(gemm_layout(whole, expanded), Err(LayoutRefusal::RhsBatch));
    // The control: the same strides with the broadcast dimension stepped are accepted.
    let stepped = View { shape: &shape, strides: &[48, 16, 4, 1] };
    assert!(gemm_layout(stepped, whole).is_ok());
    // Batches broadcast on different dimensions (`[2, 1]` by `[1, 3]`) fold in no copy.
    let (lhs_shape, rhs_shape) = ([2, 1, 4, 4], [1, 3, 4, 4]);
    let lhs = View { shape: &lhs_shape, strides: &[16, 16, 4, 1] };
    let rhs = View { shape: &rhs_shape, strides: &[48, 16, 4, 1] };
    assert_eq!(gemm_layout(lhs, rhs), Err(LayoutRefusal::Batch));
    // Empty products and shapes that do not multiply take Burn's own path.
    let empty = [0, 4];
    assert_eq!(gemm_layout(View { shape: &empty, strides: &[4, 1] }, plain.view()), Err(LayoutRefusal::Batch));
    assert_eq!(gemm_layout(plain.view(), plain.view()), Err(LayoutRefusal::Batch));
}

#[test]
fn attention_heads_split_from_rows_ask_for_a_copy() {
    // GPT-2's queries: `[b, t, h·d]` rows viewed as `[b, h, t, d]` (strides `[t·h·d, d,
    // h·d, 1]`): the batch (b, h) steps by t·h·d and d, which no single stride covers.
    let (b, h, t, d) = (2, 3, 5, 4);
    let heads = [b, h, t, d];
    let query = View { shape: &heads, strides: &[t * h * d, d, h * d, 1] };
    let keys_shape = [b, h, d, t];
    let keys = View { shape: &keys_shape, strides: &[t * h * d, t * d, 1, d] };
    assert_eq!(gemm_layout(query, keys), Err(LayoutRefusal::LhsBatch));
    let copied = View { shape: &heads, strides: &[h * t * d, t * d, d, 1] };
    // The control: the contiguous copy and the transposed keys (a batch that folds) have a layout.
    let layout = gemm_layout(copied, keys).expect("a contiguous copy folds its batch");
    assert_eq!(
        (layout.batch, layout.a.batch_stride, layout.b.batch_stride),
        ((b * h) as u64, (t * d) as i64, (t * d) as i64)
    );
    let split_keys = View { shape: &keys_shape, strides: &[t * h * d, d, 1, h * d] };
    assert_eq!(gemm_layout(copied, split_keys), Err(LayoutRefusal::RhsBatch));
}

#[test]
fn a_transposed_view_needs_no_copy() {
    // Autodiff's backward multiplies by transposes: the layout reads them as they are.
    let (rows, cols) = ([8, 3], [1, 8]);
    let transposed = View { shape: &rows, strides: &cols };
    let shape = [3, 5];
    let plain = View { shape: &shape, strides: &[5, 1] };
    let layout = gemm_layout(transposed, plain).expect("a transposed lhs has a layout");
    assert!(layout.b.transpose && !layout.a.transpose);
    assert_eq!((layout.m, layout.n, layout.k), (5, 8, 3));
}

/// Random `[rows, cols]` values in a tensor.
fn random<B: burn::tensor::backend::Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Tensor<B, D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

fn values<B: burn::tensor::backend::Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().unwrap()
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The queued GEMM (the Fusion custom operation, on the inner backend's handles and
/// strides) equals Fusion's matmul on transposed, broadcast and sliced operands; the
/// control shows the custom operation ran.
#[test]
fn the_queued_gemm_equals_fusions_matmul_on_wgpu() {
    use burn::backend::Wgpu;
    type B = Wgpu;
    let device = Default::default();
    let executed = super::fused::EXECUTED.load(Ordering::Relaxed);
    let lhs = random::<B, 3>([2, 7, 5], &device);
    let rhs = random::<B, 3>([1, 9, 5], &device).swap_dims(1, 2);
    let sliced = random::<B, 3>([2, 7, 12], &device).narrow(2, 3, 5);
    for lhs in [lhs, sliced] {
        let reference = values(lhs.clone().matmul(rhs.clone()));
        QUEUE_GEMM.with(|queue| queue.set(true));
        let queued = values(super::gemm(lhs, rhs.clone()));
        QUEUE_GEMM.with(|queue| queue.set(false));
        assert!(largest_difference(&queued, &reference) < 1e-4);
    }
    assert!(super::fused::EXECUTED.load(Ordering::Relaxed) >= executed + 2, "the custom operation did not run");
}

/// The queued GEMM takes its operands' transposes itself (`gemm_transposed`: no swap on
/// the fusion stream) and equals Fusion's matmul of the swapped views, on the products of
/// the test above; the controls: the custom operation ran (a flag it ignored would leave
/// shapes that do not multiply, and Fusion's matmul would refuse them).
#[test]
fn the_queued_gemm_takes_transposed_operands_on_wgpu() {
    use burn::backend::Wgpu;
    type B = Wgpu;
    let device = Default::default();
    let executed = super::fused::EXECUTED.load(Ordering::Relaxed);
    let lhs_stored = random::<B, 3>([2, 5, 7], &device);
    let rhs_stored = random::<B, 3>([1, 9, 5], &device);
    let reference = values(lhs_stored.clone().swap_dims(1, 2).matmul(rhs_stored.clone().swap_dims(1, 2)));
    QUEUE_GEMM.with(|queue| queue.set(true));
    let queued = values(super::gemm_transposed(lhs_stored, rhs_stored, [true, true]));
    QUEUE_GEMM.with(|queue| queue.set(false));
    assert!(largest_difference(&queued, &reference) < 1e-4, "the transposed queued GEMM differs");
    assert!(super::fused::EXECUTED.load(Ordering::Relaxed) > executed, "the custom operation did not run");
}

/// The queued GEMM with a bias (one custom operation, as where cuBLASLt adds the bias in
/// its epilogue; on wgpu the inner backend's GEMM and add) equals Burn's linear layer; the controls: the operation ran, and the same
/// product without the bias differs by more than the tolerance.
#[test]
fn the_queued_gemm_with_a_bias_equals_burns_linear_on_wgpu() {
    use burn::backend::Wgpu;
    type B = Wgpu;
    let device = Default::default();
    let executed = super::fused::EXECUTED.load(Ordering::Relaxed);
    // The product of the test above, a transposed weight as there (the autotune seed holds
    // its tunings); the reference is Flex's linear on the same values.
    let x = random::<Flex, 3>([2, 7, 5], &Default::default());
    let bias = random::<Flex, 1>([9], &Default::default());
    let stored = random::<Flex, 2>([9, 5], &Default::default());
    let wgpu_weight = Tensor::<B, 2>::from_data(stored.to_data(), &device).transpose();
    let weight = stored.transpose();
    let flex = |t: Tensor<Flex, 3>| t.into_primitive().tensor();
    let reference = float_values(Flex::linear(
        flex(x.clone()),
        weight.into_primitive().tensor(),
        Some(bias.clone().into_primitive().tensor()),
    ));
    let xp = Tensor::<B, 3>::from_data(x.to_data(), &device).into_primitive().tensor();
    let bp = Tensor::<B, 1>::from_data(bias.to_data(), &device).into_primitive().tensor();
    let wp = wgpu_weight.into_primitive().tensor();
    QUEUE_GEMM.with(|queue| queue.set(true));
    let queued = float_values_of::<B>(linear::<B>(xp.clone(), wp.clone(), Some(bp)));
    QUEUE_GEMM.with(|queue| queue.set(false));
    assert!(largest_difference(&queued, &reference) < 1e-4, "the queued GEMM with a bias differs");
    let unbiased = float_values_of::<B>(linear::<B>(xp, wp, None));
    assert!(largest_difference(&unbiased, &reference) > 1e-2, "control: the bias changed nothing");
    assert!(super::fused::EXECUTED.load(Ordering::Relaxed) > executed, "the custom operation did not run");
}

/// The queued GEMM with a sum (`sum + lhs · rhs`, one custom operation as where cuBLASLt
/// reads the sum as its `C`; on wgpu the inner backend's GEMM and add) equals Flex's on the
/// same values, on the products of the tests above; the controls: the operation ran, and
/// the product alone differs by more than the tolerance.
#[test]
fn the_queued_gemm_with_a_sum_equals_the_product_plus_the_sum_on_wgpu() {
    use burn::backend::Wgpu;
    type B = Wgpu;
    let device = Default::default();
    let executed = super::fused::EXECUTED.load(Ordering::Relaxed);
    let lhs = random::<Flex, 3>([2, 7, 5], &Default::default());
    let stored = random::<Flex, 3>([1, 9, 5], &Default::default());
    let sum = random::<Flex, 3>([2, 7, 9], &Default::default());
    let reference = values(sum.clone() + lhs.clone().matmul(stored.clone().swap_dims(1, 2)));
    let on_wgpu = |t: &Tensor<Flex, 3>| Tensor::<B, 3>::from_data(t.to_data(), &device);
    let (lhs, rhs, sum) = (on_wgpu(&lhs), on_wgpu(&stored).swap_dims(1, 2), on_wgpu(&sum));
    QUEUE_GEMM.with(|queue| queue.set(true));
    let queued = values(super::gemm_accumulate(sum, lhs.clone(), rhs.clone()));
    QUEUE_GEMM.with(|queue| queue.set(false));
    assert!(largest_difference(&queued, &reference) < 1e-4, "the queued GEMM with a sum differs");
    let product = values(super::gemm(lhs, rhs));
    assert!(largest_difference(&product, &reference) > 1e-2, "control: the sum changed nothing");
    assert!(super::fused::EXECUTED.load(Ordering::Relaxed) > executed, "the custom operation did not run");
}

/// The linear layers' GEMM forms (what `Lean` runs where the vendor's GEMM is) equal
/// Burn's defaults on Flex, forward and both gradients, for token rows and for a batch of
/// sequences; the control: a changed input changes the weight gradient beyond the tolerance.
#[test]
fn the_linear_gemm_forms_equal_burns_linear_ops() {
    type B = Flex;
    let device = Default::default();
    for (x_shape, d_out) in [([1, 12, 6], 5), ([3, 4, 6], 7)] {
        let x = random::<B, 3>(x_shape, &device);
        let weight = random::<B, 2>([6, d_out], &device);
        let bias = random::<B, 1>([d_out], &device);
        let grad = random::<B, 3>([x_shape[0], x_shape[1], d_out], &device);
        let p = |t: &Tensor<B, 3>| t.clone().into_primitive().tensor();
        let (xp, wp, bp, gp) =
            (p(&x), weight.clone().into_primitive().tensor(), bias.clone().into_primitive().tensor(), p(&grad));
        let pairs = [
            (linear::<B>(xp.clone(), wp.clone(), Some(bp.clone())), B::linear(xp.clone(), wp.clone(), Some(bp))),
            (linear_x_backward::<B>(wp.clone(), gp.clone()), B::linear_x_backward(wp.clone(), gp.clone())),
            (linear_weight_backward::<B>(xp.clone(), gp.clone()), B::linear_weight_backward(xp.clone(), gp.clone())),
        ];
        for (ours, burns) in pairs {
            let (ours, burns) = (float_values(ours), float_values(burns));
            assert!(largest_difference(&ours, &burns) < 1e-4);
        }
        let changed = B::float_add_scalar(xp, 0.5.into());
        let control = float_values(linear_weight_backward::<B>(changed, gp.clone()));
        let burns = float_values(B::linear_weight_backward(p(&x), gp));
        assert!(largest_difference(&control, &burns) > 1e-2);
    }
}

fn float_values(tensor: burn_backend::tensor::FloatTensor<Flex>) -> Vec<f32> {
    float_values_of::<Flex>(tensor)
}

fn float_values_of<B: burn::tensor::backend::Backend>(tensor: burn_backend::tensor::FloatTensor<B>) -> Vec<f32> {
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(tensor)).into_data().convert::<f32>().to_vec().unwrap()
}

/// Off the vendor's path, `gemm` is the backend's matmul to the bit (CI's backends).
#[test]
fn gemm_without_the_vendor_is_the_backends_matmul() {
    type B = Flex;
    let device = Default::default();
    assert!(!<B as GemmOps>::vendor_gemm(&device));
    let lhs = random::<B, 2>([9, 4], &device);
    let rhs = random::<B, 2>([6, 4], &device).transpose();
    let expected = lhs.clone().matmul(rhs.clone()).into_data();
    assert_eq!(super::gemm(lhs, rhs).into_data(), expected);
}

#[cfg(feature = "cuda")]
#[test]
fn the_library_probe_says_what_it_tried_and_what_it_found() {
    use super::cublaslt::probe;
    let missing = probe(&["libleanburn-no-such-library.so".into()]).unwrap_err();
    assert!(missing.contains("cuBLASLt not found") && missing.contains("libleanburn-no-such-library.so"), "{missing}");
    // The control: a library that loads but is not cuBLASLt.
    let other = probe(&["libm.so.6".into()]).unwrap_err();
    assert!(other.contains("not cuBLASLt"), "{other}");
    // Without the library (CI), CUDA devices would keep CubeCL's matmul, and say why.
    if super::cublaslt::library().is_err() {
        assert!(matches!(super::vendor_gemm(), super::VendorGemm::CubeCl(_)));
        assert!(super::vendor_gemm().to_string().starts_with("Lean's GEMMs on CubeCL's matmul ("));
    }
}

/// The operands cuBLASLt's call would copy, by the layouts above: none for contiguous and
/// transposed operands, one for each head view whose batch and heads have other strides than
/// one flat index's (`[b, t, h, d]` viewed as `[b, h, t, d]`), one for a matrix with no unit
/// stride; `None` for a partly broadcast batch, which no copy lets cuBLASLt take.
#[test]
fn operand_copies_follow_the_layouts() {
    let contiguous =
        |shape: &[usize]| -> Vec<usize> { (0..shape.len()).map(|dim| shape[dim + 1..].iter().product()).collect() };
    let copies = |lhs: (&[usize], &[usize]), rhs: (&[usize], &[usize])| {
        operand_copies(View { shape: lhs.0, strides: lhs.1 }, View { shape: rhs.0, strides: rhs.1 })
    };
    let (b, h, t, d) = (2, 3, 5, 4);
    let heads = [b, h, t, d];
    // A head view of a packed [b·t, 3·h·d] buffer: b steps t·3hd, h steps d, t steps 3hd.
    let head_view = [t * 3 * h * d, d, 3 * h * d, 1];
    let keys_t = [b, h, d, t];
    let keys_t_view = [t * 3 * h * d, d, 1, 3 * h * d];
    let scores = [b, h, t, t];
    assert_eq!(copies((&heads, &contiguous(&heads)), (&keys_t, &contiguous(&keys_t))), Some(0));
    assert_eq!(copies((&heads, &contiguous(&heads)), (&keys_t, &keys_t_view)), Some(1), "a transposed head view");
    assert_eq!(copies((&heads, &head_view), (&keys_t, &keys_t_view)), Some(2));
    assert_eq!(copies((&scores, &contiguous(&scores)), (&heads, &head_view)), Some(1));
    // The transpose of a contiguous tensor: unit row stride, no copy.
    assert_eq!(
        copies((&[b, t, d], &[t * d, 1, t]), (&[b, t, d][..], &[t * d, d, 1][..])),
        None,
        "shapes that do not multiply"
    );
    assert_eq!(copies((&[b, d, t], &[t * d, 1, d]), (&[b, t, d], &[t * d, d, 1])), Some(0), "a transposed view");
    assert_eq!(copies((&[t, d], &[2 * d, 2]), (&[d, t], &[t, 1])), Some(1), "every other column");
    assert_eq!(copies((&[2, 3, t, d], &contiguous(&[2, 3, t, d])), (&[2, 1, d, t], &contiguous(&[2, 1, d, t]))), None);
}
