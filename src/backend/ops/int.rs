//! [`IntTensorOps`] for [`Lean`]: all of them `B`'s.

use core::future::Future;
use core::ops::Range;

use burn_backend::distribution::Distribution;
use burn_backend::element::Scalar;
use burn_backend::ops::IntTensorOps;
use burn_backend::shape::Shape;
use burn_backend::slice::Slice;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{BoolDType, ExecutionError, FloatDType, IntDType, TensorData};

use super::forward::forward;
use crate::backend::{ChunkedConv, Lean};

impl<B: ChunkedConv> IntTensorOps<Self> for Lean<B> {
    fn int_into_data(tensor: IntTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        B::int_into_data(tensor)
    }

    forward! {
        fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self>;
        fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self>;
        fn int_device(tensor: &IntTensor<Self>) -> Device<Self>;
        fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self>;
        fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self>;
        fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self>;
        fn int_slice_assign(
            tensor: IntTensor<Self>,
            slices: &[Slice],
            value: IntTensor<Self>,
        ) -> IntTensor<Self>;
        fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self>;
        fn int_mask_where(
            tensor: IntTensor<Self>,
            mask: BoolTensor<Self>,
            value: IntTensor<Self>,
        ) -> IntTensor<Self>;
        fn int_mask_fill(
            tensor: IntTensor<Self>,
            mask: BoolTensor<Self>,
            value: Scalar,
        ) -> IntTensor<Self>;
        fn int_gather(
            dim: usize,
            tensor: IntTensor<Self>,
            indices: IntTensor<Self>,
        ) -> IntTensor<Self>;
        fn int_scatter_add(
            dim: usize,
            tensor: IntTensor<Self>,
            indices: IntTensor<Self>,
            value: IntTensor<Self>,
        ) -> IntTensor<Self>;
        fn int_scatter_nd(
            data: IntTensor<Self>,
            indices: IntTensor<Self>,
            values: IntTensor<Self>,
            reduction: IndexingUpdateOp,
        ) -> IntTensor<Self>;
        fn int_gather_nd(data: IntTensor<Self>, indices: IntTensor<Self>) -> IntTensor<Self>;
        fn int_select(
            tensor: IntTensor<Self>,
            dim: usize,
            indices: IntTensor<Self>,
        ) -> IntTensor<Self>;
        fn int_select_add(
            tensor: IntTensor<Self>,
            dim: usize,
            indices: IntTensor<Self>,
            value: IntTensor<Self>,
        ) -> IntTensor<Self>;
        fn int_repeat_dim(tensor: IntTensor<Self>, dim: usize, times: usize) -> IntTensor<Self>;
        fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self>;
        fn int_equal(
            lhs: IntTensor<Self>,
            rhs: IntTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_not_equal(
            lhs: IntTensor<Self>,
            rhs: IntTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_equal_elem(
            lhs: IntTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_not_equal_elem(
            lhs: IntTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_greater(
            lhs: IntTensor<Self>,
            rhs: IntTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_greater_elem(
            lhs: IntTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_greater_equal(
            lhs: IntTensor<Self>,
            rhs: IntTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_greater_equal_elem(
            lhs: IntTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_lower(
            lhs: IntTensor<Self>,
            rhs: IntTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_lower_elem(
            lhs: IntTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_lower_equal(
            lhs: IntTensor<Self>,
            rhs: IntTensor<Self>,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_lower_equal_elem(
            lhs: IntTensor<Self>,
            rhs: Scalar,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_add(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_add_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_powi(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_powi_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_powi_scalar_impl(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_clamp_min(tensor: IntTensor<Self>, min: Scalar) -> IntTensor<Self>;
        fn int_clamp_max(tensor: IntTensor<Self>, max: Scalar) -> IntTensor<Self>;
        fn int_clamp(tensor: IntTensor<Self>, min: Scalar, max: Scalar) -> IntTensor<Self>;
        fn int_sub(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_sub_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_mul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_mul_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_div(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_div_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_remainder(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_remainder_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn int_neg(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self>;
        fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self>;
        fn int_full(
            shape: Shape,
            fill_value: Scalar,
            device: &Device<Self>,
            dtype: IntDType,
        ) -> IntTensor<Self>;
        fn int_sum(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_sum_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_prod(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_prod_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_mean(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_mean_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_cumsum(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_cumprod(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_cummin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_cummax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_argmax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_argtopk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self>;
        fn int_topk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self>;
        fn int_argmin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_max(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_max_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_max_dim_with_indices(
            tensor: IntTensor<Self>,
            dim: usize,
        ) -> (IntTensor<Self>, IntTensor<Self>);
        fn int_max_abs(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_max_abs_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_min(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_min_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self>;
        fn int_min_dim_with_indices(
            tensor: IntTensor<Self>,
            dim: usize,
        ) -> (IntTensor<Self>, IntTensor<Self>);
        fn int_abs(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_transpose(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self>;
        fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self>;
        fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self>;
        fn int_random(
            shape: Shape,
            distribution: Distribution,
            device: &Device<Self>,
            dtype: IntDType,
        ) -> IntTensor<Self>;
        fn int_arange_step(
            range: Range<i64>,
            step: usize,
            device: &Device<Self>,
            dtype: IntDType,
        ) -> IntTensor<Self>;
        fn int_arange(range: Range<i64>, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self>;
        fn int_any(tensor: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn int_any_dim(
            tensor: IntTensor<Self>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_all(tensor: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn int_all_dim(
            tensor: IntTensor<Self>,
            dim: usize,
            out_dtype: BoolDType,
        ) -> BoolTensor<Self>;
        fn int_sign(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self>;
        fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self>;
        fn int_sort_with_indices(
            tensor: IntTensor<Self>,
            dim: usize,
            descending: bool,
        ) -> (IntTensor<Self>, IntTensor<Self>);
        fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self>;
        fn bitwise_and(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn bitwise_and_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn bitwise_or(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn bitwise_or_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn bitwise_xor(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn bitwise_xor_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn bitwise_not(tensor: IntTensor<Self>) -> IntTensor<Self>;
        fn bitwise_left_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn bitwise_left_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn bitwise_right_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self>;
        fn bitwise_right_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self>;
        fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self>;
        fn int_unfold(
            tensor: IntTensor<Self>,
            dim: usize,
            size: usize,
            step: usize,
        ) -> IntTensor<Self>;
    }
}
