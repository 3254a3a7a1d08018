//! [`GeluOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's GELU kernels
//! as one Fusion custom operation each, where composed the forward would be five entries
//! in the fusion stream (seven with a bias's reshape and add) and the derivative eleven
//! (each with its host work, though they fuse into one kernel).

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::DType;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{add_bias, bias_fits, gelu_derivative, GeluOps};
use crate::backend::custom_op::queue_custom;

#[cfg(test)]
thread_local! {
    /// GELU operations this thread queued as a kernel's custom operation: the tests'
    /// witness that the fused stacks take the kernels (their results may equal the fused
    /// composed chain's bit for bit).
    pub(super) static QUEUED: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// Which kernel a queued operation runs; a bias where it has one input more.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// `[x]` or `[x, bias]`.
    Forward,
    /// `[x, grad]` or `[x, bias, grad]`.
    Backward,
}

#[derive(Debug)]
struct QueuedGelu<B> {
    desc: CustomOpIr,
    pass: Pass,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + GeluOps> Operation<B::FusionRuntime> for QueuedGelu<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let inputs = &self.desc.inputs;
        let mut input = |i: usize| handles.get_float_tensor::<B>(&inputs[i]);
        let out = match (self.pass, inputs.len()) {
            (Pass::Forward, 1) => B::exact_gelu(input(0)),
            (Pass::Forward, _) => B::bias_gelu(input(0), input(1)),
            (Pass::Backward, 2) => B::exact_gelu_backward(input(0), input(1)),
            (Pass::Backward, _) => B::bias_gelu_backward(input(0), input(1), input(2)),
        };
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, out);
    }
}

/// Whether the inner backend's kernels take `x` (and `bias`, `grad`, where given).
fn takes<B: FusionBackend + GeluOps>(
    x: &FloatTensor<Fusion<B>>,
    bias: Option<&FloatTensor<Fusion<B>>>,
    grad: Option<&FloatTensor<Fusion<B>>>,
) -> bool {
    let bias_ok = bias.is_none_or(|bias| bias.dtype == x.dtype && bias_fits(&x.shape, &bias.shape));
    let grad_ok = grad.is_none_or(|grad| grad.dtype == x.dtype && grad.shape == x.shape);
    B::gelu_kernel(x.dtype) && x.shape.num_elements() > 0 && bias_ok && grad_ok
}

/// Queues `pass` on `inputs` (`x` first: the output's shape and type).
fn queue<B: FusionBackend + GeluOps>(
    name: &'static str,
    pass: Pass,
    inputs: Vec<FloatTensor<Fusion<B>>>,
) -> FloatTensor<Fusion<B>> {
    #[cfg(test)]
    QUEUED.with(|queued| queued.set(queued.get() + 1));
    let output = [(inputs[0].shape.clone(), inputs[0].dtype)];
    let [out] =
        queue_custom::<B, _, 1>(name, inputs, output, |desc| QueuedGelu::<B> { desc, pass, _backend: PhantomData });
    out
}

impl<B: FusionBackend + GeluOps> GeluOps for Fusion<B> {
    fn exact_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes::<B>(&x, None, None) {
            true => queue::<B>("leanburn_gelu", Pass::Forward, vec![x]),
            false => <Self as burn_backend::ops::ActivationOps<Self>>::gelu(x),
        }
    }

    fn exact_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes::<B>(&x, None, Some(&grad)) {
            true => queue::<B>("leanburn_gelu_backward", Pass::Backward, vec![x, grad]),
            false => gelu_derivative::<Self>(x, grad),
        }
    }

    fn bias_gelu(x: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes::<B>(&x, Some(&bias), None) {
            true => queue::<B>("leanburn_bias_gelu", Pass::Forward, vec![x, bias]),
            false => Self::exact_gelu(add_bias::<Self>(x, bias)),
        }
    }

    fn bias_gelu_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        match takes::<B>(&x, Some(&bias), Some(&grad)) {
            true => queue::<B>("leanburn_bias_gelu_backward", Pass::Backward, vec![x, bias, grad]),
            false => Self::exact_gelu_backward(add_bias::<Self>(x, bias), grad),
        }
    }

    fn gelu_kernel(dtype: DType) -> bool {
        B::gelu_kernel(dtype)
    }
}
