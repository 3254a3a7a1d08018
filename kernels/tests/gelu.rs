//! GELU's exact-derivative kernel against its f64 reference on a real runtime (wgpu;
//! llvmpipe in CI): randomized lengths (multiples of the vector width and not), inputs over
//! [−6, 6] with 0 and points far in both tails, f32 and f16. The control: the derivative of
//! GELU's tanh approximation (Burn 0.21's default `gelu_backward`) misses the same
//! reference by far more than the tolerance, so the comparison tells the two apart.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::launch_gelu_backward;
use leanburn_kernels::reference::gelu_backward;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ tolerance · (1 + |want|) (an f32 erf and exponential per element;
/// seen: 1.7e-7; the tanh approximation's derivative misses by 7.7e-4).
const F32_TOLERANCE: f64 = 1e-6;
/// f16 inputs and outputs: the output's own rounding (2⁻¹¹ relative) dominates (seen:
/// 2.4e-4).
const F16_TOLERANCE: f64 = 1e-3;

/// Random inputs of `len` elements over [−6, 6], with 0 and ±9 among them.
fn inputs(rng: &mut SmallRng, len: usize) -> (Vec<f32>, Vec<f32>) {
    let special = [0.0, 9.0, -9.0];
    let x = (0..len).map(|i| special.get(i % 97).copied().unwrap_or_else(|| rng.random_range(-6.0..6.0))).collect();
    let grad = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
    (x, grad)
}

/// The kernel's `grad · gelu′(x)`, widened to f32.
fn run<E: Element>(client: &ComputeClient<WgpuRuntime>, x: &[f32], grad: &[f32]) -> Vec<f32> {
    let len = x.len();
    let x_handle = client.create_from_slice(E::as_bytes(&E::narrow(x)));
    let grad_handle = client.create_from_slice(E::as_bytes(&E::narrow(grad)));
    let out = client.empty(len * size_of::<E>());
    // SAFETY: three distinct buffers of `len` elements of `E`, contiguous.
    unsafe {
        let arg = |h: &cubecl::server::Handle| TensorArg::from_raw_parts(h.clone(), vec![1].into(), vec![len].into());
        launch_gelu_backward::<WgpuRuntime, E>(client, arg(&x_handle), arg(&grad_handle), arg(&out), len);
    }
    E::widen(E::from_bytes(&client.read_one(out).unwrap()))
}

/// The largest |got − want| / (1 + |want|).
fn error(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).abs() / (1.0 + w.abs())).fold(0.0, f64::max)
}

fn check<E: Element>(tolerance: f64) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x6e1);
    let mut lengths: Vec<usize> = (0..8).map(|_| rng.random_range(1..=5000)).collect();
    lengths.extend([1, 3, 4, 1024, 4099]);
    for len in lengths {
        let (x, grad) = inputs(&mut rng, len);
        let (x, grad) = (E::widen(&E::narrow(&x)), E::widen(&E::narrow(&grad)));
        let error = error(&run::<E>(&client, &x, &grad), &gelu_backward(&x, &grad));
        assert!(error <= tolerance, "{len} elements: off by {error:.2e} (tolerance {tolerance:.0e})");
    }
}

#[test]
fn f32_gelu_backward_matches_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_gelu_backward_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The derivative of `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, times `grad`.
fn tanh_approximation_backward(x: &[f32], grad: &[f32]) -> Vec<f64> {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let derivative = |x: f64| {
        let t = (c * (x + 0.044715 * x * x * x)).tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
    };
    x.iter().zip(grad).map(|(&x, &g)| f64::from(g) * derivative(f64::from(x))).collect()
}

#[test]
fn the_tanh_approximations_derivative_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let (x, grad) = inputs(&mut SmallRng::seed_from_u64(5), 2000);
    let got = run::<f32>(&client, &x, &grad);
    assert!(error(&got, &gelu_backward(&x, &grad)) <= F32_TOLERANCE, "the same inputs must match");
    let approximate = tanh_approximation_backward(&x, &grad);
    let missed = error(&got, &approximate);
    assert!(missed > 100.0 * F32_TOLERANCE, "the tanh approximation's derivative went unnoticed: {missed:.2e}");
}
