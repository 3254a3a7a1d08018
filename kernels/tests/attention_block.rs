//! The block softmax kernels (attention in blocks on GEMMs) against their f64 reference on
//! a real runtime (wgpu; llvmpipe in CI): randomized blocks (rows of fewer and more keys
//! than the forward cube's 64 units, one of GPT-2's 1,024 keys), causal diagonals and
//! none, scores spread wide enough that an unshifted exponential would overflow, row
//! statistics, outputs and output gradients read from a longer sequence's tensors by their
//! strides (the gradient's heads split from each token's row, as GPT-2's), softmax scales
//! of `1/√head_dim` and random ones, f32 and f16 scores (f32 arithmetic), rows read in
//! vectors (keys a multiple of the runtime's vector width, the diagonal inside a vector or
//! at its edge) and one key at a time (other key counts). Controls: a
//! diagonal one key off, a wrong scale, a dropped log-sum-exp and a dropped output (`Δ` =
//! 0) are caught.

mod common;

use common::{relative_error, Element};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::{block_softmax, block_softmax_grad};
use leanburn_kernels::{launch_attention_block_softmax, launch_attention_block_softmax_grad, vector_width, BlockDims};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ tolerance · (1 + |want|) for probabilities, score gradients and
/// log-sum-exps (one f32 exponential of a shifted score, sums over at most 1,024 keys;
/// seen: 9.6e-7, on scores spread over ±60 and scales up to 1.9).
const F32_TOLERANCE: f64 = 2e-6;
/// f16 scores and outputs: the outputs' own rounding (2⁻¹¹ relative) dominates (seen:
/// 2.4e-4).
const F16_TOLERANCE: f64 = 5e-4;

/// Rows of the sequence the statistics tensor holds past the block's: its row stride is
/// not the block's row count.
const MORE_ROWS: usize = 3;

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    heads: usize,
    rows: usize,
    keys: usize,
    head_dim: usize,
    diagonal: Option<usize>,
    scale: f32,
    spread: f32,
}

impl Case {
    fn dims(&self) -> BlockDims {
        let Case { batch, heads, rows, keys, diagonal, scale, .. } = *self;
        BlockDims { batch_heads: batch * heads, heads, rows, keys, diagonal, scale }
    }

    fn block(&self) -> (usize, usize) {
        (self.rows, self.keys)
    }

    fn scores(&self) -> usize {
        self.batch * self.heads * self.rows * self.keys
    }

    fn score_rows(&self) -> usize {
        self.batch * self.heads * self.rows
    }

    fn outputs(&self) -> usize {
        self.score_rows() * self.head_dim
    }
}

fn cases() -> Vec<Case> {
    let mut rng = SmallRng::seed_from_u64(0xb10c);
    let mut cases: Vec<Case> = (0..10)
        .map(|i| {
            let rows = rng.random_range(1..=40);
            let keys = rng.random_range(1..=300);
            let head_dim = rng.random_range(1..=80);
            Case {
                batch: rng.random_range(1..=2),
                heads: rng.random_range(1..=3),
                rows,
                keys,
                head_dim,
                diagonal: (i % 2 == 0).then(|| rng.random_range(0..keys)),
                scale: if i % 2 == 1 { 1.0 / (head_dim as f32).sqrt() } else { rng.random_range(0.05..2.0) },
                spread: if i % 3 == 0 { 60.0 } else { 6.0 },
            }
        })
        .collect();
    // GPT-2's last block of 16 rows over 1,024 keys, and a block of one key.
    let gpt2 = Case {
        batch: 1,
        heads: 2,
        rows: 16,
        keys: 1024,
        head_dim: 64,
        diagonal: Some(1008),
        scale: 0.125,
        spread: 6.0,
    };
    cases.push(gpt2);
    cases.push(Case { rows: 3, keys: 1, head_dim: 4, diagonal: Some(0), scale: 0.5, ..gpt2 });
    // Rows of whole vectors: the diagonal inside a vector (row 0 sees keys 0 ..= 37) and at
    // a vector's edge (row 0 sees 0 ..= 7), and no diagonal.
    cases.push(Case { rows: 9, keys: 96, head_dim: 16, diagonal: Some(37), ..gpt2 });
    cases.push(Case { rows: 9, keys: 96, head_dim: 16, diagonal: Some(7), ..gpt2 });
    cases.push(Case { rows: 9, keys: 96, head_dim: 16, diagonal: None, ..gpt2 });
    cases
}

