//! The plan runtime: not built yet (issue 4).
//!
//! It will load a plan (and weights), check it, allocate arenas and execute it
//! on CPU (LLVM-JIT fused kernels) and CUDA. It will never depend on the
//! compiler crate. Nothing here works yet, so nothing is exported.
