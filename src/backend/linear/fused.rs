//! [`LinearOps`] on Burn's fused backends: where `Lean`'s GEMMs are queued (CUDA's
//! cuBLASLt, or `LEANBURN_GEMM=queued`), a linear layer's gradients as one Fusion custom
//! operation running the inner backend's GEMMs and column sums, where each would be an
//! operation of its own. Elsewhere Burn's ops, as before.

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::Shape;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::{burn_grads, gemm_grads, LinearGrads, LinearOps};
use crate::backend::bias_grad::BiasGradOps;
use crate::backend::custom_op::queue_custom_many;
use crate::backend::gemm::GemmOps;

#[cfg(test)]
thread_local! {
    /// Linear layers' gradients this thread queued as one custom operation: the tests'
    /// witness.
    pub(super) static QUEUED: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// Runs the inner backend's gradients on `[x?, weight?, output_grad]`, each output in the
/// order input, weight, bias of those asked for.
#[derive(Debug)]
struct QueuedLinearGrads<B> {
    desc: CustomOpIr,
    /// Which of `[x, weight]` are inputs (the weight's and the input's gradients asked for).
    given: [bool; 2],
    bias: bool,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + GemmOps + BiasGradOps> Operation<B::FusionRuntime> for QueuedLinearGrads<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let mut inputs = self.desc.inputs.iter().map(|input| handles.get_float_tensor::<B>(input));
        let [x, weight] = self.given.map(|given| given.then(|| inputs.next()).flatten());
        let output_grad = inputs.next().expect("queued with the output's gradient");
        let LinearGrads { x, weight, bias } = gemm_grads::<B>(x, weight, output_grad, self.bias);
        for (output, grad) in self.desc.outputs.iter().zip(x.into_iter().chain(weight).chain(bias)) {
            handles.register_float_tensor::<B>(&output.id, grad);
        }
    }
}

impl<B: FusionBackend + GemmOps + BiasGradOps> LinearOps for Fusion<B> {
    fn linear_grads(
        x: Option<FloatTensor<Self>>,
        weight: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        bias: bool,
    ) -> LinearGrads<Self> {
        if !Self::vendor_gemm(output_grad.client.device()) {
            return burn_grads::<Self>(x, weight, output_grad, bias);
        }
        let Some(outputs) = grad_shapes::<B>(&x, &weight, &output_grad, bias) else {
            // Fusion's GEMMs each, which say what is wrong with the shapes.
            return gemm_grads::<Self>(x, weight, output_grad, bias);
        };
        #[cfg(test)]
        QUEUED.with(|queued| queued.set(queued.get() + 1));
        let given = [x.is_some(), weight.is_some()];
        let inputs = x.into_iter().chain(weight).chain([output_grad]).collect();
        let queued =
            queue_custom_many::<B, _>("leanburn_linear_grads", inputs, outputs, |desc| QueuedLinearGrads::<B> {
                desc,
                given,
                bias,
                _backend: PhantomData,
            });
        // The input's gradient where the weight was given, the weight's where the input was.
        let mut grads = queued.into_iter();
        let [x, weight] = [given[1], given[0]].map(|given| given.then(|| grads.next()).flatten());
        LinearGrads { x, weight, bias: bias.then(|| grads.next()).flatten() }
    }
}

/// The shapes and type of the gradients asked for, in the order input, weight, bias; `None`
/// where the operands do not form a linear layer of one type (`weight` `[d_in, d_out]`,
/// `output_grad` `[..., d_out]` of at least two dimensions, `x` `[..., d_in]` with its rows),
/// or where nothing is asked for.
fn grad_shapes<B: FusionBackend>(
    x: &Option<FloatTensor<Fusion<B>>>,
    weight: &Option<FloatTensor<Fusion<B>>>,
    output_grad: &FloatTensor<Fusion<B>>,
    bias: bool,
) -> Option<Vec<(Shape, burn_backend::DType)>> {
    let dtype = output_grad.dtype;
    let grad = output_grad.shape.as_slice();
    let (&d_out, rows) = grad.split_last().filter(|(_, rows)| !rows.is_empty())?;
    let weight_in = match weight {
        Some(weight) => match weight.shape.as_slice() {
            &[d_in, width] if width == d_out && weight.dtype == dtype => Some(d_in),
            _ => return None,
        },
        None => None,
    };
    let x_in = match x {
        Some(x) => match x.shape.as_slice().split_last() {
            Some((&d_in, x_rows)) if x_rows == rows && x.dtype == dtype => Some(d_in),
            _ => return None,
        },
        None => None,
    };
    if let (Some(a), Some(b)) = (weight_in, x_in) {
        (a == b).then_some(())?;
    }
    let mut shapes = Vec::new();
    if let Some(d_in) = weight_in {
        shapes.push((Shape::from([rows, &[d_in]].concat()), dtype));
    }
    if let Some(d_in) = x_in {
        shapes.push((Shape::new([d_in, d_out]), dtype));
    }
    if bias {
        shapes.push((Shape::new([d_out]), dtype));
    }
    (!shapes.is_empty()).then_some(shapes)
}
