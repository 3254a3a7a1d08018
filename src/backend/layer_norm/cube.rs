//! [`LayerNormOps`] on CubeCL backends: leanburn's LayerNorm kernels.

use burn_backend::ops::ModuleOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{
    launch_layer_norm_backward, launch_layer_norm_forward, launch_layer_norm_param_grads,
    launch_layer_norm_param_grads_finish, layer_norm_blocks,
};

use super::{composed_backward, composed_forward, LayerNormOps};
use crate::backend::{contiguous_of, has_kernels};

/// `(rows, d)` of `x` viewed as `[rows, d]`.
fn rows<R: CubeRuntime>(x: &CubeTensor<R>) -> (usize, usize) {
    let shape = x.meta.shape();
    let d = shape[shape.num_dims() - 1];
    (shape.num_elements() / d.max(1), d)
}

/// Whether the kernels take `x` with `gamma` (of its last dimension's size and its type).
fn fits<R: CubeRuntime>(x: &CubeTensor<R>, gamma: &CubeTensor<R>) -> bool {
    let (rows, d) = rows(x);
    has_kernels(x.dtype) && gamma.dtype == x.dtype && rows > 0 && d > 0 && gamma.meta.num_elements() == d
}

impl<R, F, I, BT> LayerNormOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn lean_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        if !fits(&x, &gamma) {
            return Self::layer_norm(x, gamma, beta, epsilon);
        }
        let [y, _, _] = Self::lean_layer_norm_forward(x, gamma, beta, epsilon);
        y
    }

    fn lean_layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        if !fits(&x, &gamma) {
            return composed_forward::<Self>(x, gamma, beta, epsilon);
        }
        let (dtype, shape) = (x.dtype, x.meta.shape().clone());
        let (rows, d) = rows(&x);
        let (client, device) = (x.client.clone(), x.device.clone());
        let x = contiguous_of(x, dtype);
        let gamma = contiguous_of(gamma, dtype);
        let has_beta = beta.is_some();
        // Without β the kernel reads none; γ stands in for the binding.
        let beta = beta.map_or_else(|| gamma.clone(), |beta| contiguous_of(beta, dtype));
        let y = empty_device_contiguous_dtype(client.clone(), device.clone(), shape, dtype);
        let stat = || empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::new([rows]), DType::F32);
        let (mean, rstd) = (stat(), stat());
        // SAFETY: contiguous inputs of the shapes the kernel reads, outputs just allocated.
        unsafe {
            with_float_type!(dtype, E => launch_layer_norm_forward::<R, E>(
                &client,
                [x.into_tensor_arg(), gamma.into_tensor_arg(), beta.into_tensor_arg()],
                [y.clone().into_tensor_arg(), mean.clone().into_tensor_arg(), rstd.clone().into_tensor_arg()],
                rows,
                d,
                epsilon as f32,
                has_beta,
            ));
        }
        [y, mean, rstd]
    }

    fn lean_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        if !fits(&x, &gamma) {
            return composed_backward::<Self>(x, gamma, mean, rstd, grad);
        }
        let (dtype, shape) = (x.dtype, x.meta.shape().clone());
        let (rows, d) = rows(&x);
        let (client, device) = (x.client.clone(), x.device.clone());
        let [x, gamma, grad] = [x, gamma, grad].map(|t| contiguous_of(t, dtype));
        let [mean, rstd] = [mean, rstd].map(|t| contiguous_of(t, DType::F32));
        let empty =
            |shape: Shape, dtype: DType| empty_device_contiguous_dtype(client.clone(), device.clone(), shape, dtype);
        let dx = empty(shape, dtype);
        let (dgamma, dbeta) = (empty(Shape::new([d]), dtype), empty(Shape::new([d]), dtype));
        let blocks = layer_norm_blocks(rows);
        let inputs = || [x.clone(), mean.clone(), rstd.clone(), grad.clone()].map(|t| t.into_tensor_arg());
        // SAFETY: contiguous inputs of the forward's shapes, outputs and partial sums just
        // allocated with the shapes the kernels write.
        unsafe {
            with_float_type!(dtype, E => {
                launch_layer_norm_backward::<R, E>(
                    &client,
                    [x.clone(), gamma, mean.clone(), rstd.clone(), grad.clone()].map(|t| t.into_tensor_arg()),
                    dx.clone().into_tensor_arg(),
                    rows,
                    d,
                );
                if blocks == 1 {
                    let sums = [dgamma.clone(), dbeta.clone()].map(|t| t.into_tensor_arg());
                    launch_layer_norm_param_grads::<R, E, E>(&client, inputs(), sums, rows, d);
                } else {
                    let partials = [0; 2].map(|_| empty(Shape::new([blocks, d]), DType::F32));
                    let sums = partials.clone().map(|t| t.into_tensor_arg());
                    launch_layer_norm_param_grads::<R, E, f32>(&client, inputs(), sums, rows, d);
                    launch_layer_norm_param_grads_finish::<R, E>(
                        &client,
                        partials.map(|t| t.into_tensor_arg()),
                        [dgamma.clone(), dbeta.clone()].map(|t| t.into_tensor_arg()),
                        blocks,
                        d,
                    );
                }
            });
        }
        [dx, dgamma, dbeta]
    }

    fn fused_layer_norm(dtype: DType) -> bool {
        has_kernels(dtype)
    }
}
