//! [`OptimizerOps`] on CubeCL backends: leanburn's AdamW kernel, one launch per parameter
//! (in place where the update holds the parameter's and the moments' only handles), and its
//! clipping-factor kernels, one launch per gradient and one more.

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{
    launch_adamw, launch_adamw_in_place, launch_clip_factor, launch_squares, squares_partials, AdamWScalars,
};

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
        let len = shape.num_elements();
        // The parameter and both moments are overwritten where this update holds their only
        // handles (as an optimizer step does: the module's parameter and the state's moments
        // are moved in); else the update writes new buffers and leaves the inputs as they are.
        let writable = |t: &CubeTensor<R>| t.can_mut() && t.is_contiguous() && t.is_contiguous_buffer();
        if writable(&param) && moments.iter().all(writable) {
            let [moment_1, moment_2] = moments;
            let grad = contiguous_of(grad, dtype);
            // SAFETY: the three are contiguous, of the parameter's shape and type, each the
            // only handle to its buffer (so three distinct buffers nothing else reads); the
            // gradient was made contiguous with them; the scale holds one f32.
            unsafe {
                with_float_type!(dtype, E => launch_adamw_in_place::<R, E>(
                    &client,
                    [&param, &grad, &moment_1, &moment_2].map(|t| t.clone().into_tensor_arg()),
                    scale.into_tensor_arg(),
                    len,
                    scalars,
                ));
            }
            return [param, moment_1, moment_2];
        }
        let [moment_1, moment_2] = moments.map(|t| contiguous_of(t, dtype));
        let inputs = [contiguous_of(param, dtype), contiguous_of(grad, dtype), moment_1, moment_2];
        let outputs =
            [0; 3].map(|_| empty_device_contiguous_dtype(client.clone(), device.clone(), shape.clone(), dtype));
        // SAFETY: the inputs were made contiguous with the parameter's shape and type, the
        // outputs just allocated contiguous with them, the scale holds one f32.
        unsafe {
            with_float_type!(dtype, E => launch_adamw::<R, E>(
                &client,
                inputs.map(|t| t.into_tensor_arg()),
                scale.into_tensor_arg(),
                outputs.clone().map(|t| t.into_tensor_arg()),
                len,
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

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tensor, TensorPrimitive};
    use burn_backend::Backend;

    use super::super::{AdamWStep, OptimizerOps};
    use crate::device::CubeWgpu;
    use crate::MemoryProbe;

    type B = CubeWgpu;
    /// 16 MiB per f32 tensor: page rounding in the pool stays well below one tensor.
    const LEN: usize = 1 << 22;
    const STEP: AdamWStep =
        AdamWStep { lr: 3e-3, beta_1: 0.9, beta_2: 0.95, epsilon: 1e-8, weight_decay: 0.1, time: 3 };

    fn values(tensor: &Tensor<B, 1>) -> Vec<u32> {
        tensor.to_data().to_vec::<f32>().expect("f32").iter().map(|v| v.to_bits()).collect()
    }

    /// One update of `inputs` (`[param, grad, m, v]`): the reserve's rise over it and the
    /// results' bits. `shared`: the update gets clones of `inputs`, which the caller keeps;
    /// else copies only it holds.
    fn update(inputs: &[Tensor<B, 1>; 4], shared: bool) -> (u64, [Vec<u32>; 3]) {
        let device = inputs[0].device();
        let [param, grad, m, v] = match shared {
            true => inputs.clone(),
            false => inputs.each_ref().map(|t| Tensor::from_data(t.to_data(), &device)),
        };
        let primitive = |t: Tensor<B, 1>| t.into_primitive().tensor();
        B::sync(&device).expect("sync");
        B::release_unused(&device);
        let before = B::memory_sample(&device).expect("a pool").bytes_reserved;
        let out = B::adamw_step(primitive(param), primitive(grad), [primitive(m), primitive(v)], None, &STEP);
        B::sync(&device).expect("sync");
        let after = B::memory_sample(&device).expect("a pool").bytes_reserved;
        let out = out.map(|t| values(&Tensor::from_primitive(TensorPrimitive::Float(t))));
        (after.saturating_sub(before), out)
    }

    /// An update that alone holds the parameter and moments writes over them: no new
    /// memory, the same bits as the update into new buffers. The control: with the inputs
    /// shared, the update reserves its three outputs anew and leaves the inputs as they were.
    #[test]
    fn adamw_writes_over_what_only_it_holds_and_copies_what_is_shared() {
        let device = Default::default();
        <B as Backend>::seed(&device, 5);
        let uniform = |low, high| Tensor::<B, 1>::random([LEN], Distribution::Uniform(low, high), &device);
        let inputs = [uniform(-1.0, 1.0), uniform(-1e-2, 1e-2), uniform(-1e-3, 1e-3), uniform(0.0, 1e-5)];
        let snapshot: Vec<_> = inputs.iter().map(values).collect();
        update(&inputs, false); // compiles the kernels
        let (own_rise, own) = update(&inputs, false);
        let (shared_rise, shared) = update(&inputs, true);
        let tensor = (LEN * 4) as u64;
        println!(
            "reserve rise over one update of 3 × {} MiB: in place {own_rise} B, shared {shared_rise} B",
            tensor >> 20
        );
        assert!(own == shared, "the update in place wrote other bits than the one into new buffers");
        assert!(own_rise < tensor, "the update in place reserved {own_rise} B");
        assert!(shared_rise >= 3 * tensor, "control: the shared update reserved only {shared_rise} B");
        assert!(inputs.iter().map(values).eq(snapshot), "a shared input was written");
    }
}
