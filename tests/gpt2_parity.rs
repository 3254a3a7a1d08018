//! leanburn's GPT-2 against an independent implementation, as llm.c's `test_gpt2` checks
//! its model: Hugging Face transformers' `GPT2LMHeadModel` with PyTorch's AdamW and
//! `clip_grad_norm_`, through the reference state `scripts/gpt2_reference.py` wrote to
//! `tests/data/gpt2_reference.safetensors` (a 2-layer, width-32 GPT-2 over 96 tokens, its
//! weights, one batch, the logits, the loss, every gradient, ten training steps).
//!
//! Loaded into leanburn's `Gpt2` with leanburn's attention, on Flex, ndarray and wgpu
//! (llvmpipe in CI), with the full logits and with the fused chunked loss:
//!
//! - logits within [`LOGITS`], the loss within [`LOSS`] relative, every parameter's gradient
//!   within [`GRADIENT`] (largest difference over the tensor's largest magnitude, llm.c's
//!   measure);
//! - ten `HybridTrainer` full steps with leanburn's `ClippedAdamW` (on wgpu its one-kernel
//!   update; on Flex and ndarray the same update composed of tensor ops): each step's loss
//!   within [`STEP_LOSS`] relative, the final weights within [`FINAL_WEIGHTS`]; on Flex
//!   also `GlobalNormClipping` around Burn's own AdamW.
//!
//! Controls, each a change the comparison must catch: Burn's own GELU, whose backward on
//! ndarray and the CubeCL backends is the tanh approximation's derivative; weight decay
//! scaled by two (on ndarray and through wgpu's kernel); Burn's per-tensor gradient
//! clipping in place of the global norm.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::TrainStep;
use leanburn::data::TokenBatch;
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::optim::{ClippedAdamW, FusedAdamW, GlobalNormClipping};
use leanburn::MemoryProbe;
use leanburn::TrainBackend;
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};
use safetensors::SafeTensors;
use serde::Deserialize;

/// Largest logit difference over the largest logit magnitude.
const LOGITS: f64 = 1e-5;
/// The step-0 loss, relative.
const LOSS: f64 = 1e-5;
/// Each gradient: largest difference over the tensor's largest magnitude.
const GRADIENT: f64 = 1e-4;
/// Each of the ten training losses, relative.
const STEP_LOSS: f64 = 1e-4;
/// The weights after ten steps: largest difference over the tensor's largest magnitude.
const FINAL_WEIGHTS: f64 = 1e-3;

#[derive(Deserialize)]
struct ModelShape {
    vocab: usize,
    context: usize,
    layers: usize,
    d_model: usize,
    heads: usize,
    layer_norm_eps: f64,
}

#[derive(Deserialize, Clone, Copy)]
struct OptimizerSettings {
    lr: f64,
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
    clip_norm: f64,
    steps: usize,
}

/// The reference state, as f32 (token ids as i64) with shapes.
struct Reference {
    model: ModelShape,
    optimizer: OptimizerSettings,
    floats: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    ids: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
}

impl Reference {
    fn load() -> Self {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gpt2_reference.safetensors");
        let bytes = std::fs::read(path).expect("tests/data/gpt2_reference.safetensors (scripts/gpt2_reference.py)");
        let (_, metadata) = SafeTensors::read_metadata(&bytes).expect("a safetensors header");
        let meta = metadata.metadata().as_ref().expect("the reference's metadata");
        let model = serde_json::from_str(&meta["model"]).expect("model shape");
        let optimizer = serde_json::from_str(&meta["optimizer"]).expect("optimizer settings");
        let tensors = SafeTensors::deserialize(&bytes).expect("safetensors");
        let (mut floats, mut ids) = (BTreeMap::new(), BTreeMap::new());
        for (name, view) in tensors.tensors() {
            let shape = view.shape().to_vec();
            match view.dtype() {
                safetensors::Dtype::F32 => {
                    let values =
                        view.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
                    floats.insert(name, (shape, values));
                }
                safetensors::Dtype::I64 => {
                    let values =
                        view.data().chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
                    ids.insert(name, (shape, values));
                }
                other => panic!("{name}: unexpected dtype {other:?}"),
            }
        }
        Self { model, optimizer, floats, ids }
    }

