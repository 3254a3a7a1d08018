//! The global allocator of the examples and of the CPU bench (`benches/cpu.rs` includes
//! this file): mimalloc, told to keep what is freed.
//!
//! On the CPU backend a training step allocates and frees buffers of up to a hundred MiB
//! (the logits). glibc's malloc hands each back to the kernel and faults it in again,
//! zeroed, the next step: a third of the step time at gpt2-mini 8 × 64. mimalloc keeps
//! them, but by default it still purges memory left free for a second, and the kernel
//! zeroes those pages again when they are touched next. [`keep_freed_memory`] turns that
//! off. Both are measured in docs/benchmarks.md, "The main job on the CPU".

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mi_option_reset_delay` in mimalloc 2), for which
/// `libmimalloc-sys` 0.1 has no constant.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Never hand freed memory back to the OS: the process keeps its high-water mark of heap
/// memory, and large buffers are reused without page faults. Call it first in `main`.
pub fn keep_freed_memory() {
    // SAFETY: sets one of mimalloc's options, which it reads when memory is freed.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) };
}
