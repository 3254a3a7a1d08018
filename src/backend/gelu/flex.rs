//! [`GeluOps`] on Burn's CPU backend (`Flex`): GELU and its exact derivative in one pass
//! over contiguous f32, with `Φ` from an erfc that vectorises (Abramowitz and Stegun 7.1.26:
//! a degree-5 polynomial in `t = 1/(1 + p·z)` times `e^{−z²}`, within 1.5e-7 of erf) and the
//! exponential shared with the derivative's density. Flex's own `gelu` and `gelu_backward`
//! call libm's `erff` once an element (about 3% of the CPU main job's step, perf on
//! 2026-12-07); they stay for other types and layouts.

use core::mem::MaybeUninit;

use burn::backend::Flex;
use burn::tensor::TensorData;
use burn_backend::ops::ActivationOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::TensorMetadata;
use burn_flex::FlexTensor;
use rayon::prelude::*;

use super::GeluOps;
use crate::backend::cpu_rows::exp;

/// Elements per parallel task.
const CHUNK: usize = 1 << 14;

impl GeluOps for Flex {
    fn exact_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let Some(values) = contiguous_f32(&x) else {
            return Flex::gelu(x);
        };
        let pass = widest_gelu();
        let mut out = Box::new_uninit_slice(values.len());
        out.par_chunks_mut(CHUNK).zip(values.par_chunks(CHUNK)).for_each(|(out, x)| pass(x, out));
        // SAFETY: the chunks cover the buffer, and each pass wrote its chunk.
        written(unsafe { out.assume_init() }, &x)
    }

    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let (Some(values), Some(grads)) = (contiguous_f32(&x), contiguous_f32(&grad)) else {
            return Flex::gelu_backward(x, grad);
        };
        if values.len() != grads.len() {
            return Flex::gelu_backward(x, grad);
        }
        let pass = widest_gelu_grad();
        let mut out = Box::new_uninit_slice(values.len());
        out.par_chunks_mut(CHUNK)
            .zip(values.par_chunks(CHUNK).zip(grads.par_chunks(CHUNK)))
            .for_each(|(out, (x, grad))| pass(x, grad, out));
        // SAFETY: the chunks cover the buffer, and each pass wrote its chunk.
        written(unsafe { out.assume_init() }, &x)
    }
}

/// `tensor`'s values, where it is f32 in contiguous memory.
fn contiguous_f32(tensor: &FlexTensor) -> Option<&[f32]> {
    let len = tensor.shape().num_elements();
    tensor.as_slice::<f32>().filter(|values| values.len() == len)
}

/// `values` as a tensor of `like`'s shape.
fn written(values: Box<[f32]>, like: &FlexTensor) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values.into_vec(), like.shape().as_slice().to_vec()))
}

/// `p` and `a₁ … a₅` of Abramowitz and Stegun's 7.1.26.
const P: f32 = 0.327_591_1;
const A: [f32; 5] = [0.254_829_6, -0.284_496_74, 1.421_413_7, -1.453_152, 1.061_405_4];
/// 1/√2.
const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π).
const FRAC_1_SQRT_2PI: f32 = super::FRAC_1_SQRT_2PI as f32;

/// `(Φ(x), φ(x))`: the standard normal CDF (within 4e-7) and density at `x`.
#[inline(always)]
fn cdf_and_density(x: f32) -> (f32, f32) {
    let z = x.abs() * FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    // e^{−z²} = e^{−x²/2}: erfc's factor and, over √(2π), the density.
    let gauss = exp(-0.5 * x * x);
    // Φ(−|x|) = erfc(z) / 2, with no cancellation in the tail.
    let tail = 0.5 * poly * gauss;
    let cdf = if x < 0.0 { tail } else { 1.0 - tail };
    (cdf, gauss * FRAC_1_SQRT_2PI)
}

/// `out = x · Φ(x)`.
#[inline(always)]
fn gelu_chunk(x: &[f32], out: &mut [MaybeUninit<f32>]) {
    for (out, &x) in out.iter_mut().zip(x) {
        out.write(x * cdf_and_density(x).0);
    }
}

/// `out = grad · (Φ(x) + x·φ(x))`.
#[inline(always)]
fn gelu_grad_chunk(x: &[f32], grad: &[f32], out: &mut [MaybeUninit<f32>]) {
    for ((out, &x), &grad) in out.iter_mut().zip(x).zip(grad) {
        let (cdf, density) = cdf_and_density(x);
        out.write(grad * (cdf + x * density));
    }
}

