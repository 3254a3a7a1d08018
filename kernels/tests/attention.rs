//! The attention kernels against their CPU reference on a real runtime (wgpu; llvmpipe in
//! CI): randomized shapes with a fixed seed (sequence lengths that are and are not
//! multiples of the tile, one of 1,024 rows; head dimensions 8 to 128; several batches and
//! heads; causal or not, with fewer queries than keys), strided inputs, f32 and f16 (up to
//! head dimension 64 in f16, to keep llvmpipe's compile time down).
//! Controls: the same comparison fails for the other mask and for a dropped log-sum-exp.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::{self, Dims};
use leanburn_kernels::{launch_attention_backward, launch_attention_forward, tile_rows};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ F32_TOLERANCE · (1 + |want|).
const F32_TOLERANCE: f32 = 2e-5;
/// f16 inputs and outputs (f32 accumulation): the outputs' own rounding dominates.
const F16_TOLERANCE: f32 = 1e-2;

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    heads: usize,
    rows: usize,
    keys: usize,
    head_dim: usize,
    causal: bool,
}

impl Case {
    fn dims(&self) -> Dims {
        Dims { batch_heads: self.batch * self.heads, rows: self.rows, keys: self.keys, head_dim: self.head_dim }
    }
}

/// The cases: random ones with head dimensions 8 to 64, causal and not; one at head
/// dimension 128 (its kernels take llvmpipe about 30 s to compile); a long causal sequence
/// (GPT-2's 1,024 positions at its head dimension, 64) and one a multiple of the tile.
fn cases() -> Vec<Case> {
    let mut rng = SmallRng::seed_from_u64(0xa77e);
    let mut cases: Vec<Case> = (0..12)
        .map(|i| {
            let head_dim = [8, 16, 32, 64][i % 4];
            let rows = rng.random_range(1..=150);
            let causal = i % 2 == 0;
            let keys = if rng.random_bool(0.5) { rows } else { rows + rng.random_range(1..=40) };
            Case { batch: rng.random_range(1..=2), heads: rng.random_range(1..=3), rows, keys, head_dim, causal }
        })
        .collect();
    cases.push(Case { batch: 1, heads: 3, rows: 72, keys: 85, head_dim: 128, causal: true });
    cases.push(Case { batch: 1, heads: 1, rows: 1024, keys: 1024, head_dim: 64, causal: true });
    cases.push(Case {
        batch: 2,
        heads: 2,
        rows: 4 * tile_rows(32),
        keys: 4 * tile_rows(32),
        head_dim: 32,
        causal: false,
    });
    cases
}

fn random(rng: &mut SmallRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `values` stored as `[batch, rows, heads, head_dim]` and described as `[batch, heads,
/// rows, head_dim]` by strides, as the model's heads are views of one projection.
fn interleaved(values: &[f32], batch: usize, heads: usize, rows: usize, head_dim: usize) -> (Vec<f32>, Vec<usize>) {
    let mut out = vec![0.0; values.len()];
    for b in 0..batch {
        for h in 0..heads {
            for r in 0..rows {
                for d in 0..head_dim {
                    out[((b * rows + r) * heads + h) * head_dim + d] =
                        values[((b * heads + h) * rows + r) * head_dim + d];
                }
            }
        }
    }
    (out, vec![rows * heads * head_dim, head_dim, heads * head_dim, 1])
}

struct Run {
    output: Vec<f32>,
    lse: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
}

/// Forward, then backward of `Σ grad ∘ output`; `lse_override` replaces the forward's
/// log-sum-exp before the backward (the dropped-lse control).
fn run<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    case: Case,
    [q, k, v, grad]: [&[f32]; 4],
    lse_override: Option<f32>,
) -> Run {
    let Case { batch, heads, rows, keys, head_dim, causal } = case;
    let bh = batch * heads;
    let upload = |values: &[f32], len: usize| {
        let (data, strides) = interleaved(values, batch, heads, len, head_dim);
        let handle = client.create_from_slice(E::as_bytes(&E::narrow(&data)));
        (handle, strides, vec![batch, heads, len, head_dim])
    };
    // SAFETY (of every use): each handle holds the elements its shape and strides reach.
    let arg = |(handle, strides, shape): &(cubecl::server::Handle, Vec<usize>, Vec<usize>)| unsafe {
        TensorArg::from_raw_parts(handle.clone(), strides.clone().into(), shape.clone().into())
    };
    let contiguous = |len: usize| vec![heads * len * head_dim, len * head_dim, head_dim, 1];
    let empty = |elements: usize, bytes: usize| client.empty(elements * bytes);
    let (q, k, v, g) = (upload(q, rows), upload(k, keys), upload(v, keys), upload(grad, rows));
    let out = (empty(bh * rows * head_dim, size_of::<E>()), contiguous(rows), vec![batch, heads, rows, head_dim]);
    let lse = (empty(bh * rows, 4), vec![rows, 1], vec![bh, rows]);
    let dims = [bh, heads, rows, keys, head_dim];
    let scale = 1.0 / (head_dim as f32).sqrt();
    unsafe {
        launch_attention_forward::<WgpuRuntime, E>(
            client,
            arg(&q),
            arg(&k),
            arg(&v),
            arg(&out),
            arg(&lse),
            dims,
            scale,
            causal,
        );
    }
    let read_e = |handle: &cubecl::server::Handle| E::widen(E::from_bytes(&client.read_one(handle.clone()).unwrap()));
    let read_f32 =
        |handle: &cubecl::server::Handle| f32::from_bytes(&client.read_one(handle.clone()).unwrap()).to_vec();
    let output = read_e(&out.0);
    let lse_values = read_f32(&lse.0);
    let lse = match lse_override {
        Some(value) => (client.create_from_slice(f32::as_bytes(&vec![value; bh * rows])), lse.1, lse.2),
        None => lse,
    };
    let delta = (empty(bh * rows, 4), vec![rows, 1], vec![bh, rows]);
    let dq = (empty(bh * rows * head_dim, size_of::<E>()), contiguous(rows), vec![batch, heads, rows, head_dim]);
    let dk = (empty(bh * keys * head_dim, size_of::<E>()), contiguous(keys), vec![batch, heads, keys, head_dim]);
    let dv = (empty(bh * keys * head_dim, size_of::<E>()), contiguous(keys), vec![batch, heads, keys, head_dim]);
    unsafe {
        launch_attention_backward::<WgpuRuntime, E>(
            client,
            [arg(&q), arg(&k), arg(&v), arg(&out), arg(&g)],
            arg(&lse),
            arg(&delta),
            [arg(&dq), arg(&dk), arg(&dv)],
            dims,
            scale,
            causal,
        );
    }
    Run { output, lse: lse_values, dq: read_e(&dq.0), dk: read_e(&dk.0), dv: read_e(&dv.0) }
}

