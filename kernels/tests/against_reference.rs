//! The kernels against their CPU references on a real runtime (wgpu; llvmpipe in CI), over
//! randomized shapes with a fixed seed. im2col only moves values, so it must match exactly;
//! col2im sums up to kh·kw values per pixel, so it gets a small relative tolerance. Both
//! take column matrices with padded rows (CUDA's pitched layout) as well as contiguous ones.

use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use std::collections::BTreeSet;

use leanburn_kernels::{im2col_vector_size, launch_col2im, launch_im2col, reference, ConvGeometry};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// col2im: |got − want| ≤ TOLERANCE · (1 + |want|).
const TOLERANCE: f32 = 1e-5;
const CASES: usize = 120;

struct Case {
    geometry: ConvGeometry,
    batch: usize,
    batch_offset: usize,
    chunk: usize,
}

fn random_case(rng: &mut SmallRng) -> Case {
    loop {
        let k = [rng.random_range(1..=7), rng.random_range(1..=7)];
        let geometry = ConvGeometry {
            channels: rng.random_range(1..=6),
            in_h: rng.random_range(1..=14),
            in_w: rng.random_range(1..=14),
            kernel_h: k[0],
            kernel_w: k[1],
            stride: [rng.random_range(1..=3), rng.random_range(1..=3)],
            padding: [rng.random_range(0..=3), rng.random_range(0..=3)],
            dilation: [rng.random_range(1..=3), rng.random_range(1..=3)],
        };
        if geometry.output_size().is_none() {
            continue;
        }
        let batch = rng.random_range(1..=4);
        let batch_offset = rng.random_range(0..batch);
        let chunk = rng.random_range(1..=batch - batch_offset);
        return Case { geometry, batch, batch_offset, chunk };
    }
}

fn random_values(rng: &mut SmallRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

fn read(client: &ComputeClient<WgpuRuntime>, handle: cubecl::server::Handle) -> Vec<f32> {
    let bytes = client.read_one(handle).expect("read back");
    f32::from_bytes(&bytes).to_vec()
}

#[test]
fn im2col_matches_the_reference_exactly_including_strided_images() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x12c01);
    // Vector widths the cases were written with: the scalar kernel and the vector ones.
    let mut widths = BTreeSet::new();
    for case_index in 0..CASES {
        let Case { geometry: g, batch, batch_offset, chunk } = random_case(&mut rng);
        let shape = [batch, g.channels, g.in_h, g.in_w];
        let image = random_values(&mut rng, shape.iter().product());
        let want = reference::im2col(&image, &g, batch_offset, chunk);

        // Every other case stores the image channels-last and describes it with strides,
        // as a permuted tensor arrives from Burn.
        let channels_last = case_index % 2 == 1;
        let (data, strides) = if channels_last {
            let mut nhwc = vec![0.0; image.len()];
            for n in 0..batch {
                for c in 0..g.channels {
                    for y in 0..g.in_h {
                        for x in 0..g.in_w {
                            nhwc[((n * g.in_h + y) * g.in_w + x) * g.channels + c] =
                                image[((n * g.channels + c) * g.in_h + y) * g.in_w + x];
                        }
                    }
                }
            }
            let hw = g.in_h * g.in_w * g.channels;
            (nhwc, vec![hw, 1, g.in_w * g.channels, g.channels])
        } else {
            (image.clone(), contiguous_strides(&shape))
        };

        let image_handle = client.create_from_slice(f32::as_bytes(&data));
        let col_shape = [g.col_rows(), chunk * g.col_cols_per_image()];
        let len = col_shape[0] * col_shape[1];
        // Every third case pads each column row, as CUDA's pitched allocations do (rows
        // aligned to 512 bytes): the padding must keep its sentinel.
        let row_stride = col_shape[1] + if case_index % 3 == 0 { 1 + case_index % 13 } else { 0 };
        const SENTINEL: f32 = 12345.0;
        let col_handle = client.create_from_slice(f32::as_bytes(&vec![SENTINEL; col_shape[0] * row_stride]));
        unsafe {
            launch_im2col::<WgpuRuntime, f32>(
                &client,
                TensorArg::from_raw_parts(image_handle, strides.into(), shape.to_vec().into()),
                TensorArg::from_raw_parts(col_handle.clone(), vec![row_stride, 1].into(), col_shape.to_vec().into()),
                len,
                [row_stride, 1],
                &g,
                batch_offset,
            );
        }
        widths.insert(im2col_vector_size(&client, 4, &g, [row_stride, 1]));
        let got = read(&client, col_handle);
        let context = format!(
            "case {case_index}: {g:?}, batch {batch}, offset {batch_offset}, chunk {chunk}, row stride {row_stride}"
        );
        for row in 0..col_shape[0] {
            let line = &got[row * row_stride..(row + 1) * row_stride];
            assert_eq!(
                &line[..col_shape[1]],
                &want[row * col_shape[1]..(row + 1) * col_shape[1]],
                "{context}, row {row}"
            );
            assert!(line[col_shape[1]..].iter().all(|&v| v == SENTINEL), "{context}: row {row}'s padding was written");
        }
    }
    assert!(widths.len() > 1 && widths.contains(&1), "the cases wrote with vector widths {widths:?} only");
}