    fn float(&self, name: &str) -> &(Vec<usize>, Vec<f32>) {
        self.floats.get(name).unwrap_or_else(|| panic!("the reference has no `{name}`"))
    }

    fn config(&self) -> Gpt2Config {
        let m = &self.model;
        Gpt2Config::new(m.vocab, m.context, m.layers, m.d_model, m.heads).with_layer_norm_eps(m.layer_norm_eps)
    }

    fn batch<B: Backend>(&self, device: &B::Device) -> TokenBatch<B> {
        let ids = |name: &str| {
            let (shape, values) = &self.ids[name];
            Tensor::<B, 2, Int>::from_data(TensorData::new(values.clone(), [shape[0], shape[1]]), device)
        };
        TokenBatch { inputs: ids("inputs"), targets: ids("targets") }
    }
}

/// The module path of each float parameter as Burn's derive names it
/// (`blocks.0.attention.qkv.weight`), in visiting order.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    fn enter(&mut self, name: &str) {
        self.0.push(name.to_string());
    }
    fn exit(&mut self) {
        self.0.pop();
    }
    fn current(&self) -> String {
        self.0.join(".")
    }
}

/// Replaces every float parameter by the reference's `param.<path>`.
struct LoadWeights<'a> {
    reference: &'a Reference,
    path: Path,
    loaded: usize,
}

impl<B: Backend> ModuleMapper<B> for LoadWeights<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let name = format!("param.{}", self.path.current());
        let (shape, values) = self.reference.float(&name);
        assert_eq!(shape.as_slice(), tensor.dims().as_slice(), "{name}: shape");
        let mut loaded = Tensor::<B, D>::from_data(TensorData::new(values.clone(), shape.clone()), &tensor.device());
        if tensor.is_require_grad() {
            loaded = loaded.require_grad();
        }
        self.loaded += 1;
        Param::from_mapped_value(id, loaded, mapper)
    }
}

/// Each float parameter's values (or its gradient's), keyed by path.
struct Collect<'a, B: AutodiffBackend> {
    grads: Option<&'a GradientsParams>,
    path: Path,
    values: BTreeMap<String, Vec<f32>>,
    _backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let data = match self.grads {
            Some(grads) => {
                grads.get::<B::InnerBackend, D>(param.id).expect("every parameter has a gradient").into_data()
            }
            None => param.val().into_data(),
        };
        self.values.insert(self.path.current(), data.convert::<f32>().to_vec::<f32>().unwrap());
    }
}

fn collect<B: AutodiffBackend>(model: &Gpt2<B>, grads: Option<&GradientsParams>) -> BTreeMap<String, Vec<f32>> {
    let mut visitor =
        Collect::<B> { grads, path: Path::default(), values: BTreeMap::new(), _backend: Default::default() };
    model.visit(&mut visitor);
    visitor.values
}

/// Largest |a − b| over the largest |b|: llm.c's scale-free measure for one tensor.
fn relative_error(ours: &[f32], theirs: &[f32]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs.iter().fold(0f64, |m, &b| m.max(f64::from(b).abs())).max(1e-30);
    ours.iter().zip(theirs).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs())) / scale
}

/// GELU, optimizer and clipping as the reference, or one of them changed (the controls).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    AsReference,
    /// `GlobalNormClipping` around Burn's `AdamW` in place of `ClippedAdamW`: as the
    /// reference too.
    BurnAdamW,
    BurnGelu,
    DoubleWeightDecay,
    PerTensorClipping,
}

fn model<B: TrainBackend>(reference: &Reference, variant: Variant, device: &B::Device) -> Gpt2<B> {
    let model = reference.config().init::<B>(device);
    let model = if variant == Variant::BurnGelu { model.with_burn_gelu() } else { model };
    let mut loader = LoadWeights { reference, path: Path::default(), loaded: 0 };
    let model = model.map(&mut loader);
    assert_eq!(loader.loaded, reference.floats.keys().filter(|k| k.starts_with("param.")).count(), "every weight");
    model
}

