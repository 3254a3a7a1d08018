//! Gradient clipping by the global norm, as PyTorch's `clip_grad_norm_`, GPT-2, nanoGPT and
//! llm.c clip: one norm over every parameter's gradient, one scale for all of them.
//!
//! Burn 0.21's `GradientClippingConfig::Norm(c)` clips each parameter tensor by its own norm
//! (`burn-optim`'s `clip_by_norm`, called per tensor by `OptimizerAdaptor`): every tensor may
//! keep a norm of up to `c`, so a model of `n` tensors is clipped at up to `c·√n` in all, and
//! the update's direction changes wherever one tensor is clipped and another is not. A run
//! configured as "AdamW, clipped at 1" then takes other steps than the same run in PyTorch
//! (`tests/parity/gpt2_parity/` measures it). [`GlobalNormClipping`] wraps any Burn optimizer
//! (give it one without its own clipping) and scales all gradients by
//! `min(1, max_norm / (‖g‖ + 1e-6))` before that optimizer sees them.
//!
//! Nothing is read back to the host: the norm and the scale stay on the device. The factor
//! is [`OptimizerOps::clip_factor`]: on the CubeCL backends leanburn's kernels (one launch
//! per gradient and one more), not Burn's `sum`, which on wgpu (Burn 0.21, llvmpipe) added
//! up only the first 262,132 elements of a million-element gradient
//! (`docs/benchmarks.md`); elsewhere Burn's ops. Scaling then costs one multiplication per
//! parameter tensor ([`ClippedAdamW`](super::ClippedAdamW) folds it into the update).

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::LearningRate;
use burn::optim::{GradientsParams, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;

use crate::backend::OptimizerOps;

/// A Burn [`Optimizer`] whose gradients are first clipped by their global norm; see the
/// module docs (`src/optim/clip.rs`).
#[derive(Clone, Debug)]
pub struct GlobalNormClipping<O> {
    inner: O,
    max_norm: f64,
}

impl<O> GlobalNormClipping<O> {
    /// Clips at `max_norm` (PyTorch's `max_norm`) before `inner` steps. A `max_norm` that is
    /// not positive and finite clips nothing.
    pub fn new(inner: O, max_norm: f64) -> Self {
        Self { inner, max_norm }
    }

    /// The norm the gradients are clipped to.
    pub fn max_norm(&self) -> f64 {
        self.max_norm
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }
}

impl<M, B, O> Optimizer<M, B> for GlobalNormClipping<O>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    B::InnerBackend: OptimizerOps,
    O: Optimizer<M, B>,
{
    type Record = O::Record;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        let grads = clip_by_global_norm::<B, M>(&module, grads, self.max_norm);
        self.inner.step(lr, module, grads)
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        // One gradient per parameter, summed over the devices onto the parameter's own.
        let mut merged = Merge { multi: grads, merged: GradientsParams::new() };
        module.visit(&mut merged);
        self.step(lr, module, merged.merged)
    }

    fn to_record(&self) -> Self::Record {
        self.inner.to_record()
    }

    fn load_record(self, record: Self::Record) -> Self {
        Self { inner: self.inner.load_record(record), max_norm: self.max_norm }
    }
}

/// Scales every gradient of `module`'s parameters in `grads` by
/// `min(1, max_norm / (‖g‖₂ + 1e-6))`, `‖g‖₂` the norm of all of them together (PyTorch's
/// `clip_grad_norm_`). Gradients of parameters that are not `module`'s are left alone.
pub fn clip_by_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    max_norm: f64,
) -> GradientsParams
where
    B::InnerBackend: OptimizerOps,
{
    let Some(scale) = global_norm_scale::<B, M>(module, &grads, max_norm) else { return grads };
    let mut scaled = Scale { grads, scale, ids: Vec::new() };
    module.visit(&mut scaled);
    scaled.grads
}

/// `min(1, max_norm / (‖g‖₂ + 1e-6))` over `module`'s gradients in `grads` (each
/// parameter's once), a `[1]` f32 tensor left on the device; none when `max_norm` is not
/// positive and finite or no parameter has a gradient.
pub(crate) fn global_norm_scale<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
    max_norm: f64,
) -> Option<Tensor<B::InnerBackend, 1>>
where
    B::InnerBackend: OptimizerOps,
{
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return None;
    }
    let mut gradients = Gradients::<B::InnerBackend> { grads, found: Vec::new(), ids: Vec::new() };
    module.visit(&mut gradients);
    if gradients.found.is_empty() {
        return None;
    }
    let factor = <B::InnerBackend as OptimizerOps>::clip_factor(gradients.found, max_norm);
    Some(Tensor::from_primitive(TensorPrimitive::Float(factor)))
}

/// The module's gradients in `grads`, each parameter's once.
struct Gradients<'a, B: Backend> {
    grads: &'a GradientsParams,
    found: Vec<FloatTensor<B>>,
    ids: Vec<ParamId>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for Gradients<'_, AB::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if self.ids.contains(&param.id) {
            return;
        }
        self.ids.push(param.id);
        if let Some(grad) = self.grads.get::<AB::InnerBackend, D>(param.id) {
            self.found.push(grad.into_primitive().tensor());
        }
    }
}

/// Multiplies each of the module's gradients by `scale` (`[1]`), once per parameter (a
/// parameter visited twice, as a tied weight may be, is scaled once).
struct Scale<B: Backend> {
    grads: GradientsParams,
    scale: Tensor<B, 1>,
    ids: Vec<ParamId>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for Scale<AB::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if self.ids.contains(&param.id) {
            return;
        }
        if let Some(grad) = self.grads.remove::<AB::InnerBackend, D>(param.id) {
            let scale = self.scale.clone().cast(grad.dtype()).reshape([1; D]);
            self.grads.register::<AB::InnerBackend, D>(param.id, grad * scale);
            self.ids.push(param.id);
        }
    }
}

/// Sums a multi-device gradient of each parameter onto the parameter's device.
pub(crate) struct Merge {
    pub(crate) multi: MultiGradientsParams,
    pub(crate) merged: GradientsParams,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for Merge {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if let Some((grad, _)) = self.multi.remove::<AB::InnerBackend, D>(param.id) {
            let device = param.val().device();
            self.merged.register::<AB::InnerBackend, D>(param.id, grad.to_device(&device));
        }
    }
}
