//! `Lean<B>` against stock `B`, side by side, over ResNet-50's convolution shapes and a few
//! large-batch / high-resolution ones: forward + input gradient + weight gradient.
//!
//! ```text
//! cargo bench --bench conv -- --backend wgpu --allow-software --batch 1 --reps 3
//! cargo bench --bench conv -- --backend cuda --set all --batch 32 --dtype bf16
//! ```
//!
//! On CubeCL backends both stacks run by default (`--stack`): Burn's default, fused one
//! (`Fusion<CubeBackend>`: `Lean`'s pixel moves run as Fusion custom ops) and the unfused
//! `CubeBackend`, each with `Lean` against stock on that stack; a last table puts `Lean`
//! over the fused stack beside `Lean` over the unfused one.
//!
//! Per shape and per backend: the median wall time of `--reps` timed runs (after
//! `--warmup` untimed ones, which also absorb CubeCL's autotuning), of the whole pass and of
//! each of its three parts (each part is synced before the next starts), and how far the device
//! pool's reserve rose during one run after a trim (the pool's high-water mark, rounded up
//! to its pages). `Lean`'s planned workspace per chunk is printed with its budget. The table
//! is Markdown, ready for `docs/benchmarks.md`.
//!
//! Correctness on the device itself: "max rel. error" is the largest difference between
//! `Lean`'s three results and stock's on the same inputs, element by element, relative to
//! `max(|stock|, rms(stock))` (the measure of `tests/conv_correctness.rs`). A shape whose
//! error exceeds `--tolerance` (default 1e-4 for f32, 1e-2 for f16, 4e-2 for bf16, the
//! tests' tolerances; 1e-2 for f32 on a device whose matmuls take TF32, as CubeCL's do on
//! CUDA: both sides then multiply with 10-bit mantissas, in different orders) is marked
//! with the error of each result (forward, input gradient, weight gradient), every stack
//! still runs, and the bench then exits with status 1.

use std::time::{Duration, Instant};

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::ops::{ConvOptions, FloatTensor, ModuleOps};
use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement};
use burn_fusion::Fusion;
use clap::{Parser, ValueEnum};
use cubecl::prelude::{tf32, CubePrimitive};
use leanburn::backend::{conv2d_plan, ChunkedConv};
use leanburn::device::{select, Chosen};
use leanburn::memory::format_bytes;
use leanburn::BackendArgs;
use leanburn::MemoryProbe;
use leanburn::{ConvBudget, Lean};

