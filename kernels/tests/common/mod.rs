//! What the kernel tests share: the element types they run the kernels in, the error
//! they measure against an f64 reference, and the shapes of the element-wise kernels'
//! rows. (Each test binary uses part of it.)
#![allow(dead_code)]

use cubecl::prelude::*;
use rand::rngs::SmallRng;
use rand::Rng;

/// The largest |got − want| / (1 + |want|).
pub fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).abs() / (1.0 + w.abs())).fold(0.0, f64::max)
}

/// Shapes `[rows, row]` for a kernel over rows with a bias per row: random, and ones whose
/// rows are and are not multiples of four.
pub fn row_shapes(rng: &mut SmallRng) -> Vec<[usize; 2]> {
    let mut shapes: Vec<[usize; 2]> = (0..8).map(|_| [rng.random_range(1..=40), rng.random_range(1..=300)]).collect();
    shapes.extend([[1, 1], [3, 1], [1, 4], [256, 4], [5, 820], [7, 3], [2, 4099]]);
    shapes
}

/// An element type the kernels are tested in, converted from and to the f32 values the
/// references take.
pub trait Element: Float + CubeElement {
    fn narrow(values: &[f32]) -> Vec<Self>;
    fn widen(values: &[Self]) -> Vec<f32>;
}

impl Element for f32 {
    fn narrow(values: &[f32]) -> Vec<Self> {
        values.to_vec()
    }
    fn widen(values: &[Self]) -> Vec<f32> {
        values.to_vec()
    }
}

impl Element for half::f16 {
    fn narrow(values: &[f32]) -> Vec<Self> {
        values.iter().map(|&v| half::f16::from_f32(v)).collect()
    }
    fn widen(values: &[Self]) -> Vec<f32> {
        values.iter().map(|v| v.to_f32()).collect()
    }
}
