//! [`GeluOps::exact_gelu_backward`] runs one pass where the backend has one: leanburn's
//! kernel on both wgpu stacks (queued as one custom operation on the fused one), Flex's own
//! derivative; the unfused kernel and Flex's pass differ from the composed
//! [`gelu_derivative`] in the last bits, and all agree with it within 1e-6. The control: on
//! ndarray the op is the composed default, bit for bit. (Against finite differences:
//! `tests/parity/gelu_derivative.rs`; the kernel against its f64 reference:
//! `kernels/tests/gelu.rs`.)

use burn::backend::{Flex, NdArray, Wgpu};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use super::fused::QUEUED;
use super::{gelu_derivative, GeluOps};
use crate::device::CubeWgpu;

/// The largest |op − composed| over 4,099 points in [−6, 6] with random output gradients,
/// and whether any value differs at all.
fn compare<B: GeluOps>() -> (f32, bool) {
    let len = 4099;
    let x: Vec<f32> = (0..len).map(|i| ((i * 7919) % 4099) as f32 * 12.0 / 4099.0 - 6.0).collect();
    let grad: Vec<f32> = (0..len).map(|i| ((i * 104_729) % 1013) as f32 / 506.5 - 1.0).collect();
    let device = Default::default();
    let tensor = |values: &Vec<f32>| {
        Tensor::<B, 1>::from_data(TensorData::new(values.clone(), [len]), &device).into_primitive().tensor()
    };
    let values = |primitive| {
        let tensor = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(primitive));
        tensor.into_data().to_vec::<f32>().expect("f32 values")
    };
    let ours = values(B::exact_gelu_backward(tensor(&x), tensor(&grad)));
    let composed = values(gelu_derivative::<B>(tensor(&x), tensor(&grad)));
    let worst = ours.iter().zip(&composed).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    (worst, ours.iter().zip(&composed).any(|(a, b)| a.to_bits() != b.to_bits()))
}

#[test]
fn the_gelu_derivative_is_one_pass_on_wgpu_and_flex_and_composed_on_ndarray() {
    for (backend, (worst, differs)) in [("CubeWgpu", compare::<CubeWgpu>()), ("Flex", compare::<Flex>())] {
        assert!(worst <= 1e-6, "{backend}: off by {worst:.2e} from the composed derivative");
        assert!(differs, "{backend}: the composed derivative ran (the same bits)");
    }
    // The fused stack's composed chain is one kernel, which may give the kernel's bits:
    // the witness is the queued custom operation.
    let before = QUEUED.with(|queued| queued.get());
    let (worst, _) = compare::<Wgpu>();
    assert!(worst <= 1e-6, "Wgpu: off by {worst:.2e} from the composed derivative");
    assert_eq!(QUEUED.with(|queued| queued.get()) - before, 1, "Wgpu: the kernel was not queued");
    let (worst, differs) = compare::<NdArray>();
    assert!(worst == 0.0 && !differs, "ndarray: {worst:.2e}");
}
