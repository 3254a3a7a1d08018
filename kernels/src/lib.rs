//! CubeCL kernels for leanburn's memory-bounded convolutions, each with a plain-Rust CPU
//! reference. Kernel code here never touches Burn backend types; `leanburn::backend`
//! launches it.
