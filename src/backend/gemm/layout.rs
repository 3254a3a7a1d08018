//! Burn's row-major, strided, batched `lhs · rhs` as one call of a column-major GEMM
//! (cuBLASLt's), without copies where the strides allow.
//!
//! Burn multiplies `lhs` `[.., m, k]` by `rhs` `[.., k, n]` into a contiguous `[.., m, n]`,
//! the batch dimensions broadcast. A column-major library reads a row-major matrix as its
//! transpose, so `out = lhs · rhs` is computed as `outᵀ = rhsᵀ · lhsᵀ`: the library's `A`
//! is `rhs`, its `B` is `lhs`, its `m × n` result is `n × m`. A row-major operand with unit
//! column stride is its transpose stored column-major (no transpose op, leading dimension
//! its row stride); one with unit row stride (a transposed view, as autodiff's backward
//! makes) is stored column-major as it is (a transpose op, leading dimension its column
//! stride). Anything else needs a copy. The batch dimensions fold into one batch stride
//! when each operand's strides over them are those of one flat index (a broadcast operand
//! has stride 0); an operand whose batch does not, but whose contiguous copy's would (the
//! heads attention splits from each row), is copied too. Until 2026-11-30 such products
//! fell back to CubeCL's matmul: a gpt2-small step on an H200 ran its attention's 72
//! products there (CubeCL's per-kernel profile).

use burn_backend::Shape;

/// One operand as the column-major library reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Operand {
    /// Whether the library transposes the stored matrix (`CUBLAS_OP_T`).
    pub transpose: bool,
    /// Rows of the stored column-major matrix (before the transpose op).
    pub rows: u64,
    /// Its columns.
    pub cols: u64,
    /// Elements between the starts of two stored columns (at least `rows`, at least 1).
    pub ld: i64,
    /// Elements between two batch entries; 0 for a broadcast operand.
    pub batch_stride: i64,
}

/// `D = op(A) · op(B)`, column-major, `batch` times: `D` is `m × n`, `op(A)` `m × k`,
/// `op(B)` `k × n`. `a` reads Burn's `rhs`, `b` Burn's `lhs`, `d` the contiguous output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GemmLayout {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub a: Operand,
    pub b: Operand,
    pub d: Operand,
}

/// Why a product has no copy-free layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LayoutRefusal {
    /// Burn's `lhs` has neither a unit row nor a unit column stride: copy it contiguous.
    LhsStrides,
    /// The same for `rhs`.
    RhsStrides,
    /// `lhs`'s batch dimensions do not step through one stride where a contiguous copy's
    /// would (heads split from a row: `[b, t, h, d]` viewed as `[b, h, t, d]`, as attention
    /// reads its queries, keys and values): copy it contiguous.
    LhsBatch,
    /// The same for `rhs`.
    RhsBatch,
    /// The batch dimensions do not fold into one stride even in contiguous copies (a
    /// partly broadcast batch, ranks or batch sizes that do not broadcast), or a dimension
    /// is empty: not for this path.
    Batch,
}

/// A strided view: its shape and its strides in elements.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View<'a> {
    pub shape: &'a [usize],
    pub strides: &'a [usize],
}

impl<'a> View<'a> {
    pub(crate) fn new(shape: &'a Shape, strides: &'a [usize]) -> Self {
        Self { shape: shape.as_slice(), strides }
    }
}

/// The output shape of Burn's `lhs · rhs` (the batch broadcast), if the shapes multiply.
pub(crate) fn output_shape(lhs: &[usize], rhs: &[usize]) -> Option<Vec<usize>> {
    let rank = lhs.len();
    if rank < 2 || rhs.len() != rank || lhs[rank - 1] != rhs[rank - 2] {
        return None;
    }
    let mut shape = Vec::with_capacity(rank);
    for (&l, &r) in lhs[..rank - 2].iter().zip(&rhs[..rank - 2]) {
        shape.push(match (l, r) {
            (l, r) if l == r => l,
            (1, r) => r,
            (l, 1) => l,
            _ => return None,
        });
    }
    shape.extend([lhs[rank - 2], rhs[rank - 1]]);
    Some(shape)
}

/// The column-major layout of `lhs · rhs`, or why there is none without a copy.
pub(crate) fn gemm_layout(lhs: View<'_>, rhs: View<'_>) -> Result<GemmLayout, LayoutRefusal> {
    let out = output_shape(lhs.shape, rhs.shape).ok_or(LayoutRefusal::Batch)?;
    if out.contains(&0) || lhs.shape[lhs.shape.len() - 1] == 0 {
        return Err(LayoutRefusal::Batch);
    }
    let rank = out.len();
    let (m, n, k) = (out[rank - 2], out[rank - 1], lhs.shape[rank - 1]);
    let batch_dims = &out[..rank - 2];
    let lhs_batch =
        batch_stride(batch_dims, lhs).ok_or_else(|| batch_refusal(batch_dims, lhs, LayoutRefusal::LhsBatch))?;
    let rhs_batch =
        batch_stride(batch_dims, rhs).ok_or_else(|| batch_refusal(batch_dims, rhs, LayoutRefusal::RhsBatch))?;
    // The library's A: op(A) is n × k with op(A)(j, p) = rhs[p, j].
    let a = operand(n, k, matrix_strides(rhs), rhs_batch).ok_or(LayoutRefusal::RhsStrides)?;
    // Its B: op(B) is k × m with op(B)(p, i) = lhs[i, p].
    let b = operand(k, m, matrix_strides(lhs), lhs_batch).ok_or(LayoutRefusal::LhsStrides)?;
    let d = Operand { transpose: false, rows: n as u64, cols: m as u64, ld: n as i64, batch_stride: (m * n) as i64 };
    let batch = batch_dims.iter().product::<usize>() as u64;
    Ok(GemmLayout { m: n as u64, n: m as u64, k: k as u64, batch, a, b, d })
}

