//! Weights written by `materialize_persistent` take CubeCL's persistent memory on a real
//! pool (fused wgpu, llvmpipe in CI): a buffer of their size, not a slice of a shared page.
//!
//! What is measured: how far the pool's `bytes_reserved` rises while a 20 MiB weight is
//! built and read. On llvmpipe a 20 MiB slice needs a 128 MiB page. The control is Burn's
//! own lazy initialiser (`materialize`): under Fusion its random draw runs only when the
//! weight is first read, outside the persistent window, so the weight lands in such a
//! page. The test holds the device lock, so the pool is this test's alone while it runs.

use burn::backend::wgpu::WgpuDevice;
use burn::backend::{Autodiff, Wgpu};
use burn::nn::LinearConfig;
use burn::tensor::Shape;
use leanburn::init::{materialize, materialize_persistent};
use leanburn::MemoryProbe;

type B = Autodiff<Wgpu>;

const MIB: u64 = 1 << 20;

fn reserved(device: &WgpuDevice) -> u64 {
    B::memory_sample(device).expect("a wgpu pool").bytes_reserved
}

#[test]
fn persistent_weights_reserve_their_size_and_lazy_ones_a_page() {
    let _device_lock = crate::common::exclusive_device();
    let device = crate::common::wgpu_device();
    // [1024 → 5120]: a 20 MiB weight and a 20 KiB bias.
    let start = reserved(&device);
    let lazy = materialize(LinearConfig::new(1024, 5120).init::<B>(&device));
    let values = lazy.weight.val().into_data();
    let control = reserved(&device) - start;
    eprintln!("lazy initialiser: {control} B reserved");
    assert!(control >= 128 * MIB, "the control reserved only {control} B: a shared page was expected");
    drop(lazy);

    // Another size, so nothing of the control's is reused for the weight itself.
    let before = reserved(&device);
    let persistent = materialize_persistent(LinearConfig::new(1024, 5121).init::<B>(&device));
    let read = persistent.weight.val().into_data();
    let rise = reserved(&device) - before;
    eprintln!("persistent weights: {rise} B reserved");
    let weight = 1024 * 5121 * 4;
    assert!(rise >= weight, "{rise} B reserved for a {weight} B weight");
    // The weight and, at most, the buffer of its random draw (freed, kept for the next
    // allocation of that size); no new page.
    assert!(rise < 2 * weight + MIB, "{rise} B reserved for a {weight} B weight");
    assert_eq!(read.shape, Shape::new([1024, 5121]));
    assert_eq!(values.shape, Shape::new([1024, 5120]));
}
