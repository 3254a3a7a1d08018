//! [`OptimizerOps`] on CubeCL backends: leanburn's AdamW kernel, one launch per parameter,
//! and its clipping-factor kernels, one launch per gradient and one more.

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{launch_adamw, launch_clip_factor, launch_squares, squares_partials, AdamWScalars};

use super::{composed, composed_clip_factor, AdamWStep, OptimizerOps};
use crate::backend::{contiguous_of, has_kernels};

impl<R, F, I, BT> OptimizerOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: [FloatTensor<Self>; 2],
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> [FloatTensor<Self>; 3] {
        let dtype = param.dtype;
        let shape = param.meta.shape().clone();
        let same = |t: &CubeTensor<R>| t.dtype == dtype && *t.meta.shape() == shape;
        if !has_kernels(dtype) || !same(&grad) || !moments.iter().all(same) {
            return composed::<Self>(param, grad, moments, scale, step);
        }
        let (client, device) = (param.client.clone(), param.device.clone());
        let scale = match scale {
            Some(scale) => contiguous_of(scale, DType::F32),
            None => {
                let one = client.create_from_slice(&1.0f32.to_le_bytes());
                CubeTensor::new_contiguous(client.clone(), device.clone(), [1].into(), one, DType::F32)
            }
        };
        let [moment_1, moment_2] = moments.map(|t| contiguous_of(t, dtype));
        let inputs = [contiguous_of(param, dtype), contiguous_of(grad, dtype), moment_1, moment_2];
        let outputs =
            [0; 3].map(|_| empty_device_contiguous_dtype(client.clone(), device.clone(), shape.clone(), dtype));
        let (c1, c2) = step.corrections();
        let scalars = AdamWScalars {
            beta_1: step.beta_1,
            beta_2: step.beta_2,
            epsilon: step.epsilon,
            lr: step.lr as f32,
            decay: step.decay() as f32,
            correction_1: c1,
            correction_2: c2,
        };
        // SAFETY: the inputs were made contiguous with the parameter's shape and type, the
        // outputs just allocated contiguous with them, the scale holds one f32.
        unsafe {
            with_float_type!(dtype, E => launch_adamw::<R, E>(
                &client,
                inputs.map(|t| t.into_tensor_arg()),
                scale.into_tensor_arg(),
                outputs.clone().map(|t| t.into_tensor_arg()),
                shape.num_elements(),
                scalars,
            ));
        }
        outputs
    }

    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        if grads.is_empty() || !grads.iter().all(|grad| has_kernels(grad.dtype)) {
            return composed_clip_factor::<Self>(grads, max_norm);
        }
        let (client, device) = (grads[0].client.clone(), grads[0].device.clone());
        let count = grads.iter().map(|grad| squares_partials(grad.meta.num_elements())).sum();
        let partials = empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::new([count]), DType::F32);
        let factor = empty_device_contiguous_dtype(client.clone(), device, Shape::new([1]), DType::F32);
        let mut offset = 0;
        for grad in grads {
            let (len, dtype) = (grad.meta.num_elements(), grad.dtype);
            let grad = contiguous_of(grad, dtype);
            // SAFETY: the gradient is contiguous with `len` elements; its slots,
            // `offset .. offset + squares_partials(len)`, are inside `partials`.
            unsafe {
                with_float_type!(dtype, E => launch_squares::<R, E>(
                    &client,
                    grad.into_tensor_arg(),
                    partials.clone().into_tensor_arg(),
                    len,
                    offset,
                ));
            }
            offset += squares_partials(len);
        }
        // SAFETY: every one of the `count` slots was written above; `factor` holds one f32.
        unsafe {
            launch_clip_factor::<R>(
                &client,
                partials.into_tensor_arg(),
                factor.clone().into_tensor_arg(),
                count,
                max_norm as f32,
            );
        }
        factor
    }
}
