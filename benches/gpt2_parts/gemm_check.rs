//! The `gemm-check` part: `Lean`'s matmul (cuBLASLt on CUDA) against the backend's own
//! matmul (`LEANBURN_GEMM=cubecl`'s path: CubeCL's on CUDA and wgpu, Flex's on the CPU) and
//! a host f64 reference, over random shapes, transposed and sliced views and broadcast
//! batches, in each float type the device computes; then one GPT-2 step's loss and
//! gradients with the vendor's GEMM and without.
//!
//! The error of one output element is `|out − ref| / Σₚ |aᵢₚ·bₚⱼ|` (the reference in f64 on
//! the inputs as the device holds them): at most the products' and the sum's rounding.
//! Tolerances: strict f32 1e-5; TF32 2e-3 (10-bit products); f16 2e-3 (its 11-bit output);
//! bf16 8e-3 (its 8-bit output). The backend's own matmul is held to TF32's tolerance in
//! f32 (CubeCL computes f32 products as TF32 on CUDA), and so is a product cuBLASLt does not
//! take (a partly broadcast batch falls back to the backend's matmul; such cases, those
//! during which [`vendor_gemm_products`] did not move, are counted apart). The control:
//! the reference with its columns rotated by one, what an off-by-one leading dimension
//! would give, must fail the same check.

use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, ElementConversion, FloatDType, Tensor, TensorPrimitive};
use leanburn::backend::{
    gemm_fused_adds, gemm_order, set_f32_gemm, set_gemm_fused_adds, set_gemm_order, set_vendor_gemm, vendor_gemm,
    vendor_gemm_products, F32Gemm, GemmOps, GemmOrder,
};
use leanburn::data::HostBatch;
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::trainer::ForwardLoss;
use leanburn::TrainBackend;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::Args;

/// One float type and how f32 products are computed, with its tolerance.
struct Precision {
    name: &'static str,
    dtype: FloatDType,
    f32: F32Gemm,
    tolerance: f64,
}

const PRECISIONS: [Precision; 4] = [
    Precision { name: "f32 (strict)", dtype: FloatDType::F32, f32: F32Gemm::Strict, tolerance: 1e-5 },
    Precision { name: "f32 (TF32)", dtype: FloatDType::F32, f32: F32Gemm::Tf32, tolerance: 2e-3 },
    Precision { name: "f16", dtype: FloatDType::F16, f32: F32Gemm::Tf32, tolerance: 2e-3 },
    Precision { name: "bf16", dtype: FloatDType::BF16, f32: F32Gemm::Tf32, tolerance: 8e-3 },
];

/// Runs the check and prints a line per precision; `Err` names what failed.
pub fn run<B: TrainBackend>(args: &Args, config: &Gpt2Config, seq: usize, device: &B::Device) -> Result<(), String> {
    let here = if <B::InnerBackend as GemmOps>::vendor_gemm(device) { "cuBLASLt" } else { "the backend's own matmul" };
    eprintln!("gemm-check: Lean's GEMMs here run on {here}; on CUDA devices: {}", vendor_gemm());
    let mut failures = Vec::new();
    for precision in &PRECISIONS {
        if !B::InnerBackend::supports_dtype(device, precision.dtype.into()) {
            eprintln!("gemm-check {}: not computed by this device, skipped", precision.name);
            continue;
        }
        set_f32_gemm(precision.f32);
        let mut rng = SmallRng::seed_from_u64(args.seed);
        let mut worst = Worst::default();
        for case in 0..args.gemm_cases {
            let shapes = Shapes::random(&mut rng, case % 2 == 0);
            worst.add(check_case::<B::InnerBackend>(&shapes, precision, &mut rng, device));
        }
        let verdict = worst.verdict(precision.tolerance, precision.own_tolerance());
        eprintln!("gemm-check {}: {} cases; {verdict}", precision.name, args.gemm_cases);
        if !worst.passed(precision.tolerance, precision.own_tolerance()) {
            failures.push(precision.name);
        }
        if !check_fused_adds::<B::InnerBackend>(args, precision, &mut rng, device) {
            failures.push("a bias or a sum added by the GEMM");
        }
    }
    set_f32_gemm(F32Gemm::Tf32);
    if let Err(step) = gpt2_step::<B>(args, config, seq, device) {
        failures.push(step);
    }
    if let Err(pass) = gpt2_forward_only::<B>(args, config, seq, device) {
        failures.push(pass);
    }
    set_vendor_gemm(true);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("gemm-check failed: {}", failures.join(", ")))
    }
}

