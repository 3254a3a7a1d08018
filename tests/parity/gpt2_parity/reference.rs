//! The reference state a PyTorch script wrote (`scripts/gpt2_reference.py`), loaded, and
//! the weights and gradients of leanburn's `Gpt2` read out by parameter path.

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use leanburn::data::TokenBatch;
use leanburn::model::{Gpt2, Gpt2Config};
use safetensors::SafeTensors;
use serde::Deserialize;

#[derive(Deserialize)]
pub struct ModelShape {
    vocab: usize,
    context: usize,
    layers: usize,
    d_model: usize,
    heads: usize,
    layer_norm_eps: f64,
}

#[derive(Deserialize, Clone, Copy)]
pub struct OptimizerSettings {
    pub lr: f64,
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    pub weight_decay: f32,
    pub clip_norm: f64,
    pub steps: usize,
}

/// The reference state, as f32 (token ids as i64) with shapes.
pub struct Reference {
    model: ModelShape,
    pub optimizer: OptimizerSettings,
    pub floats: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    ids: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
}

/// PyTorch in f32 (TF32 off).
pub const F32: &str = "gpt2_reference.safetensors";
/// PyTorch under `torch.autocast(bfloat16)`: same weights and batch as [`F32`].
pub const BF16_AUTOCAST: &str = "gpt2_reference_bf16.safetensors";

impl Reference {
    /// `file` in `tests/data/`.
    pub fn load(file: &str) -> Self {
        let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap_or_else(|err| panic!("{path} (scripts/gpt2_reference.py): {err}"));
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

    pub fn float(&self, name: &str) -> &(Vec<usize>, Vec<f32>) {
        self.floats.get(name).unwrap_or_else(|| panic!("the reference has no `{name}`"))
    }

    pub fn config(&self) -> Gpt2Config {
        let m = &self.model;
        Gpt2Config::new(m.vocab, m.context, m.layers, m.d_model, m.heads).with_layer_norm_eps(m.layer_norm_eps)
    }

    pub fn batch<B: Backend>(&self, device: &B::Device) -> TokenBatch<B> {
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
pub struct Path(Vec<String>);

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
pub struct LoadWeights<'a> {
    pub reference: &'a Reference,
    pub path: Path,
    pub loaded: usize,
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

pub fn collect<B: AutodiffBackend>(model: &Gpt2<B>, grads: Option<&GradientsParams>) -> BTreeMap<String, Vec<f32>> {
    let mut visitor =
        Collect::<B> { grads, path: Path::default(), values: BTreeMap::new(), _backend: Default::default() };
    model.visit(&mut visitor);
    visitor.values
}

/// Largest |a − b| over the largest |b|: llm.c's scale-free measure for one tensor.
pub fn relative_error(ours: &[f32], theirs: &[f32]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs.iter().fold(0f64, |m, &b| m.max(f64::from(b).abs())).max(1e-30);
    ours.iter().zip(theirs).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs())) / scale
}