/// `(row stride, column stride)` of the view's last two dimensions, a dimension of size 1
/// given the stride that suits the library best (it is never stepped over).
fn matrix_strides(view: View<'_>) -> (usize, usize) {
    let rank = view.shape.len();
    let (rows, cols) = (view.shape[rank - 2], view.shape[rank - 1]);
    let (row_stride, col_stride) = (view.strides[rank - 2], view.strides[rank - 1]);
    match (rows, cols) {
        (1, 1) => (1, 1),
        (_, 1) => (row_stride, 1),
        (1, _) if col_stride == 1 => (cols, 1),
        (1, _) => (1, col_stride),
        _ => (row_stride, col_stride),
    }
}

/// The operand whose `op(X)` is `rows × cols` with `op(X)(r, c)` = the row-major matrix's
/// element `(c, r)`, from that matrix's strides (it is `cols × rows`).
fn operand(rows: usize, cols: usize, (row_stride, col_stride): (usize, usize), batch_stride: i64) -> Option<Operand> {
    let (transpose, stored_rows, stored_cols, ld) = if col_stride == 1 {
        // Element (c, r) at c·row_stride + r: stored column-major as rows × cols, ld row_stride.
        (false, rows, cols, row_stride)
    } else if row_stride == 1 {
        // At c + r·col_stride: stored as cols × rows, ld col_stride, transposed by the library.
        (true, cols, rows, col_stride)
    } else {
        return None;
    };
    if ld < stored_rows.max(1) {
        return None;
    }
    Some(Operand { transpose, rows: stored_rows as u64, cols: stored_cols as u64, ld: ld as i64, batch_stride })
}

/// Why `view`'s batch does not fold: `copy_helps` where a contiguous copy's would, else
/// [`LayoutRefusal::Batch`].
fn batch_refusal(batch_dims: &[usize], view: View<'_>, copy_helps: LayoutRefusal) -> LayoutRefusal {
    let strides = contiguous_strides(view.shape);
    match batch_stride(batch_dims, View { shape: view.shape, strides: &strides }) {
        Some(_) => copy_helps,
        None => LayoutRefusal::Batch,
    }
}

/// The one stride that steps `view` through the flat index of the output's batch
/// dimensions `batch_dims` (0 when `view` is broadcast over all of them), if there is one.
fn batch_stride(batch_dims: &[usize], view: View<'_>) -> Option<i64> {
    // The view's stride for each output batch dimension: 0 where it is broadcast.
    let strides = batch_dims.iter().enumerate().map(|(dim, &size)| {
        let own = view.shape[dim];
        (size, if own == 1 { 0 } else { view.strides[dim] })
    });
    // Dimensions of size 1 are never stepped over; the others must nest.
    let stepped: Vec<(usize, usize)> = strides.filter(|&(size, _)| size > 1).collect();
    let nested = stepped.windows(2).all(|pair| pair[0].1 == pair[1].1 * pair[1].0);
    if !nested {
        return None;
    }
    Some(stepped.last().map_or(0, |&(_, stride)| stride as i64))
}

/// How many operands of `lhs · rhs` the vendor's GEMM copies contiguous before it finds a
/// layout, as `cublaslt`'s call does (the refused operand copied, the layout asked again):
/// 0, 1 or 2; `None` where even contiguous copies have none (the backend's own matmul then
/// takes the product).
pub(crate) fn operand_copies(lhs: View<'_>, rhs: View<'_>) -> Option<usize> {
    let (lhs_contiguous, rhs_contiguous) = (contiguous_strides(lhs.shape), contiguous_strides(rhs.shape));
    let mut copied = [false; 2];
    loop {
        let lhs_view = if copied[0] { View { shape: lhs.shape, strides: &lhs_contiguous } } else { lhs };
        let rhs_view = if copied[1] { View { shape: rhs.shape, strides: &rhs_contiguous } } else { rhs };
        match gemm_layout(lhs_view, rhs_view) {
            Ok(_) => return Some(copied.iter().filter(|&&copy| copy).count()),
            Err(LayoutRefusal::LhsStrides | LayoutRefusal::LhsBatch) if !is_contiguous(lhs_view) => copied[0] = true,
            Err(LayoutRefusal::RhsStrides | LayoutRefusal::RhsBatch) if !is_contiguous(rhs_view) => copied[1] = true,
            Err(_) => return None,
        }
    }
}

/// Row-major contiguous strides of `shape`.
fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for dim in (0..shape.len().saturating_sub(1)).rev() {
        strides[dim] = strides[dim + 1] * shape[dim + 1];
    }
    strides
}

/// Whether `view` has row-major contiguous strides (Burn's test, which the copy before
/// cuBLASLt's call asks: strict, dimensions of size 1 too).
fn is_contiguous(view: View<'_>) -> bool {
    view.strides == contiguous_strides(view.shape).as_slice()
}