/// One product's sizes and views.
#[derive(Debug)]
struct Shapes {
    /// Batch dimensions of the output (none for a plain matrix product).
    batch: Vec<usize>,
    /// `rhs`'s batch dimensions broadcast (size 1) where true.
    rhs_broadcast: Vec<bool>,
    m: usize,
    k: usize,
    n: usize,
    /// Operands made as transposed views (as autodiff's backward passes them).
    lhs_transposed: bool,
    rhs_transposed: bool,
    /// `lhs` a slice of a wider tensor (an offset and padded rows).
    lhs_sliced: bool,
}

impl Shapes {
    fn random(rng: &mut SmallRng, matrix: bool) -> Self {
        let size = |rng: &mut SmallRng| [1, 3, 17, 64, 100, 128, 257][rng.random_range(0..7)];
        let batch: Vec<usize> =
            if matrix { Vec::new() } else { vec![rng.random_range(1..=2), rng.random_range(1..=3)] };
        Self {
            rhs_broadcast: batch.iter().map(|_| rng.random_bool(0.3)).collect(),
            batch,
            m: size(rng),
            k: size(rng),
            n: size(rng),
            lhs_transposed: rng.random_bool(0.4),
            rhs_transposed: rng.random_bool(0.4),
            lhs_sliced: rng.random_bool(0.3),
        }
    }
}

impl Precision {
    /// The backend's own matmul's tolerance: TF32's for f32 (CubeCL's on CUDA), else the
    /// type's.
    fn own_tolerance(&self) -> f64 {
        if self.dtype == FloatDType::F32 {
            self.tolerance.max(2e-3)
        } else {
            self.tolerance
        }
    }
}

/// The largest error and control error over the cases, against the vendor and against
/// the backend's own matmul.
#[derive(Default)]
struct Worst {
    vendor: f64,
    own: f64,
    /// Cases whose product was the backend's own matmul (cuBLASLt did not take them).
    fallbacks: usize,
    /// The smallest error of the control (each case's must exceed the tolerance).
    control: f64,
    controls: usize,
}

impl Worst {
    fn add(&mut self, [vendor, own, control]: [Option<f64>; 3]) {
        match vendor {
            Some(vendor) => self.vendor = self.vendor.max(vendor),
            None => self.fallbacks += 1,
        }
        self.own = self.own.max(own.unwrap_or(0.0));
        if let Some(control) = control {
            self.control = if self.controls == 0 { control } else { self.control.min(control) };
            self.controls += 1;
        }
    }

    fn passed(&self, tolerance: f64, own_tolerance: f64) -> bool {
        self.vendor <= tolerance && self.own <= own_tolerance && (self.controls == 0 || self.control > tolerance)
    }

    fn verdict(&self, tolerance: f64, own_tolerance: f64) -> String {
        format!(
            "worst error {:.1e} ({}; tolerance {tolerance:.0e}; {} cases on the fallback), the backend's own matmul \
             {:.1e} ({}; tolerance {own_tolerance:.0e}); the control's smallest {:.1e} over {} cases ({})",
            self.vendor,
            if self.vendor <= tolerance { "pass" } else { "FAIL" },
            self.fallbacks,
            self.own,
            if self.own <= own_tolerance { "pass" } else { "FAIL" },
            self.control,
            self.controls,
            if self.controls == 0 || self.control > tolerance { "caught" } else { "NOT CAUGHT" },
        )
    }
}

/// `[vendor error, own error, control error]` of one product; no vendor error where the
/// vendor's library did not compute it (cuBLASLt did not take the layout, or is not here:
/// [`vendor_gemm_products`] did not move), so the product was the backend's own matmul.
fn check_case<B: Backend>(
    shapes: &Shapes,
    precision: &Precision,
    rng: &mut SmallRng,
    device: &B::Device,
) -> [Option<f64>; 3] {
    let Shapes { batch, m, k, n, .. } = shapes;
    let rhs_batch: Vec<usize> =
        batch.iter().zip(&shapes.rhs_broadcast).map(|(&d, &broadcast)| if broadcast { 1 } else { d }).collect();
    let seed = rng.random_range(0..u64::MAX / 2);
    B::seed(device, seed);
    let lhs = operand::<B>(batch, *m, *k, shapes.lhs_transposed, shapes.lhs_sliced, precision.dtype, device);
    let rhs = operand::<B>(&rhs_batch, *k, *n, shapes.rhs_transposed, false, precision.dtype, device);
    let (lhs_host, rhs_host) = (host(&lhs), host(&rhs));
    let reference = reference(batch, &shapes.rhs_broadcast, *m, *k, *n, &lhs_host, &rhs_host);
    set_vendor_gemm(true);
    let products = vendor_gemm_products();
    let vendor = host(&product(&lhs, &rhs));
    let fallback = vendor_gemm_products() == products;
    set_vendor_gemm(false);
    let own = host(&product(&lhs, &rhs));
    set_vendor_gemm(true);
    let rotated = (*n > 1).then(|| rotate_columns(&reference, *n));
    [
        (!fallback).then(|| error(&vendor, &reference)),
        Some(error(&own, &reference)),
        rotated.map(|rotated| error(&vendor, &rotated)),
    ]
}

