//! A tensor as CPU kernels see it: a base address plus ggml's extents and
//! byte strides. Steps are prepared once at load with these addresses baked in
//! (arenas never move), so running a step does no lookups.

use ir::DType;

/// A tensor's bytes and layout. It does not own the bytes.
///
/// Invariant (upheld by the runtime that builds it): `data` points to at least
/// [`RawTensor::span_bytes`] bytes that stay valid while any kernel holding it
/// may run, and the layout is one `ir::Layout::is_valid` accepts.
#[derive(Clone, Copy, Debug)]
pub struct RawTensor {
    /// First byte (element [0, 0, 0, 0]).
    pub data: *mut u8,
    /// Element type.
    pub dtype: DType,
    /// Extents, ggml order (ne0 is the row length).
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [u64; 4],
}

// SAFETY: a RawTensor is an address and a layout; the runtime guarantees that
// concurrent kernels write disjoint bytes (each thread its own rows).
unsafe impl Send for RawTensor {}
// SAFETY: as above.
unsafe impl Sync for RawTensor {}

impl RawTensor {
    /// The layout part.
    pub fn layout(&self) -> ir::Layout {
        ir::Layout {
            dtype: self.dtype,
            ne: self.ne,
            nb: self.nb,
        }
    }

    /// Number of rows: ne1 * ne2 * ne3.
    pub fn n_rows(&self) -> usize {
        (self.ne[1] * self.ne[2] * self.ne[3]) as usize
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        (self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]) as usize
    }

    /// Bytes from the first to one past the last element (ggml_nbytes).
    pub fn span_bytes(&self) -> u64 {
        self.layout().span_bytes()
    }

    /// Rows packed with no gaps, elements packed within rows.
    pub fn is_contiguous(&self) -> bool {
        self.layout().is_contiguous()
    }

    /// The (i1, i2, i3) of flat row index `row` (row-major over ne1, ne2, ne3).
    pub fn row_coords(&self, row: usize) -> [usize; 3] {
        let ne1 = self.ne[1] as usize;
        let ne2 = self.ne[2] as usize;
        [row % ne1, (row / ne1) % ne2, row / (ne1 * ne2)]
    }

    /// Address of the first element of row (i1, i2, i3).
    ///
    /// # Safety
    /// The indices must be inside the extents.
    pub unsafe fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        let off = i1 as u64 * self.nb[1] + i2 as u64 * self.nb[2] + i3 as u64 * self.nb[3];
        // SAFETY: in bounds by the caller's contract and the type's invariant.
        unsafe { self.data.add(off as usize) }
    }

    /// Address of the first element of flat row `row`.
    ///
    /// # Safety
    /// `row < n_rows()`.
    pub unsafe fn flat_row_ptr(&self, row: usize) -> *mut u8 {
        let [i1, i2, i3] = self.row_coords(row);
        // SAFETY: row_coords stays inside the extents for row < n_rows.
        unsafe { self.row_ptr(i1, i2, i3) }
    }
}
