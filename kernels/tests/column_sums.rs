//! The column-sum kernel against its f64 reference on a real runtime (wgpu; llvmpipe in
//! CI): randomized matrices (one row, one column, columns past a cube's lanes, rows past a
//! block's), stored with padded rows, read as vectors of every width that divides them, in
//! one block, in a few and in the count the runtime picks (the blocks' f32 sums added by a
//! second launch, as `Lean`'s bias gradient does); f32 and f16. Controls: a row left out
//! and the padding read as a column are caught.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::column_sums;
use leanburn_kernels::{column_sum_blocks, launch_column_sums, whole_blocks};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// |got − want| ≤ TOLERANCE · max(1, Σ|terms|) per column: f32 sums of up to a few
/// thousand terms (seen: 2.9e-8).
const F32_TOLERANCE: f64 = 1e-6;
/// f16 inputs and output, f32 sums: the output's rounding, 2⁻¹¹ relative (seen: 2.4e-4).
const F16_TOLERANCE: f64 = 2e-3;

/// Elements after each stored row, and their value (one that f16 holds exactly): read as
/// part of a row, it shows.
const PAD: usize = 4;
const PADDING: f32 = 1024.0;

struct Case {
    input: Vec<f32>,
    rows: usize,
    columns: usize,
}

impl Case {
    fn random(rng: &mut SmallRng, rows: usize, columns: usize) -> Self {
        Self { input: (0..rows * columns).map(|_| rng.random_range(-1.0..1.0)).collect(), rows, columns }
    }

    /// The kernel's column sums of the first `rows` rows, read as vectors of `width` from
    /// rows stored `stride` elements apart, in `blocks` blocks (a second launch adding the
    /// blocks' sums when more than one).
    fn run<E: Element>(
        &self,
        client: &ComputeClient<WgpuRuntime>,
        rows: usize,
        width: usize,
        stride: usize,
        blocks: usize,
    ) -> Vec<f32> {
        let columns = self.columns;
        let stored: Vec<f32> = (0..self.rows * (columns + PAD))
            .map(|i| {
                let (row, column) = (i / (columns + PAD), i % (columns + PAD));
                if column < columns {
                    self.input[row * columns + column]
                } else {
                    PADDING
                }
            })
            .collect();
        let input = client.create_from_slice(E::as_bytes(&E::narrow(&stored)));
        let vectors = columns / width;
        // SAFETY (of every use): each handle holds the elements its shape and strides say.
        let arg = |handle: &cubecl::server::Handle, [rows, row_stride]: [usize; 2]| unsafe {
            TensorArg::from_raw_parts(handle.clone(), vec![row_stride, 1].into(), vec![rows, columns].into())
        };
        let blocks = whole_blocks(rows, blocks);
        let sums = if blocks == 1 {
            let sums = client.empty(columns * size_of::<E>());
            unsafe {
                launch_column_sums::<WgpuRuntime, E, E>(
                    client,
                    arg(&input, [rows, stride]),
                    arg(&sums, [1, columns]),
                    [rows, vectors],
                    width,
                    stride / width,
                    1,
                );
            }
            sums
        } else {
            let partials = client.empty(blocks * columns * size_of::<f32>());
            let sums = client.empty(columns * size_of::<E>());
            unsafe {
                launch_column_sums::<WgpuRuntime, E, f32>(
                    client,
                    arg(&input, [rows, stride]),
                    arg(&partials, [blocks, columns]),
                    [rows, vectors],
                    width,
                    stride / width,
                    blocks,
                );
                launch_column_sums::<WgpuRuntime, f32, E>(
                    client,
                    arg(&partials, [blocks, columns]),
                    arg(&sums, [1, columns]),
                    [blocks, vectors],
                    width,
                    vectors,
                    1,
                );
            }
            sums
        };
        E::widen(E::from_bytes(&client.read_one(sums).unwrap()))
    }

    /// The largest error of `got` against the reference's sums, relative to each column's
    /// sum of absolute values (at least 1).
    fn error(&self, got: &[f32]) -> f64 {
        let want = column_sums(&self.input, self.columns);
        let magnitude: Vec<f32> = self.input.iter().map(|v| v.abs()).collect();
        let scale = column_sums(&magnitude, self.columns);
        (0..self.columns).map(|c| (f64::from(got[c]) - want[c]).abs() / scale[c].max(1.0)).fold(0.0, f64::max)
    }
}

fn check<E: Element>(tolerance: f64) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0xb1a5);
    let mut shapes: Vec<(usize, usize)> =
        (0..6).map(|_| (rng.random_range(1..=3000), rng.random_range(1..=300))).collect();
    // One row, one column, columns past one cube's lanes at every width, and a projection
    // of gpt2-tiny's.
    shapes.extend([(1, 40), (777, 1), (70, 4 * 32 * 2 + 8), (512, 192)]);
    for (index, (rows, columns)) in shapes.into_iter().enumerate() {
        let case = Case::random(&mut rng, rows, columns);
        for width in [1, 2, 4].into_iter().filter(|&w| columns.is_multiple_of(w) && (columns + PAD).is_multiple_of(w)) {
            for blocks in [1, 3, column_sum_blocks(&client, rows, columns / width)] {
                let got = case.run::<E>(&client, rows, width, columns + PAD, blocks);
                let error = case.error(&got);
                assert!(
                    error <= tolerance,
                    "case {index} ({rows} × {columns}, vectors of {width}, {blocks} blocks): off by {error:.2e} \
                     (tolerance {tolerance:.0e})"
                );
            }
        }
    }
}

#[test]
fn f32_column_sums_match_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_column_sums_match_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The controls: the last row left out, and rows read one element too far apart (the
/// padding taken for a column), are caught.
#[test]
fn a_row_left_out_or_a_wrong_stride_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(8);
    let case = Case::random(&mut rng, 300, 36);
    let blocks = column_sum_blocks(&client, case.rows, case.columns);
    let got = case.run::<f32>(&client, case.rows, 1, case.columns + PAD, blocks);
    assert!(case.error(&got) <= F32_TOLERANCE, "the same inputs must match");
    let got = case.run::<f32>(&client, case.rows - 1, 1, case.columns + PAD, blocks);
    assert!(case.error(&got) > 1e-3, "a row left out went unnoticed");
    let got = case.run::<f32>(&client, case.rows, 1, case.columns + PAD - 1, blocks);
    assert!(case.error(&got) > 1e-3, "a wrong row stride went unnoticed");
}
