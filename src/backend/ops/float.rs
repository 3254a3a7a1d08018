//! [`FloatTensorOps`] for [`Lean`]: all of them `B`'s.

use core::future::Future;

use burn_backend::distribution::Distribution;
use burn_backend::element::Scalar;
use burn_backend::ops::{FloatTensorOps, GridSampleOptions};
use burn_backend::shape::Shape;
use burn_backend::slice::Slice;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{BoolDType, ExecutionError, FloatDType, IntDType, TensorData};

use super::forward::forward;
use crate::backend::{ChunkedConv, Lean};

impl<B: ChunkedConv> FloatTensorOps<Self> for Lean<B> {
    // Returns `B`'s future as is: no extra state machine, and its `Send` is `B`'s promise.
    fn float_into_data(tensor: FloatTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        B::float_into_data(tensor)
    }

    /// Every product on `B`'s GEMM: the vendor's where `B` has it (cuBLASLt on CUDA).
    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        B::gemm(lhs, rhs)
    }

    forward! {
        fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self>;
        fn float_random(
            shape: Shape,
            distribution: Distribution,
            device: &Device<Self>,
            dtype: FloatDType,
        ) -> FloatTensor<Self>;
        fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_full(
            shape: Shape,
            fill_value: Scalar,
            device: &Device<Self>,
            dtype: FloatDType,
        ) -> FloatTensor<Self>;
        fn float_device(tensor: &FloatTensor<Self>) -> Device<Self>;
        fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self>;
        fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self>;
        fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_repeat_dim(
            tensor: FloatTensor<Self>,
            dim: usize,
            times: usize,
        ) -> FloatTensor<Self>;
        fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_add_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_clamp_min(tensor: FloatTensor<Self>, min: Scalar) -> FloatTensor<Self>;
        fn float_clamp_max(tensor: FloatTensor<Self>, max: Scalar) -> FloatTensor<Self>;
        fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self>;
        fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_remainder(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_cross(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            dim: usize,
        ) -> FloatTensor<Self>;
        fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_transpose(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_swap_dims(
            tensor: FloatTensor<Self>,
            dim1: usize,
            dim2: usize,
        ) -> FloatTensor<Self>;
        fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self>;
        fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self>;
        fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self>;
        fn float_gather(
            dim: usize,
            tensor: FloatTensor<Self>,
            indices: IntTensor<Self>,
        ) -> FloatTensor<Self>;
        fn float_scatter_add(
            dim: usize,
            tensor: FloatTensor<Self>,
            indices: IntTensor<Self>,
            value: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn float_scatter_nd(
            data: FloatTensor<Self>,
            indices: IntTensor<Self>,
            values: FloatTensor<Self>,
            reduction: IndexingUpdateOp,
        ) -> FloatTensor<Self>;
        fn float_gather_nd(data: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn float_select(
            tensor: FloatTensor<Self>,
            dim: usize,
            indices: IntTensor<Self>,
        ) -> FloatTensor<Self>;
        fn float_select_add(
            tensor: FloatTensor<Self>,
            dim: usize,
            indices: IntTensor<Self>,
            value: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self>;
        fn float_slice_assign(
            tensor: FloatTensor<Self>,
            slices: &[Slice],
            value: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn float_mask_where(
            tensor: FloatTensor<Self>,
            mask: BoolTensor<Self>,
            value: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn float_mask_fill(
            tensor: FloatTensor<Self>,
            mask: BoolTensor<Self>,
            value: Scalar,
        ) -> FloatTensor<Self>;
        fn float_equal(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_not_equal(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_equal_elem(
            lhs: FloatTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_not_equal_elem(
            lhs: FloatTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_greater(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_greater_elem(
            lhs: FloatTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_greater_equal(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_greater_equal_elem(
            lhs: FloatTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_lower(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_lower_elem(
            lhs: FloatTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_lower_equal(
            lhs: FloatTensor<Self>,
            rhs: FloatTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_lower_equal_elem(
            lhs: FloatTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_detach(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_set_require_grad(
            tensor: FloatTensor<Self>,
            require_grad: bool,
        ) -> FloatTensor<Self>;
        fn float_is_require_grad(tensor: &FloatTensor<Self>) -> bool;
        fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_prod(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_prod_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_mean(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cumsum(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cumprod(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cummin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cummax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_exp(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_log(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_log1p(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_powf(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_powi(lhs: FloatTensor<Self>, rhs: IntTensor<Self>) -> FloatTensor<Self>;
        fn float_powi_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_powi_scalar_impl(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_powf_scalar(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self>;
        fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self>;
        fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_tan(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cosh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sinh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_acos(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_acosh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_asin(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_asinh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_atan(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_atanh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_atan2(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_round(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_floor(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_ceil(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_trunc(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self>;
        fn float_argmax(
            tensor: FloatTensor<Self>,
            dim: usize,
            out_dtype: IntDType,
        ) -> IntTensor<Self>;
        fn float_argtopk(
            tensor: FloatTensor<Self>,
            dim: usize,
            k: usize,
            out_dtype: IntDType,
        ) -> IntTensor<Self>;
        fn float_topk(tensor: FloatTensor<Self>, dim: usize, k: usize) -> FloatTensor<Self>;
        fn float_argmin(
            tensor: FloatTensor<Self>,
            dim: usize,
            out_dtype: IntDType,
        ) -> IntTensor<Self>;
        fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_max_dim_with_indices(
            tensor: FloatTensor<Self>,
            dim: usize,
            indices_dtype: IntDType,
        ) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_min_dim_with_indices(
            tensor: FloatTensor<Self>,
            dim: usize,
            indices_dtype: IntDType,
        ) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_any(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_any_dim(
            tensor: FloatTensor<Self>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_all(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_all_dim(
            tensor: FloatTensor<Self>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn float_sign(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self>;
        fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self>;
        fn float_sort_with_indices(
            tensor: FloatTensor<Self>,
            dim: usize,
            descending: bool,
            indices_dtype: IntDType,
        ) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_argsort(
            tensor: FloatTensor<Self>,
            dim: usize,
            descending: bool,
            out_dtype: IntDType,
        ) -> IntTensor<Self>;
        fn float_grid_sample_2d(
            tensor: FloatTensor<Self>,
            grid: FloatTensor<Self>,
            options: GridSampleOptions,
        ) -> FloatTensor<Self>;
        fn float_unfold(
            tensor: FloatTensor<Self>,
            dim: usize,
            size: usize,
            step: usize,
        ) -> FloatTensor<Self>;
        fn float_is_nan(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_is_inf(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
    }
}