/// `[batch, heads, rows + MORE_ROWS, 1]` statistics holding `values` (one per score row)
/// in their first `rows` rows, as a handle and the strides of that layout.
fn statistics(case: Case, values: &[f32]) -> (Vec<f32>, Vec<usize>) {
    let total = case.rows + MORE_ROWS;
    let mut stats = vec![f32::NAN; case.batch * case.heads * total];
    for (r, &value) in values.iter().enumerate() {
        stats[(r / case.rows) * total + r % case.rows] = value;
    }
    (stats, vec![case.heads * total, total, 1, 1])
}

/// `values` (`[batch, heads, rows, head_dim]` in order) inside a sequence of `rows +
/// MORE_ROWS` rows, laid out head-major (`[batch, heads, seq, head_dim]`) or token-major
/// (`[batch, seq, heads, head_dim]`: each token's heads side by side, as a gradient of
/// heads split from rows): the buffer and the block's strides in it.
fn in_sequence(case: Case, values: &[f32], token_major: bool) -> (Vec<f32>, Vec<usize>) {
    let (heads, dim, seq) = (case.heads, case.head_dim, case.rows + MORE_ROWS);
    let strides = if token_major {
        vec![seq * heads * dim, dim, heads * dim, 1]
    } else {
        vec![heads * seq * dim, seq * dim, dim, 1]
    };
    let mut buffer = vec![f32::NAN; case.batch * heads * seq * dim];
    for (index, &value) in values.iter().enumerate() {
        let (r, d) = (index / dim, index % dim);
        let (bh, i) = (r / case.rows, r % case.rows);
        buffer[(bh / heads) * strides[0] + (bh % heads) * strides[1] + i * strides[2] + d] = value;
    }
    (buffer, strides)
}

/// Each score row's `Δ = Σ dO ∘ O` over the head dimension, in f64, rounded to f32.
fn deltas(case: Case, output: &[f32], grad_output: &[f32]) -> Vec<f32> {
    let rows = output.chunks(case.head_dim).zip(grad_output.chunks(case.head_dim));
    rows.map(|(o, g)| o.iter().zip(g).map(|(&o, &g)| f64::from(o) * f64::from(g)).sum::<f64>() as f32).collect()
}

/// What the kernels wrote, widened to f32.
struct Got {
    first: Vec<f32>,
    second: Vec<f32>,
}

fn contiguous(case: Case, last: usize) -> (Vec<usize>, Vec<usize>) {
    let shape = vec![case.batch, case.heads, case.rows, last];
    let strides = vec![case.heads * case.rows * last, case.rows * last, last, 1];
    (shape, strides)
}

/// The forward kernel: the probabilities and the log-sum-exps (in score-row order).
fn forward<E: Element>(client: &ComputeClient<WgpuRuntime>, case: Case, scores: &[f32]) -> Got {
    let scores_handle = client.create_from_slice(E::as_bytes(&E::narrow(scores)));
    let probabilities = client.empty(case.scores() * size_of::<E>());
    let (stats, stat_strides) = statistics(case, &vec![f32::NAN; case.score_rows()]);
    let lse = client.create_from_slice(f32::as_bytes(&stats));
    let (shape, strides) = contiguous(case, case.keys);
    // SAFETY: each handle holds the elements its shape and strides reach.
    unsafe {
        let arg = |h: &cubecl::server::Handle, shape: &[usize], strides: &[usize]| {
            TensorArg::from_raw_parts(h.clone(), strides.to_vec().into(), shape.to_vec().into())
        };
        launch_attention_block_softmax::<WgpuRuntime, E>(
            client,
            arg(&scores_handle, &shape, &strides),
            arg(&probabilities, &shape, &strides),
            arg(&lse, &contiguous(case, 1).0, &stat_strides),
            case.dims(),
        );
    }
    let stats = f32::from_bytes(&client.read_one(lse).unwrap()).to_vec();
    let total = case.rows + MORE_ROWS;
    let lse = (0..case.score_rows()).map(|r| stats[(r / case.rows) * total + r % case.rows]).collect();
    Got { first: E::widen(E::from_bytes(&client.read_one(probabilities).unwrap())), second: lse }
}

