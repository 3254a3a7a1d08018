//! leanburn's kernels on Burn's fused backends (`Cuda`, `Wgpu`): each op is queued as one
//! Fusion custom operation, which runs the inner backend's op on its inputs' handles when
//! the stream executes (the convolutions' pixel moves, the attention, the optimizer's
//! update and clipping factor, LayerNorm).

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend};
use burn_ir::{CustomOpIr, OperationIr, OperationOutput, TensorIr};

/// Queues the custom operation `name` on `inputs` (at least one), producing `N` float
/// tensors of these shapes and types; `operation` builds what executes it from its
/// description.
pub(crate) fn queue_custom<B, O, const N: usize>(
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: [(Shape, DType); N],
    operation: impl FnOnce(CustomOpIr) -> O,
) -> [FloatTensor<Fusion<B>>; N]
where
    B: FusionBackend,
    O: Operation<B::FusionRuntime> + 'static,
{
    queue_custom_many::<B, O>(name, inputs, outputs.into(), operation).outputs()
}

/// [`queue_custom`] for a number of outputs known only when it runs.
pub(crate) fn queue_custom_many<B, O>(
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: Vec<(Shape, DType)>,
    operation: impl FnOnce(CustomOpIr) -> O,
) -> Vec<FloatTensor<Fusion<B>>>
where
    B: FusionBackend,
    O: Operation<B::FusionRuntime> + 'static,
{
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|tensor| tensor.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    client.register(streams, OperationIr::Custom(desc.clone()), operation(desc))
}
