//! The LayerNorm kernels against their CPU reference on a real runtime (wgpu; llvmpipe in
//! CI): randomized widths (below, at and above the cube's 128 units; GPT-2-small's 768;
//! rows read in vectors of four, of two, and one element at a time) and row counts (one block of parameter-gradient sums and several, one past 65,535 rows
//! is left to the GPU: llvmpipe would take minutes), with and without β, f32 and f16.
//! Controls: a backward pass fed the wrong row statistics, and the forward with the wrong
//! ε, are caught.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference;
use leanburn_kernels::{
    launch_layer_norm_backward, launch_layer_norm_forward, launch_layer_norm_param_grads,
    launch_layer_norm_param_grads_finish, layer_norm_blocks, vector_width,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ F32_TOLERANCE · (1 + |want|); the parameters' gradients, sums over
/// up to a thousand rows, within F32_TOLERANCE · (1 + |want|) · √rows.
const F32_TOLERANCE: f32 = 2e-5;
/// f16 inputs and outputs (f32 arithmetic): the outputs' rounding dominates.
const F16_TOLERANCE: f32 = 4e-3;
const EPSILON: f64 = 1e-5;

struct Run {
    y: Vec<f32>,
    dx: Vec<f32>,
    dgamma: Vec<f32>,
    dbeta: Vec<f32>,
}

/// Forward then backward of `Σ dy ∘ y`; `stats_shift` is added to the mean the backward
/// pass reads (the control).
fn run<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    [x, gamma, beta, dy]: [&[f32]; 4],
    d: usize,
    has_beta: bool,
    epsilon: f64,
    stats_shift: f32,
) -> Run {
    let rows = x.len() / d;
    let upload = |values: &[f32]| client.create_from_slice(E::as_bytes(&E::narrow(values)));
    // SAFETY (of every use): each handle holds `len` elements.
    let arg = |handle: &cubecl::server::Handle, len: usize| unsafe {
        TensorArg::from_raw_parts(handle.clone(), vec![1].into(), vec![len].into())
    };
    let (x_h, gamma_h, beta_h, dy_h) = (upload(x), upload(gamma), upload(beta), upload(dy));
    let elem = size_of::<E>();
    let (y_h, mean_h, rstd_h) = (client.empty(rows * d * elem), client.empty(rows * 4), client.empty(rows * 4));
    unsafe {
        launch_layer_norm_forward::<WgpuRuntime, E>(
            client,
            [arg(&x_h, rows * d), arg(&gamma_h, d), arg(&beta_h, d)],
            [arg(&y_h, rows * d), arg(&mean_h, rows), arg(&rstd_h, rows)],
            rows,
            d,
            epsilon as f32,
            has_beta,
        );
    }
    let mean_h = if stats_shift == 0.0 {
        mean_h
    } else {
        let mean = f32::from_bytes(&client.read_one(mean_h).unwrap()).to_vec();
        let shifted: Vec<f32> = mean.iter().map(|m| m + stats_shift).collect();
        client.create_from_slice(f32::as_bytes(&shifted))
    };
    let (dx_h, dgamma_h, dbeta_h) = (client.empty(rows * d * elem), client.empty(d * elem), client.empty(d * elem));
    let stats = |h: &cubecl::server::Handle| arg(h, rows);
    unsafe {
        launch_layer_norm_backward::<WgpuRuntime, E>(
            client,
            [arg(&x_h, rows * d), arg(&gamma_h, d), stats(&mean_h), stats(&rstd_h), arg(&dy_h, rows * d)],
            arg(&dx_h, rows * d),
            rows,
            d,
        );
        let inputs = || [arg(&x_h, rows * d), stats(&mean_h), stats(&rstd_h), arg(&dy_h, rows * d)];
        let blocks = layer_norm_blocks(rows);
        if blocks == 1 {
            launch_layer_norm_param_grads::<WgpuRuntime, E, E>(
                client,
                inputs(),
                [arg(&dgamma_h, d), arg(&dbeta_h, d)],
                rows,
                d,
            );
        } else {
            let partials = [client.empty(blocks * d * 4), client.empty(blocks * d * 4)];
            launch_layer_norm_param_grads::<WgpuRuntime, E, f32>(
                client,
                inputs(),
                [arg(&partials[0], blocks * d), arg(&partials[1], blocks * d)],
                rows,
                d,
            );
            launch_layer_norm_param_grads_finish::<WgpuRuntime, E>(
                client,
                [arg(&partials[0], blocks * d), arg(&partials[1], blocks * d)],
                [arg(&dgamma_h, d), arg(&dbeta_h, d)],
                blocks,
                d,
            );
        }
    }
    let read = |handle: cubecl::server::Handle| E::widen(E::from_bytes(&client.read_one(handle).unwrap()));
    Run { y: read(y_h), dx: read(dx_h), dgamma: read(dgamma_h), dbeta: read(dbeta_h) }
}

