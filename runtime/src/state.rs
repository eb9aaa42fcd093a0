//! State tensors (KV caches) shared by several runtimes: generation runs a
//! prefill plan and a decode plan over the same cache.
//!
//! Invariants: a state tensor is bound by name; the first runtime to bind a
//! name fixes its dtype and extents (the buffer is zeroed), every later one
//! must declare the same or loading fails naming the tensor; buffers never move
//! while the store lives. Runtimes sharing a store take its run lock, so two of
//! them never run at once.

use crate::RuntimeError;
use crate::memory::AlignedBuffer;
use ir::layout::fmt_ne;
use ir::{DType, Layout};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

struct Entry {
    dtype: DType,
    ne: [i64; 4],
    buffer: AlignedBuffer,
}

/// Named state buffers shared by runtimes.
#[derive(Default)]
pub struct StateStore {
    entries: Mutex<BTreeMap<String, Entry>>,
    run_lock: Mutex<()>,
}

impl StateStore {
    /// An empty store.
    pub fn new() -> StateStore {
        StateStore::default()
    }

    /// The address of state tensor `name` with `layout` (packed), created
    /// zeroed on first use.
    pub(crate) fn bind(&self, name: &str, layout: &Layout) -> Result<*mut u8, RuntimeError> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = entries.get(name) {
            if (e.dtype, e.ne) != (layout.dtype, layout.ne) {
                return Err(RuntimeError::Mismatch {
                    what: "state",
                    name: name.to_string(),
                    origin: " in the shared state store".to_string(),
                    found: format!("{} {}", e.dtype, fmt_ne(&e.ne)),
                    expected: format!("{} {}", layout.dtype, fmt_ne(&layout.ne)),
                });
            }
            return Ok(e.buffer.as_ptr());
        }
        let bytes = layout.span_bytes();
        let buffer = AlignedBuffer::zeroed(bytes as usize, 64).ok_or(RuntimeError::Alloc {
            arena: 0,
            bytes,
            usage: format!("state '{name}'"),
            device: "cpu".to_string(),
        })?;
        let ptr = buffer.as_ptr();
        entries.insert(
            name.to_string(),
            Entry {
                dtype: layout.dtype,
                ne: layout.ne,
                buffer,
            },
        );
        Ok(ptr)
    }

    /// Zeroes every state buffer (a new conversation).
    pub fn clear(&self) {
        let _running = self.lock_run();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for e in entries.values() {
            // SAFETY: the buffer owns len bytes; no runtime runs (run lock held).
            unsafe { std::ptr::write_bytes(e.buffer.as_ptr(), 0, e.buffer.len()) };
        }
    }

    /// Held while a runtime sharing this store runs.
    pub(crate) fn lock_run(&self) -> MutexGuard<'_, ()> {
        self.run_lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}
