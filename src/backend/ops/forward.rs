//! The one macro behind every op impl of [`Lean`](crate::backend::Lean).

/// Emits, for each `fn name(arg: Ty, ..) -> Ret;`, a method whose body is `B::name(arg, ..)`.
///
/// It is used inside `impl<B: ChunkedConv> XxxOps<Self> for Lean<B>` blocks, where `B` is the
/// wrapped backend. Every method of every op trait goes through here or is written by hand,
/// those with a default body included: a method left to its trait default would run Burn's
/// generic composition on `Lean<B>` (e.g. `float_mean` as `sum / n`) instead of `B`'s own,
/// often fused or specialised, kernel.
///
/// `map path;` first applies `path` to each result: the quantized ops return
/// `TensorPrimitive<B>`, a type of its own for each backend, which has to be rebuilt as
/// `TensorPrimitive<Lean<B>>` even though its contents are the same.
macro_rules! forward {
    (map $map:path; $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        $(
            #[inline]
            fn $name($($arg: $ty),*) -> $ret {
                $map(B::$name($($arg),*))
            }
        )*
    };
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;)*) => {
        $(
            #[inline]
            fn $name($($arg: $ty),*) $(-> $ret)? {
                B::$name($($arg),*)
            }
        )*
    };
}

pub(crate) use forward;
