//! The CPU backend's LM-head loss against the composed one, over random shapes.

use burn::backend::Flex;
use burn::prelude::*;
use burn::tensor::{Distribution, TensorPrimitive};

use super::{composed, composed_token_losses, LmHeadLossOps};

type Cpu = Flex;

/// A small deterministic generator for shapes and ids.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % bound
    }
}

struct Case {
    hidden: Tensor<Cpu, 2>,
    weight: Tensor<Cpu, 2>,
    targets: Tensor<Cpu, 1, Int>,
}

impl Case {
    fn random(tokens: usize, d: usize, vocab: usize, logit_scale: f64, rng: &mut Lcg) -> Self {
        let device = Default::default();
        Cpu::seed(&device, rng.below(1 << 20) as u64);
        let hidden = Tensor::random([tokens, d], Distribution::Normal(0.0, 1.0), &device);
        let weight = Tensor::random([vocab, d], Distribution::Normal(0.0, logit_scale), &device);
        // The first and last ids among them, where an off-by-one would show.
        let ids: Vec<i64> = (0..tokens)
            .map(|i| match i {
                0 => 0,
                1 => vocab as i64 - 1,
                _ => rng.below(vocab) as i64,
            })
            .collect();
        let targets = Tensor::from_data(TensorData::new(ids, [tokens]), &device);
        Self { hidden, weight, targets }
    }

    /// `[loss, grad_hidden, grad_weight]` as host vectors, by the op or by the composition.
    fn run(&self, chunk: usize, fast: bool) -> [Vec<f32>; 3] {
        let (h, w, t) = (
            self.hidden.clone().into_primitive().tensor(),
            self.weight.clone().into_primitive().tensor(),
            self.targets.clone().into_primitive(),
        );
        let outputs = if fast {
            <Cpu as LmHeadLossOps>::lm_head_loss_grads(h, w, t, chunk)
        } else {
            composed::<Cpu>(h, w, t, chunk)
        };
        outputs.map(|tensor| {
            let tensor = Tensor::<Cpu, 2>::from_primitive(TensorPrimitive::Float(tensor));
            tensor.into_data().to_vec::<f32>().unwrap()
        })
    }
}

impl Case {
    /// Each token's loss, by the op or by the composition.
    fn token_losses(&self, chunk: usize, fast: bool) -> Vec<f32> {
        let (h, w, t) = (
            self.hidden.clone().into_primitive().tensor(),
            self.weight.clone().into_primitive().tensor(),
            self.targets.clone().into_primitive(),
        );
        let losses = if fast {
            <Cpu as LmHeadLossOps>::lm_head_token_losses(h, w, t, chunk)
        } else {
            composed_token_losses::<Cpu>(h, w, t, chunk)
        };
        Tensor::<Cpu, 1>::from_primitive(TensorPrimitive::Float(losses)).into_data().to_vec::<f32>().unwrap()
    }
}

/// The largest difference between `got` and `expected` relative to `expected`'s largest
/// magnitude (the gradients' elements span many orders; their errors scale with the largest).
fn relative_difference(got: &[f32], expected: &[f32]) -> f32 {
    assert_eq!(got.len(), expected.len());
    let largest = expected.iter().fold(0.0f32, |max, value| max.max(value.abs()));
    let worst = got.iter().zip(expected).fold(0.0f32, |max, (a, b)| max.max((a - b).abs()));
    worst / largest.max(f32::MIN_POSITIVE)
}

/// f32 tolerances: the loss within 1e-5 relative, each gradient within 1e-5 of its largest
/// element (the parity test's budget is 1e-4 per gradient).
const LOSS_TOLERANCE: f32 = 1e-5;
const GRAD_TOLERANCE: f32 = 1e-5;

fn mismatch(got: &[Vec<f32>; 3], expected: &[Vec<f32>; 3]) -> Option<String> {
    let loss = (got[0][0] - expected[0][0]).abs() / expected[0][0].abs().max(1e-6);
    let (grad_hidden, grad_weight) =
        (relative_difference(&got[1], &expected[1]), relative_difference(&got[2], &expected[2]));
    (loss > LOSS_TOLERANCE || grad_hidden > GRAD_TOLERANCE || grad_weight > GRAD_TOLERANCE)
        .then(|| format!("loss {loss:.2e}, grad_hidden {grad_hidden:.2e}, grad_weight {grad_weight:.2e}"))
}

#[test]
fn the_cpu_op_matches_the_composed_loss_and_gradients_over_random_shapes() {
    let mut rng = Lcg(17);
    for round in 0..40 {
        let (tokens, d, vocab) = (1 + rng.below(40), 1 + rng.below(24), 2 + rng.below(400));
        let chunk = 1 + rng.below(tokens + 4);
        let case = Case::random(tokens, d, vocab, 0.5, &mut rng);
        let (got, expected) = (case.run(chunk, true), case.run(chunk, false));
        if let Some(why) = mismatch(&got, &expected) {
            panic!("round {round}: {tokens} tokens, d {d}, vocab {vocab}, chunk {chunk}: {why}");
        }
    }
}