/// What cuBLASLt adds to a product where [`set_gemm_fused_adds`] says so.
#[derive(Clone, Copy, PartialEq)]
enum Addend {
    /// The linear layers' `x · w + b`: `b` `[n]` in the epilogue.
    Bias,
    /// `s + x · w`, `s` of the product's shape, as `C` with `β = 1` (the LM head loss's
    /// weight gradient over its chunks).
    Sum,
}

/// `x · w` plus a bias, then plus a sum, over matrix shapes, as `Lean` runs them with the
/// add folded into cuBLASLt's call ([`set_gemm_fused_adds`]) and without (the GEMM, then an
/// add), against the host reference plus the addend; the addend is `k` times a standard
/// normal, so that the control, the reference without it, fails. Prints a line for each;
/// whether both passed.
fn check_fused_adds<B: Backend + GemmOps>(
    args: &Args,
    precision: &Precision,
    rng: &mut SmallRng,
    device: &B::Device,
) -> bool {
    let was = gemm_fused_adds();
    let mut passed = true;
    for addend in [Addend::Bias, Addend::Sum] {
        let (mut fused, mut add, mut control) = (0.0f64, 0.0f64, f64::INFINITY);
        for _ in 0..args.gemm_cases {
            let Shapes { m, k, n, lhs_transposed, rhs_transposed, lhs_sliced, .. } = Shapes::random(rng, true);
            B::seed(device, rng.random_range(0..u64::MAX / 2));
            let x = operand::<B>(&[], m, k, lhs_transposed, lhs_sliced, precision.dtype, device);
            let weight = operand::<B>(&[], k, n, rhs_transposed, false, precision.dtype, device);
            let dims = if addend == Addend::Bias { [1, 1, 1, n] } else { [1, 1, m, n] };
            let normal = Distribution::Normal(0.0, k as f64);
            let extra = Tensor::<B, 4>::random(dims, normal, device).cast(precision.dtype);
            let product = reference(&[], &[], m, k, n, &host(&x), &host(&weight));
            let e = host(&extra);
            let at = |i: usize| if addend == Addend::Bias { e[i % n] } else { e[i] };
            let expected: Vec<(f64, f64)> =
                product.iter().enumerate().map(|(i, &(v, scale))| (v + at(i), scale + at(i).abs())).collect();
            let run = |on: bool| {
                set_gemm_fused_adds(on);
                host(&match addend {
                    Addend::Bias => burn::tensor::module::linear(x.clone(), weight.clone().reshape([k, n]), {
                        Some(extra.clone().reshape([n]))
                    }),
                    Addend::Sum => {
                        let [sum, lhs, rhs] = [&extra, &x, &weight].map(|t| t.clone().into_primitive().tensor());
                        Tensor::from_primitive(TensorPrimitive::Float(B::gemm_accumulate(sum, lhs, rhs)))
                    }
                })
            };
            let (with, without) = (run(true), run(false));
            fused = fused.max(error(&with, &expected));
            add = add.max(error(&without, &expected));
            control = control.min(error(&with, &product));
        }
        let tolerance = precision.tolerance;
        let ok = fused <= tolerance && add <= tolerance && control > tolerance;
        let what = if addend == Addend::Bias { "a bias" } else { "a sum" };
        eprintln!(
            "gemm-check {} with {what}: {} cases; worst error {fused:.1e} asking cuBLASLt to add it, {add:.1e} as the \
             GEMM then an add (tolerance {tolerance:.0e}); without it (the control) {control:.1e} at least ({})",
            precision.name,
            args.gemm_cases,
            if ok {
                "pass"
            } else if control > tolerance {
                "FAIL"
            } else {
                "control NOT CAUGHT"
            }
        );
        passed &= ok;
    }
    set_gemm_fused_adds(was);
    passed
}

