//! [`GemmOps`] on Burn's fused backends: where the inner backend runs the vendor's GEMM,
//! one Fusion custom operation that runs the inner backend's `gemm` on its inputs' handles
//! when the stream executes; elsewhere Fusion's own matmul (which it may fuse with the
//! element-wise ops around it), as before.

use core::marker::PhantomData;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::Shape;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use super::layout::output_shape;
use super::{gemm_fused_adds, leading_ones, transposed_where, GemmOps};
use crate::backend::custom_op::queue_custom;
use crate::backend::switch::{env_is, Switch};

#[derive(Debug)]
struct QueuedGemm<B> {
    desc: CustomOpIr,
    /// What a third input is: `lhs · rhs + input`'s bias or sum.
    addend: Addend,
    /// Whether `lhs` and `rhs` are multiplied transposed (their last two dimensions).
    transposed: [bool; 2],
    _backend: PhantomData<B>,
}

/// The third input of a queued GEMM, if any.
#[derive(Clone, Copy, Debug)]
enum Addend {
    None,
    /// `[n]`, added to every row ([`GemmOps::gemm_bias`]).
    Bias,
    /// Of the product's shape ([`GemmOps::gemm_accumulate`]).
    Sum,
}

impl<B: FusionBackend + GemmOps> Operation<B::FusionRuntime> for QueuedGemm<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        #[cfg(test)]
        EXECUTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let operands = [0, 1].map(|i| handles.get_float_tensor::<B>(&self.desc.inputs[i]));
        let [lhs, rhs] = transposed_where::<B>(operands, self.transposed);
        let product = match self.addend {
            Addend::None => B::gemm(lhs, rhs),
            Addend::Bias => B::gemm_bias(lhs, rhs, handles.get_float_tensor::<B>(&self.desc.inputs[2])),
            Addend::Sum => B::gemm_accumulate(handles.get_float_tensor::<B>(&self.desc.inputs[2]), lhs, rhs),
        };
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, product);
    }
}

impl<B: FusionBackend + GemmOps> GemmOps for Fusion<B> {
    fn vendor_gemm(device: &Self::Device) -> bool {
        B::vendor_gemm(device) || queue_gemm()
    }

    fn gemm(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gemm_transposed(lhs, rhs, [false, false])
    }

    /// One custom operation that takes the transposed views of its operands itself.
    fn gemm_transposed(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, transposed: [bool; 2]) -> FloatTensor<Self> {
        let queued = Self::vendor_gemm(lhs.client.device());
        let lhs_dims = viewed(lhs.shape.as_slice(), transposed[0]);
        let rhs_dims = viewed(rhs.shape.as_slice(), transposed[1]);
        match output_shape(&lhs_dims, &rhs_dims) {
            Some(shape) if queued && lhs.dtype == rhs.dtype => {
                let output = (Shape::from(shape), lhs.dtype);
                queue_gemm_op::<B>("leanburn_gemm", vec![lhs, rhs], output, (Addend::None, transposed))
            }
            // Fusion's matmul, which also says what is wrong with shapes that do not multiply.
            _ => {
                let [lhs, rhs] = transposed_where::<Self>([lhs, rhs], transposed);
                <Self as FloatTensorOps<Self>>::float_matmul(lhs, rhs)
            }
        }
    }

