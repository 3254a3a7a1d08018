//! AdamW with one fused update per parameter tensor, or for all of a module's parameters
//! together, and the global-norm clipping folded into it.
//!
//! [`FusedAdamW`] is Burn's AdamW (the same numerics, the same `AdamWState` records, so a
//! checkpoint written with Burn's `AdamW` behind `OptimizerAdaptor` loads into it) whose
//! update runs as [`OptimizerOps::adamw_step`]: one kernel per parameter on the CubeCL
//! backends instead of about a dozen element-wise ops. As a [`SimpleOptimizer`] it goes
//! behind Burn's `OptimizerAdaptor` like any other.
//!
//! [`ClippedAdamW`] is the optimizer leanburn's GPT-2 trains with: PyTorch's
//! `clip_grad_norm_` then AdamW. The clipping's factor is [`OptimizerOps::clip_factor`] (on
//! CubeCL one launch per gradient, or per group of them, and one more), handed to the update instead of
//! multiplied into every gradient first, and the update is
//! [`OptimizerOps::adamw_steps`] over all parameters at once (`update.rs`; on CubeCL in
//! place, one launch per group of parameters with `LEANBURN_OPTIMIZER=grouped`), the bits
//! of one update per parameter. Its records are `OptimizerAdaptor<FusedAdamW, ..>`'s.

use hashbrown::HashMap;

use burn::module::{AutodiffModule, ParamId};
use burn::optim::record::AdaptorRecord;
use burn::optim::{
    AdamWState, AdaptiveMomentumState, GradientsParams, LearningRate, MultiGradientsParams, Optimizer, SimpleOptimizer,
};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};

use super::clip::{global_norm_scale, Merge};
use super::update::update_all;
use crate::backend::{AdamWStep, OptimizerOps};

/// AdamW (Loshchilov and Hutter) with Burn's numerics, updating each parameter in one op;
/// see the module docs (`src/optim/adamw.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FusedAdamW {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
}

impl FusedAdamW {
    /// AdamW with β = (0.9, 0.999), this ε and decoupled weight decay (PyTorch's
    /// `AdamW(eps=epsilon, weight_decay=weight_decay)`).
    pub fn new(epsilon: f32, weight_decay: f32) -> Self {
        Self { beta_1: 0.9, beta_2: 0.999, epsilon, weight_decay }
    }

    /// The same with other moment decays.
    pub fn with_betas(self, beta_1: f32, beta_2: f32) -> Self {
        Self { beta_1, beta_2, ..self }
    }

    /// The update's hyperparameters at step `time` (from 1).
    pub(crate) fn step_at(&self, lr: LearningRate, time: usize) -> AdamWStep {
        let Self { beta_1, beta_2, epsilon, weight_decay } = *self;
        AdamWStep { lr, beta_1, beta_2, epsilon, weight_decay, time }
    }

    /// Updates `tensor` by its gradient `grad` (times `scale`, a one-element f32 tensor,
    /// when given) from `state` (none before the first step).
    pub fn step_scaled<B: OptimizerOps, const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<AdamWState<B, D>>,
        scale: Option<Tensor<B, 1>>,
    ) -> (Tensor<B, D>, AdamWState<B, D>) {
        let (time, moment_1, moment_2) = match state {
            Some(AdamWState { momentum }) => (momentum.time + 1, momentum.moment_1, momentum.moment_2),
            None => (1, grad.zeros_like(), grad.zeros_like()),
        };
        let step = self.step_at(lr, time);
        let primitive = |t: Tensor<B, D>| t.into_primitive().tensor();
        let [param, moment_1, moment_2] = B::adamw_step(
            primitive(tensor),
            primitive(grad),
            [primitive(moment_1), primitive(moment_2)],
            scale.map(|s| s.into_primitive().tensor()),
            &step,
        )
        .map(|t| Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t)));
        (param, AdamWState::new(AdaptiveMomentumState::new(time, moment_1, moment_2)))
    }
}

impl<B: OptimizerOps> SimpleOptimizer<B> for FusedAdamW {
    type State<const D: usize> = AdamWState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let (tensor, state) = self.step_scaled(lr, tensor, grad, state, None);
        (tensor, Some(state))
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

/// The moments of each parameter, as `OptimizerAdaptor<FusedAdamW, ..>` records them.
pub type AdamWRecords<B> = HashMap<ParamId, AdaptorRecord<FusedAdamW, B>>;

/// Gradient clipping by the global norm, then [`FusedAdamW`], the clipping's factor passed
/// into each update; see the module docs (`src/optim/adamw.rs`).
#[derive(Clone)]
pub struct ClippedAdamW<B: AutodiffBackend>
where
    B::InnerBackend: OptimizerOps,
{
    adamw: FusedAdamW,
    max_norm: f64,
    records: AdamWRecords<B>,
}

impl<B: AutodiffBackend> ClippedAdamW<B>
where
    B::InnerBackend: OptimizerOps,
{
    /// `adamw` behind clipping at a global norm of `max_norm` (one that is not positive and
    /// finite clips nothing).
    pub fn new(adamw: FusedAdamW, max_norm: f64) -> Self {
        Self { adamw, max_norm, records: HashMap::new() }
    }

    /// The norm the gradients are clipped to.
    pub fn max_norm(&self) -> f64 {
        self.max_norm
    }

    /// The AdamW settings.
    pub fn adamw(&self) -> &FusedAdamW {
        &self.adamw
    }
}

impl<M, B> Optimizer<M, B> for ClippedAdamW<B>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    B::InnerBackend: OptimizerOps,
{
    type Record = AdamWRecords<B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        let scale = global_norm_scale::<B, M>(&module, &grads, self.max_norm);
        update_all(&self.adamw, &mut self.records, lr, module, grads, scale)
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        // One gradient per parameter, summed over the devices onto the parameter's own.
        let mut merged = Merge { multi: grads, merged: GradientsParams::new() };
        module.visit(&mut merged);
        Optimizer::<M, B>::step(self, lr, module, merged.merged)
    }

    fn to_record(&self) -> Self::Record {
        self.records.clone()
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.records = record;
        self
    }
}
