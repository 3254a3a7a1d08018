//! [`OptimizerOps`] on Burn's fused backends (`Cuda`, `Wgpu`): the inner backend's update
//! and clipping factor (its kernels on CubeCL) as Fusion custom operations, as the
//! attention kernels are (`backend/attention/fused.rs`).

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::{AdamWStep, OptimizerOps};

/// Which op one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum Queued {
    /// [`OptimizerOps::adamw_step`]: inputs param, grad, both moments and maybe the scale.
    AdamW(AdamWStep),
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
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|tensor| tensor.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    let queued = QueuedOp::<B> { desc: desc.clone(), op, _backend: PhantomData };
    client.register(streams, OperationIr::Custom(desc), queued).outputs()
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

    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        let [factor] =
            queue::<B, 1>(Queued::ClipFactor(max_norm), "leanburn_clip_factor", grads, [(Shape::new([1]), DType::F32)]);
        factor
    }
}