    /// One custom operation where the GEMMs are queued: the inner backend's `gemm_bias`
    /// (cuBLASLt adding the bias in its epilogue where [`gemm_fused_adds`], else its GEMM
    /// and add), where the GEMM, the bias's reshape and Fusion's add would be three
    /// operations on the stream. Elsewhere the GEMM and Fusion's add, which Fusion may fuse
    /// with the element-wise ops after it.
    fn gemm_bias(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        let queued = Self::vendor_gemm(lhs.client.device());
        let shape = output_shape(lhs.shape.as_slice(), rhs.shape.as_slice());
        let same_type = lhs.dtype == rhs.dtype && bias.dtype == lhs.dtype;
        match shape {
            Some(shape) if queued && same_type && bias.shape.as_slice() == [shape[shape.len() - 1]] => {
                let output = (Shape::from(shape), lhs.dtype);
                queue_gemm_op::<B>("leanburn_gemm_bias", vec![lhs, rhs, bias], output, (Addend::Bias, [false; 2]))
            }
            _ => {
                let rank = lhs.shape.num_dims();
                let product = Self::gemm(lhs, rhs);
                <Self as FloatTensorOps<Self>>::float_add(product, leading_ones::<Self>(bias, rank))
            }
        }
    }

    /// One custom operation where cuBLASLt adds `sum` as its `C`; elsewhere the GEMM and
    /// Fusion's add.
    fn gemm_accumulate(sum: FloatTensor<Self>, lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        let fused = queue_addend::<B>(lhs.client.device());
        let shape = output_shape(lhs.shape.as_slice(), rhs.shape.as_slice());
        let same_type = lhs.dtype == rhs.dtype && sum.dtype == lhs.dtype;
        match shape {
            Some(shape) if fused && same_type && sum.shape.as_slice() == shape.as_slice() => {
                let output = (Shape::from(shape), lhs.dtype);
                queue_gemm_op::<B>("leanburn_gemm_accumulate", vec![lhs, rhs, sum], output, (Addend::Sum, [false; 2]))
            }
            _ => <Self as FloatTensorOps<Self>>::float_add(sum, Self::gemm(lhs, rhs)),
        }
    }
}

/// One queued GEMM of `inputs` (`lhs`, `rhs`, and the addend's tensor, if any) into
/// `output`, the operands transposed where the flags say.
fn queue_gemm_op<B: FusionBackend + GemmOps>(
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    output: (Shape, burn_backend::DType),
    (addend, transposed): (Addend, [bool; 2]),
) -> FloatTensor<Fusion<B>> {
    let [product] = queue_custom::<B, _, 1>(name, inputs, [output], |desc| QueuedGemm::<B> {
        desc,
        addend,
        transposed,
        _backend: PhantomData,
    });
    product
}

/// `dims` with the last two swapped where `transposed`.
fn viewed(dims: &[usize], transposed: bool) -> Vec<usize> {
    let mut dims = dims.to_vec();
    let rank = dims.len();
    if transposed && rank >= 2 {
        dims.swap(rank - 2, rank - 1);
    }
    dims
}

/// Queued GEMMs executed, for the tests' control.
#[cfg(test)]
pub(super) static EXECUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether every GEMM is queued as on CUDA on a backend without the vendor's GEMM (the
/// backend's own matmul inside the custom operation): `LEANBURN_GEMM=queued`, read once,
/// which also makes [`GemmOps::vendor_gemm`] true, so that the linear layers and the
/// attention take their CUDA paths. A diagnostic: CUDA's step structure (its ops and
/// launches) on wgpu, to count without a GPU. Or a test's request, so that CI runs the
/// custom operation over wgpu.
fn queue_gemm() -> bool {
    static QUEUED: Switch = Switch::unset();
    QUEUED.get(|| env_is("LEANBURN_GEMM", "queued")) || queue_gemm_in_test()
}

/// Whether the GEMM is queued with its addend as one custom operation: where the vendor's
/// GEMM adds it ([`gemm_fused_adds`]), or, in a test, always.
fn queue_addend<B: GemmOps>(device: &B::Device) -> bool {
    queue_gemm_in_test() || ((B::vendor_gemm(device) || queue_gemm()) && gemm_fused_adds())
}

#[cfg(test)]
fn queue_gemm_in_test() -> bool {
    super::tests::QUEUE_GEMM.with(|queue| queue.get())
}

#[cfg(not(test))]
fn queue_gemm_in_test() -> bool {
    false
}
