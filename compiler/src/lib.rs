//! The ahead-of-time compiler: not built yet (issue 3).
//!
//! It will turn a verified `ir::Graph` and a target description into a plan:
//! a device for every tensor, a schedule, splits and copies, fused kernels,
//! lifetimes and arena offsets, re-proved by an independent checker. It will
//! never open a device or LLVM. Nothing here works yet, so nothing is exported.