/// `[batch.., rows, cols]` random values of `dtype`, made as asked (a transposed view, or a
/// slice of a wider tensor).
fn operand<B: Backend>(
    batch: &[usize],
    rows: usize,
    cols: usize,
    transposed: bool,
    sliced: bool,
    dtype: FloatDType,
    device: &B::Device,
) -> Tensor<B, 4> {
    let mut dims = [1; 4];
    dims[2 - batch.len()..2].copy_from_slice(batch);
    let normal = Distribution::Normal(0.0, 1.0);
    let (rows_made, cols_made) = if transposed { (cols, rows) } else { (rows, cols + 3 * usize::from(sliced)) };
    dims[2..].copy_from_slice(&[rows_made, cols_made]);
    let made = Tensor::<B, 4>::random(dims, normal, device).cast(dtype);
    match (transposed, sliced) {
        (true, _) => made.swap_dims(2, 3),
        (false, true) => made.narrow(3, 1, cols),
        (false, false) => made,
    }
}

/// `lhs · rhs` on the backend, its batch dimensions as they were made.
fn product<B: Backend>(lhs: &Tensor<B, 4>, rhs: &Tensor<B, 4>) -> Tensor<B, 4> {
    lhs.clone().matmul(rhs.clone())
}

fn host<B: Backend, const D: usize>(tensor: &Tensor<B, D>) -> Vec<f64> {
    let values: Vec<f32> = tensor.clone().into_data().convert::<f32>().to_vec().expect("f32 values");
    values.into_iter().map(f64::from).collect()
}

/// `(value, Σ|a·b|)` of each output element, in f64, over the logical (contiguous) values.
fn reference(
    batch: &[usize],
    rhs_broadcast: &[bool],
    m: usize,
    k: usize,
    n: usize,
    lhs: &[f64],
    rhs: &[f64],
) -> Vec<(f64, f64)> {
    let batches: usize = batch.iter().product();
    let mut out = Vec::with_capacity(batches * m * n);
    for entry in 0..batches {
        // The rhs entry: broadcast dimensions stay at 0.
        let (mut rest, mut rhs_entry, mut scale) = (entry, 0, 1);
        for dim in (0..batch.len()).rev() {
            let index = rest % batch[dim];
            rest /= batch[dim];
            if !rhs_broadcast[dim] {
                rhs_entry += index * scale;
                scale *= batch[dim];
            }
        }
        let (a, b) = (&lhs[entry * m * k..], &rhs[rhs_entry * k * n..]);
        for i in 0..m {
            for j in 0..n {
                let products = (0..k).map(|p| a[i * k + p] * b[p * n + j]);
                out.push(products.fold((0.0, 0.0), |(sum, abs), x| (sum + x, abs + x.abs())));
            }
        }
    }
    out
}

/// The reference with each row's columns rotated by one.
fn rotate_columns(reference: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    reference.chunks(n).flat_map(|row| row.iter().cycle().skip(1).take(n).copied()).collect()
}

/// The largest `|out − ref| / Σ|a·b|` (`Σ|a·b|` at least the smallest normal f32).
fn error(out: &[f64], reference: &[(f64, f64)]) -> f64 {
    assert_eq!(out.len(), reference.len(), "the product's shape");
    out.iter()
        .zip(reference)
        .map(|(o, (r, scale))| (o - r).abs() / scale.max(f64::from(f32::MIN_POSITIVE)))
        .fold(0.0, f64::max)
}

/// The bench's model and batch, and another seed's batch (the checks' control).
fn model_and_batches<B: TrainBackend>(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    device: &B::Device,
) -> (Gpt2<B>, HostBatch, HostBatch) {
    let (model, _, batch) = super::training::<B>(args, config, seq, device);
    let (_, _, other) = super::training::<B>(&Args { seed: args.seed + 1, ..args.clone() }, config, seq, device);
    (model, batch, other)
}

