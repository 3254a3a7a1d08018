//! The LM head's loss-rows kernel against its f64 reference on a real runtime (wgpu;
//! llvmpipe in CI): randomized rows and vocabularies (below, at and above the cube's 256
//! units, and GPT-2's padded 50,304; rows read as vectors of 4, 2 and 1; a row's first
//! and last logit as targets), logits spread wide enough that an unshifted
//! exponential would overflow, the loss alone and with the gradient, f32 and f16 logits
//! (f32 arithmetic). Controls: a target off by one and a gradient without its scale are
//! caught.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::launch_lm_head_loss_rows;
use leanburn_kernels::reference::lm_head_loss_rows;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32 logits: losses within 1e-6 · (1 + |want|), gradients within 1e-6 · scale · (1 +
/// |want / scale|) (f32 exponentials of shifted logits, sums over the vocabulary; seen:
/// 1.2e-7 and 3e-8).
const F32_TOLERANCE: f64 = 1e-6;
/// f16 logits: the kernel reads the same rounded values the reference gets; the
/// gradient's own f16 rounding (2⁻¹¹ relative) dominates (seen: 2.1e-4).
const F16_TOLERANCE: f64 = 5e-4;

/// The kernel's row losses and, `with_grad`, its gradient (else empty).
fn run<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    logits: &[f32],
    targets: &[usize],
    vocab: usize,
    scale: f32,
    with_grad: bool,
) -> (Vec<f32>, Vec<f32>) {
    let rows = targets.len();
    let ids: Vec<i32> = targets.iter().map(|&t| t as i32).collect();
    let logits_handle = client.create_from_slice(E::as_bytes(&E::narrow(logits)));
    let targets_handle = client.create_from_slice(i32::as_bytes(&ids));
    let losses = client.empty(rows * 4);
    let grad = client.empty(if with_grad { logits.len() * size_of::<E>() } else { 4 });
    // SAFETY (of every use): each handle holds the elements its shape says.
    let arg = |handle: &cubecl::server::Handle, shape: Vec<usize>| unsafe {
        let strides = if shape.len() == 2 { vec![shape[1], 1] } else { vec![1] };
        TensorArg::from_raw_parts(handle.clone(), strides.into(), shape.into())
    };
    unsafe {
        launch_lm_head_loss_rows::<WgpuRuntime, E, i32>(
            client,
            arg(&logits_handle, vec![rows, vocab]),
            arg(&targets_handle, vec![rows]),
            arg(&losses, vec![rows]),
            arg(&grad, if with_grad { vec![rows, vocab] } else { vec![1] }),
            [rows, vocab],
            scale,
            with_grad,
        );
    }
    let losses = f32::from_bytes(&client.read_one(losses).unwrap()).to_vec();
    let grad = if with_grad { E::widen(E::from_bytes(&client.read_one(grad).unwrap())) } else { Vec::new() };
    (losses, grad)
}

/// The largest error of the losses and of the gradients (relative to the scale).
fn errors(got: &(Vec<f32>, Vec<f32>), want: &(Vec<f64>, Vec<f64>), scale: f64) -> (f64, f64) {
    let relative = |g: f32, w: f64, unit: f64| (f64::from(g) - w).abs() / (unit * (1.0 + (w / unit).abs()));
    let loss = got.0.iter().zip(&want.0).map(|(&g, &w)| relative(g, w, 1.0)).fold(0.0, f64::max);
    let grad = got.1.iter().zip(&want.1).map(|(&g, &w)| relative(g, w, scale)).fold(0.0, f64::max);
    (loss, grad)
}

/// Rows of logits spread over ±`spread`, and a target per row.
fn case(rng: &mut SmallRng, rows: usize, vocab: usize, spread: f32) -> (Vec<f32>, Vec<usize>) {
    let logits = (0..rows * vocab).map(|_| rng.random_range(-spread..spread)).collect();
    (logits, (0..rows).map(|_| rng.random_range(0..vocab)).collect())
}

fn check<E: Element>(tolerance: f64) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x1055);
    let mut shapes: Vec<(usize, usize)> =
        (0..6).map(|_| (rng.random_range(1..=40), rng.random_range(1..=3000))).collect();
    // Rows read as vectors of four, two and one logit (the widest that divides the row).
    shapes.extend([(3, 256), (2, 1), (5, 50_304), (4, 1000), (3, 998), (3, 999)]);
    for (index, (rows, vocab)) in shapes.into_iter().enumerate() {
        let spread = if index % 2 == 0 { 8.0 } else { 60.0 };
        let (logits, mut targets) = case(&mut rng, rows, vocab, spread);
        // A row's last logit and its first as targets: a vector's last and first lane.
        targets[0] = vocab - 1;
        if rows > 1 {
            targets[1] = 0;
        }
        let logits = E::widen(&E::narrow(&logits));
        let scale = 1.0 / (rows as f32 * 3.0);
        let want = lm_head_loss_rows(&logits, &targets, vocab, f64::from(scale));
        let with_grad = index != 1;
        let got = run::<E>(&client, &logits, &targets, vocab, scale, with_grad);
        let (loss, grad) = errors(&got, &want, f64::from(scale));
        assert!(
            loss <= tolerance && grad <= tolerance,
            "case {index} ({rows} × {vocab}, ±{spread}): loss off by {loss:.2e}, gradient by {grad:.2e} \
             (tolerance {tolerance:.0e})"
        );
    }
}

#[test]
fn f32_loss_rows_match_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_loss_rows_match_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The controls: targets shifted by one, or the gradient computed at another scale, put
/// the kernel's result outside the tolerance.
#[test]
fn a_wrong_target_or_scale_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(9);
    let (rows, vocab, scale) = (7, 700, 0.125f32);
    let (logits, targets) = case(&mut rng, rows, vocab, 8.0);
    let want = lm_head_loss_rows(&logits, &targets, vocab, f64::from(scale));
    let shifted: Vec<usize> = targets.iter().map(|t| (t + 1) % vocab).collect();
    let (loss, grad) = errors(&run::<f32>(&client, &logits, &shifted, vocab, scale, true), &want, f64::from(scale));
    assert!(loss > 100.0 * F32_TOLERANCE && grad > 100.0 * F32_TOLERANCE, "a wrong target went unnoticed");
    let (_, grad) = errors(&run::<f32>(&client, &logits, &targets, vocab, 1.0, true), &want, f64::from(scale));
    assert!(grad > 100.0 * F32_TOLERANCE, "a wrong scale went unnoticed");
    let right = errors(&run::<f32>(&client, &logits, &targets, vocab, scale, true), &want, f64::from(scale));
    assert!(right.0 <= F32_TOLERANCE && right.1 <= F32_TOLERANCE, "the same inputs must match: {right:?}");
}
