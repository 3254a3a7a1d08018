//! The embedding-gradient kernel against its f64 reference on a real runtime (wgpu;
//! llvmpipe in CI): randomized tables, widths and token counts (ids repeated, the first and
//! last row among them, ids outside the table; rows wider than a cube, more tokens than a
//! tile), added into a table of random values whose rows are padded (the padding must stay
//! as it was), the rows cut into one block, one block a row (up to 1,000 rows) and the
//! count the runtime picks; f32 and f16. Controls: ids shifted by one and sums written over
//! the table instead of added to it are caught.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::embedding_grad;
use leanburn_kernels::{embedding_grad_blocks, launch_embedding_grad};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// |got − want| ≤ TOLERANCE · max(1, Σ|terms|) per entry: f32 sums of up to a few hundred
/// terms in token order, added to the table's value (seen: 2.3e-7).
const F32_TOLERANCE: f64 = 1e-6;
/// f16: the terms and each addition round to 2⁻¹¹ relative (seen: 1.1e-3).
const F16_TOLERANCE: f64 = 5e-3;

struct Case {
    output_grad: Vec<f32>,
    ids: Vec<i64>,
    rows: usize,
    width: usize,
}

impl Case {
    fn random(rng: &mut SmallRng, tokens: usize, rows: usize, width: usize) -> Self {
        let output_grad = (0..tokens * width).map(|_| rng.random_range(-1.0..1.0)).collect();
        // Few distinct ids, so that rows sum many tokens; the table's first and last rows,
        // and ids outside it (negative, and at or past its end).
        let distinct = rng.random_range(1..=rows.min(12));
        let ids = (0..tokens)
            .map(|n| match n % 11 {
                0 => 0,
                1 => rows as i64 - 1,
                2 if n % 3 == 0 => -1,
                2 => rows as i64 + rng.random_range(0..3),
                _ => (rng.random_range(0..distinct) * rows / distinct) as i64,
            })
            .collect();
        Self { output_grad, ids, rows, width }
    }

    /// The kernel's sums added into `table` (`[rows, width]`, stored with `PAD` more
    /// elements after each row), the rows cut into `blocks`: the table's rows, and whether
    /// its padding kept the value it had.
    fn run<E: Element>(&self, client: &ComputeClient<WgpuRuntime>, blocks: usize, table: &[f32]) -> (Vec<f32>, bool) {
        let (rows, width, tokens) = (self.rows, self.width, self.ids.len());
        let stride = width + PAD;
        let stored: Vec<f32> = (0..rows * stride)
            .map(|i| if i % stride < width { table[i / stride * width + i % stride] } else { PADDING })
            .collect();
        let ids: Vec<i32> = self.ids.iter().map(|&id| id as i32).collect();
        let output_grad = client.create_from_slice(E::as_bytes(&E::narrow(&self.output_grad)));
        let ids = client.create_from_slice(i32::as_bytes(&ids));
        let grad = client.create_from_slice(E::as_bytes(&E::narrow(&stored)));
        // SAFETY (of every use): each handle holds the elements its shape and strides say.
        let arg = |handle: &cubecl::server::Handle, shape: Vec<usize>, strides: Vec<usize>| unsafe {
            TensorArg::from_raw_parts(handle.clone(), strides.into(), shape.into())
        };
        unsafe {
            launch_embedding_grad::<WgpuRuntime, E, i32>(
                client,
                arg(&output_grad, vec![tokens, width], vec![width, 1]),
                arg(&ids, vec![tokens], vec![1]),
                arg(&grad, vec![rows, width], vec![stride, 1]),
                [tokens, rows, width],
                blocks,
            );
        }
        let stored = E::widen(E::from_bytes(&client.read_one(grad).unwrap()));
        let padding_kept = stored.iter().enumerate().filter(|(i, _)| i % stride >= width).all(|(_, &v)| v == PADDING);
        let rows = stored.chunks(stride).flat_map(|row| row[..width].to_vec()).collect();
        (rows, padding_kept)
    }

    /// The largest error of `got` against `table` plus the sums, relative to each entry's
    /// sum of absolute terms (the table's value among them; at least 1).
    fn error(&self, table: &[f32], got: &[f32]) -> f64 {
        let sums = embedding_grad(&self.output_grad, &self.ids, self.rows, self.width);
        let magnitude: Vec<f32> = self.output_grad.iter().map(|v| v.abs()).collect();
        let scale = embedding_grad(&magnitude, &self.ids, self.rows, self.width);
        (0..got.len())
            .map(|i| {
                let want = f64::from(table[i]) + sums[i];
                (f64::from(got[i]) - want).abs() / (scale[i] + f64::from(table[i].abs())).max(1.0)
            })
            .fold(0.0, f64::max)
    }
}

/// Elements after each stored row of the table (CUDA pads rows alike), and their value
/// (one that f16 holds exactly).
const PAD: usize = 3;
const PADDING: f32 = 1234.0;

fn random_table(rng: &mut SmallRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn check<E: Element>(tolerance: f64) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0xe4b);
    let mut shapes: Vec<(usize, usize, usize)> =
        (0..8).map(|_| (rng.random_range(1..=300), rng.random_range(1..=400), rng.random_range(1..=300))).collect();
    // One row, one column, a row wider than a cube, tiles of ids and a part of one, and
    // gpt2-small's padded table at a narrow width.
    shapes.extend([(40, 1, 7), (50, 9, 1), (30, 5, 1000), (700, 50, 3), (64, 50_304, 8)]);
    for (index, (tokens, rows, width)) in shapes.into_iter().enumerate() {
        let case = Case::random(&mut rng, tokens, rows, width);
        let table = E::widen(&E::narrow(&random_table(&mut rng, rows * width)));
        for blocks in [1, rows.min(1000), embedding_grad_blocks(&client, rows)] {
            let (got, padding_kept) = case.run::<E>(&client, blocks, &table);
            let error = case.error(&table, &got);
            assert!(
                error <= tolerance && padding_kept,
                "case {index} ({tokens} tokens, {rows} × {width}, {blocks} blocks): off by {error:.2e} \
                 (tolerance {tolerance:.0e}), padding kept: {padding_kept}"
            );
        }
    }
}

#[test]
fn f32_embedding_grad_matches_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_embedding_grad_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The controls: ids shifted by one row are caught, and so are sums that did not add into
/// the table's values (written into zeros instead).
#[test]
fn a_shifted_id_or_a_table_overwritten_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(5);
    let case = Case::random(&mut rng, 90, 30, 17);
    let table = random_table(&mut rng, 30 * 17);
    let blocks = embedding_grad_blocks(&client, case.rows);
    let (got, _) = case.run::<f32>(&client, blocks, &table);
    assert!(case.error(&table, &got) <= F32_TOLERANCE, "the same inputs must match");
    let shifted = Case {
        output_grad: case.output_grad.clone(),
        ids: case.ids.iter().map(|id| id + 1).collect(),
        rows: case.rows,
        width: case.width,
    };
    let (got, _) = shifted.run::<f32>(&client, blocks, &table);
    assert!(case.error(&table, &got) > 0.1, "a shifted id went unnoticed");
    let (got, _) = case.run::<f32>(&client, blocks, &vec![0.0; table.len()]);
    assert!(case.error(&table, &got) > 0.1, "sums written over the table went unnoticed");
}
