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
    /// State held in a device's own memory (a GPU's), by (device, tensor).
    device_entries: Mutex<BTreeMap<(String, String), DeviceEntry>>,
    run_lock: Mutex<()>,
}

/// A state buffer in a device's own memory.
pub trait DeviceState: Send + Sync {
    /// Its address on the device.
    fn addr(&self) -> u64;
    /// Writes zeroes over it.
    fn zero(&self) -> Result<(), RuntimeError>;
}

struct DeviceEntry {
    dtype: DType,
    ne: [i64; 4],
    buffer: Box<dyn DeviceState>,
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

    /// The device address of state tensor `name` with `layout` on device
    /// `device`, allocated (zeroed) by `alloc` on first use; the same rules
    /// as for host state: the first binding fixes the dtype and extents, later
    /// ones must match.
    pub fn bind_device(
        &self,
        device: &str,
        name: &str,
        layout: &Layout,
        alloc: &dyn Fn(u64) -> Result<Box<dyn DeviceState>, RuntimeError>,
    ) -> Result<u64, RuntimeError> {
        let mut entries = self
            .device_entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (device.to_string(), name.to_string());
        if let Some(e) = entries.get(&key) {
            if (e.dtype, e.ne) != (layout.dtype, layout.ne) {
                return Err(RuntimeError::Mismatch {
                    what: "state",
                    name: name.to_string(),
                    origin: format!(" on {device} in the shared state store"),
                    found: format!("{} {}", e.dtype, fmt_ne(&e.ne)),
                    expected: format!("{} {}", layout.dtype, fmt_ne(&layout.ne)),
                });
            }
            return Ok(e.buffer.addr());
        }
        let buffer = alloc(layout.span_bytes())?;
        let addr = buffer.addr();
        entries.insert(
            key,
            DeviceEntry {
                dtype: layout.dtype,
                ne: layout.ne,
                buffer,
            },
        );
        Ok(addr)
    }

    /// Zeroes every state buffer (a new conversation). A device buffer that
    /// cannot be zeroed (its device failed) is reported by its next run.
    pub fn clear(&self) {
        let _running = self.lock_run();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for e in entries.values() {
            // SAFETY: the buffer owns len bytes; no runtime runs (run lock held).
            unsafe { std::ptr::write_bytes(e.buffer.as_ptr(), 0, e.buffer.len()) };
        }
        let device_entries = self
            .device_entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for e in device_entries.values() {
            let _ = e.buffer.zero();
        }
    }

    /// Held while a runtime sharing this store runs.
    pub(crate) fn lock_run(&self) -> MutexGuard<'_, ()> {
        self.run_lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}
