//! `Lean<B>` convolutions against stock Burn over randomized shapes, fixed seeds.
//!
//! Reference: Burn's `NdArray` backend (stock `conv2d`, `conv2d_x_backward`,
//! `conv2d_weight_backward`, `conv_transpose2d`), in f32: a backend of its own, apart
//! from `Flex`, the CPU backend `Lean`'s composed path is checked on.
//! Tolerance (f32): every element satisfies |got − want| ≤ 1e-4 · max(|want|, rms(want)),
//! i.e. 1e-4 relative, with the tensor's rms as the floor for elements near zero.
//! Half precision is checked against the same f32 reference with 1e-2 (f16) and 4e-2
//! (bf16) in place of 1e-4.
//!
//! The workspace budget is set to 32 KiB for this binary so most shapes run in several
//! chunks; the results must not depend on the chunking.

use std::sync::Once;

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::{Flex, NdArray, Wgpu};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_backend::ops::{ConvOptions, ConvTransposeOptions, ModuleOps};
use burn_backend::Backend;
use burn_cubecl::CubeBackend;
use leanburn::backend::{conv2d_plan, conv_transpose2d_plan, ChunkedConv, ConvPlan};
use leanburn::{ConvBudget, Lean};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Cube = CubeBackend<WgpuRuntime, f32, i32, u32>;
type CubeF16 = CubeBackend<WgpuRuntime, half::f16, i32, u32>;
type CubeBf16 = CubeBackend<WgpuRuntime, half::bf16, i32, u32>;

