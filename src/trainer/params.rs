//! Parameter tensors by id: read them, diff them, update them, compare updates.
//!
//! Everything is keyed by Burn's [`ParamId`], the same key the optimizer uses, and kept in
//! a `BTreeMap` so that every sum over parameters runs in the same order on every run.
//! Only float parameters take part; integer, boolean and quantized ones are left alone.

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor};

/// Per-parameter updates (or any per-parameter vectors), flattened to 1-D.
pub type ParamUpdates<B> = BTreeMap<ParamId, Tensor<B, 1>>;

/// One float parameter, flattened to 1-D, with the shape it has in the module.
#[derive(Clone, Debug)]
pub struct FlatParam<B: Backend> {
    /// The values, flattened (a view of the parameter's buffer on most backends).
    pub tensor: Tensor<B, 1>,
    /// The parameter's shape in the module.
    pub shape: Vec<usize>,
}

/// The float parameters of a module, by id.
#[derive(Clone, Debug)]
pub struct ParamTensors<B: Backend> {
    params: BTreeMap<ParamId, FlatParam<B>>,
}

impl<B: Backend> ParamTensors<B> {
    /// The parameter with this id.
    pub fn get(&self, id: &ParamId) -> Option<&FlatParam<B>> {
        self.params.get(id)
    }

    /// The parameters in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&ParamId, &FlatParam<B>)> {
        self.params.iter()
    }

    /// Takes the parameter with this id out.
    pub fn remove(&mut self, id: &ParamId) -> Option<FlatParam<B>> {
        self.params.remove(id)
    }

    /// Number of parameters.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Device bytes the tensors occupy.
    pub fn bytes(&self) -> usize {
        self.params.values().map(|param| tensor_bytes(&param.tensor)).sum()
    }
}

/// Bytes a tensor's elements occupy (`numel × element size`).
pub fn tensor_bytes<B: Backend, const D: usize>(tensor: &Tensor<B, D>) -> usize {
    tensor.shape().num_elements() * tensor.dtype().size()
}

/// The float type of a dtype, or `None` for integer, boolean and quantized types.
pub fn float_dtype(dtype: DType) -> Option<FloatDType> {
    match dtype {
        DType::F64 => Some(FloatDType::F64),
        DType::F32 => Some(FloatDType::F32),
        DType::Flex32 => Some(FloatDType::Flex32),
        DType::F16 => Some(FloatDType::F16),
        DType::BF16 => Some(FloatDType::BF16),
        _ => None,
    }
}

struct Collector<B: Backend> {
    params: BTreeMap<ParamId, FlatParam<B>>,
}

impl<B: Backend> ModuleVisitor<B> for Collector<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        let numel = tensor.shape().num_elements();
        if numel == 0 || float_dtype(tensor.dtype()).is_none() {
            return;
        }
        let shape = tensor.dims().to_vec();
        self.params.insert(param.id, FlatParam { tensor: tensor.reshape([numel]), shape });
    }
}

/// The float parameters of `module` (usually `model.valid()`), flattened, by id.
///
/// No data moves: the tensors share the module's buffers, and holding them keeps those
/// buffers alive after the module itself has been updated.
pub fn collect<B: Backend, M: Module<B>>(module: &M) -> ParamTensors<B> {
    let mut collector = Collector { params: BTreeMap::new() };
    module.visit(&mut collector);
    ParamTensors { params: collector.params }
}

/// `decay · average + (1 − decay) · live` for every parameter of `average` that `live` has
/// too, in the average's dtype; the others stay as they are.
pub fn blend<B: Backend>(average: &ParamTensors<B>, live: &ParamTensors<B>, decay: f64) -> ParamTensors<B> {
    let params = average
        .iter()
        .map(|(id, old)| {
            let tensor = match live.get(id) {
                Some(now) if now.tensor.dims() == old.tensor.dims() => {
                    let now = now.tensor.clone().cast(old.tensor.dtype());
                    old.tensor.clone().mul_scalar(decay) + now.mul_scalar(1.0 - decay)
                }
                _ => old.tensor.clone(),
            };
            (*id, FlatParam { tensor, shape: old.shape.clone() })
        })
        .collect();
    ParamTensors { params }
}