/// One GPT-2 step's loss and gradients with the vendor's GEMM and with the backend's own
/// (both round f32 products to TF32 on CUDA, in different orders: each gradient within 2e-2 of
/// its norm, the loss within 1e-3); the control: the gradients of another batch, which must differ more.
fn gpt2_step<B: TrainBackend>(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    device: &B::Device,
) -> Result<(), &'static str> {
    let (model, host, other) = model_and_batches::<B>(args, config, seq, device);
    let run = |vendor: bool, batch: &HostBatch| {
        set_vendor_gemm(vendor);
        let loss = model.clone().forward_loss(batch.to_device::<B>(device));
        let value = loss.clone().into_scalar().elem::<f64>();
        let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &model);
        let flat = super::checks::gradients::<B>(&model, &grads).into_iter().map(|g| host_1d(&g)).collect::<Vec<_>>();
        (value, flat)
    };
    let (with, without, control) = (run(true, &host), run(false, &host), run(true, &other));
    let order = gemm_order();
    set_gemm_order(GemmOrder::HostWaits);
    let host_waits = run(true, &host);
    set_gemm_order(order);
    let was = gemm_fused_adds();
    set_gemm_fused_adds(!was);
    let other_adds = run(true, &host);
    set_gemm_fused_adds(was);
    set_vendor_gemm(true);
    let relative = |a: &[Vec<f64>], b: &[Vec<f64>]| {
        a.iter().zip(b).map(|(x, y)| norm_of_difference(x, y) / norm(y).max(f64::MIN_POSITIVE)).fold(0.0, f64::max)
    };
    let gradients = relative(&with.1, &without.1);
    let control_gap = relative(&control.1, &without.1);
    let loss = (with.0 - without.0).abs() / without.0.abs();
    // The same products in another order with CubeCL's kernels: a GEMM that ran before its
    // operands were written, or was overwritten before it was read, shows here.
    let order_gap = relative(&with.1, &host_waits.1).max((with.0 - host_waits.0).abs() / host_waits.0.abs());
    // The biases and the loss's gradient sums added by cuBLASLt or after the GEMM (the
    // heuristic may choose other algorithms for either): held to the tolerances of with
    // and without the vendor.
    let adds_gap = relative(&other_adds.1, &with.1);
    let adds_loss = (other_adds.0 - with.0).abs() / with.0.abs();
    let passed = loss <= 1e-3
        && gradients <= 2e-2
        && control_gap > 2e-2
        && order_gap <= 1e-5
        && adds_loss <= 1e-3
        && adds_gap <= 2e-2;
    eprintln!(
        "gemm-check GPT-2 step ({}, batch {} × {seq}): loss {:.6} with the vendor's GEMM, {:.6} without (relative {loss:.1e}); \
         worst gradient ‖with − without‖/‖without‖ {gradients:.1e} (tolerance 2e-2); another batch's {control_gap:.1e} \
         (the control); on CubeCL's stream against with host waits (loss and gradients) {order_gap:.1e} (tolerance 1e-5); \
         the adds {} cuBLASLt's calls against {}: loss {adds_loss:.1e}, gradients {adds_gap:.1e} — {}",
        args.preset,
        args.batch,
        with.0,
        without.0,
        if was { "after" } else { "in" },
        if was { "in them" } else { "after them" },
        if passed { "pass" } else { "FAIL" }
    );
    passed.then_some(()).ok_or("the GPT-2 step")
}

/// One GPT-2 forward-only pass (an evaluation's: `model.valid()`, no autodiff), whose
/// attention runs the training step's blocks where the GEMMs are the vendor's and Burn's
/// attention op where they are not: the last layer's hidden states with the vendor's GEMM
/// within 1e-2 (relative norm, as the step's gradients' 2e-2) of those without it and of
/// the training step's forward pass; the control: another batch's, which must differ more.
fn gpt2_forward_only<B: TrainBackend>(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    device: &B::Device,
) -> Result<(), &'static str> {
    let (model, host_batch, other) = model_and_batches::<B>(args, config, seq, device);
    let valid = model.valid();
    let forward_only = |vendor: bool, batch: &HostBatch| {
        set_vendor_gemm(vendor);
        host(&valid.hidden(batch.to_device::<B::InnerBackend>(device).inputs))
    };
    let (with, without) = (forward_only(true, &host_batch), forward_only(false, &host_batch));
    let control = forward_only(true, &other);
    set_vendor_gemm(true);
    let training = host(&model.hidden(host_batch.to_device::<B>(device).inputs));
    let gap = |a: &[f64], b: &[f64]| norm_of_difference(a, b) / norm(b).max(f64::MIN_POSITIVE);
    let [without_gap, training_gap, control_gap] = [gap(&with, &without), gap(&with, &training), gap(&control, &with)];
    let passed = without_gap <= 1e-2 && training_gap <= 1e-2 && control_gap > 1e-2;
    eprintln!(
        "gemm-check GPT-2 forward only ({}, batch {} × {seq}): hidden states with the vendor's GEMM (the training \
         step's attention blocks) against without (Burn's attention) {without_gap:.1e}, against the training step's \
         forward {training_gap:.1e} (‖a − b‖/‖b‖, tolerance 1e-2 each); another batch's {control_gap:.1e} (the \
         control) — {}",
        args.preset,
        args.batch,
        if passed { "pass" } else { "FAIL" }
    );
    passed.then_some(()).ok_or("the GPT-2 forward-only pass")
}

fn host_1d<B: Backend>(tensor: &Tensor<B, 1>) -> Vec<f64> {
    let values: Vec<f32> = tensor.clone().into_data().convert::<f32>().to_vec().expect("f32 values");
    values.into_iter().map(f64::from).collect()
}

fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

fn norm_of_difference(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
}