/// Step 0: the worst logits, loss and gradient errors against the reference.
struct Step0 {
    logits: f64,
    loss: f64,
    /// The largest gradient error and the parameter it is in.
    gradient: (f64, String),
}

fn step0<B: TrainBackend>(variant: Variant, loss_chunk: Option<usize>, device: &B::Device) -> Step0 {
    let reference = Reference::load();
    let model = model::<B>(&reference, variant, device).with_loss_chunk(loss_chunk);
    let batch = reference.batch::<B>(device);
    let logits = model.valid().forward(batch.inputs.clone().inner()).into_data().convert::<f32>().to_vec().unwrap();
    let output = TrainStep::step(&model, batch);
    let loss = output.item.loss.into_scalar().elem::<f64>();
    let expected = f64::from(reference.float("loss").1[0]);
    let grads = collect(&model, Some(&output.grads));
    let gradient = grads
        .iter()
        .map(|(path, grad)| (relative_error(grad, &reference.float(&format!("grad.{path}")).1), path.clone()))
        .fold((0.0, String::new()), |worst, next| if next.0 > worst.0 { next } else { worst });
    Step0 {
        logits: relative_error(&logits, &reference.float("logits").1),
        loss: (loss - expected).abs() / expected,
        gradient,
    }
}

/// Ten full steps of `HybridTrainer` on the reference batch: the worst step-loss and
/// final-weight errors.
fn training<B: TrainBackend>(variant: Variant, device: &B::Device) -> (f64, f64) {
    let reference = Reference::load();
    let settings = reference.optimizer;
    let weight_decay = match variant {
        Variant::DoubleWeightDecay => 2.0 * settings.weight_decay,
        _ => settings.weight_decay,
    };
    let adamw = AdamWConfig::new()
        .with_beta_1(settings.beta_1)
        .with_beta_2(settings.beta_2)
        .with_epsilon(settings.epsilon)
        .with_weight_decay(weight_decay);
    let model = model::<B>(&reference, variant, device);
    let lr = LrSchedule::Constant { lr: settings.lr };
    let losses = match variant {
        Variant::PerTensorClipping => {
            let optimizer =
                adamw.with_grad_clipping(Some(GradientClippingConfig::Norm(settings.clip_norm as f32))).init();
            train(model, optimizer, lr, &reference, device)
        }
        Variant::BurnAdamW => {
            train(model, GlobalNormClipping::new(adamw.init(), settings.clip_norm), lr, &reference, device)
        }
        _ => {
            let fused = FusedAdamW::new(settings.epsilon, weight_decay).with_betas(settings.beta_1, settings.beta_2);
            train(model, ClippedAdamW::new(fused, settings.clip_norm), lr, &reference, device)
        }
    };
    let expected = &reference.float("losses").1;
    assert_eq!(losses.0.len(), expected.len());
    let step_loss =
        losses.0.iter().zip(expected).map(|(&a, &b)| (a - f64::from(b)).abs() / f64::from(b)).fold(0.0, f64::max);
    let weights = losses
        .1
        .iter()
        .map(|(path, values)| relative_error(values, &reference.float(&format!("final.{path}")).1))
        .fold(0.0, f64::max);
    (step_loss, weights)
}

fn train<B: TrainBackend + MemoryProbe, O: Optimizer<Gpt2<B>, B>>(
    model: Gpt2<B>,
    optimizer: O,
    lr: LrSchedule,
    reference: &Reference,
    device: &B::Device,
) -> (Vec<f64>, BTreeMap<String, Vec<f32>>) {
    let mut trainer = HybridTrainer::new(model, optimizer, HybridConfig::all_full(), lr, device.clone()).unwrap();
    let losses = (0..reference.optimizer.steps)
        .map(|_| trainer.step(reference.batch::<B>(device)).unwrap().loss.expect("the loss is read every step"))
        .collect();
    (losses, collect(trainer.model(), None))
}