type GeluPass = fn(&[f32], &mut [MaybeUninit<f32>]);
type GeluGradPass = fn(&[f32], &[f32], &mut [MaybeUninit<f32>]);

/// [`gelu_chunk`] in the widest vector instructions this CPU has.
fn widest_gelu() -> GeluPass {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return |x, out| unsafe { gelu_avx512(x, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            return |x, out| unsafe { gelu_avx2(x, out) };
        }
    }
    gelu_chunk
}

/// [`gelu_grad_chunk`] in the widest vector instructions this CPU has.
fn widest_gelu_grad() -> GeluGradPass {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return |x, grad, out| unsafe { gelu_grad_avx512(x, grad, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            return |x, grad, out| unsafe { gelu_grad_avx2(x, grad, out) };
        }
    }
    gelu_grad_chunk
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_avx512(x: &[f32], out: &mut [MaybeUninit<f32>]) {
    gelu_chunk(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(x: &[f32], out: &mut [MaybeUninit<f32>]) {
    gelu_chunk(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_grad_avx512(x: &[f32], grad: &[f32], out: &mut [MaybeUninit<f32>]) {
    gelu_grad_chunk(x, grad, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_grad_avx2(x: &[f32], grad: &[f32], out: &mut [MaybeUninit<f32>]) {
    gelu_grad_chunk(x, grad, out)
}

#[cfg(test)]
mod tests {
    use super::cdf_and_density;

    /// erf(x) in f64 by its Taylor series (about 1e-9 accurate up to |x| = 4.5, where the
    /// terms' cancellation costs seven of f64's sixteen digits).
    fn erf(x: f64) -> f64 {
        let (mut term, mut sum, mut n) = (x, x, 0.0f64);
        while term.abs() > 1e-17 * sum.abs().max(1e-300) {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn the_cdf_and_density_are_within_f32s_reach_of_f64s() {
        let (mut worst_cdf, mut worst_density) = (0.0f64, 0.0f64);
        let mut x = -6.0f32;
        while x <= 6.0 {
            let (cdf, density) = cdf_and_density(x);
            let x64 = f64::from(x);
            let expected_cdf = 0.5 * (1.0 + erf(x64 / std::f64::consts::SQRT_2));
            let expected_density = (-0.5 * x64 * x64).exp() / (2.0 * std::f64::consts::PI).sqrt();
            worst_cdf = worst_cdf.max((f64::from(cdf) - expected_cdf).abs());
            worst_density = worst_density.max((f64::from(density) - expected_density).abs() / expected_density);
            x += 0.000_731;
        }
        eprintln!("Φ: worst {worst_cdf:.2e} absolute; φ: worst {worst_density:.2e} relative (x in [−6, 6])");
        // Abramowitz and Stegun's bound on erf is 1.5e-7, so 7.5e-8 on Φ; the tail's
        // exponential (within 3e-7 relative, `cpu_rows`) on a tail of at most 0.5, and f32's
        // rounding of the polynomial and of `1 − tail`, add at most about 2.5e-7.
        assert!(worst_cdf < 4e-7, "Φ off by {worst_cdf:.2e}");
        // f32's rounding of x²/2 (up to 18 here) moves e^{−x²/2} by up to about 1e-6.
        assert!(worst_density < 2e-6, "φ off by {worst_density:.2e} (relative)");
        // Control: the series itself against known values, so the bound is not against a
        // reference that agrees with anything.
        assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-12);
        assert!((erf(3.0) - 0.999_977_909_503_001_4).abs() < 1e-12);
        // Control: the tanh approximation of Φ is caught by the same bound.
        let tanh_cdf =
            |x: f64| 0.5 * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x)).tanh());
        let tanh_worst = (-600..=600)
            .map(|i| f64::from(i) / 100.0)
            .map(|x| (tanh_cdf(x) - 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2))).abs())
            .fold(0.0, f64::max);
        assert!(tanh_worst > 4e-7, "tanh's Φ off by only {tanh_worst:.2e}");
    }

    #[test]
    fn the_cdf_saturates_and_propagates_nan() {
        assert_eq!(cdf_and_density(40.0).0, 1.0);
        assert!(cdf_and_density(-40.0).0 < 1e-30 && cdf_and_density(-40.0).0 >= 0.0);
        assert!((cdf_and_density(0.0).0 - 0.5).abs() < 1e-7);
        assert!(cdf_and_density(f32::NAN).0.is_nan());
    }
}