#[test]
fn the_cpu_token_losses_match_the_composed_ones_over_random_shapes() {
    let mut rng = Lcg(23);
    for round in 0..30 {
        let (tokens, d, vocab) = (1 + rng.below(40), 1 + rng.below(24), 2 + rng.below(400));
        let chunk = 1 + rng.below(tokens + 4);
        let case = Case::random(tokens, d, vocab, 0.5, &mut rng);
        let (got, expected) = (case.token_losses(chunk, true), case.token_losses(chunk, false));
        assert_eq!(got.len(), tokens);
        for (token, (a, b)) in got.iter().zip(&expected).enumerate() {
            let difference = (a - b).abs() / b.abs().max(1e-6);
            assert!(difference <= LOSS_TOLERANCE, "round {round}, token {token}: {a} vs {b} ({difference:.2e})");
        }
        // Their mean is the loss the gradient op reports.
        let mean = got.iter().map(|&loss| f64::from(loss)).sum::<f64>() / tokens as f64;
        let loss = f64::from(case.run(chunk, true)[0][0]);
        assert!((mean - loss).abs() <= 1e-5 * loss.abs(), "round {round}: mean {mean} vs loss {loss}");
    }
}

#[test]
fn the_comparison_tells_a_wrong_gradient() {
    // Control for the test above: the same comparison rejects the gradients of other
    // targets (every id shifted by one), and a loss scaled by 1 + 1e-4.
    let mut rng = Lcg(5);
    let case = Case::random(12, 8, 50, 0.5, &mut rng);
    let expected = case.run(5, false);
    let shifted = Case { targets: case.targets.clone().add_scalar(1).remainder_scalar(50), ..case };
    assert!(mismatch(&shifted.run(5, true), &expected).is_some());
    let mut scaled = expected.clone();
    scaled[0][0] *= 1.0 + 1e-4;
    assert!(mismatch(&scaled, &expected).is_some());
}

#[test]
fn large_logits_and_a_large_vocabulary_stay_within_tolerance() {
    // Logits in the hundreds (exp without the row maximum taken out would overflow), and
    // rows longer than the op's summation block.
    let mut rng = Lcg(29);
    for (tokens, d, vocab, scale) in [(9, 6, 17, 100.0), (6, 16, 5000, 1.0), (4, 32, 9000, 8.0)] {
        let case = Case::random(tokens, d, vocab, scale, &mut rng);
        let (got, expected) = (case.run(4, true), case.run(4, false));
        assert!(got[0][0].is_finite());
        if let Some(why) = mismatch(&got, &expected) {
            panic!("{tokens} tokens, vocab {vocab}, logit scale {scale}: {why}");
        }
    }
}

#[test]
fn a_strided_weight_gives_the_same_results() {
    // The same weight values held transposed (`[d, vocab]` memory read as `[vocab, d]`):
    // read as if row-major they would give other results.
    let mut rng = Lcg(3);
    let case = Case::random(7, 5, 30, 0.5, &mut rng);
    let expected = case.run(3, false);
    let held_transposed = Tensor::<Cpu, 2>::from_data(case.weight.clone().transpose().into_data(), &Default::default());
    let strided = Case { weight: held_transposed.transpose(), ..case };
    let got = strided.run(3, true);
    assert!(mismatch(&got, &expected).is_none(), "{:?}", mismatch(&got, &expected));
}

/// The op on a wgpu backend `W` for `case`'s values (moved to the device), as host vectors:
/// `[loss, grad_hidden, grad_weight]` and each token's loss.
fn on_device<W: LmHeadLossOps>(case: &Case, chunk: usize) -> ([Vec<f32>; 3], Vec<f32>) {
    let device = Default::default();
    let float = |t: &Tensor<Cpu, 2>| Tensor::<W, 2>::from_data(t.to_data(), &device).into_primitive().tensor();
    let targets = || Tensor::<W, 1, Int>::from_data(case.targets.to_data(), &device).into_primitive();
    let host = |t| Tensor::<W, 2>::from_primitive(TensorPrimitive::Float(t)).into_data().to_vec::<f32>().unwrap();
    let grads = W::lm_head_loss_grads(float(&case.hidden), float(&case.weight), targets(), chunk).map(host);
    let losses = W::lm_head_token_losses(float(&case.hidden), float(&case.weight), targets(), chunk);
    let losses = Tensor::<W, 1>::from_primitive(TensorPrimitive::Float(losses)).into_data().to_vec::<f32>().unwrap();
    (grads, losses)
}