#[test]
fn col2im_matches_the_reference_and_writes_only_its_chunk() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0xc0_1213);
    for case_index in 0..CASES {
        let Case { geometry: g, batch, batch_offset, chunk } = random_case(&mut rng);
        let col_shape = [g.col_rows(), chunk * g.col_cols_per_image()];
        let columns = random_values(&mut rng, col_shape[0] * col_shape[1]);
        let want_chunk = reference::col2im(&columns, &g, chunk);

        // Fill the whole image with a sentinel: pixels outside the chunk must keep it.
        const SENTINEL: f32 = 12345.0;
        let shape = [batch, g.channels, g.in_h, g.in_w];
        let total: usize = shape.iter().product();
        let image_handle = client.create_from_slice(f32::as_bytes(&vec![SENTINEL; total]));
        // Every third case reads the columns from padded rows (CUDA's pitched layout).
        let row_stride = col_shape[1] + if case_index % 3 == 0 { 1 + case_index % 13 } else { 0 };
        let mut padded = vec![f32::NAN; col_shape[0] * row_stride];
        for row in 0..col_shape[0] {
            padded[row * row_stride..row * row_stride + col_shape[1]]
                .copy_from_slice(&columns[row * col_shape[1]..(row + 1) * col_shape[1]]);
        }
        let col_handle = client.create_from_slice(f32::as_bytes(&padded));
        unsafe {
            launch_col2im::<WgpuRuntime, f32>(
                &client,
                TensorArg::from_raw_parts(col_handle, vec![row_stride, 1].into(), col_shape.to_vec().into()),
                TensorArg::from_raw_parts(
                    image_handle.clone(),
                    contiguous_strides(&shape).into(),
                    shape.to_vec().into(),
                ),
                chunk,
                &g,
                batch_offset,
            );
        }
        let got = read(&client, image_handle);
        let per_image = g.channels * g.in_h * g.in_w;
        for (i, &value) in got.iter().enumerate() {
            let n = i / per_image;
            if n < batch_offset || n >= batch_offset + chunk {
                assert_eq!(value, SENTINEL, "case {case_index}: image {n} outside the chunk was written");
            } else {
                let want = want_chunk[i - batch_offset * per_image];
                assert!(
                    (value - want).abs() <= TOLERANCE * (1.0 + want.abs()),
                    "case {case_index}: {g:?}, element {i}: got {value}, want {want}"
                );
            }
        }
    }
}

#[test]
fn col2im_is_the_adjoint_of_im2col() {
    // <im2col(x), y> = <x, col2im(y)> for any x, y: the identity the input gradient rests on.
    let mut rng = SmallRng::seed_from_u64(7);
    for _ in 0..50 {
        let Case { geometry: g, chunk, .. } = random_case(&mut rng);
        let image = random_values(&mut rng, chunk * g.channels * g.in_h * g.in_w);
        let columns = random_values(&mut rng, g.col_rows() * chunk * g.col_cols_per_image());
        let lhs: f64 =
            reference::im2col(&image, &g, 0, chunk).iter().zip(&columns).map(|(a, b)| (*a as f64) * (*b as f64)).sum();
        let rhs: f64 =
            image.iter().zip(reference::col2im(&columns, &g, chunk)).map(|(a, b)| (*a as f64) * (b as f64)).sum();
        assert!((lhs - rhs).abs() <= 1e-4 * (1.0 + lhs.abs()), "{g:?}: {lhs} vs {rhs}");
    }
}
