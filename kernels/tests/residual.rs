//! The residual add after a linear layer (`sum = residual + (sum + bias)`, in place) against
//! its f64 reference on a real runtime (wgpu; llvmpipe in CI): with and without a bias added
//! to every row, randomized shapes (lengths and rows that are multiples of the vector width
//! and not), f32 and f16. The controls: the kernel without the bias misses the biased
//! reference, and the reference without the residual misses the kernel's output, by far
//! more than the tolerances.

mod common;

use common::{relative_error, row_shapes, Element};
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::residual_add;
use leanburn_kernels::{launch_residual_add, RowBias};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ tolerance · (1 + |want|) (two f32 roundings of sums up to about 9:
/// seen 2.3e-7).
const F32_TOLERANCE: f64 = 1e-6;
/// f16 inputs and output: the output's own rounding (2⁻¹¹ relative) dominates (seen: 4.3e-4).
const F16_TOLERANCE: f64 = 1e-3;

/// A product `rows × row`, a bias of `row` elements or none, and a residual.
struct Case {
    product: Vec<f32>,
    bias: Option<Vec<f32>>,
    residual: Vec<f32>,
}

impl Case {
    /// A product and a residual over [−4, 4], a bias over [−1, 1].
    fn new(rng: &mut SmallRng, rows: usize, row: usize, biased: bool) -> Self {
        let len = rows * row;
        let product = (0..len).map(|_| rng.random_range(-4.0..4.0)).collect();
        let bias = biased.then(|| (0..row).map(|_| rng.random_range(-1.0..1.0)).collect());
        let residual = (0..len).map(|_| rng.random_range(-4.0..4.0)).collect();
        Self { product, bias, residual }
    }

    /// The values as `E` holds them, widened back.
    fn rounded<E: Element>(&self) -> Self {
        let round = |values: &Vec<f32>| E::widen(&E::narrow(values));
        Self { product: round(&self.product), bias: self.bias.as_ref().map(round), residual: round(&self.residual) }
    }

    fn reference(&self) -> Vec<f64> {
        residual_add(&self.product, self.bias.as_deref(), &self.residual)
    }
}

/// Runs the kernel on `case` in `E`, widened to f32; with `use_bias` false the bias is not
/// passed.
fn run<E: Element>(client: &ComputeClient<WgpuRuntime>, case: &Case, use_bias: bool) -> Vec<f32> {
    let len = case.product.len();
    let upload = |values: &[f32]| client.create_from_slice(E::as_bytes(&E::narrow(values)));
    let arg = |handle: &Handle, len: usize| {
        // SAFETY: every handle here holds `len` elements of `E`, contiguous.
        unsafe { TensorArg::from_raw_parts(handle.clone(), vec![1].into(), vec![len].into()) }
    };
    let (sum, residual) = (upload(&case.product), upload(&case.residual));
    let bias = case.bias.as_ref().filter(|_| use_bias).map(|bias| (upload(bias), bias.len()));
    let bias = match &bias {
        Some((handle, row)) => RowBias { arg: arg(handle, *row), row: Some(*row) },
        None => RowBias { arg: arg(&residual, len), row: None },
    };
    // SAFETY: distinct buffers of `len` elements of `E` (the bias: `row` dividing `len`).
    unsafe { launch_residual_add::<WgpuRuntime, E>(client, arg(&sum, len), bias, arg(&residual, len), len) };
    E::widen(E::from_bytes(&client.read_one(sum).unwrap()))
}

fn check<E: Element>(tolerance: f64) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x4e5);
    let mut worst = 0.0f64;
    for [rows, row] in row_shapes(&mut rng) {
        for biased in [false, true] {
            let case = Case::new(&mut rng, rows, row, biased).rounded::<E>();
            let error = relative_error(&run::<E>(&client, &case, true), &case.reference());
            assert!(
                error <= tolerance,
                "{rows} × {row}, bias {biased}: off by {error:.2e} (tolerance {tolerance:.0e})"
            );
            worst = worst.max(error);
        }
    }
    eprintln!("residual add in {}: worst {worst:.2e} (tolerance {tolerance:.0e})", std::any::type_name::<E>());
}

#[test]
fn f32_residual_add_matches_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_residual_add_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

#[test]
fn a_missing_bias_or_residual_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let case = Case::new(&mut SmallRng::seed_from_u64(9), 16, 64, true);
    let got = run::<f32>(&client, &case, true);
    assert!(relative_error(&got, &case.reference()) <= F32_TOLERANCE, "the same inputs must match");
    let missed = relative_error(&run::<f32>(&client, &case, false), &case.reference());
    assert!(missed > 100.0 * F32_TOLERANCE, "an add without its bias went unnoticed: {missed:.2e}");
    let without_residual = residual_add(&case.product, case.bias.as_deref(), &vec![0.0; case.residual.len()]);
    let missed = relative_error(&got, &without_residual);
    assert!(missed > 100.0 * F32_TOLERANCE, "an add without the residual went unnoticed: {missed:.2e}");
}
