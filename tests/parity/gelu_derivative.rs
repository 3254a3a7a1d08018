//! GELU's gradient under autodiff against finite differences of the backend's own forward
//! pass, on Flex, ndarray and wgpu (llvmpipe in CI): leanburn's `exact_gelu` everywhere, and
//! Burn's `gelu` on `Lean<B>`, whose `gelu_backward` is leanburn's. The control: Burn's `gelu`
//! on ndarray and on wgpu, whose backward is the tanh approximation's derivative (Burn 0.21's
//! default), is caught by the same comparison.
//!
//! The reference is a Richardson-extrapolated central difference at 513 points over
//! [-4, 4], steps of 1/16 and 1/32 (every argument exact in f32): truncation error near
//! 1e-7, rounding about 2e-5. The tolerance, [`TOLERANCE`], sits between that and the tanh
//! derivative's error, up to 8.7e-4 near |x| = 2.

use crate::common;

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn::prelude::*;
use burn::tensor::activation::gelu;
use burn::tensor::backend::AutodiffBackend;
use leanburn::backend::{exact_gelu, GeluOps};
use leanburn::device::CubeWgpu;
use leanburn::Lean;

/// Largest absolute difference allowed between the autodiff gradient and the finite
/// differences.
const TOLERANCE: f64 = 1e-4;

/// x = k/64 for k in -256..=256.
fn points() -> Vec<f32> {
    (-256..=256).map(|k| k as f32 / 64.0).collect()
}

/// The largest |autodiff gradient − finite difference| of `f` over [`points`].
fn worst_error<B: AutodiffBackend>(
    device: &B::Device,
    f: impl Fn(Tensor<B, 1>) -> Tensor<B, 1>,
    forward: impl Fn(Tensor<B::InnerBackend, 1>) -> Tensor<B::InnerBackend, 1>,
) -> f64 {
    let xs = points();
    let x = Tensor::<B, 1>::from_floats(xs.as_slice(), device).require_grad();
    let grads = f(x.clone()).sum().backward();
    let gradient = x.grad(&grads).expect("a gradient").into_data().to_vec::<f32>().unwrap();
    let at = |shift: f32| {
        let shifted: Vec<f32> = xs.iter().map(|x| x + shift).collect();
        forward(Tensor::from_floats(shifted.as_slice(), device)).into_data().to_vec::<f32>().unwrap()
    };
    let (h, half) = (1.0f32 / 16.0, 1.0f32 / 32.0);
    let (plus, minus, plus_half, minus_half) = (at(h), at(-h), at(half), at(-half));
    (0..xs.len())
        .map(|i| {
            let wide = (f64::from(plus[i]) - f64::from(minus[i])) / (2.0 * f64::from(h));
            let narrow = (f64::from(plus_half[i]) - f64::from(minus_half[i])) / (2.0 * f64::from(half));
            let richardson = (4.0 * narrow - wide) / 3.0;
            (f64::from(gradient[i]) - richardson).abs()
        })
        .fold(0.0, f64::max)
}

fn exact<B>(name: &str, device: &B::Device)
where
    B: AutodiffBackend + GeluOps,
    B::InnerBackend: GeluOps,
{
    let error = worst_error::<B>(device, exact_gelu, exact_gelu);
    eprintln!("{name}: exact_gelu's gradient within {error:.2e} of finite differences");
    assert!(error <= TOLERANCE, "{name}: exact_gelu's gradient off by {error:.2e} (tolerance {TOLERANCE:.0e})");
}

fn burns<B: AutodiffBackend>(device: &B::Device) -> f64 {
    worst_error::<B>(device, gelu, gelu)
}

#[test]
fn exact_gelu_has_the_exact_derivative_on_flex() {
    exact::<Autodiff<Flex>>("flex", &Default::default());
}

#[test]
fn exact_gelu_has_the_exact_derivative_on_ndarray() {
    exact::<Autodiff<NdArray>>("ndarray", &Default::default());
}

#[test]
fn exact_gelu_has_the_exact_derivative_on_wgpu() {
    let device = common::wgpu_device();
    exact::<Autodiff<Wgpu>>("wgpu (fused)", &device);
    exact::<Autodiff<CubeWgpu>>("wgpu (unfused)", &device);
}

#[test]
fn burns_gelu_on_lean_has_the_exact_derivative() {
    let error = burns::<Autodiff<Lean<CubeWgpu>>>(&common::wgpu_device());
    eprintln!("Burn's gelu on Lean<wgpu>: within {error:.2e}");
    assert!(error <= TOLERANCE, "Burn's gelu on Lean: off by {error:.2e}");
}

/// The control: Burn 0.21's default `gelu_backward` is caught on both backends that use it.
#[test]
fn burns_tanh_derivative_is_caught_on_ndarray_and_wgpu() {
    let ndarray = burns::<Autodiff<NdArray>>(&Default::default());
    let wgpu = burns::<Autodiff<Wgpu>>(&common::wgpu_device());
    eprintln!("Burn's gelu: ndarray {ndarray:.2e}, wgpu {wgpu:.2e} from finite differences");
    assert!(
        ndarray > TOLERANCE && wgpu > TOLERANCE,
        "Burn's tanh derivative passed: ndarray {ndarray:.2e}, wgpu {wgpu:.2e}"
    );
}
