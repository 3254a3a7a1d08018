//! AdamW's per-parameter update as one op: on the CubeCL backends (CUDA, wgpu; fused or
//! not) one kernel per parameter tensor (`leanburn-kernels`' `adamw`), or per group of
//! them (up to 16 a launch on CUDA, 7 on llvmpipe) with `LEANBURN_OPTIMIZER=grouped`,
//! where Burn's AdamW launches a dozen element-wise ops and the clipping's scale one more; on the CPU backend
//! (`Flex`) one pass over the host buffers (`flex.rs`); elsewhere, and for element types
//! the kernel is not compiled for, the same arithmetic composed of Burn tensor ops
//! ([`composed`]).
//!
//! The numerics are `burn-optim`'s `AdamW` (decoupled weight decay; bias-corrected moments;
//! ε added to the corrected second moment's square root), the gradient first multiplied by
//! the clipping factor when one is given. `optim::FusedAdamW` is the optimizer built on it.

mod cube;
mod flex;
mod fused;

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};

use super::conv::ChunkedConv;
use super::switch::{env_is, Switch};
use super::Lean;

/// Whether the CubeCL update and clipping sums launch for groups of tensors
/// (`LEANBURN_OPTIMIZER=grouped`, read once) or one tensor a launch (the default). Both
/// write the same bits. On llvmpipe one a launch is the faster (gpt2-mini's optimizer step
/// 61–65 ms against 90–91, `docs/benchmarks.md`); on a GPU, where a launch costs more, the
/// device call in `docs/gpu.md` times both before the default changes.
pub(crate) static GROUPED: Switch = Switch::unset();

pub(crate) fn grouped() -> bool {
    GROUPED.get(|| env_is("LEANBURN_OPTIMIZER", "grouped"))
}

/// PyTorch's `clip_grad_norm_` guard against a zero norm.
pub const NORM_EPSILON: f64 = 1e-6;

/// One AdamW step's hyperparameters, as `burn-optim`'s `AdamWConfig` names them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// The learning rate of this step.
    pub lr: f64,
    /// β₁, the first moment's decay.
    pub beta_1: f32,
    /// β₂, the second moment's decay.
    pub beta_2: f32,
    /// ε, added to the corrected second moment's square root.
    pub epsilon: f32,
    /// Decoupled weight decay: each step multiplies the weights by `1 − lr · weight_decay`.
    pub weight_decay: f32,
    /// The step, from 1 (the bias corrections are `1 − βᵗ`).
    pub time: usize,
}

impl AdamWStep {
    /// `1 − β₁ᵗ` and `1 − β₂ᵗ`, in f32 as Burn's AdamW computes them.
    pub(crate) fn corrections(&self) -> (f32, f32) {
        let time = self.time as i32;
        (1.0 - self.beta_1.powi(time), 1.0 - self.beta_2.powi(time))
    }

    /// `1 − lr · weight_decay`, computed in f64 as Burn's AdamW does.
    pub(crate) fn decay(&self) -> f64 {
        1.0 - self.lr * f64::from(self.weight_decay)
    }
}

/// One parameter's tensors for [`OptimizerOps::adamw_steps`], all of one shape and type.
#[derive(Debug)]
pub struct AdamWParam<B: Backend> {
    /// The parameter before the step.
    pub param: FloatTensor<B>,
    /// Its gradient.
    pub grad: FloatTensor<B>,
    /// Both moments before the step (zeros before the first).
    pub moments: [FloatTensor<B>; 2],
}

impl<B: ChunkedConv> AdamWParam<Lean<B>> {
    /// The same tensors as `B`'s (`Lean` wraps none of them).
    fn into_inner(self) -> AdamWParam<B> {
        let Self { param, grad, moments } = self;
        AdamWParam { param, grad, moments }
    }
}

/// A backend with AdamW's update as one op; see the module docs (`src/backend/optimizer/mod.rs`).
pub trait OptimizerOps: Backend {
    /// The parameter and its two moments after one step, `[param', m', v']`, from the
    /// parameter, its gradient and the moments before it (zeros before the first step), all
    /// of one shape and element type; the gradient is multiplied by `scale` (a one-element
    /// f32 tensor, clipping's factor) first when it is given.
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: [FloatTensor<Self>; 2],
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> [FloatTensor<Self>; 3] {
        composed::<Self>(param, grad, moments, scale, step)
    }