/// The backward kernel: the probabilities and the score gradients.
fn backward<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    case: Case,
    scores: &[f32],
    grad_probabilities: &[f32],
    lse: &[f32],
    [output, grad_output]: [&[f32]; 2],
) -> Got {
    let scores_handle = client.create_from_slice(E::as_bytes(&E::narrow(scores)));
    let dp_handle = client.create_from_slice(E::as_bytes(&E::narrow(grad_probabilities)));
    let (lse_stats, stat_strides) = statistics(case, lse);
    let lse_handle = client.create_from_slice(f32::as_bytes(&lse_stats));
    let (output, output_strides) = in_sequence(case, output, false);
    let (grad_output, grad_strides) = in_sequence(case, grad_output, true);
    let output_handle = client.create_from_slice(E::as_bytes(&E::narrow(&output)));
    let grad_output_handle = client.create_from_slice(E::as_bytes(&E::narrow(&grad_output)));
    let output_shape = contiguous(case, case.head_dim).0;
    let probabilities = client.empty(case.scores() * size_of::<E>());
    let grad_scores = client.empty(case.scores() * size_of::<E>());
    let (shape, strides) = contiguous(case, case.keys);
    let stat_shape = contiguous(case, 1).0;
    // SAFETY: each handle holds the elements its shape and strides reach.
    unsafe {
        let arg = |h: &cubecl::server::Handle, shape: &[usize], strides: &[usize]| {
            TensorArg::from_raw_parts(h.clone(), strides.to_vec().into(), shape.to_vec().into())
        };
        launch_attention_block_softmax_grad::<WgpuRuntime, E>(
            client,
            arg(&scores_handle, &shape, &strides),
            arg(&dp_handle, &shape, &strides),
            arg(&lse_handle, &stat_shape, &stat_strides),
            arg(&output_handle, &output_shape, &output_strides),
            arg(&grad_output_handle, &output_shape, &grad_strides),
            arg(&probabilities, &shape, &strides),
            arg(&grad_scores, &shape, &strides),
            case.dims(),
        );
    }
    let read = |handle| E::widen(E::from_bytes(&client.read_one(handle).unwrap()));
    Got { first: read(probabilities), second: read(grad_scores) }
}

fn random(rng: &mut SmallRng, len: usize, spread: f32) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-spread..spread)).collect()
}

/// The backward's reference: `(probabilities, grad_scores)` with each row's `Δ` from the
/// block's output and its gradient.
fn reference_grad(
    case: Case,
    scores: &[f32],
    grad_probabilities: &[f32],
    lse: &[f32],
    [output, grad_output]: [&[f32]; 2],
) -> (Vec<f64>, Vec<f64>) {
    let delta = deltas(case, output, grad_output);
    block_softmax_grad(scores, grad_probabilities, [lse, &delta], case.block(), case.diagonal, case.scale)
}

/// Both kernels on `case` against the references: the largest error of the forward's
/// probabilities and log-sum-exps and of the backward's probabilities and gradients.
fn errors<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    case: Case,
    kernel_case: Case,
    rng: &mut SmallRng,
) -> [f64; 4] {
    let scores = E::widen(&E::narrow(&random(rng, case.scores(), case.spread)));
    let (want_p, want_lse) = block_softmax(&scores, case.block(), case.diagonal, case.scale);
    let got = forward::<E>(client, kernel_case, &scores);
    let lse: Vec<f32> = want_lse.iter().map(|&l| l as f32).collect();
    let grad_probabilities = E::widen(&E::narrow(&random(rng, case.scores(), 1.0)));
    let output = E::widen(&E::narrow(&random(rng, case.outputs(), 1.0)));
    let grad_output = E::widen(&E::narrow(&random(rng, case.outputs(), 1.0)));
    let (grad_p, grad_s) = reference_grad(case, &scores, &grad_probabilities, &lse, [&output, &grad_output]);
    let grad = backward::<E>(client, kernel_case, &scores, &grad_probabilities, &lse, [&output, &grad_output]);
    [
        relative_error(&got.first, &want_p),
        relative_error(&got.second, &want_lse),
        relative_error(&grad.first, &grad_p),
        relative_error(&grad.second, &grad_s),
    ]
}

