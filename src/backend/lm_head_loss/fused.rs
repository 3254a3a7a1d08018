//! [`LmHeadLossOps`] on Burn's fused backends (`Cuda`, `Wgpu`): each chunk's rows as one
//! Fusion custom operation running the inner backend's (its kernel on CubeCL), the GEMMs
//! around it Fusion's.

use core::marker::PhantomData;

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{DType, Shape};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{column_total, LmHeadLossOps};
use crate::backend::bias_grad::BiasGradOps;
use crate::backend::custom_op::queue_custom;
use crate::backend::gemm::GemmOps;

#[derive(Debug)]
struct QueuedRows<B> {
    desc: CustomOpIr,
    grad_scale: Option<f32>,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + LmHeadLossOps> Operation<B::FusionRuntime> for QueuedRows<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let [logits, targets] = &self.desc.inputs[..] else { unreachable!("queued with logits and targets") };
        let logits = handles.get_float_tensor::<B>(logits);
        let targets = handles.get_int_tensor::<B>(targets);
        let (losses, grad) = B::lm_head_loss_rows(logits, targets, self.grad_scale);
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, losses);
        if let (Some(grad), Some(ir)) = (grad, self.desc.outputs.get(1)) {
            handles.register_float_tensor::<B>(&ir.id, grad);
        }
    }
}

impl<B: FusionBackend + GemmOps + LmHeadLossOps + BiasGradOps> LmHeadLossOps for Fusion<B> {
    fn lm_head_loss_total(losses: FloatTensor<Self>) -> FloatTensor<Self> {
        column_total::<Self>(losses)
    }

    fn lm_head_loss_rows(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        grad_scale: Option<f32>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        let rows = logits.shape.dims::<2>()[0];
        let losses = (Shape::new([rows]), DType::F32);
        let grad = (logits.shape.clone(), logits.dtype);
        // A Fusion tensor is one type, float or int: the targets travel as an input.
        let inputs = vec![logits, targets];
        let make = |desc| QueuedRows::<B> { desc, grad_scale, _backend: PhantomData };
        match grad_scale {
            Some(_) => {
                let [losses, grad] =
                    queue_custom::<B, _, 2>("leanburn_lm_head_loss_rows", inputs, [losses, grad], make);
                (losses, Some(grad))
            }
            None => {
                let [losses] = queue_custom::<B, _, 1>("leanburn_lm_head_token_losses", inputs, [losses], make);
                (losses, None)
            }
        }
    }
}