    /// [`adamw_step`](Self::adamw_step) for many parameters at once, each gradient times the
    /// same `scale`, the results in the parameters' order: on the CubeCL backends one launch
    /// for a group of parameters (PyTorch's multi-tensor AdamW) where the update holds their
    /// only handles; one update after another by default.
    fn adamw_steps(
        params: Vec<AdamWParam<Self>>,
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> Vec<[FloatTensor<Self>; 3]> {
        params
            .into_iter()
            .map(|AdamWParam { param, grad, moments }| Self::adamw_step(param, grad, moments, scale.clone(), step))
            .collect()
    }

    /// `min(1, max_norm / (‖g‖₂ + 1e-6))`, `‖g‖₂` the norm of all of `grads` together (at
    /// least one, any shapes and float types), as a `[1]` f32 tensor left on the device.
    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        composed_clip_factor::<Self>(grads, max_norm)
    }
}

impl OptimizerOps for NdArray {}

/// `B`'s update, its kernel included.
impl<B: ChunkedConv + OptimizerOps> OptimizerOps for Lean<B> {
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: [FloatTensor<Self>; 2],
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> [FloatTensor<Self>; 3] {
        B::adamw_step(param, grad, moments, scale, step)
    }

    fn adamw_steps(
        params: Vec<AdamWParam<Self>>,
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> Vec<[FloatTensor<Self>; 3]> {
        B::adamw_steps(params.into_iter().map(AdamWParam::into_inner).collect(), scale, step)
    }

    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        B::clip_factor(grads, max_norm)
    }
}

/// [`OptimizerOps::adamw_step`] composed of `B`'s tensor ops, in the order `burn-optim`'s
/// `AdamW` runs them (on Burn's fusion stacks the element-wise ones fuse).
pub(crate) fn composed<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    [moment_1, moment_2]: [FloatTensor<B>; 2],
    scale: Option<FloatTensor<B>>,
    step: &AdamWStep,
) -> [FloatTensor<B>; 3] {
    let shape = param.shape();
    let (param, mut grad, moment_1, moment_2) =
        (flat::<B>(param), flat::<B>(grad), flat::<B>(moment_1), flat::<B>(moment_2));
    if let Some(scale) = scale {
        grad = grad.clone() * flat::<B>(scale).cast(grad.dtype());
    }
    let (c1, c2) = step.corrections();
    let moment_1 = moment_1.mul_scalar(step.beta_1).add(grad.clone().mul_scalar(1.0 - step.beta_1));
    let moment_2 = moment_2.mul_scalar(step.beta_2).add(grad.square().mul_scalar(1.0 - step.beta_2));
    let delta = moment_1.clone().div_scalar(c1).div(moment_2.clone().div_scalar(c2).sqrt().add_scalar(step.epsilon));
    let decayed = if step.weight_decay == 0.0 { param } else { param.mul_scalar(step.decay()) };
    let param = decayed - delta.mul_scalar(step.lr);
    [param, moment_1, moment_2].map(|tensor| B::float_reshape(tensor.into_primitive().tensor(), shape.clone()))
}

/// [`OptimizerOps::clip_factor`] composed of `B`'s tensor ops: each gradient's squares
/// summed in f32, the sums added.
pub fn composed_clip_factor<B: Backend>(grads: Vec<FloatTensor<B>>, max_norm: f64) -> FloatTensor<B> {
    let sum = grads
        .into_iter()
        .map(|grad| flat::<B>(grad).cast(burn::tensor::FloatDType::F32).square().sum())
        .reduce(|sum, squares| sum + squares)
        .expect("clip_factor: at least one gradient");
    let factor = sum.sqrt().add_scalar(NORM_EPSILON).recip().mul_scalar(max_norm).clamp_max(1.0);
    factor.into_primitive().tensor()
}

/// `tensor` as a 1-D tensor of all its elements.
fn flat<B: Backend>(tensor: FloatTensor<B>) -> Tensor<B, 1> {
    let len = tensor.shape().num_elements();
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(tensor, [len].into())))
}
