//! [`ChunkedConv`] on Burn's fused backends (`Cuda`, `Wgpu`): leanburn's im2col / col2im
//! as Fusion custom operations.
//!
//! A fused backend does not run ops when they are called: it queues their intermediate
//! representation for its fuser and runs them later on the inner backend's handles. Each
//! pixel move is queued as one `CustomOpIr` (the way burn-vision 0.21 queues its own
//! kernels); when the queue runs it, the op takes its tensors' handles, calls the inner
//! backend's [`ChunkedConv`] (leanburn's kernels on a `CubeBackend`) and registers the
//! result under the output's id. The GEMMs around the pixel moves stay Burn's own fused
//! matmuls. The parameters that are not tensors (geometry, chunk) live in the queued
//! operation, not in the IR, as burn-vision's do.

use core::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::Shape;
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};
use leanburn_kernels::ConvGeometry;

use super::ChunkedConv;
use crate::backend::custom_op::queue_custom;

/// The pixel move one queued operation runs on the inner backend.
#[derive(Clone, Copy, Debug)]
enum PixelMove {
    Im2col,
    Col2im,
}

impl PixelMove {
    fn name(self) -> &'static str {
        match self {
            Self::Im2col => "leanburn_im2col",
            Self::Col2im => "leanburn_col2im",
        }
    }
}

#[derive(Debug)]
struct QueuedPixelMove<B> {
    desc: CustomOpIr,
    kind: PixelMove,
    geometry: ConvGeometry,
    batch_offset: usize,
    chunk: usize,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + ChunkedConv> Operation<B::FusionRuntime> for QueuedPixelMove<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let Self { geometry, batch_offset, chunk, .. } = *self;
        #[cfg(test)]
        RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.kind {
            PixelMove::Im2col => {
                let ([image], [columns]) = self.desc.as_fixed();
                let image = handles.get_float_tensor::<B>(image);
                let out = B::im2col(image, &geometry, batch_offset, chunk);
                handles.register_float_tensor::<B>(&columns.id, out);
            }
            PixelMove::Col2im => {
                let ([columns, image], [written]) = self.desc.as_fixed();
                let columns = handles.get_float_tensor::<B>(columns);
                // The image's handle is taken (not shared) when this op is its last use,
                // so the inner col2im may write into it; otherwise it copies.
                let image = handles.get_float_tensor::<B>(image);
                let out = B::col2im(columns, image, &geometry, batch_offset, chunk);
                handles.register_float_tensor::<B>(&written.id, out);
            }
        }
    }
}

/// Queues `kind` with `inputs`, producing one tensor of `shape`.
fn queue<B: FusionBackend + ChunkedConv>(
    kind: PixelMove,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    shape: Shape,
    geometry: &ConvGeometry,
    batch_offset: usize,
    chunk: usize,
) -> FloatTensor<Fusion<B>> {
    // The output has the image's element type: the last input.
    let dtype = inputs.last().expect("a pixel move has an image").dtype;
    let geometry = *geometry;
    let [output] = queue_custom::<B, _, 1>(kind.name(), inputs, [(shape, dtype)], |desc| QueuedPixelMove::<B> {
        desc,
        kind,
        geometry,
        batch_offset,
        chunk,
        _backend: PhantomData,
    });
    output
}

/// Over a fused backend, `Lean` runs the inner backend's pixel moves: leanburn's kernels
/// when the inner backend is a `CubeBackend`, with its workspace accounting.
impl<B: FusionBackend + ChunkedConv> ChunkedConv for Fusion<B> {
    fn im2col_copies() -> usize {
        B::im2col_copies()
    }

    fn im2col(
        image: FloatTensor<Self>,
        geometry: &ConvGeometry,
        batch_offset: usize,
        chunk: usize,
    ) -> FloatTensor<Self> {
        let shape = Shape::new([geometry.col_rows(), chunk * geometry.col_cols_per_image()]);
        queue::<B>(PixelMove::Im2col, vec![image], shape, geometry, batch_offset, chunk)
    }

    fn col2im(
        columns: FloatTensor<Self>,
        image: FloatTensor<Self>,
        geometry: &ConvGeometry,
        batch_offset: usize,
        chunk: usize,
    ) -> FloatTensor<Self> {
        let shape = image.shape.clone();
        queue::<B>(PixelMove::Col2im, vec![columns, image], shape, geometry, batch_offset, chunk)
    }
}

/// Queued pixel moves run so far (tests only): shows which path a stack took.
#[cfg(test)]
static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use burn::backend::wgpu::WgpuDevice;
    use burn::backend::{Autodiff, Wgpu};
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;
    use burn::tensor::{Distribution, Tensor};

    use super::RUNS;
    use crate::backend::Lean;
    use crate::device::CubeWgpu;

    /// conv2d forward and both gradients on `B`, waited for; the queued pixel moves run.
    fn conv_step<B: burn::tensor::backend::AutodiffBackend<Device = WgpuDevice>>(device: &WgpuDevice) -> usize {
        let before = RUNS.load(Ordering::SeqCst);
        let x = Tensor::<B, 4>::random([2, 3, 9, 9], Distribution::Normal(0.0, 1.0), device).require_grad();
        let weight = Tensor::<B, 4>::random([4, 3, 3, 3], Distribution::Normal(0.0, 0.1), device).require_grad();
        let grads =
            conv2d(x.clone(), weight.clone(), None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1)).sum().backward();
        let _ = (x.grad(&grads).unwrap().into_data(), weight.grad(&grads).unwrap().into_data());
        B::sync(device).unwrap();
        RUNS.load(Ordering::SeqCst) - before
    }

    /// Over the fused stack the pixel moves are queued as custom ops and run (forward
    /// im2col, input-gradient col2im, weight-gradient im2col); the control, the unfused
    /// stack, queues none, so the count tells the paths apart.
    #[test]
    fn lean_over_the_fused_stack_queues_leanburns_pixel_moves() {
        let device = WgpuDevice::default();
        assert_eq!(conv_step::<Autodiff<Lean<CubeWgpu>>>(&device), 0, "the unfused stack queues nothing");
        assert!(conv_step::<Autodiff<Lean<Wgpu>>>(&device) >= 3, "the fused stack ran fewer than 3 pixel moves");
    }
}
