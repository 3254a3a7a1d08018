//! `trim()` hands back what the pool reserved for a large transient allocation. The
//! control is the same allocation without `trim()`: the reserve stays, which is why
//! `trim()` exists.

use burn::prelude::*;
use leanburn::memory::trim;
use leanburn::MemoryProbe;

use crate::common::{exclusive_device, wgpu_device};

type Inner = burn::backend::wgpu::Wgpu;

/// 64 MiB of f32.
const TRANSIENT: usize = 16 << 20;

fn reserved(device: &burn::backend::wgpu::WgpuDevice) -> u64 {
    Inner::memory_sample(device).expect("wgpu memory is readable").bytes_reserved
}

fn transient(device: &burn::backend::wgpu::WgpuDevice) {
    let big = Tensor::<Inner, 1>::from_data(TensorData::new(vec![1f32; TRANSIENT], [TRANSIENT]), device);
    let tail: Vec<f32> = big.slice([TRANSIENT - 4..TRANSIENT]).into_data().to_vec().expect("f32 data");
    assert_eq!(tail, [1.0; 4]);
}

#[test]
fn trim_lowers_bytes_reserved_after_a_large_transient() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    trim::<Inner>(&device);
    let before = reserved(&device);

    // Control: dropped, but still reserved by the pool.
    transient(&device);
    let kept = reserved(&device);
    println!("reserved before {before} B, after the transient {kept} B");
    assert!(kept >= before + (TRANSIENT * 4) as u64, "the pool should keep the transient's pages reserved");

    let report = trim::<Inner>(&device);
    let released = report.released_bytes().expect("readings before and after");
    println!("trim released {released} B; reserved now {} B", reserved(&device));
    assert!(released >= (TRANSIENT * 4) as u64, "trim released only {released} B");
    assert!(reserved(&device) <= before + (1 << 20), "the reserve did not return near its level before");
}
