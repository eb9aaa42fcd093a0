//! Ownership of LLVM state: one [`Llvm`] (context + host target machine) per
//! `Jit`, shared through an `Arc` by every [`Compiled`] kernel made from it.
//!
//! Invariants (what makes the lifetime erasure below sound):
//! - the `Context` lives inside an `Arc<Llvm>` allocation, so its address is
//!   stable and it is dropped only after the last `Compiled` (each holds an
//!   `Arc<Llvm>`) has dropped its execution engine;
//! - everything that touches the context (building, optimising, compiling a
//!   module; disposing an engine) happens while holding `Llvm::lock`: an LLVM
//!   context is not thread-safe, but may be used from any one thread at a time;
//! - running compiled code touches no LLVM state, so kernels run without the lock.

use crate::RuntimeError;
use inkwell::OptimizationLevel;
use inkwell::builder::BuilderError;
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine,
};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

use super::codegen::{Gen, HostCpu, jit_err};

impl From<BuilderError> for RuntimeError {
    fn from(e: BuilderError) -> RuntimeError {
        RuntimeError::Jit(format!("building IR: {e}"))
    }
}

/// A JIT error with context.
/// The kernel entry point every generated module exports as `k`:
/// `k(args, row_begin, row_end, col_begin, col_end)`.
pub(super) type KernelFn = unsafe extern "C" fn(*const i64, i64, i64, i64, i64);

/// One LLVM context and the host's target machine.
pub(super) struct Llvm {
    lock: Mutex<()>,
    context: Context,
    machine: TargetMachine,
    /// The host CPU every function is generated for.
    pub host: HostCpu,
}

// SAFETY: the context and target machine are only used while holding `lock`
// (module invariant); LLVM allows a context to move between threads.
unsafe impl Send for Llvm {}
// SAFETY: as above: shared access is serialised by `lock`.
unsafe impl Sync for Llvm {}

/// The widest f32 vector the host runs natively.
fn host_width() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    4
}

impl Llvm {
    /// A fresh context and a target machine for the host CPU.
    pub fn new() -> Result<Arc<Llvm>, RuntimeError> {
        let cpu = TargetMachine::get_host_cpu_name().to_string();
        let features = TargetMachine::get_host_cpu_features().to_string();
        Llvm::for_target(cpu, features, host_width())
    }

    /// A fresh context and a target machine for another x86-64 CPU: code
    /// for it can be inspected but not run here (tests of other ISAs).
    pub fn for_target(
        cpu: String,
        features: String,
        width: u32,
    ) -> Result<Arc<Llvm>, RuntimeError> {
        Target::initialize_native(&InitializationConfig::default())
            .map_err(|e| jit_err("initialising the native target", e))?;
        let triple = TargetMachine::get_default_triple();
        let target = Target::from_triple(&triple).map_err(|e| jit_err("host target", e))?;
        let machine = target
            .create_target_machine(
                &triple,
                &cpu,
                &features,
                OptimizationLevel::Aggressive,
                RelocMode::Default,
                // The same model the engine uses (see `sections`), so
                // `inspect` shows the code that runs.
                CodeModel::Small,
            )
            .ok_or_else(|| jit_err("target machine", format!("none for {cpu}")))?;
        Ok(Arc::new(Llvm {
            lock: Mutex::new(()),
            context: Context::create(),
            machine,
            host: HostCpu {
                cpu,
                features,
                width,
            },
        }))
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Builds a module with `build`, optimises it (`default<O3>`) and returns
    /// the module, still under the lock, to `finish`.
    fn with_module<T>(
        &self,
        build: &dyn Fn(&mut Gen<'_, '_>) -> Result<(), RuntimeError>,
        finish: impl FnOnce(&Module<'_>) -> Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let _guard = self.guard();
        let module = self.context.create_module("ggplan_kernel");
        module.set_triple(&self.machine.get_triple());
        module.set_data_layout(&self.machine.get_target_data().get_data_layout());
        {
            let mut generator = Gen::new(&self.context, &module, &self.host)?;
            build(&mut generator)?;
        }
        module
            .verify()
            .map_err(|e| jit_err("generated IR is invalid", e.to_string()))?;
        module
            .run_passes("default<O3>", &self.machine, PassBuilderOptions::create())
            .map_err(|e| jit_err("optimising", e.to_string()))?;
        finish(&module)
    }

    /// Generates, optimises and compiles one kernel.
    pub fn compile(
        self: &Arc<Self>,
        build: &dyn Fn(&mut Gen<'_, '_>) -> Result<(), RuntimeError>,
    ) -> Result<Arc<Compiled>, RuntimeError> {
        self.with_module(build, |module| {
            let sections = super::sections::NearSections::new()
                .map_err(|e| jit_err("reserving memory for the kernel", e))?;
            let engine = module
                .create_mcjit_execution_engine_with_memory_manager(
                    sections,
                    OptimizationLevel::Aggressive,
                    CodeModel::Small,
                    false,
                    false,
                )
                .map_err(|e| jit_err("creating the execution engine", e.to_string()))?;
            let address = engine
                .get_function_address("k")
                .map_err(|e| jit_err("looking up the kernel", e))?;
            // SAFETY: only the lifetime is erased. The engine borrows
            // `self.context`, which lives in the `Arc<Llvm>` that `Compiled`
            // holds and drops after the engine (see `Compiled::drop`).
            let engine = unsafe {
                std::mem::transmute::<ExecutionEngine<'_>, ExecutionEngine<'static>>(engine)
            };
            // SAFETY: `k` is generated with exactly the `KernelFn` signature.
            let func = unsafe { std::mem::transmute::<usize, KernelFn>(address) };
            Ok(Arc::new(Compiled {
                engine: ManuallyDrop::new(engine),
                func,
                llvm: Arc::clone(self),
            }))
        })
    }

    /// The optimised IR and the host assembly of a kernel (for tests and tools).
    pub fn inspect(
        &self,
        build: &dyn Fn(&mut Gen<'_, '_>) -> Result<(), RuntimeError>,
    ) -> Result<(String, String), RuntimeError> {
        self.with_module(build, |module| {
            let ir = module.print_to_string().to_string();
            let asm = self
                .machine
                .write_to_memory_buffer(module, FileType::Assembly)
                .map_err(|e| jit_err("emitting assembly", e.to_string()))?;
            Ok((ir, String::from_utf8_lossy(asm.as_slice()).into_owned()))
        })
    }
}

/// A compiled kernel: its machine code lives as long as this value.
pub(super) struct Compiled {
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    /// The entry point `k`.
    pub func: KernelFn,
    llvm: Arc<Llvm>,
}

// SAFETY: the engine is touched only in `drop`, under the context's lock; the
// function pointer is plain machine code.
unsafe impl Send for Compiled {}
// SAFETY: as above.
unsafe impl Sync for Compiled {}

impl Drop for Compiled {
    fn drop(&mut self) {
        let _guard = self.llvm.guard();
        // SAFETY: dropped exactly once, here, before `self.llvm` (a field
        // dropped after this body) can release the context.
        unsafe { ManuallyDrop::drop(&mut self.engine) };
    }
}
