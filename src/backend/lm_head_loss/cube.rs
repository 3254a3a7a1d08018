//! [`LmHeadLossOps`] on CubeCL backends: each chunk's rows through leanburn's row kernel
//! (`leanburn-kernels`' `lm_head_loss`), the GEMMs around it the backend's.

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::launch_lm_head_loss_rows;

use super::{column_total, composed_rows, LmHeadLossOps};
use crate::backend::{contiguous_of, has_kernels};

impl<R, F, I, BT> LmHeadLossOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn lm_head_loss_total(losses: FloatTensor<Self>) -> FloatTensor<Self> {
        column_total::<Self>(losses)
    }

    fn lm_head_loss_rows(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        grad_scale: Option<f32>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        let dtype = logits.dtype;
        let [rows, vocab] = logits.meta.shape().dims::<2>();
        let fits = targets.meta.shape().dims::<1>() == [rows] && vocab > 0;
        if !has_kernels(dtype) || targets.dtype != I::dtype() || !fits {
            return composed_rows::<Self>(logits, targets, grad_scale);
        }
        let (client, device) = (logits.client.clone(), logits.device.clone());
        let logits = contiguous_of(logits, dtype);
        let targets = if targets.is_contiguous() { targets } else { burn_cubecl::kernel::into_contiguous(targets) };
        let losses = empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::new([rows]), DType::F32);
        // Without a gradient the kernel writes none: any tensor stands in.
        let grad = match grad_scale {
            Some(_) => empty_device_contiguous_dtype(client.clone(), device, Shape::new([rows, vocab]), dtype),
            None => losses.clone(),
        };
        // SAFETY: the logits were made contiguous `[rows, vocab]`, the targets contiguous
        // `[rows]` of `I` (ids below `vocab` is the op's contract); the losses and the
        // gradient just allocated with the shapes the kernel writes.
        unsafe {
            with_float_type!(dtype, E => launch_lm_head_loss_rows::<R, E, I>(
                &client,
                logits.into_tensor_arg(),
                targets.into_tensor_arg(),
                losses.clone().into_tensor_arg(),
                grad.clone().into_tensor_arg(),
                [rows, vocab],
                grad_scale.unwrap_or(0.0),
                grad_scale.is_some(),
            ));
        }
        (losses, grad_scale.map(|_| grad))
    }
}
