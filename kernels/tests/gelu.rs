//! GELU's kernels, the forward and the exact derivative, against their f64 references on a
//! real runtime (wgpu; llvmpipe in CI): with and without a bias added to every row,
//! randomized shapes (lengths and rows that are multiples of the vector width and not),
//! inputs over [−6, 6] with 0 and points far in both tails, f32 and f16. The controls: the
//! derivative of GELU's tanh approximation (Burn 0.21's default `gelu_backward`) misses the
//! derivative's reference, and the kernels without the bias miss the biased references,
//! by far more than the tolerances.

mod common;

use common::{relative_error, row_shapes, Element};
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::{gelu, gelu_backward};
use leanburn_kernels::{launch_gelu, launch_gelu_backward, RowBias};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ tolerance · (1 + |want|) (an f32 erf and exponential per element;
/// seen: 2.6e-7 forward, 1.8e-7 for the derivative; the tanh approximation's derivative
/// misses by 7.7e-4).
const F32_TOLERANCE: f64 = 1e-6;
/// f16 inputs and outputs: the output's own rounding (2⁻¹¹ relative) dominates (seen:
/// 4.3e-4 forward, 2.4e-4 for the derivative).
const F16_TOLERANCE: f64 = 1e-3;

/// `x` (`rows × row` elements), a bias of `row` elements or none, and an output gradient.
struct Case {
    x: Vec<f32>,
    bias: Option<Vec<f32>>,
    grad: Vec<f32>,
}

impl Case {
    /// Random inputs over [−6, 6], with 0 and ±9 among them; a bias over [−2, 2].
    fn new(rng: &mut SmallRng, rows: usize, row: usize, biased: bool) -> Self {
        let special = [0.0, 9.0, -9.0];
        let len = rows * row;
        let x = (0..len).map(|i| special.get(i % 97).copied().unwrap_or_else(|| rng.random_range(-6.0..6.0))).collect();
        let bias = biased.then(|| (0..row).map(|_| rng.random_range(-2.0..2.0)).collect());
        let grad = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
        Self { x, bias, grad }
    }

    /// The values as `E` holds them, widened back.
    fn rounded<E: Element>(&self) -> Self {
        let round = |values: &Vec<f32>| E::widen(&E::narrow(values));
        Self { x: round(&self.x), bias: self.bias.as_ref().map(round), grad: round(&self.grad) }
    }

    /// `x + bias` in f64: what the references take.
    fn pre_activations(&self) -> Vec<f64> {
        let bias = |i: usize| self.bias.as_ref().map_or(0.0, |bias| f64::from(bias[i % bias.len()]));
        self.x.iter().enumerate().map(|(i, &x)| f64::from(x) + bias(i)).collect()
    }
}

/// Runs the forward (no `grad`) or the derivative on `case` in `E`, widened to f32; with
/// `use_bias` false the bias is not passed.
fn run<E: Element>(client: &ComputeClient<WgpuRuntime>, case: &Case, backward: bool, use_bias: bool) -> Vec<f32> {
    let len = case.x.len();
    let upload = |values: &[f32]| client.create_from_slice(E::as_bytes(&E::narrow(values)));
    let arg = |handle: &Handle, len: usize| {
        // SAFETY: every handle here holds `len` elements of `E`, contiguous.
        unsafe { TensorArg::from_raw_parts(handle.clone(), vec![1].into(), vec![len].into()) }
    };
    let x = upload(&case.x);
    let bias = case.bias.as_ref().filter(|_| use_bias).map(|bias| (upload(bias), bias.len()));
    let bias = match &bias {
        Some((handle, row)) => RowBias { arg: arg(handle, *row), row: Some(*row) },
        None => RowBias { arg: arg(&x, len), row: None },
    };
    let out = client.empty(len * size_of::<E>());
    // SAFETY: distinct buffers of `len` elements of `E` (the bias: `row` dividing `len`).
    unsafe {
        match backward {
            false => launch_gelu::<WgpuRuntime, E>(client, arg(&x, len), bias, arg(&out, len), len),
            true => {
                let grad = upload(&case.grad);
                launch_gelu_backward::<WgpuRuntime, E>(client, arg(&x, len), bias, arg(&grad, len), arg(&out, len), len)
            }
        }
    }
    E::widen(E::from_bytes(&client.read_one(out).unwrap()))
}

/// The reference for `case`: GELU, or its derivative times `grad`.
fn reference(case: &Case, backward: bool) -> Vec<f64> {
    match backward {
        false => gelu(&case.pre_activations()),
        true => gelu_backward(&case.pre_activations(), &case.grad),
    }
}

fn check<E: Element>(tolerance: f64, backward: bool) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x6e1);
    let what = if backward { "derivative" } else { "forward" };
    let mut worst = 0.0f64;
    for [rows, row] in row_shapes(&mut rng) {
        for biased in [false, true] {
            let case = Case::new(&mut rng, rows, row, biased).rounded::<E>();
            let error = relative_error(&run::<E>(&client, &case, backward, true), &reference(&case, backward));
            assert!(
                error <= tolerance,
                "{what}, {rows} × {row}, bias {biased}: off by {error:.2e} (tolerance {tolerance:.0e})"
            );
            worst = worst.max(error);
        }
    }
    eprintln!("{what} in {}: worst {worst:.2e} (tolerance {tolerance:.0e})", std::any::type_name::<E>());
}

#[test]
fn f32_gelu_matches_the_reference() {
    check::<f32>(F32_TOLERANCE, false);
}

#[test]
fn f16_gelu_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE, false);
}

#[test]
fn f32_gelu_backward_matches_the_reference() {
    check::<f32>(F32_TOLERANCE, true);
}

#[test]
fn f16_gelu_backward_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE, true);
}

/// The derivative of `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, times `grad`.
fn tanh_approximation_backward(x: &[f64], grad: &[f32]) -> Vec<f64> {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let derivative = |x: f64| {
        let t = (c * (x + 0.044715 * x * x * x)).tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
    };
    x.iter().zip(grad).map(|(&x, &g)| f64::from(g) * derivative(x)).collect()
}

#[test]
fn the_tanh_approximations_derivative_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let case = Case::new(&mut SmallRng::seed_from_u64(5), 1, 2000, false);
    let got = run::<f32>(&client, &case, true, true);
    assert!(relative_error(&got, &reference(&case, true)) <= F32_TOLERANCE, "the same inputs must match");
    let missed = relative_error(&got, &tanh_approximation_backward(&case.pre_activations(), &case.grad));
    assert!(missed > 100.0 * F32_TOLERANCE, "the tanh approximation's derivative went unnoticed: {missed:.2e}");
}

#[test]
fn a_missing_bias_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let case = Case::new(&mut SmallRng::seed_from_u64(9), 16, 64, true);
    for backward in [false, true] {
        let want = reference(&case, backward);
        assert!(
            relative_error(&run::<f32>(&client, &case, backward, true), &want) <= F32_TOLERANCE,
            "the same inputs must match"
        );
        let missed = relative_error(&run::<f32>(&client, &case, backward, false), &want);
        assert!(
            missed > 100.0 * F32_TOLERANCE,
            "backward {backward}: a GELU without its bias went unnoticed: {missed:.2e}"
        );
    }
}