/// `after − before` for every parameter present in both with the same size.
pub fn differences<B: Backend>(after: &ParamTensors<B>, before: &ParamTensors<B>) -> ParamUpdates<B> {
    after
        .iter()
        .filter_map(|(id, new)| {
            let old = before.get(id)?;
            (old.shape == new.shape).then(|| (*id, new.tensor.clone() - old.tensor.clone()))
        })
        .collect()
}

struct UpdateMapper<'a, B: AutodiffBackend> {
    updates: &'a ParamUpdates<B::InnerBackend>,
    scale: f64,
}

impl<B: AutodiffBackend> ModuleMapper<B> for UpdateMapper<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(update) = self.updates.get(&param.id) else {
            return param;
        };
        let (id, tensor, mapper) = param.consume();
        let Some(dtype) = float_dtype(tensor.dtype()) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let shape = tensor.shape();
        if shape.num_elements() != update.shape().num_elements() {
            tracing::warn!(%id, "predicted update does not match the parameter's size; skipped");
            return Param::from_mapped_value(id, tensor, mapper);
        }
        let require_grad = tensor.is_require_grad();
        let weights = tensor.inner();
        let step = update.clone().cast(dtype).reshape::<D, _>(shape).mul_scalar(self.scale);
        // A fresh leaf, exactly as Burn's optimizers produce it: no graph is recorded.
        let updated = Tensor::<B, D>::from_inner(weights + step).set_require_grad(require_grad);
        Param::from_mapped_value(id, updated, mapper)
    }
}

/// `w ← w + scale · u` for every float parameter with an update in `updates`.
///
/// Works on the autodiff module so that each parameter keeps its id and its
/// `require_grad` flag exactly as the optimizer would leave them; the arithmetic itself
/// runs on the inner tensors, so no autodiff graph is built. Updates are cast to the
/// parameter's float type and reshaped to its shape.
pub fn apply_update<B: AutodiffBackend, M: Module<B>>(
    module: M,
    updates: &ParamUpdates<B::InnerBackend>,
    scale: f64,
) -> M {
    module.map(&mut UpdateMapper::<B> { updates, scale })
}

/// How a real update compares with a predicted one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alignment {
    /// Cosine of the angle between the two, over all parameters at once.
    pub cosine: f64,
    /// `‖actual‖ / ‖predicted‖`.
    pub norm_ratio: f64,
}

