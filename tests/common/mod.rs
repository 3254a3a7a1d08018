//! Shared pieces of the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use burn::backend::wgpu::WgpuDevice;
use burn::prelude::*;
use burn::tensor::Distribution;

/// Memory tests read one device pool; running two at once would mix their readings.
static DEVICE_POOL: Mutex<()> = Mutex::new(());

/// The device lock, with the process-wide settings a test may change (the convolution
/// budget, the attention workspace) back at their defaults: a test sees the ones it sets
/// itself, not the ones an earlier test of the same binary left.
pub fn exclusive_device() -> MutexGuard<'static, ()> {
    let guard = DEVICE_POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    leanburn::backend::ConvBudget::set_global(leanburn::backend::ConvBudget::default());
    leanburn::backend::set_attention_workspace(leanburn::backend::DEFAULT_ATTENTION_WORKSPACE_BYTES);
    guard
}

/// The wgpu device CI runs on: the default adapter, llvmpipe on a machine without a GPU.
pub fn wgpu_device() -> WgpuDevice {
    WgpuDevice::DefaultDevice
}

pub const CLASSES: usize = 4;

/// A random image batch with cycling labels, made on `device`.
pub fn image_batch<B: Backend>(
    size: usize,
    side: usize,
    step: u64,
    device: &B::Device,
) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
    let images = Tensor::random([size, 3, side, side], Distribution::Normal(0.0, 1.0), device);
    let labels: Vec<i64> = (0..size).map(|i| ((i as u64 + step) % CLASSES as u64) as i64).collect();
    (images, Tensor::from_data(TensorData::new(labels, [size]), device))
}

/// An example binary, which `cargo test` builds beside the test binaries, with the
/// backend-selection environment cleared and leanburn's kernel cache off (so CubeCL keeps
/// its autotune results in `target/`, shared with the other test binaries, unless a test
/// passes `--kernel-cache`).
pub fn example(name: &str) -> Command {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} is missing: run through `cargo test`, which builds the examples", path.display());
    let mut command = Command::new(path);
    command.env_remove("LEANBURN_BACKEND").env_remove("LEANBURN_ALLOW_SOFTWARE");
    command.env(leanburn::device::CACHE_DIR_VAR, "off");
    command
}

/// A finished command's exit status and output, for assertion messages.
pub fn output_text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A fresh, empty directory `name` under the target directory's tmp.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes an IDX pair of `count` 16 × 16 grey images into `dir`: label `i % 10`, a bright
/// bar whose row is the label (so the classes can be told apart).
pub fn write_idx_pair(dir: &Path, count: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut images = Vec::new();
    for word in [0x0803u32, count as u32, 16, 16] {
        images.extend(word.to_be_bytes());
    }
    let mut labels = Vec::new();
    for word in [0x0801u32, count as u32] {
        labels.extend(word.to_be_bytes());
    }
    for i in 0..count {
        let label = i % 10;
        images.extend((0..256).map(|p| if p / 16 == label + 3 { 255u8 } else { (p * 7 % 40) as u8 }));
        labels.push(label as u8);
    }
    std::fs::write(dir.join("images-idx3-ubyte"), images).unwrap();
    std::fs::write(dir.join("labels-idx1-ubyte"), labels).unwrap();
}
