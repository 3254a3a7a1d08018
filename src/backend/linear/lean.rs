//! [`LinearOps`] on `Lean<B>`: `B`'s gradients as one op where `B`'s GEMMs are the vendor's
//! (or queued as on CUDA), `Lean`'s own three ops elsewhere.

use burn_backend::tensor::FloatTensor;

use super::{burn_grads, LinearGrads, LinearOps};
use crate::backend::conv::ChunkedConv;
use crate::backend::Lean;

impl<B: ChunkedConv> LinearOps for Lean<B> {
    fn linear_grads(
        x: Option<FloatTensor<Self>>,
        weight: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        bias: bool,
    ) -> LinearGrads<Self> {
        if !B::vendor_gemm(&B::float_device(&output_grad)) {
            return burn_grads::<Self>(x, weight, output_grad, bias);
        }
        let LinearGrads { x, weight, bias } = B::linear_grads(x, weight, output_grad, bias);
        LinearGrads { x, weight, bias }
    }
}
