//! [`TransactionOps`] for [`Lean`]: `B`'s batched read-back.
//!
//! The default `tr_execute` reads tensors back one by one; `B`'s (CubeCL, Fusion) batches
//! them into a single device round trip, which is the point of a transaction.

use core::future::Future;

use burn_backend::ops::{TransactionOps, TransactionPrimitive, TransactionPrimitiveData};
use burn_backend::ExecutionError;

use crate::backend::{ChunkedConv, Lean};

impl<B: ChunkedConv> TransactionOps<Self> for Lean<B> {
    fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> impl Future<Output = Result<TransactionPrimitiveData, ExecutionError>> + Send {
        // `TransactionPrimitive<B>` has a private field (the registration order), so it is
        // rebuilt with `new`. The order is not lost: `execute_async` takes it out before it
        // calls `tr_execute` and reorders the results itself.
        B::tr_execute(TransactionPrimitive::new(
            transaction.read_floats,
            transaction.read_qfloats,
            transaction.read_ints,
            transaction.read_bools,
        ))
    }
}