const F32_TOLERANCE: f32 = 1e-4;
/// Shapes per comparison on the wgpu runtime. Every new shape costs llvmpipe seconds of
/// kernel compilation and CubeCL matmul autotuning (10 to 20 s each from cold caches), so
/// CI runs 12 (kernel path), 8 (transposed), 8 (fused wgpu), 6 (fused transposed, f16,
/// bf16); [`assert_covers`] fails if a count is too small to reach every feature. `LEANBURN_CONV_CASES=300` runs the full sweep (about
/// 20 minutes on 2 cores); the CPU (`Flex`) comparisons always run 300 and 100.
fn wgpu_cases(default: usize) -> usize {
    std::env::var("LEANBURN_CONV_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn small_budget() {
    static INIT: Once = Once::new();
    INIT.call_once(|| ConvBudget::set_global(ConvBudget::from_bytes(32 * 1024)));
}

#[derive(Clone, Debug)]
struct Case {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    size: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

impl Case {
    fn random(rng: &mut SmallRng, max_channels: usize) -> Self {
        loop {
            let groups = *[1, 1, 1, 2, 3, 4].get(rng.random_range(0..6)).unwrap();
            let in_channels = groups * rng.random_range(1..=(max_channels / groups).max(1));
            let out_channels = groups * rng.random_range(1..=(max_channels / groups).max(1));
            let case = Case {
                batch: rng.random_range(1..=8),
                in_channels,
                out_channels,
                groups,
                size: [rng.random_range(1..=14), rng.random_range(1..=14)],
                kernel: [rng.random_range(1..=7), rng.random_range(1..=7)],
                stride: [rng.random_range(1..=3), rng.random_range(1..=3)],
                padding: [rng.random_range(0..=3), rng.random_range(0..=3)],
                dilation: [rng.random_range(1..=3), rng.random_range(1..=3)],
            };
            // Keep the kernel inside the padded input, and the problem small enough.
            let fits = (0..2).all(|i| case.size[i] + 2 * case.padding[i] > case.dilation[i] * (case.kernel[i] - 1));
            let work = case.batch * case.in_channels * case.out_channels / case.groups
                * case.size[0]
                * case.size[1]
                * case.kernel[0]
                * case.kernel[1];
            if fits && work <= 4_000_000 {
                return case;
            }
        }
    }

    fn out_size(&self) -> [usize; 2] {
        [0, 1].map(|i| {
            (self.size[i] + 2 * self.padding[i] - self.dilation[i] * (self.kernel[i] - 1) - 1) / self.stride[i] + 1
        })
    }

    fn options(&self) -> ConvOptions<2> {
        ConvOptions::new(self.stride, self.padding, self.dilation, self.groups)
    }
}

/// Host data for one case: input, weight, bias, output gradient.
struct Data {
    x: TensorData,
    weight: TensorData,
    bias: TensorData,
    output_grad: TensorData,
}

fn values(rng: &mut SmallRng, shape: Vec<usize>) -> TensorData {
    let n = shape.iter().product();
    TensorData::new((0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>(), shape)
}

fn conv_data(rng: &mut SmallRng, case: &Case) -> Data {
    let [oh, ow] = case.out_size();
    Data {
        x: values(rng, vec![case.batch, case.in_channels, case.size[0], case.size[1]]),
        weight: values(rng, vec![case.out_channels, case.in_channels / case.groups, case.kernel[0], case.kernel[1]]),
        bias: values(rng, vec![case.out_channels]),
        output_grad: values(rng, vec![case.batch, case.out_channels, oh, ow]),
    }
}

fn prim<B: Backend, const D: usize>(data: &TensorData, device: &B::Device) -> B::FloatTensorPrimitive {
    Tensor::<B, D>::from_data(data.clone(), device).into_primitive().tensor()
}

fn host<B: Backend, const D: usize>(tensor: B::FloatTensorPrimitive) -> Vec<f32> {
    Tensor::<B, D>::from_primitive(TensorPrimitive::Float(tensor)).into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

/// Forward output, input gradient and weight gradient of `conv2d` on `B`.
fn conv2d_all<B: Backend>(data: &Data, case: &Case, device: &B::Device) -> [Vec<f32>; 3] {
    let (x, w) = (prim::<B, 4>(&data.x, device), prim::<B, 4>(&data.weight, device));
    let bias = prim::<B, 1>(&data.bias, device);
    let dy = prim::<B, 4>(&data.output_grad, device);
    let y = B::conv2d(x.clone(), w.clone(), Some(bias), case.options());
    let dx = B::conv2d_x_backward(x.clone(), w.clone(), dy.clone(), case.options());
    let dw = B::conv2d_weight_backward(x, w, dy, case.options());
    [host::<B, 4>(y), host::<B, 4>(dx), host::<B, 4>(dw)]
}

fn assert_close(what: &str, case_index: usize, case: &Case, got: &[f32], want: &[f32], tolerance: f32) {
    assert_eq!(got.len(), want.len(), "{what}, case {case_index}: length, {case:?}");
    let rms = (want.iter().map(|v| v * v).sum::<f32>() / want.len().max(1) as f32).sqrt();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let bound = tolerance * w.abs().max(rms);
        assert!(
            (g - w).abs() <= bound || (g - w).abs() == 0.0,
            "{what}, case {case_index}, element {i}: got {g}, want {w} (bound {bound}), {case:?}"
        );
    }
}

/// Fails unless the drawn cases reach every feature of the convolution that `Lean`
/// handles itself, so that the reduced counts CI runs on wgpu still cover them all.
/// `plans` (the plans `Lean` followed, one per case): also require a case cut into several
/// chunks, one whose chunk holds several images and one cut into row tiles.
fn assert_covers(drawn: &[Case], plans: Option<&[ConvPlan]>) {
    let any = |feature: &dyn Fn(&Case) -> bool| drawn.iter().any(feature);
    let mut features = vec![
        ("groups > 1", any(&|c| c.groups > 1)),
        ("stride > 1", any(&|c| c.stride.iter().any(|&s| s > 1))),
        ("dilation > 1", any(&|c| c.dilation.iter().any(|&d| d > 1))),
        ("padding > 0", any(&|c| c.padding.iter().any(|&p| p > 0))),
        ("a non-square kernel", any(&|c| c.kernel[0] != c.kernel[1])),
        ("a non-square image", any(&|c| c.size[0] != c.size[1])),
    ];
    if let Some(plans) = plans {
        let any_plan = |feature: &dyn Fn(&ConvPlan, &Case) -> bool| plans.iter().zip(drawn).any(|(p, c)| feature(p, c));
        features.push(("several chunks", any_plan(&|p, _| p.chunks > 1)));
        features.push(("several images in one chunk", any_plan(&|p, c| p.images_per_chunk > 1 && c.batch > 1)));
        features.push(("one image in several row tiles", any_plan(&|p, _| p.row_tiles > 1)));
    }
    let missing: Vec<&str> = features.iter().filter(|(_, hit)| !hit).map(|(name, _)| *name).collect();
    assert!(missing.is_empty(), "{} cases never reach: {missing:?}; draw more or change the seed", drawn.len());
}

fn compare_conv2d<B: ChunkedConv>(seed: u64, cases: usize, max_channels: usize, device: &B::Device, tolerance: f32) {
    small_budget();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut drawn, mut plans) = (Vec::with_capacity(cases), Vec::with_capacity(cases));
    for case_index in 0..cases {
        let case = Case::random(&mut rng, max_channels);
        let weight = [case.out_channels, case.in_channels / case.groups, case.kernel[0], case.kernel[1]];
        plans.push(conv2d_plan::<B>(
            [case.batch, case.in_channels, case.size[0], case.size[1]],
            weight,
            &case.options(),
            4,
        ));
        let data = conv_data(&mut rng, &case);
        let want = conv2d_all::<NdArray>(&data, &case, &Default::default());
        let got = conv2d_all::<Lean<B>>(&data, &case, device);
        for (what, (g, w)) in ["forward", "input gradient", "weight gradient"].iter().zip(got.iter().zip(&want)) {
            assert_close(what, case_index, &case, g, w, tolerance);
        }
        drawn.push(case);
    }
    assert_covers(&drawn, Some(&plans));
}

#[test]
fn kernel_path_matches_stock_burn_on_random_shapes() {
    compare_conv2d::<Cube>(0x5eed_0001, wgpu_cases(12), 64, &WgpuDevice::default(), F32_TOLERANCE);
}

#[test]
fn composed_path_on_flex_matches_stock_burn_on_300_random_shapes() {
    compare_conv2d::<Flex>(0x5eed_0002, 300, 64, &Default::default(), F32_TOLERANCE);
}

/// Burn's default (fused) wgpu stack: the same kernels, queued as Fusion custom ops.
#[test]
fn kernel_path_on_fused_wgpu_matches_stock_burn() {
    compare_conv2d::<Wgpu>(0x5eed_0003, wgpu_cases(8), 32, &WgpuDevice::default(), F32_TOLERANCE);
}

#[test]
fn half_precision_kernels_match_within_stated_tolerance() {
    let device = WgpuDevice::default();
    let mut ran = 0;
    if Cube::supports_dtype(&device, burn::tensor::DType::F16) {
        compare_conv2d::<CubeF16>(0x5eed_0004, wgpu_cases(6), 16, &device, 1e-2);
        ran += 1;
    } else {
        eprintln!("f16 not supported by this wgpu adapter: f16 comparison not run");
    }
    if Cube::supports_dtype(&device, burn::tensor::DType::BF16) {
        compare_conv2d::<CubeBf16>(0x5eed_0005, wgpu_cases(6), 16, &device, 4e-2);
        ran += 1;
    } else {
        eprintln!("bf16 not supported by this wgpu adapter: bf16 comparison not run");
    }
    eprintln!("half-precision comparisons run: {ran}");
}

fn conv_transpose_all<B: Backend>(
    data: &Data,
    case: &Case,
    options: &ConvTransposeOptions<2>,
    device: &B::Device,
) -> Vec<f32> {
    let x = prim::<B, 4>(&data.x, device);
    let w = prim::<B, 4>(&data.weight, device);
    let bias = prim::<B, 1>(&data.bias, device);
    let _ = case;
    host::<B, 4>(B::conv_transpose2d(x, w, Some(bias), options.clone()))
}

fn compare_conv_transpose2d<B: ChunkedConv>(seed: u64, cases: usize, device: &B::Device) {
    small_budget();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut drawn, mut plans) = (Vec::with_capacity(cases), Vec::with_capacity(cases));
    for case_index in 0..cases {
        let (case, padding_out) = loop {
            let case = Case::random(&mut rng, 32);
            let padding_out = [0, 1].map(|i| rng.random_range(0..case.stride[i].max(case.dilation[i])));
            let positive = (0..2).all(|i| {
                (case.size[i] - 1) * case.stride[i] + case.dilation[i] * (case.kernel[i] - 1) + 1 + padding_out[i]
                    > 2 * case.padding[i]
            });
            if positive {
                break (case, padding_out);
            }
        };
        let options = ConvTransposeOptions::new(case.stride, case.padding, padding_out, case.dilation, case.groups);
        let x_dims = [case.batch, case.in_channels, case.size[0], case.size[1]];
        let weight_dims = [case.in_channels, case.out_channels / case.groups, case.kernel[0], case.kernel[1]];
        // None where the output padding reaches the stride: Lean hands the case to B.
        let plan = conv_transpose2d_plan::<B>(x_dims, weight_dims, &options, 4);
        // Transposed: weight [in, out / groups, kh, kw], bias [out].
        let data = Data {
            x: values(&mut rng, vec![case.batch, case.in_channels, case.size[0], case.size[1]]),
            weight: values(
                &mut rng,
                vec![case.in_channels, case.out_channels / case.groups, case.kernel[0], case.kernel[1]],
            ),
            bias: values(&mut rng, vec![case.out_channels]),
            output_grad: TensorData::new(Vec::<f32>::new(), [0]),
        };
        let want = conv_transpose_all::<NdArray>(&data, &case, &options, &Default::default());
        let got = conv_transpose_all::<Lean<B>>(&data, &case, &options, device);
        assert_close("conv_transpose2d", case_index, &case, &got, &want, F32_TOLERANCE);
        if let Some(plan) = plan {
            plans.push(plan);
            drawn.push(case);
        }
    }
    assert!(drawn.len() * 2 >= cases, "Lean handed most drawn transposed cases to B: {} of {cases} ran", drawn.len());
    assert_covers(&drawn, Some(&plans));
}

#[test]
fn conv_transpose2d_kernel_path_matches_stock_burn() {
    compare_conv_transpose2d::<Cube>(0x5eed_0006, wgpu_cases(8), &WgpuDevice::default());
}

#[test]
fn conv_transpose2d_kernel_path_on_fused_wgpu_matches_stock_burn() {
    compare_conv_transpose2d::<Wgpu>(0x5eed_0008, wgpu_cases(6), &WgpuDevice::default());
}

#[test]
fn conv_transpose2d_composed_path_matches_stock_burn() {
    compare_conv_transpose2d::<Flex>(0x5eed_0007, 100, &Default::default());
}

fn panic_message(result: std::thread::Result<impl Sized>) -> String {
    match result {
        Ok(_) => panic!("expected the convolution to refuse its input"),
        Err(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let device = WgpuDevice::default();
    let options = ConvOptions::new([1, 1], [0, 0], [1, 1], 2);
    let tensor = |shape: [usize; 4]| Tensor::<Lean<Cube>, 4>::zeros(shape, &device).into_primitive().tensor();

    // 3 input channels cannot feed 2 groups of 2.
    let message = panic_message(std::panic::catch_unwind(|| {
        <Lean<Cube> as ModuleOps<Lean<Cube>>>::conv2d(tensor([1, 3, 8, 8]), tensor([4, 2, 3, 3]), None, options.clone())
    }));
    assert!(message.contains("channels"), "{message}");

    // A 7×7 kernel on a 4×4 image without padding has no output.
    let options = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
    let message = panic_message(std::panic::catch_unwind(|| {
        <Lean<Cube> as ModuleOps<Lean<Cube>>>::conv2d(tensor([1, 2, 4, 4]), tensor([2, 2, 7, 7]), None, options.clone())
    }));
    assert!(message.contains("does not fit"), "{message}");

    // Through the public Burn API the channel check is Burn's own, before the backend.
    let message = panic_message(std::panic::catch_unwind(|| {
        let x = Tensor::<Lean<Cube>, 4>::zeros([1, 3, 8, 8], &device);
        let w = Tensor::<Lean<Cube>, 4>::zeros([4, 2, 3, 3], &device);
        burn::tensor::module::conv2d(x, w, None, ConvOptions::new([1, 1], [0, 0], [1, 1], 1))
    }));
    assert!(!message.is_empty(), "Burn's own check must explain the refusal");
}
