//! CubeCL kernels for leanburn's memory-bounded convolutions, its fused attention, its
//! transformer rows (LayerNorm, the LM head's loss, the embedding's and a bias's
//! gradients, GELU and its derivative, the residual add after a linear layer) and its optimizer (the AdamW update, the clipping factor), each with a
//! plain-Rust CPU reference that the tests compare it against.
//!
//! Layout (the classic im2col one, with the batch folded into the columns so one GEMM
//! covers a whole batch chunk):
//!
//! - image: `[batch, channels, height, width]`, any strides;
//! - columns: `[channels · kernel_h · kernel_w, chunk · out_h · out_w]`, row index
//!   `(c, ky, kx)`, column index `(n, oy, ox)`, any strides: CUDA's allocator pads each row
//!   of a fresh 2-D buffer to 512 bytes (its pitched layout), so both kernels index the
//!   columns by their strides, never by position in the buffer.
//!
//! Rows are ordered like the weight `[out_channels, in_channels/groups, kh, kw]`, so for
//! grouped convolution group `g` owns the contiguous rows of its channels.
//!
//! Kernel code here never touches Burn backend types; `leanburn::backend` launches it.

mod adamw;
mod attention;
mod col2im;
mod column_sums;
mod embedding_grad;
mod gelu;
mod geometry;
mod global_norm;
mod im2col;
mod layer_norm;
mod lm_head_loss;
mod reduce;
pub mod reference;
mod residual;
mod row_bias;
mod tensor_group;
mod vector;

pub use adamw::{
    adamw_group_size, adamw_in_place_kernel, adamw_kernel, launch_adamw, launch_adamw_in_place, AdamWMember,
    AdamWScalars, AdamWScalarsLaunch,
};
pub use attention::{
    attention_backward_dkdv_kernel, attention_backward_dq_kernel, attention_block_softmax_grad_kernel,
    attention_block_softmax_kernel, attention_forward_kernel, launch_attention_backward,
    launch_attention_block_softmax, launch_attention_block_softmax_grad, launch_attention_forward, supports_head_dim,
    tile_rows, AttentionShape, AttentionShapeLaunch, BlockDims, ScoreBlock, ScoreBlockLaunch, ROWS_PER_CUBE,
    SCORE_ROW_UNITS,
};
pub use col2im::{col2im_kernel, launch_col2im};
pub use column_sums::{
    column_sum_blocks, column_sums_kernel, launch_column_sums, whole_blocks, COLUMN_LANES, MAX_COLUMN_SUM_ROWS,
    MAX_COLUMN_SUM_VECTORS, ROW_LANES,
};
pub use embedding_grad::{embedding_grad_blocks, embedding_grad_kernel, launch_embedding_grad};
pub use gelu::{gelu_backward_kernel, gelu_kernel, launch_gelu, launch_gelu_backward};
pub use geometry::{ConvGeometry, ConvGeometryArgs, ConvGeometryArgsLaunch};
pub use global_norm::{
    clip_factor_kernel, launch_clip_factor, launch_squares, squares_group_size, squares_kernel, squares_partials,
    NORM_EPSILON, NORM_UNITS,
};
pub use im2col::{im2col_kernel, im2col_vector_size, launch_im2col};
pub use layer_norm::{
    launch_layer_norm_backward, launch_layer_norm_forward, launch_layer_norm_param_grads,
    launch_layer_norm_param_grads_finish, layer_norm_backward_kernel, layer_norm_blocks, layer_norm_forward_kernel,
    layer_norm_param_grads_kernel, ROWS_PER_PARTIAL, ROW_UNITS,
};
pub use lm_head_loss::{launch_lm_head_loss_rows, lm_head_loss_rows_kernel, LOSS_ROW_UNITS};
pub use residual::{launch_residual_add, residual_add_kernel};
pub use row_bias::RowBias;
pub use vector::vector_width;