fn check<E: Element>(tolerance: f64) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let width = vector_width(&client, size_of::<E>(), 96);
    assert!(width > 1, "rows of 96 keys must be read in vectors here, else only the scalar path is tested");
    let mut rng = SmallRng::seed_from_u64(7);
    for case in cases() {
        let errors = errors::<E>(&client, case, case, &mut rng);
        let names = ["probabilities", "log-sum-exp", "backward probabilities", "score gradients"];
        for (name, error) in names.iter().zip(errors) {
            assert!(error <= tolerance, "{case:?}: {name} off by {error:.2e} (tolerance {tolerance:.0e})");
        }
    }
}

#[test]
fn f32_block_softmax_matches_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_block_softmax_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The controls: the kernels run with the diagonal one key further, or with a scale 10 %
/// larger, the backward with every log-sum-exp 0, or with the output 0 (so `Δ` = 0), miss
/// the reference by far more than the tolerance.
#[test]
fn a_wrong_diagonal_or_scale_a_dropped_log_sum_exp_or_a_dropped_delta_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let case =
        Case { batch: 1, heads: 2, rows: 5, keys: 40, head_dim: 8, diagonal: Some(20), scale: 0.35, spread: 6.0 };
    let right = errors::<f32>(&client, case, case, &mut SmallRng::seed_from_u64(3));
    assert!(right.iter().all(|&e| e <= F32_TOLERANCE), "the same inputs must match: {right:?}");
    let shifted = Case { diagonal: Some(21), ..case };
    let wrong = errors::<f32>(&client, case, shifted, &mut SmallRng::seed_from_u64(3));
    assert!(wrong.iter().all(|&e| e > 100.0 * F32_TOLERANCE), "a wrong diagonal went unnoticed: {wrong:?}");
    let rescaled = Case { scale: case.scale * 1.1, ..case };
    let wrong = errors::<f32>(&client, case, rescaled, &mut SmallRng::seed_from_u64(3));
    assert!(wrong.iter().all(|&e| e > 100.0 * F32_TOLERANCE), "a wrong scale went unnoticed: {wrong:?}");

    let mut rng = SmallRng::seed_from_u64(4);
    let scores = random(&mut rng, case.scores(), 6.0);
    let grad_probabilities = random(&mut rng, case.scores(), 1.0);
    let output = random(&mut rng, case.outputs(), 1.0);
    let grad_output = random(&mut rng, case.outputs(), 1.0);
    let (_, lse) = block_softmax(&scores, case.block(), case.diagonal, case.scale);
    let lse: Vec<f32> = lse.iter().map(|&l| l as f32).collect();
    let outputs = [output.as_slice(), grad_output.as_slice()];
    let (want_p, want_ds) = reference_grad(case, &scores, &grad_probabilities, &lse, outputs);
    let dropped = backward::<f32>(&client, case, &scores, &grad_probabilities, &vec![0.0; lse.len()], outputs);
    assert!(relative_error(&dropped.first, &want_p) > 100.0 * F32_TOLERANCE, "a dropped log-sum-exp went unnoticed");
    let right = backward::<f32>(&client, case, &scores, &grad_probabilities, &lse, outputs);
    assert!(relative_error(&right.second, &want_ds) <= F32_TOLERANCE, "the same inputs must match");
    let zeros = vec![0.0; output.len()];
    let no_delta = backward::<f32>(&client, case, &scores, &grad_probabilities, &lse, [&zeros, &grad_output]);
    assert!(relative_error(&no_delta.second, &want_ds) > 100.0 * F32_TOLERANCE, "a dropped Δ went unnoticed");
}
