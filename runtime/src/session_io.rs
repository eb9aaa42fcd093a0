//! Setting inputs and reading outputs of a loaded plan, by name.
//!
//! Invariants: only Input and State tensors can be set, with exactly their
//! dtype and element count; index inputs are range-checked against the table
//! they index before any byte is written.

use crate::RuntimeError;
use crate::device::TensorBytes;
use crate::runtime::{Runtime, describe, layout_of};
use ir::{DType, Role};

impl Runtime {
    fn settable(&self, name: &str) -> Result<u32, RuntimeError> {
        let t = self.tensor_id(name)?;
        let pt = &self.plan.tensors[t as usize];
        match pt.role {
            Role::Input | Role::State => Ok(t),
            other => Err(RuntimeError::WrongUse {
                name: name.to_string(),
                why: format!("is {}, not an input or state tensor", role_words(other)),
            }),
        }
    }

    /// Sets input (or state) `name` from its packed bytes in the tensor's dtype.
    pub fn set_input_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<(), RuntimeError> {
        let t = self.settable(name)?;
        let layout = layout_of(&self.plan, t);
        let expected = layout.span_bytes() as usize;
        if bytes.len() != expected || !layout.is_contiguous() {
            return Err(RuntimeError::Mismatch {
                what: "input",
                name: name.to_string(),
                origin: String::new(),
                found: format!("{} bytes", bytes.len()),
                expected: format!("{} ({expected} bytes)", describe(layout.dtype, &layout.ne)),
            });
        }
        if let Some(&(bound, table)) = self.index_bounds.get(&t) {
            for (index, chunk) in bytes.chunks_exact(4).enumerate() {
                let value = i64::from(i32::from_le_bytes(chunk.try_into().expect("4 bytes")));
                if !(0..bound).contains(&value) {
                    return Err(RuntimeError::IndexOutOfRange {
                        name: name.to_string(),
                        index,
                        value,
                        bound,
                        table: self.plan.tensors[table as usize].name.clone(),
                    });
                }
            }
        }
        // SAFETY: the tensor's bytes hold `expected` bytes (checked layout),
        // in a buffer of its device that lives as long as the runtime.
        let tensor = unsafe { TensorBytes::new(self.addr[t as usize], expected) };
        let device = self.plan.tensors[t as usize].device.index();
        self.devices[device].set_tensor(tensor, 0, bytes)?;
        self.inputs.insert(t, true);
        Ok(())
    }

    fn check_values(&self, name: &str, dtype: DType, n: usize) -> Result<(), RuntimeError> {
        let t = self.settable(name)?;
        let pt = &self.plan.tensors[t as usize];
        let given = format!("{n} {dtype} values");
        let count = pt.ne.iter().product::<i64>() as usize;
        if pt.dtype != dtype || n != count {
            return Err(RuntimeError::Mismatch {
                what: "input",
                name: name.to_string(),
                origin: String::new(),
                found: given,
                expected: format!("{} ({count} values)", describe(pt.dtype, &pt.ne)),
            });
        }
        Ok(())
    }

    /// Sets input `name` to seeded random values, the reference evaluator's
    /// for the same seed (index inputs within the table they index); returns
    /// the values set.
    pub fn set_random_input(
        &mut self,
        name: &str,
        seed: u64,
    ) -> Result<kernels::reference::Dense, RuntimeError> {
        let t = self.settable(name)?;
        let layout = layout_of(&self.plan, t);
        let bound = self.index_bounds.get(&t).map(|&(b, _)| b);
        let bytes = kernels::evaluate::random_leaf(name, &layout, seed, bound);
        self.set_input_bytes(name, &bytes)?;
        Ok(kernels::reference::gather(&bytes, &layout))
    }

    /// The names of the graph's inputs, in tensor order.
    pub fn input_names(&self) -> Vec<String> {
        self.inputs
            .keys()
            .map(|&t| self.plan.tensors[t as usize].name.clone())
            .collect()
    }

    /// Sets an F32 input from values in ggml element order.
    pub fn set_input_f32(&mut self, name: &str, values: &[f32]) -> Result<(), RuntimeError> {
        self.check_values(name, DType::F32, values.len())?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.set_input_bytes(name, &bytes)
    }

    /// Sets an I32 input (token ids, positions) from values in element order.
    pub fn set_input_i32(&mut self, name: &str, values: &[i32]) -> Result<(), RuntimeError> {
        self.check_values(name, DType::I32, values.len())?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.set_input_bytes(name, &bytes)
    }

    /// The bytes of plan tensor `t` (its span, read through its device), or
    /// `None` when it has none.
    pub fn tensor_bytes(&self, t: u32) -> Option<Vec<u8>> {
        let a = *self.addr.get(t as usize)?;
        if a.is_null() {
            return None;
        }
        let span = layout_of(&self.plan, t).span_bytes() as usize;
        if let Some(&(at, len)) = self.f32_weight_sources.get(&t) {
            // SAFETY: mapped file bytes of this weight (its span), which the
            // runtime's weights keep mapped.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
            return Some(bytes[..span.min(len)].to_vec());
        }
        // SAFETY: a tensor's address is valid for its span (checker + load),
        // in a buffer of its device that lives as long as the runtime.
        let tensor = unsafe { TensorBytes::new(a, span) };
        let device = self.plan.tensors[t as usize].device.index();
        let mut bytes = vec![0u8; span];
        // In bounds by construction: the whole span from offset 0.
        (self.devices[device].get_tensor(tensor, 0, &mut bytes)).ok()?;
        Some(bytes)
    }

    /// The values of plan tensor `t` as f64 in ggml element order.
    pub fn tensor_values(&self, t: u32) -> Option<kernels::reference::Dense> {
        let bytes = self.tensor_bytes(t)?;
        Some(kernels::reference::gather(
            &bytes,
            &layout_of(&self.plan, t),
        ))
    }

    /// The values of graph tensor `name` as f32, in element order.
    pub fn output_f32(&self, name: &str) -> Result<Vec<f32>, RuntimeError> {
        let t = self.tensor_id(name)?;
        let pt = &self.plan.tensors[t as usize];
        if pt.dtype == DType::F32 && layout_of(&self.plan, t).is_contiguous() {
            let bytes = self.tensor_bytes(t).ok_or_else(|| fused_away(name))?;
            return Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect());
        }
        let values = self.tensor_values(t).ok_or_else(|| fused_away(name))?;
        Ok(values.data.iter().map(|&v| v as f32).collect())
    }

    /// The values of an I32 graph tensor (e.g. argmax ids).
    pub fn output_i32(&self, name: &str) -> Result<Vec<i32>, RuntimeError> {
        let t = self.tensor_id(name)?;
        let values = self.tensor_values(t).ok_or_else(|| fused_away(name))?;
        Ok(values.data.iter().map(|&v| v as i32).collect())
    }
}

fn fused_away(name: &str) -> RuntimeError {
    RuntimeError::WrongUse {
        name: name.to_string(),
        why: "is computed inside a fused kernel in this plan: it has no bytes to read".to_string(),
    }
}

fn role_words(role: Role) -> &'static str {
    match role {
        Role::Weight => "a weight",
        Role::Input => "an input",
        Role::State => "a state tensor",
        Role::Constant => "a constant",
        Role::Intermediate => "an intermediate",
        Role::Output => "an output",
    }
}