/// Cosine and norm ratio between `actual` and `predicted`, over the parameters present in
/// both, as if all parameters were one vector.
///
/// All partial sums are reduced on the device and read back in one transfer (one host
/// sync). `None` when nothing is shared or either side is zero.
pub fn alignment<B: Backend>(actual: &ParamUpdates<B>, predicted: &ParamUpdates<B>) -> Option<Alignment> {
    let mut sums: Option<[Tensor<B, 1>; 3]> = None;
    for (id, a) in actual {
        let Some(p) = predicted.get(id) else { continue };
        if a.shape() != p.shape() {
            continue;
        }
        // Sums of squares overflow half precision long before they lose meaning.
        let a = a.clone().cast(FloatDType::F32);
        let p = p.clone().cast(FloatDType::F32);
        let terms = [(a.clone() * p.clone()).sum(), (a.clone() * a).sum(), (p.clone() * p).sum()];
        sums = Some(match sums {
            None => terms,
            Some([dot, aa, pp]) => {
                let [t_dot, t_aa, t_pp] = terms;
                [dot + t_dot, aa + t_aa, pp + t_pp]
            }
        });
    }
    let values: Vec<f64> = Tensor::cat(Vec::from(sums?), 0).into_data().iter::<f64>().collect();
    let [dot, aa, pp] = values.as_slice() else {
        return None;
    };
    let (norm_actual, norm_predicted) = (aa.sqrt(), pp.sqrt());
    // Written as a negation so that NaN norms return `None` too.
    #[allow(clippy::nonminimal_bool)]
    if !(norm_actual > 0.0 && norm_predicted > 0.0) || !dot.is_finite() {
        return None;
    }
    Some(Alignment {
        cosine: (dot / (norm_actual * norm_predicted)).clamp(-1.0, 1.0),
        norm_ratio: norm_actual / norm_predicted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::flex::FlexDevice;
    use burn::backend::{Autodiff, Flex};
    use burn::module::AutodiffModule;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::TensorData;

    type Inner = Flex;
    type Train = Autodiff<Flex>;

    fn linear() -> Linear<Train> {
        LinearConfig::new(3, 2).init(&FlexDevice)
    }

    fn values<const D: usize>(tensor: Tensor<Inner, D>) -> Vec<f32> {
        tensor.into_data().to_vec::<f32>().expect("f32 data")
    }

    #[test]
    fn collects_every_float_parameter_flattened() {
        let model = linear();
        let params = collect(&model.valid());
        assert_eq!(params.len(), 2);
        let weight = params.get(&model.weight.id).expect("weight");
        assert_eq!(weight.shape, vec![3, 2]);
        assert_eq!(weight.tensor.dims(), [6]);
        assert_eq!(params.bytes(), (6 + 2) * 4);
    }

    #[test]
    fn applies_a_scaled_update_and_keeps_ids_and_require_grad() {
        let device = FlexDevice;
        let model = linear();
        let before = collect(&model.valid());
        let id = model.weight.id;
        let mut updates = ParamUpdates::<Inner>::new();
        updates.insert(id, Tensor::from_data(TensorData::new(vec![1.0f32; 6], [6]), &device));
        let updated = apply_update(model.clone(), &updates, 0.5);

        assert_eq!(updated.weight.id, id);
        assert!(updated.weight.val().is_require_grad());
        let old = values(before.get(&id).expect("weight").tensor.clone());
        let new = values(updated.weight.val().inner().reshape([6]));
        for (o, n) in old.iter().zip(&new) {
            assert!((n - o - 0.5).abs() < 1e-6, "{o} -> {n}");
        }
        // The bias had no update and is untouched.
        let bias_before = values(model.bias.as_ref().expect("bias").val().inner());
        let bias_after = values(updated.bias.as_ref().expect("bias").val().inner());
        assert_eq!(bias_before, bias_after);
    }

    #[test]
    fn differences_recover_the_update() {
        let device = FlexDevice;
        let model = linear();
        let before = collect(&model.valid());
        let mut updates = ParamUpdates::<Inner>::new();
        for (id, param) in before.iter() {
            let n = param.tensor.dims()[0];
            let ramp: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
            updates.insert(*id, Tensor::from_data(TensorData::new(ramp, [n]), &device));
        }
        let after = collect(&apply_update(model, &updates, 2.0).valid());
        let deltas = differences(&after, &before);
        assert_eq!(deltas.len(), 2);
        for (id, delta) in &deltas {
            let expected: Vec<f32> = values(updates[id].clone()).iter().map(|v| v * 2.0).collect();
            for (d, e) in values(delta.clone()).iter().zip(&expected) {
                assert!((d - e).abs() < 1e-5, "{d} vs {e}");
            }
        }
    }

    #[test]
    fn alignment_of_parallel_opposite_and_scaled_updates() {
        let device = FlexDevice;
        let id_a = ParamId::from(1);
        let id_b = ParamId::from(2);
        let map = |a: Vec<f32>, b: Vec<f32>| {
            let mut updates = ParamUpdates::<Inner>::new();
            let (na, nb) = (a.len(), b.len());
            updates.insert(id_a, Tensor::from_data(TensorData::new(a, [na]), &device));
            updates.insert(id_b, Tensor::from_data(TensorData::new(b, [nb]), &device));
            updates
        };
        let actual = map(vec![1.0, 2.0], vec![2.0]);
        let same = alignment(&actual, &map(vec![0.5, 1.0], vec![1.0])).expect("aligned");
        assert!((same.cosine - 1.0).abs() < 1e-6);
        assert!((same.norm_ratio - 2.0).abs() < 1e-6);
        let opposite = alignment(&actual, &map(vec![-1.0, -2.0], vec![-2.0])).expect("aligned");
        assert!((opposite.cosine + 1.0).abs() < 1e-6);
        let orthogonal = alignment(&map(vec![1.0, 0.0], vec![0.0]), &map(vec![0.0, 1.0], vec![0.0])).expect("aligned");
        assert!(orthogonal.cosine.abs() < 1e-6);
        assert_eq!(alignment(&actual, &map(vec![0.0, 0.0], vec![0.0])), None);
        assert_eq!(alignment(&actual, &ParamUpdates::new()), None);
    }
}
