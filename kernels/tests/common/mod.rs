//! What the kernel tests share: the element types they run the kernels in.

use cubecl::prelude::*;

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
