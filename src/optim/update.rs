//! One AdamW step of all of a module's parameters together, as [`ClippedAdamW`] takes it:
//! the parameters that have a gradient are taken out of the module (each one's gradient, of
//! its shape, type and device, stands in for it meanwhile: no new memory), updated by
//! [`OptimizerOps::adamw_steps`] (on the CubeCL backends in place, one launch per group of
//! parameters with `LEANBURN_OPTIMIZER=grouped`), and put back, their moments into Burn's `AdamWState` records.
//! Taken out, each parameter's tensor has no other handle, so the update may write over
//! it, as `OptimizerAdaptor`'s one-parameter-at-a-time mapper allows.
//!
//! [`ClippedAdamW`]: super::ClippedAdamW

use hashbrown::HashMap;

use burn::module::{AutodiffModule, ModuleMapper, Param, ParamId};
use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamWState, AdaptiveMomentumState, GradientsParams, LearningRate, SimpleOptimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;

use super::{AdamWRecords, FusedAdamW};
use crate::backend::{AdamWParam, OptimizerOps};

/// Updates every parameter of `module` that has a gradient in `grads` (times `scale` when
/// given) by one step of `adamw` from its state in `records`, which get the new states.
pub(crate) fn update_all<B, M>(
    adamw: &FusedAdamW,
    records: &mut AdamWRecords<B>,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
    scale: Option<Tensor<B::InnerBackend, 1>>,
) -> M
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    B::InnerBackend: OptimizerOps,
{
    let mut take = Take::<B> { grads, records, taken: Vec::new() };
    let module = module.map(&mut take);
    let updated = update(adamw, lr, take.taken, scale);
    module.map(&mut PutBack::<B> { updated, records })
}

/// A parameter taken out of the module for the update.
struct Taken<B: Backend> {
    id: ParamId,
    /// The step the update takes it to (from 1).
    time: usize,
    require_grad: bool,
    tensors: AdamWParam<B>,
}

/// A parameter after the update: its step, whether it requires a gradient, and
/// `[param, moment_1, moment_2]`.
type Updated<B> = (usize, bool, [FloatTensor<B>; 3]);

/// The taken parameters updated, one [`OptimizerOps::adamw_steps`] for those of one step
/// count and device (all of them, where the model trains on one device).
fn update<B: OptimizerOps>(
    adamw: &FusedAdamW,
    lr: LearningRate,
    taken: Vec<Taken<B>>,
    scale: Option<Tensor<B, 1>>,
) -> HashMap<ParamId, Updated<B>> {
    // Each batch's step count and device, and its parameters.
    type Batch<B> = ((usize, burn::tensor::Device<B>), Vec<Taken<B>>);
    let mut batches: Vec<Batch<B>> = Vec::new();
    for param in taken {
        let key = (param.time, B::float_device(&param.tensors.param));
        match batches.iter_mut().find(|(k, _)| *k == key) {
            Some((_, batch)) => batch.push(param),
            None => batches.push((key, vec![param])),
        }
    }
    let mut updated = HashMap::new();
    for ((time, device), batch) in batches {
        let scale = scale.clone().map(|scale| scale.to_device(&device).into_primitive().tensor());
        let (marks, params): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|param| ((param.id, param.require_grad), param.tensors)).unzip();
        let results = B::adamw_steps(params, scale, &adamw.step_at(lr, time));
        for ((id, require_grad), tensors) in marks.into_iter().zip(results) {
            updated.insert(id, (time, require_grad, tensors));
        }
    }
    updated
}

/// Takes each parameter with a gradient out of the module, its gradient in its place.
struct Take<'a, B: AutodiffBackend>
where
    B::InnerBackend: OptimizerOps,
{
    grads: GradientsParams,
    records: &'a mut AdamWRecords<B>,
    taken: Vec<Taken<B::InnerBackend>>,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Take<'_, B>
where
    B::InnerBackend: OptimizerOps,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let device = grad.device();
        let require_grad = tensor.is_require_grad();
        let tensor = if tensor.device() == device { tensor } else { tensor.to_device(&device) };
        let state = self
            .records
            .remove(&id)
            .map(|record| <FusedAdamW as SimpleOptimizer<B::InnerBackend>>::to_device(record.into_state(), &device));
        let (time, moment_1, moment_2) = match state {
            Some(AdamWState { momentum }) => (momentum.time + 1, momentum.moment_1, momentum.moment_2),
            None => (1, grad.zeros_like(), grad.zeros_like()),
        };
        let primitive = |t: Tensor<B::InnerBackend, D>| t.into_primitive().tensor();
        let tensors = AdamWParam {
            param: primitive(tensor.inner()),
            grad: primitive(grad.clone()),
            moments: [primitive(moment_1), primitive(moment_2)],
        };
        self.taken.push(Taken { id, time, require_grad, tensors });
        Param::from_mapped_value(id, Tensor::from_inner(grad), mapper)
    }
}

/// Puts each updated parameter back in its gradient's place and its moments in the records.
struct PutBack<'a, B: AutodiffBackend>
where
    B::InnerBackend: OptimizerOps,
{
    updated: HashMap<ParamId, Updated<B::InnerBackend>>,
    records: &'a mut AdamWRecords<B>,
}

impl<B: AutodiffBackend> ModuleMapper<B> for PutBack<'_, B>
where
    B::InnerBackend: OptimizerOps,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, stand_in, mapper) = param.consume();
        let Some((time, require_grad, [param, moment_1, moment_2])) = self.updated.remove(&id) else {
            return Param::from_mapped_value(id, stand_in, mapper);
        };
        drop(stand_in);
        let tensor = |t| Tensor::<B::InnerBackend, D>::from_primitive(TensorPrimitive::Float(t));
        let state = AdamWState::new(AdaptiveMomentumState::new(time, tensor(moment_1), tensor(moment_2)));
        self.records.insert(id, AdaptorRecord::from_state(state));
        let mut updated = Tensor::from_inner(tensor(param));
        if require_grad {
            updated = updated.require_grad();
        }
        Param::from_mapped_value(id, updated, mapper)
    }
}