fn assert_step0(backend: &str, got: &Step0) {
    assert!(got.logits <= LOGITS, "{backend}: logits off by {:.2e} (tolerance {LOGITS:.0e})", got.logits);
    assert!(got.loss <= LOSS, "{backend}: loss off by {:.2e} relative (tolerance {LOSS:.0e})", got.loss);
    let (error, path) = &got.gradient;
    assert!(*error <= GRADIENT, "{backend}: gradient of {path} off by {error:.2e} (tolerance {GRADIENT:.0e})");
}

/// Step 0 with the full logits and with the fused loss in chunks of 24 of the 64 tokens.
fn check_step0<B: TrainBackend>(backend: &str, device: &B::Device) {
    for chunk in [None, Some(24)] {
        let got = step0::<B>(Variant::AsReference, chunk, device);
        eprintln!(
            "{backend}, loss chunk {chunk:?}: logits {:.2e}, loss {:.2e}, worst gradient {:.2e} ({})",
            got.logits, got.loss, got.gradient.0, got.gradient.1
        );
        assert_step0(&format!("{backend}, loss chunk {chunk:?}"), &got);
    }
}

fn check_training<B: TrainBackend>(backend: &str, device: &B::Device) {
    check_training_with::<B>(backend, Variant::AsReference, device);
}

fn check_training_with<B: TrainBackend>(backend: &str, variant: Variant, device: &B::Device) {
    let (step_loss, weights) = training::<B>(variant, device);
    eprintln!("{backend}, {variant:?}: ten steps: worst loss {step_loss:.2e}, final weights {weights:.2e}");
    assert!(step_loss <= STEP_LOSS, "{backend}: a training loss is off by {step_loss:.2e} (tolerance {STEP_LOSS:.0e})");
    assert!(weights <= FINAL_WEIGHTS, "{backend}: final weights off by {weights:.2e} (tolerance {FINAL_WEIGHTS:.0e})");
}

#[test]
fn flex_matches_pytorch() {
    check_step0::<Autodiff<Flex>>("flex", &Default::default());
    check_training::<Autodiff<Flex>>("flex", &Default::default());
    check_training_with::<Autodiff<Flex>>("flex", Variant::BurnAdamW, &Default::default());
}

#[test]
fn ndarray_matches_pytorch() {
    check_step0::<Autodiff<NdArray>>("ndarray", &Default::default());
    check_training::<Autodiff<NdArray>>("ndarray", &Default::default());
}

#[test]
fn wgpu_matches_pytorch() {
    let device = common::wgpu_device();
    check_step0::<Autodiff<Wgpu>>("wgpu", &device);
    check_training::<Autodiff<Wgpu>>("wgpu", &device);
    // The control through the kernel: twice the weight decay is caught there too.
    let (step_loss, weights) = training::<Autodiff<Wgpu>>(Variant::DoubleWeightDecay, &device);
    eprintln!("wgpu, DoubleWeightDecay: worst loss {step_loss:.2e}, final weights {weights:.2e}");
    assert!(step_loss > STEP_LOSS && weights > FINAL_WEIGHTS, "wgpu: twice the weight decay passed");
}

/// The controls: on ndarray, whose `gelu_backward` is Burn's default, Burn's GELU puts a
/// gradient past the tolerance; twice the weight decay, or Burn's per-tensor clipping, put
/// the ten steps past theirs.
#[test]
fn the_comparison_catches_a_wrong_gelu_derivative_weight_decay_or_clipping() {
    type B = Autodiff<NdArray>;
    let device = Default::default();
    let gelu = step0::<B>(Variant::BurnGelu, None, &device);
    eprintln!("Burn's GELU on ndarray: worst gradient {:.2e} ({})", gelu.gradient.0, gelu.gradient.1);
    assert!(gelu.gradient.0 > GRADIENT, "Burn's tanh-derivative GELU passed: {:.2e}", gelu.gradient.0);
    for variant in [Variant::DoubleWeightDecay, Variant::PerTensorClipping] {
        let (step_loss, weights) = training::<B>(variant, &device);
        eprintln!("{variant:?}: worst loss {step_loss:.2e}, final weights {weights:.2e}");
        assert!(step_loss > STEP_LOSS && weights > FINAL_WEIGHTS, "{variant:?} passed: {step_loss:.2e}, {weights:.2e}");
    }
}
