//! [`OptimizerOps`] on CubeCL backends: leanburn's AdamW kernel, in place where the update
//! holds the parameters' and their moments' only handles (into new buffers otherwise), and
//! its clipping-factor kernels, then one more for the factor. One launch per tensor, or per
//! group of them where [`grouped`] says so (both write the same bits).

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{
    adamw_group_size, launch_adamw, launch_adamw_in_place, launch_clip_factor, launch_squares, squares_group_size,
    squares_partials, vector_width, AdamWMember, AdamWScalars,
};

use super::{composed, composed_clip_factor, grouped, AdamWParam, AdamWStep, OptimizerOps};
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
        let mut updated = Self::adamw_steps(vec![AdamWParam { param, grad, moments }], scale, step);
        updated.pop().expect("one update for one parameter")
    }

    fn adamw_steps(
        params: Vec<AdamWParam<Self>>,
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> Vec<[FloatTensor<Self>; 3]> {
        let Some(first) = params.first() else { return Vec::new() };
        let (client, device) = (first.param.client.clone(), first.param.device.clone());
        let scale = match scale {
            Some(scale) => contiguous_of(scale, DType::F32),
            None => {
                let one = client.create_from_slice(&1.0f32.to_le_bytes());
                CubeTensor::new_contiguous(client, device, [1].into(), one, DType::F32)
            }
        };
        let scalars = scalars(step);
        let mut updated: Vec<Option<[CubeTensor<R>; 3]>> = params.iter().map(|_| None).collect();
        let mut groups: Vec<InPlaceGroup<R>> = Vec::new();
        for (index, AdamWParam { param, grad, moments }) in params.into_iter().enumerate() {
            let dtype = param.dtype;
            let shape = param.meta.shape().clone();
            let same = |t: &CubeTensor<R>| t.dtype == dtype && *t.meta.shape() == shape;
            if !has_kernels(dtype) || !same(&grad) || !moments.iter().all(same) {
                updated[index] = Some(composed::<Self>(param, grad, moments, Some(scale.clone()), step));
                continue;
            }
            // The parameter and both moments are overwritten where this update holds their
            // only handles (as an optimizer step does: the module's parameter and the
            // state's moments are moved in); else the update writes new buffers and leaves
            // the inputs as they are.
            let writable = |t: &CubeTensor<R>| t.can_mut() && t.is_contiguous() && t.is_contiguous_buffer();
            if !(writable(&param) && moments.iter().all(writable)) {
                updated[index] = Some(into_new_buffers(param, grad, moments, &scale, scalars));
                continue;
            }
            let len = shape.num_elements();
            let width = vector_width(&param.client, dtype.size(), len);
            let key = (param.device.clone(), dtype, width);
            let grad = contiguous_of(grad, dtype);
            let [moment_1, moment_2] = moments;
            let member = (index, [param, grad, moment_1, moment_2]);
            match groups.iter_mut().find(|group| group.key == key) {
                Some(group) => group.members.push(member),
                None => groups.push(InPlaceGroup { key, members: vec![member] }),
            }
        }
        for group in groups {
            group.launch(&scale, scalars, &mut updated);
        }
        updated.into_iter().map(|update| update.expect("every parameter updated")).collect()
    }

    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        if grads.is_empty() || !grads.iter().all(|grad| has_kernels(grad.dtype)) {
            return composed_clip_factor::<Self>(grads, max_norm);
        }
        let (client, device) = (grads[0].client.clone(), grads[0].device.clone());
        let count = grads.iter().map(|grad| squares_partials(grad.meta.num_elements())).sum();
        let partials = empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::new([count]), DType::F32);
        let factor = empty_device_contiguous_dtype(client.clone(), device, Shape::new([1]), DType::F32);
        // Runs of gradients of one type, in their order (so the slots and the sum's order
        // are those of one launch per gradient), a launch per group of them.
        let group = if grouped() { squares_group_size(&client) } else { 1 };
        let mut offset = 0;
        let mut grads = grads.into_iter().peekable();
        while let Some(first) = grads.next() {
            let dtype = first.dtype;
            let mut run = vec![first];
            while run.len() < group && grads.peek().is_some_and(|grad| grad.dtype == dtype) {
                run.extend(grads.next());
            }
            let slots: usize = run.iter().map(|grad| squares_partials(grad.meta.num_elements())).sum();
            let args = run
                .into_iter()
                .map(|grad| (grad.meta.num_elements(), contiguous_of(grad, dtype)))
                .map(|(len, grad)| (grad.into_tensor_arg(), len))
                .collect();
            // SAFETY: each gradient is contiguous with its length of elements of `dtype`; the
            // run's slots, `offset .. offset + slots`, are inside `partials`; at most a
            // group's count.
            unsafe {
                with_float_type!(dtype, E => launch_squares::<R, E>(
                    &client,
                    args,
                    partials.clone().into_tensor_arg(),
                    offset,
                ));
            }
            offset += slots;
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

/// Parameters of one device, type and vector width whose update holds their only
/// handles, updated in place a launch per [`adamw_group_size`] of them.
struct InPlaceGroup<R: CubeRuntime> {
    key: (R::Device, DType, usize),
    /// Each parameter's index among the update's and `[param, grad, moment_1, moment_2]`,
    /// contiguous.
    members: Vec<(usize, [CubeTensor<R>; 4])>,
}

impl<R: CubeRuntime> InPlaceGroup<R> {
    /// Launches the updates and puts each parameter and its moments at its index.
    fn launch(self, scale: &CubeTensor<R>, scalars: AdamWScalars, updated: &mut [Option<[CubeTensor<R>; 3]>]) {
        let (_, dtype, width) = self.key;
        let client = self.members[0].1[0].client.clone();
        let mut members = self.members.into_iter().peekable();
        while members.peek().is_some() {
            let group = if grouped() { adamw_group_size(&client) } else { 1 };
            let launch: Vec<_> = members.by_ref().take(group).collect();
            let args = launch
                .iter()
                .map(|(_, tensors)| AdamWMember {
                    tensors: tensors.each_ref().map(|t| t.clone().into_tensor_arg()),
                    len: tensors[0].meta.num_elements(),
                })
                .collect();
            // SAFETY: each member's four tensors are contiguous, of its parameter's shape and
            // type (the gradient made so), and the parameter and moments each the only handle
            // to its buffer (so distinct buffers nothing else reads, none in two members);
            // `width` divides every length (the group's key); at most a group's count; the
            // scale holds one f32.
            unsafe {
                with_float_type!(dtype, E => launch_adamw_in_place::<R, E>(
                    &client,
                    args,
                    scale.clone().into_tensor_arg(),
                    width,
                    scalars,
                ));
            }
            for (index, [param, _, moment_1, moment_2]) in launch {
                updated[index] = Some([param, moment_1, moment_2]);
            }
        }
    }
}

/// One parameter's update into new buffers, the inputs left as they are.
fn into_new_buffers<R: CubeRuntime>(
    param: CubeTensor<R>,
    grad: CubeTensor<R>,
    moments: [CubeTensor<R>; 2],
    scale: &CubeTensor<R>,
    scalars: AdamWScalars,
) -> [CubeTensor<R>; 3] {
    let (dtype, shape) = (param.dtype, param.meta.shape().clone());
    let (client, device) = (param.client.clone(), param.device.clone());
    let [moment_1, moment_2] = moments.map(|t| contiguous_of(t, dtype));
    let inputs = [contiguous_of(param, dtype), contiguous_of(grad, dtype), moment_1, moment_2];
    let outputs = [0; 3].map(|_| empty_device_contiguous_dtype(client.clone(), device.clone(), shape.clone(), dtype));
    // SAFETY: the inputs were made contiguous with the parameter's shape and type, the
    // outputs just allocated contiguous with them, the scale holds one f32.
    unsafe {
        with_float_type!(dtype, E => launch_adamw::<R, E>(
            &client,
            inputs.map(|t| t.into_tensor_arg()),
            scale.clone().into_tensor_arg(),
            outputs.clone().map(|t| t.into_tensor_arg()),
            shape.num_elements(),
            scalars,
        ));
    }
    outputs
}

/// The kernel's scalars for `step`.
fn scalars(step: &AdamWStep) -> AdamWScalars {
    let (correction_1, correction_2) = step.corrections();
    AdamWScalars {
        beta_1: step.beta_1,
        beta_2: step.beta_2,
        epsilon: step.epsilon,
        lr: step.lr as f32,
        decay: step.decay() as f32,
        correction_1,
        correction_2,
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tensor, TensorPrimitive};
    use burn_backend::Backend;

    use super::super::{AdamWParam, AdamWStep, OptimizerOps};
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

    /// Parameters for a grouped update: eight of 4 MiB and sixteen small ones of odd lengths
    /// (updated a scalar at a time, in a group of their own), 24 in all (more than one
    /// launch's worth on GPU runtimes).
    fn group_inputs(device: &burn::tensor::Device<B>) -> Vec<[Tensor<B, 1>; 4]> {
        <B as Backend>::seed(device, 9);
        let uniform = |len, low, high| Tensor::<B, 1>::random([len], Distribution::Uniform(low, high), device);
        (0..24)
            .map(|i| {
                let len = if i % 3 == 0 { 1 << 20 } else { 7 * i + 3 };
                [uniform(len, -1.0, 1.0), uniform(len, -1e-2, 1e-2), uniform(len, -1e-3, 1e-3), uniform(len, 0.0, 1e-5)]
            })
            .collect()
    }

    /// One grouped update of `params` (copies only it holds, or clones the caller keeps):
    /// the reserve's rise over it and each parameter's results' bits.
    fn group_update(params: &[[Tensor<B, 1>; 4]], shared: bool) -> (u64, Vec<[Vec<u32>; 3]>) {
        let device = params[0][0].device();
        let primitive = |t: &Tensor<B, 1>| match shared {
            true => t.clone().into_primitive().tensor(),
            false => Tensor::<B, 1>::from_data(t.to_data(), &device).into_primitive().tensor(),
        };
        let params: Vec<_> = params
            .iter()
            .map(|[p, g, m, v]| AdamWParam {
                param: primitive(p),
                grad: primitive(g),
                moments: [primitive(m), primitive(v)],
            })
            .collect();
        B::sync(&device).expect("sync");
        B::release_unused(&device);
        let before = B::memory_sample(&device).expect("a pool").bytes_reserved;
        let out = B::adamw_steps(params, None, &STEP);
        B::sync(&device).expect("sync");
        let after = B::memory_sample(&device).expect("a pool").bytes_reserved;
        let out = out.into_iter().map(|ts| ts.map(|t| values(&Tensor::from_primitive(TensorPrimitive::Float(t)))));
        (after.saturating_sub(before), out.collect())
    }

    /// Many parameters updated together in place: no new memory, and each one's bits are
    /// those of its own update. The control: with the inputs shared, the update reserves
    /// every output anew (and writes the same bits).
    #[test]
    fn adamw_steps_update_a_group_in_place_as_one_update_each() {
        super::super::GROUPED.set(true); // both settings write the same bits
        let device = Default::default();
        let params = group_inputs(&device);
        group_update(&params, false); // compiles the kernels
        let (own_rise, own) = group_update(&params, false);
        let (shared_rise, shared) = group_update(&params, true);
        let alone: Vec<[Vec<u32>; 3]> = params.iter().map(|p| update(p, false).1).collect();
        // The large parameters' bytes (the small ones' copies may fit in pages the pool holds).
        let bytes: u64 = params.iter().map(|p| p[0].dims()[0] as u64 * 4).filter(|&b| b >= 1 << 20).sum();
        println!("reserve rise over one update of 24 parameters, 3 × {bytes} B in the large ones: in place {own_rise} B, shared {shared_rise} B");
        assert!(own == alone, "the grouped update wrote other bits than one update per parameter");
        assert!(shared == alone, "the grouped update into new buffers wrote other bits");
        assert!(own_rise < (4 << 20), "the grouped update in place reserved {own_rise} B");
        assert!(shared_rise >= 3 * bytes, "control: the shared update reserved only {shared_rise} B");
    }
}