/// The largest |got − want| / (1 + |want|).
fn error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).fold(0.0, f32::max)
}

fn random(rng: &mut SmallRng, len: usize, spread: f32) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-spread..spread)).collect()
}

/// Each output's error against the reference: `[y, dx, dgamma, dbeta]` (the last two
/// divided by √rows: they are sums over the rows).
fn errors(got: &Run, inputs: [&[f32]; 4], d: usize, has_beta: bool) -> [f32; 4] {
    let [x, gamma, beta, dy] = inputs;
    let rows = x.len() / d;
    let (y, _, _) = reference::layer_norm(x, gamma, has_beta.then_some(beta), d, EPSILON);
    let (dx, dgamma, dbeta) = reference::layer_norm_backward(x, gamma, dy, d, EPSILON);
    let sums = (rows as f32).sqrt();
    [error(&got.y, &y), error(&got.dx, &dx), error(&got.dgamma, &dgamma) / sums, error(&got.dbeta, &dbeta) / sums]
}

fn check<E: Element>(tolerance: f32) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x1a7e);
    let mut cases: Vec<(usize, usize)> =
        (0..6).map(|_| (rng.random_range(1..=300), rng.random_range(1..=600))).collect();
    cases.extend([(128, 64), (768, 40), (32, 1000), (1, 3), (770, 33), (6, 7)]);
    let width = vector_width(&client, size_of::<E>(), 768);
    assert!(width > 1, "rows of 768 must be read in vectors here, else only the scalar path is tested");
    for (index, (d, rows)) in cases.into_iter().enumerate() {
        let has_beta = index % 3 != 1;
        let round = |v: Vec<f32>| E::widen(&E::narrow(&v));
        // Rows off centre and spread, as activations are.
        let x: Vec<f32> =
            random(&mut rng, rows * d, 2.0).iter().enumerate().map(|(i, v)| v + (i / d) as f32 * 0.01).collect();
        let (x, gamma, beta, dy) = (
            round(x),
            round(random(&mut rng, d, 1.5)),
            round(random(&mut rng, d, 0.5)),
            round(random(&mut rng, rows * d, 1.0)),
        );
        let inputs = [&x[..], &gamma[..], &beta[..], &dy[..]];
        let got = run::<E>(&client, inputs, d, has_beta, EPSILON, 0.0);
        let errs = errors(&got, inputs, d, has_beta);
        for (name, err) in ["y", "dx", "dgamma", "dbeta"].iter().zip(errs) {
            assert!(
                err <= tolerance,
                "case {index} (d {d}, rows {rows}, beta {has_beta}): {name} off by {err:.2e} (tolerance {tolerance:.0e})"
            );
        }
    }
}

#[test]
fn f32_layer_norm_matches_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_layer_norm_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The controls: ε a hundred times too large moves `y`; a backward pass reading a mean
/// off by 0.1 moves `dx` and `dgamma`.
#[test]
fn a_wrong_epsilon_or_wrong_row_statistics_are_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(3);
    let (d, rows) = (64, 300);
    let x: Vec<f32> = random(&mut rng, rows * d, 0.01);
    let (gamma, beta, dy) = (random(&mut rng, d, 1.5), random(&mut rng, d, 0.5), random(&mut rng, rows * d, 1.0));
    let inputs = [&x[..], &gamma[..], &beta[..], &dy[..]];
    let wide = run::<f32>(&client, inputs, d, true, 100.0 * EPSILON, 0.0);
    assert!(errors(&wide, inputs, d, true)[0] > 100.0 * F32_TOLERANCE, "a wrong epsilon went unnoticed");
    let shifted = run::<f32>(&client, inputs, d, true, EPSILON, 0.1);
    let errs = errors(&shifted, inputs, d, true);
    assert!(errs[2] > 100.0 * F32_TOLERANCE, "wrong row statistics went unnoticed: {errs:?}");
    let right = run::<f32>(&client, inputs, d, true, EPSILON, 0.0);
    assert!(errors(&right, inputs, d, true).iter().all(|&e| e <= F32_TOLERANCE), "the same inputs must match");
}