/// The largest |got − want| / (1 + |want|).
fn error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).fold(0.0, f32::max)
}

/// Each result's error against the reference at `causal`.
fn errors(run: &Run, case: Case, inputs: [&[f32]; 4], causal: bool) -> [(&'static str, f32); 5] {
    let [q, k, v, grad] = inputs;
    let (output, lse) = reference::attention(q, k, v, case.dims(), causal);
    let grads = reference::attention_backward(q, k, v, grad, case.dims(), causal);
    [
        ("output", error(&run.output, &output)),
        ("lse", error(&run.lse, &lse)),
        ("dq", error(&run.dq, &grads.dq)),
        ("dk", error(&run.dk, &grads.dk)),
        ("dv", error(&run.dv, &grads.dv)),
    ]
}

/// Every `every`-th case up to head dimension `max_head_dim`.
fn check<E: Element>(tolerance: f32, every: usize, max_head_dim: usize) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let cases = cases().into_iter().enumerate().filter(|(i, case)| i % every == 0 && case.head_dim <= max_head_dim);
    for (index, case) in cases {
        let Case { batch, heads, rows, keys, head_dim, .. } = case;
        let n = batch * heads * head_dim;
        let (q, k, v, grad) = (
            random(&mut rng, n * rows),
            random(&mut rng, n * keys),
            random(&mut rng, n * keys),
            random(&mut rng, n * rows),
        );
        // f16 runs see the inputs rounded to f16, and so must the reference.
        let round = |x: Vec<f32>| E::widen(&E::narrow(&x));
        let (q, k, v, grad) = (round(q), round(k), round(v), round(grad));
        let inputs = [&q[..], &k[..], &v[..], &grad[..]];
        let started = std::time::Instant::now();
        let got = run::<E>(&client, case, inputs, None);
        let ran = started.elapsed();
        let errs = errors(&got, case, inputs, case.causal);
        eprintln!("case {index} {case:?}: kernels {ran:.2?}, reference {:.2?}", started.elapsed() - ran);
        for (name, err) in errs {
            assert!(err <= tolerance, "case {index} {case:?}: {name} off by {err:.2e} (tolerance {tolerance:.0e})");
        }
    }
}

#[test]
fn f32_attention_matches_the_reference() {
    check::<f32>(F32_TOLERANCE, 1, 128);
}

#[test]
fn f16_attention_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE, 3, 64);
}

/// The controls: against the reference with the other mask, the causal kernels' output is
/// off; with the log-sum-exp replaced by 0, the gradients are.
#[test]
fn a_wrong_mask_or_a_dropped_log_sum_exp_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(7);
    let case = Case { batch: 1, heads: 2, rows: 40, keys: 40, head_dim: 16, causal: true };
    let n = 2 * 16 * 40;
    let (q, k, v, grad) = (random(&mut rng, n), random(&mut rng, n), random(&mut rng, n), random(&mut rng, n));
    let inputs = [&q[..], &k[..], &v[..], &grad[..]];
    let got = run::<f32>(&client, case, inputs, None);
    let against_full = errors(&got, case, inputs, false);
    assert!(against_full[0].1 > 100.0 * F32_TOLERANCE, "the mask went unnoticed: {against_full:?}");
    let dropped = run::<f32>(&client, case, inputs, Some(0.0));
    let wrong = errors(&dropped, case, inputs, true);
    assert!(
        wrong[2..].iter().all(|(_, err)| *err > 100.0 * F32_TOLERANCE),
        "a dropped log-sum-exp went unnoticed: {wrong:?}"
    );
}
