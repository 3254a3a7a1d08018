//! [`OptimizerOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's update
//! and clipping factor (its kernels on CubeCL) as Fusion custom operations, as the
//! attention kernels are (`backend/attention/fused.rs`).

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{AdamWParam, AdamWStep, OptimizerOps};
use crate::backend::custom_op::{queue_custom, queue_custom_many};

/// Which op one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum Queued {
    /// [`OptimizerOps::adamw_step`]: inputs param, grad, both moments and maybe the scale.
    AdamW(AdamWStep),
    /// [`OptimizerOps::adamw_steps`] of this many parameters: inputs each one's param, grad
    /// and both moments, then maybe the scale.
    AdamWSteps(AdamWStep, usize),
    /// [`OptimizerOps::clip_factor`] at this norm: every input a gradient.
    ClipFactor(f64),
}

#[derive(Debug)]
struct QueuedOp<B> {
    desc: CustomOpIr,
    op: Queued,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + OptimizerOps> Operation<B::FusionRuntime> for QueuedOp<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let mut inputs = self.desc.inputs.iter().map(|ir| handles.get_float_tensor::<B>(ir));
        let outputs: Vec<_> = match self.op {
            Queued::AdamW(step) => {
                let mut next = || inputs.next().expect("the queued update has its four or five inputs");
                let (param, grad, moment_1, moment_2) = (next(), next(), next(), next());
                let scale = inputs.next();
                B::adamw_step(param, grad, [moment_1, moment_2], scale, &step).into()
            }
            Queued::AdamWSteps(step, count) => {
                let params = (0..count)
                    .map(|_| {
                        let mut next = || inputs.next().expect("the queued updates have four inputs each");
                        AdamWParam { param: next(), grad: next(), moments: [next(), next()] }
                    })
                    .collect();
                B::adamw_steps(params, inputs.next(), &step).into_iter().flatten().collect()
            }
            Queued::ClipFactor(max_norm) => vec![B::clip_factor(inputs.collect(), max_norm)],
        };
        for (ir, tensor) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

/// Queues `op` on `inputs`, producing `N` tensors of these shapes and types.
fn queue<B: FusionBackend + OptimizerOps, const N: usize>(
    op: Queued,
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: [(Shape, DType); N],
) -> [FloatTensor<Fusion<B>>; N] {
    queue_custom::<B, _, N>(name, inputs, outputs, |desc| QueuedOp::<B> { desc, op, _backend: PhantomData })
}

impl<B: FusionBackend + OptimizerOps> OptimizerOps for Fusion<B> {
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        [moment_1, moment_2]: [FloatTensor<Self>; 2],
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> [FloatTensor<Self>; 3] {
        let output = (param.shape.clone(), param.dtype);
        let mut inputs = vec![param, grad, moment_1, moment_2];
        inputs.extend(scale);
        queue::<B, 3>(Queued::AdamW(*step), "leanburn_adamw", inputs, [output.clone(), output.clone(), output])
    }

    fn adamw_steps(
        params: Vec<AdamWParam<Self>>,
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> Vec<[FloatTensor<Self>; 3]> {
        if params.is_empty() {
            return Vec::new();
        }
        let count = params.len();
        let outputs: Vec<_> =
            params.iter().flat_map(|p| [0; 3].map(|_| (p.param.shape.clone(), p.param.dtype))).collect();
        let mut inputs: Vec<_> =
            params.into_iter().flat_map(|AdamWParam { param, grad, moments: [m, v] }| [param, grad, m, v]).collect();
        inputs.extend(scale);
        let op = Queued::AdamWSteps(*step, count);
        let mut outputs = queue_custom_many::<B, _>("leanburn_adamw_steps", inputs, outputs, |desc| QueuedOp::<B> {
            desc,
            op,
            _backend: PhantomData,
        })
        .into_iter();
        (0..count).map(|_| [0; 3].map(|_| outputs.next().expect("three outputs per parameter"))).collect()
    }

    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        let [factor] =
            queue::<B, 1>(Queued::ClipFactor(max_norm), "leanburn_clip_factor", grads, [(Shape::new([1]), DType::F32)]);
        factor
    }
}
