//! [`LayerNormOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's forward
//! and backward (its kernels on CubeCL) as Fusion custom operations, as the attention
//! kernels are (`backend/attention/fused.rs`).

use core::marker::PhantomData;

use burn_backend::ops::ModuleOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::LayerNormOps;
use crate::backend::custom_op::queue_custom;

/// Which pass one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum Pass {
    /// Inputs x, γ and maybe β; outputs y, mean, rstd.
    Forward { epsilon: f64 },
    /// Inputs x, γ, mean, rstd and the output's gradient; outputs dx, dγ, dβ.
    Backward,
}

#[derive(Debug)]
struct QueuedLayerNorm<B> {
    desc: CustomOpIr,
    pass: Pass,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + LayerNormOps> Operation<B::FusionRuntime> for QueuedLayerNorm<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let mut inputs = self.desc.inputs.iter().map(|ir| handles.get_float_tensor::<B>(ir));
        let mut next = || inputs.next().expect("the queued LayerNorm has its inputs");
        let outputs = match self.pass {
            Pass::Forward { epsilon } => {
                let (x, gamma) = (next(), next());
                B::lean_layer_norm_forward(x, gamma, inputs.next(), epsilon)
            }
            Pass::Backward => {
                let (x, gamma, mean, rstd, grad) = (next(), next(), next(), next(), next());
                B::lean_layer_norm_backward(x, gamma, mean, rstd, grad)
            }
        };
        for (ir, tensor) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

/// Queues `pass` on `inputs`, producing tensors of these shapes and types.
fn queue<B: FusionBackend + LayerNormOps>(
    pass: Pass,
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: [(Shape, DType); 3],
) -> [FloatTensor<Fusion<B>>; 3] {
    queue_custom::<B, _, 3>(name, inputs, outputs, |desc| QueuedLayerNorm::<B> { desc, pass, _backend: PhantomData })
}

impl<B: FusionBackend + LayerNormOps> LayerNormOps for Fusion<B> {
    fn lean_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        if !B::fused_layer_norm(x.dtype) {
            return Self::layer_norm(x, gamma, beta, epsilon);
        }
        let [y, _, _] = Self::lean_layer_norm_forward(x, gamma, beta, epsilon);
        y
    }

    fn lean_layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        let d = x.shape[x.shape.num_dims() - 1];
        let rows = x.shape.num_elements() / d.max(1);
        let stat = (Shape::new([rows]), DType::F32);
        let outputs = [(x.shape.clone(), x.dtype), stat.clone(), stat];
        let mut inputs = vec![x, gamma];
        inputs.extend(beta);
        queue::<B>(Pass::Forward { epsilon }, "leanburn_layer_norm_forward", inputs, outputs)
    }

    fn lean_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        // The gradients take the input's type, as the composed backward's do.
        let param = (gamma.shape.clone(), x.dtype);
        let outputs = [(x.shape.clone(), x.dtype), param.clone(), param];
        queue::<B>(Pass::Backward, "leanburn_layer_norm_backward", vec![x, gamma, mean, rstd, grad], outputs)
    }

    fn fused_layer_norm(dtype: DType) -> bool {
        B::fused_layer_norm(dtype)
    }
}