#[derive(Parser, Debug)]
#[command(about = "Lean<B> convolutions against stock B: time and peak memory")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// Which shapes: ResNet-50's layers, the large ones, or both.
    #[arg(long, value_enum, default_value_t = ShapeSet::Resnet50)]
    set: ShapeSet,
    /// Batch size for the ResNet-50 shapes (the large shapes set their own).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Divides the batch of the large shapes (for slow devices).
    #[arg(long, default_value_t = 1)]
    large_divisor: usize,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// `Lean`'s convolution workspace budget in MiB.
    #[arg(long, default_value_t = ConvBudget::DEFAULT_MIB)]
    budget_mib: usize,
    /// Float type on CubeCL backends (the CPU backend runs f32).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    dtype: Precision,
    /// Largest allowed relative error of `Lean` against stock; default by `--dtype`.
    #[arg(long)]
    tolerance: Option<f32>,
    /// Run only the shapes whose name contains this.
    #[arg(long)]
    only: Option<String>,
    /// Which CubeCL stacks `Lean` and stock run on (the CPU backend has one).
    #[arg(long, value_enum, default_value_t = Stack::Both)]
    stack: Stack,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum ShapeSet {
    Resnet50,
    Large,
    /// ResNet-50's and the large ones.
    All,
    /// The convolutions of the CNN example's `--net resnet18 --widths 32,64,128,256` on
    /// 64 × 64 images (at `--batch`).
    Resnet18At64,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Stack {
    /// Burn's default `Fusion<CubeBackend>`.
    Fused,
    /// `CubeBackend` without the fuser.
    Unfused,
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Precision {
    F32,
    F16,
    Bf16,
}

#[derive(Clone, Debug)]
struct Shape {
    name: &'static str,
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    side: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
}

fn shapes(args: &Args) -> Vec<Shape> {
    let n = args.batch.max(1);
    let resnet = |name, in_channels, out_channels, side, kernel, stride, padding| Shape {
        name,
        batch: n,
        in_channels,
        out_channels,
        side,
        kernel,
        stride,
        padding,
    };
    let large_n = |batch: usize| (batch / args.large_divisor.max(1)).max(1);
    let large = |name, batch, in_channels, out_channels, side, kernel, stride, padding| Shape {
        name,
        batch: large_n(batch),
        in_channels,
        out_channels,
        side,
        kernel,
        stride,
        padding,
    };
    let mut list = Vec::new();
    if args.set == ShapeSet::Resnet18At64 {
        list.extend([
            resnet("r18@64 stem 7x7/2 3-32", 3, 32, 64, 7, 2, 3),
            resnet("r18@64 l1 3x3 32", 32, 32, 16, 3, 1, 1),
            resnet("r18@64 l2 3x3/2 32-64", 32, 64, 16, 3, 2, 1),
            resnet("r18@64 l2 1x1/2 32-64", 32, 64, 16, 1, 2, 0),
            resnet("r18@64 l2 3x3 64", 64, 64, 8, 3, 1, 1),
            resnet("r18@64 l3 3x3/2 64-128", 64, 128, 8, 3, 2, 1),
            resnet("r18@64 l3 3x3 128", 128, 128, 4, 3, 1, 1),
            resnet("r18@64 l4 3x3/2 128-256", 128, 256, 4, 3, 2, 1),
            resnet("r18@64 l4 3x3 256", 256, 256, 2, 3, 1, 1),
        ]);
    }
    if matches!(args.set, ShapeSet::Resnet50 | ShapeSet::All) {
        list.extend([
            resnet("r50.conv1 7x7/2", 3, 64, 224, 7, 2, 3),
            resnet("r50.l1 1x1 64-64", 64, 64, 56, 1, 1, 0),
            resnet("r50.l1 3x3 64-64", 64, 64, 56, 3, 1, 1),
            resnet("r50.l1 1x1 64-256", 64, 256, 56, 1, 1, 0),
            resnet("r50.l2 3x3/2 128", 128, 128, 56, 3, 2, 1),
            resnet("r50.l2 3x3 128", 128, 128, 28, 3, 1, 1),
            resnet("r50.l3 3x3 256", 256, 256, 14, 3, 1, 1),
            resnet("r50.l3 1x1 256-1024", 256, 1024, 14, 1, 1, 0),
            resnet("r50.l4 3x3 512", 512, 512, 7, 3, 1, 1),
            resnet("r50.l4 1x1 512-2048", 512, 2048, 7, 1, 1, 0),
        ]);
    }
    if matches!(args.set, ShapeSet::Large | ShapeSet::All) {
        list.extend([
            large("large 3x3 64 @256²", 16, 64, 64, 256, 3, 1, 1),
            large("large 3x3 32 @128² b128", 128, 32, 32, 128, 3, 1, 1),
            large("large 7x7 16 @512²", 8, 16, 16, 512, 7, 1, 3),
        ]);
    }
    if let Some(only) = &args.only {
        list.retain(|shape| shape.name.contains(only.as_str()));
    }
    list
}

struct Measured {
    /// Of the whole pass.
    median: Duration,
    /// Of the forward, the input gradient and the weight gradient, each on its own.
    parts: [Duration; 3],
    reserve_rise: Option<u64>,
}

/// `a / b / c` milliseconds.
fn parts_ms(parts: &[Duration; 3]) -> String {
    parts.map(|part| format!("{:.1}", part.as_secs_f64() * 1e3)).join(" / ")
}

fn float<B: Backend>(tensor: Tensor<B, 4>) -> FloatTensor<B> {
    tensor.into_primitive().tensor()
}

/// One forward + input-gradient + weight-gradient pass, each part synced and timed.
fn pass<B: Backend>(
    x: &Tensor<B, 4>,
    weight: &Tensor<B, 4>,
    grad: &Tensor<B, 4>,
    options: &ConvOptions<2>,
) -> [Duration; 3] {
    let device = x.device();
    let timed = |part: &dyn Fn() -> FloatTensor<B>| {
        let start = Instant::now();
        let result = part();
        B::sync(&device).expect("device sync");
        let elapsed = start.elapsed();
        drop(result);
        elapsed
    };
    [
        timed(&|| B::conv2d(float(x.clone()), float(weight.clone()), None, options.clone())),
        timed(&|| B::conv2d_x_backward(float(x.clone()), float(weight.clone()), float(grad.clone()), options.clone())),
        timed(&|| {
            B::conv2d_weight_backward(float(x.clone()), float(weight.clone()), float(grad.clone()), options.clone())
        }),
    ]
}

/// The shape's convolution options and random input, weight and output gradient.
fn random_inputs<B: Backend>(
    shape: &Shape,
    device: &B::Device,
) -> (ConvOptions<2>, Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
    let options = ConvOptions::new([shape.stride; 2], [shape.padding; 2], [1, 1], 1);
    let x = Tensor::<B, 4>::random(
        [shape.batch, shape.in_channels, shape.side, shape.side],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let weight = Tensor::<B, 4>::random(
        [shape.out_channels, shape.in_channels, shape.kernel, shape.kernel],
        Distribution::Normal(0.0, 0.05),
        device,
    );
    let out_side = (shape.side + 2 * shape.padding - shape.kernel) / shape.stride + 1;
    let grad = Tensor::<B, 4>::random(
        [shape.batch, shape.out_channels, out_side, out_side],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    (options, x, weight, grad)
}

fn measure<B: Backend + MemoryProbe>(shape: &Shape, args: &Args, device: &B::Device) -> Measured {
    let (options, x, weight, grad) = random_inputs::<B>(shape, device);
    B::sync(device).expect("device sync");
    for _ in 0..args.warmup {
        pass(&x, &weight, &grad, &options);
    }
    B::release_unused(device);
    let before = B::memory_sample(device);
    pass(&x, &weight, &grad, &options);
    let after = B::memory_sample(device);
    let reserve_rise = before.zip(after).map(|(b, a)| a.bytes_reserved.saturating_sub(b.bytes_reserved));

    let times: Vec<[Duration; 3]> = (0..args.reps.max(1)).map(|_| pass(&x, &weight, &grad, &options)).collect();
    let median = |part: &dyn Fn(&[Duration; 3]) -> Duration| {
        let mut sorted: Vec<Duration> = times.iter().map(part).collect();
        sorted.sort();
        sorted[sorted.len() / 2]
    };
    Measured {
        median: median(&|t| t.iter().sum()),
        parts: [median(&|t| t[0]), median(&|t| t[1]), median(&|t| t[2])],
        reserve_rise,
    }
}

fn host<B: Backend>(tensor: FloatTensor<B>) -> Vec<f32> {
    Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(tensor))
        .into_data()
        .convert::<f32>()
        .to_vec()
        .expect("f32 data")
}

/// Largest error of `got` against `want`, each element relative to `max(|want|, rms(want))`.
fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    let rms = (want.iter().map(|w| f64::from(*w).powi(2)).sum::<f64>() / want.len().max(1) as f64).sqrt() as f32;
    got.iter().zip(want).map(|(g, w)| (g - w).abs() / w.abs().max(rms).max(f32::MIN_POSITIVE)).fold(0.0, f32::max)
}

/// `Lean<B>`'s forward, input gradient and weight gradient against `B`'s on the same
/// random inputs: the relative error of each, in that order.
fn lean_errors<B: ChunkedConv>(shape: &Shape, device: &B::Device) -> [f32; 3] {
    let (options, x, weight, grad) = random_inputs::<B>(shape, device);
    let (x, weight, grad) = (float(x), float(weight), float(grad));
    let pairs = [
        (
            Lean::<B>::conv2d(x.clone(), weight.clone(), None, options.clone()),
            B::conv2d(x.clone(), weight.clone(), None, options.clone()),
        ),
        (
            Lean::<B>::conv2d_x_backward(x.clone(), weight.clone(), grad.clone(), options.clone()),
            B::conv2d_x_backward(x.clone(), weight.clone(), grad.clone(), options.clone()),
        ),
        (
            Lean::<B>::conv2d_weight_backward(x.clone(), weight.clone(), grad.clone(), options.clone()),
            B::conv2d_weight_backward(x, weight, grad, options),
        ),
    ];
    pairs.map(|(got, want)| relative_error(&host::<B>(got), &host::<B>(want)))
}

fn memory(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "n/a".to_string(), |b| format_bytes(b as f64))
}

/// `Lean`'s median time per shape, and how many shapes were over the tolerance.
struct Table {
    lean_times: Vec<Duration>,
    wrong: usize,
}

/// Runs the table on `B`.
fn run<B: ChunkedConv + MemoryProbe>(
    args: &Args,
    device: B::Device,
    elem_bytes: usize,
    tf32: bool,
    label: &str,
) -> Table {
    let list = shapes(args);
    let tolerance = args.tolerance.unwrap_or(match elem_bytes {
        4 if tf32 => 1e-2,
        4 => 1e-4,
        _ if label.starts_with("bf16") => 4e-2,
        _ => 1e-2,
    });
    ConvBudget::set_global(ConvBudget::from_mib(args.budget_mib));
    println!(
        "\n{} vs {}, {label}, budget {} MiB, median of {} (after {} warm-up)\n",
        <Lean<B> as Backend>::name(&device),
        B::name(&device),
        args.budget_mib,
        args.reps,
        args.warmup
    );
    println!(
        "| shape | batch | stock ms | lean ms | lean/stock time | stock fwd / dx / dw ms | lean fwd / dx / dw ms | stock reserve rise | lean reserve rise | lean workspace (chunks) | max rel. error |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let rows: Vec<Row> = list.iter().map(|shape| row::<B>(shape, args, &device, elem_bytes, tolerance)).collect();
    let over_budget = rows.iter().filter(|row| row.over_budget).count();
    let wrong = rows.iter().filter(|row| row.wrong).count();
    if over_budget > 0 {
        println!(
            "\n{over_budget} shape(s) need more than the budget for a single output row; Lean runs those one row at a time."
        );
    }
    println!("\nmax rel. error: Lean against stock on the same inputs; tolerance {tolerance:.0e}");
    if wrong > 0 {
        eprintln!("error: {wrong} shape(s) differ from stock beyond {tolerance:.0e} ({label})");
    }
    Table { lean_times: rows.iter().map(|row| row.lean).collect(), wrong }
}

/// What the table keeps of a shape's row.
struct Row {
    /// `Lean`'s median time.
    lean: Duration,
    /// `Lean`'s plan needs more than the budget for one output row.
    over_budget: bool,
    /// `Lean`'s results differ from stock's beyond the tolerance.
    wrong: bool,
}

/// Times `shape` on stock `B` and on `Lean<B>`, compares their results, prints the row.
fn row<B: ChunkedConv + MemoryProbe>(
    shape: &Shape,
    args: &Args,
    device: &B::Device,
    elem_bytes: usize,
    tolerance: f32,
) -> Row {
    eprintln!("… {} (batch {})", shape.name, shape.batch);
    let stock = measure::<B>(shape, args, device);
    let lean = measure::<Lean<B>>(shape, args, device);
    let options = ConvOptions::new([shape.stride; 2], [shape.padding; 2], [1, 1], 1);
    let plan = conv2d_plan::<B>(
        [shape.batch, shape.in_channels, shape.side, shape.side],
        [shape.out_channels, shape.in_channels, shape.kernel, shape.kernel],
        &options,
        elem_bytes,
    );
    let errors = lean_errors::<B>(shape, device);
    let error = errors.into_iter().fold(0.0, f32::max);
    let within = error <= tolerance;
    println!(
        "| {} | {} | {:.1} | {:.1} | {:.2} | {} | {} | {} | {} | {} ({}{}){} | {:.1e}{} |",
        shape.name,
        shape.batch,
        stock.median.as_secs_f64() * 1e3,
        lean.median.as_secs_f64() * 1e3,
        lean.median.as_secs_f64() / stock.median.as_secs_f64(),
        parts_ms(&stock.parts),
        parts_ms(&lean.parts),
        memory(stock.reserve_rise),
        memory(lean.reserve_rise),
        format_bytes(plan.workspace_bytes as f64),
        plan.chunks,
        if plan.row_tiles > 1 { format!(" × {} row tiles", plan.row_tiles) } else { String::new() },
        if plan.fits_budget() { "" } else { " over budget: one output row" },
        error,
        if within {
            String::new()
        } else {
            format!(
                " **over tolerance** (forward {:.1e}, input grad {:.1e}, weight grad {:.1e})",
                errors[0], errors[1], errors[2]
            )
        },
    );
    Row { lean: lean.median, over_budget: !plan.fits_budget(), wrong: !within }
}

/// Runs `Lean` against stock on the fused and the unfused CubeCL stack; returns how many
/// shapes were over the tolerance on either.
fn run_cube<R: CubeRuntime, BT: BoolElement>(args: &Args, device: R::Device) -> usize {
    fn typed<R: CubeRuntime, F: FloatElement, BT: BoolElement>(args: &Args, device: R::Device, label: &str) -> usize {
        let bytes = core::mem::size_of::<F>();
        // CubeCL's accelerated matmuls stage f32 operands as TF32 where the device has it.
        let tf32 = R::client(&device).properties().supports_type(tf32::as_type_native_unchecked().storage_type());
        let fused = (args.stack != Stack::Unfused).then(|| {
            run::<Fusion<CubeBackend<R, F, i32, BT>>>(args, device.clone(), bytes, tf32, &format!("{label}, fused"))
        });
        let unfused = (args.stack != Stack::Fused)
            .then(|| run::<CubeBackend<R, F, i32, BT>>(args, device, bytes, tf32, &format!("{label}, unfused")));
        let wrong = fused.as_ref().map_or(0, |t| t.wrong) + unfused.as_ref().map_or(0, |t| t.wrong);
        if let (Some(fused), Some(unfused)) = (fused, unfused) {
            println!("\nLean over the fused stack against Lean over the unfused one, {label}\n");
            println!("| shape | lean fused ms | lean unfused ms | fused/unfused time |");
            println!("|---|---|---|---|");
            for ((shape, fused), unfused) in shapes(args).iter().zip(fused.lean_times).zip(unfused.lean_times) {
                println!(
                    "| {} | {:.1} | {:.1} | {:.2} |",
                    shape.name,
                    fused.as_secs_f64() * 1e3,
                    unfused.as_secs_f64() * 1e3,
                    fused.as_secs_f64() / unfused.as_secs_f64()
                );
            }
        }
        wrong
    }
    match args.dtype {
        Precision::F32 => typed::<R, f32, BT>(args, device, "f32"),
        Precision::F16 => typed::<R, half::f16, BT>(args, device, "f16"),
        Precision::Bf16 => typed::<R, half::bf16, BT>(args, device, "bf16"),
    }
}

fn main() {
    let args = Args::parse();
    let backend = match select(&args.backend) {
        Ok(backend) => backend,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::exit(err.exit_code());
        }
    };
    eprintln!("{backend}");
    let wrong = match backend.chosen {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { ordinal } => {
            run_cube::<cubecl::cuda::CudaRuntime, u8>(&args, burn::backend::cuda::CudaDevice::new(ordinal))
        }
        Chosen::Wgpu { device, .. } => run_cube::<burn::backend::wgpu::WgpuRuntime, u32>(&args, device),
        Chosen::Cpu => {
            if args.dtype != Precision::F32 {
                eprintln!("note: the CPU backend runs f32");
            }
            run::<NdArray>(&args, Default::default(), 4, false, "f32").wrong
        }
    };
    if wrong > 0 {
        std::process::exit(1);
    }
}