/// The row kernel (`lm_head_loss_rows` on CubeCL) through the unfused and the fused wgpu
/// stacks against the composed ops on the CPU, same values: the loss, both gradients and
/// each token's loss within the tolerances above, rows of logits shorter and longer than
/// the kernel's 256 units, chunks that do and do not divide the tokens, logits in the
/// tens. One shape per stack: each compiles and tunes its GEMMs on llvmpipe (the kernel's
/// randomized shapes are in leanburn-kernels).
#[test]
fn the_row_kernel_on_wgpu_matches_the_composed_loss_on_the_cpu() {
    let mut rng = Lcg(41);
    for (stack, (tokens, d, vocab, chunk, logit_scale)) in
        [("unfused", (13, 8, 300, 5, 8.0)), ("fused", (6, 12, 97, 6, 0.5))]
    {
        let case = Case::random(tokens, d, vocab, logit_scale, &mut rng);
        let (expected, expected_losses) = (case.run(chunk, false), case.token_losses(chunk, false));
        let (got, losses) = match stack {
            "unfused" => on_device::<crate::device::CubeWgpu>(&case, chunk),
            _ => on_device::<burn::backend::Wgpu>(&case, chunk),
        };
        let shape = format!("{stack}: {tokens} tokens, d {d}, vocab {vocab}, chunk {chunk}");
        assert!(mismatch(&got, &expected).is_none(), "{shape}: {:?}", mismatch(&got, &expected));
        let worst = relative_difference(&losses, &expected_losses);
        assert!(worst <= LOSS_TOLERANCE, "{shape}: token losses off by {worst:.2e}");
    }
}

/// The kernel ran: its rows differ from the composed ones on the same backend in the last
/// bits (another order of operations) while agreeing within the tolerance; the control is
/// the composed function itself, bit for bit equal to a second run of it.
#[test]
fn wgpu_runs_the_row_kernel_not_the_composed_rows() {
    use super::composed_rows;
    type W = crate::device::CubeWgpu;
    let device = Default::default();
    W::seed(&device, 8);
    let logits = Tensor::<W, 2>::random([16, 300], Distribution::Normal(0.0, 4.0), &device);
    let targets = Tensor::<W, 1, Int>::from_data(TensorData::new((0..16i64).map(|i| i * 17).collect(), [16]), &device);
    let rows = |kernel: bool| {
        let (logits, targets) = (logits.clone().into_primitive().tensor(), targets.clone().into_primitive());
        let (losses, grad) = if kernel {
            <W as LmHeadLossOps>::lm_head_loss_rows(logits, targets, Some(0.25))
        } else {
            composed_rows::<W>(logits, targets, Some(0.25))
        };
        let host = |t| Tensor::<W, 2>::from_primitive(TensorPrimitive::Float(t)).into_data().to_vec::<f32>().unwrap();
        let losses =
            Tensor::<W, 1>::from_primitive(TensorPrimitive::Float(losses)).into_data().to_vec::<f32>().unwrap();
        (losses, host(grad.expect("asked for")))
    };
    let (kernel, composed, again) = (rows(true), rows(false), rows(false));
    assert_eq!(composed, again, "control: the composed rows are deterministic");
    assert_ne!(kernel, composed, "the kernel's rows are bit for bit the composed ones: did it run?");
    assert!(relative_difference(&kernel.0, &composed.0) <= LOSS_TOLERANCE);
    assert!(relative_difference(&kernel.1, &composed.1) <= GRAD_TOLERANCE);
}

/// The loss's total on the CubeCL backends (column sums of the losses as one column, fused
/// and not) within 1e-6 of the host's f64 sum, relatively, from one loss to lengths whose
/// rows the kernel splits over several blocks; the control: the same sum without the last
/// loss (each at least 1) is caught.
#[test]
fn the_loss_total_on_wgpu_matches_the_hosts_sum() {
    fn total<W: LmHeadLossOps>(values: &[f32]) -> f64 {
        let losses = Tensor::<W, 1>::from_data(TensorData::new(values.to_vec(), [values.len()]), &Default::default());
        let total = W::lm_head_loss_total(losses.into_primitive().tensor());
        let host = Tensor::<W, 1>::from_primitive(TensorPrimitive::Float(total)).into_data().to_vec::<f32>().unwrap();
        assert_eq!(host.len(), 1, "the total is one value");
        f64::from(host[0])
    }
    let mut rng = Lcg(7);
    for n in [1, 7, 256, 1000, 100_003] {
        let values: Vec<f32> = (0..n).map(|_| 1.0 + rng.below(1 << 20) as f32 / (1 << 16) as f32).collect();
        let exact: f64 = values.iter().map(|&v| f64::from(v)).sum();
        let unfused = total::<crate::device::CubeWgpu>(&values);
        let fused = total::<burn::backend::Wgpu>(&values);
        for (stack, got) in [("unfused", unfused), ("fused", fused)] {
            let error = (got - exact).abs() / exact;
            assert!(error <= 1e-6, "{stack}, {n} losses: total {got} against {exact} ({error:.1e})");
        }
        if n > 1 {
            let short = total::<burn::backend::Wgpu>(&values[..n - 1]);
            assert!((short - exact).abs() / exact > 1e-6, "the control: a dropped loss went unnoticed ({n})");
        }
    }
}
