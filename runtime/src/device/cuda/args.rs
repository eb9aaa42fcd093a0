//! The argument block every CUDA kernel takes, byte for byte the `Args`
//! struct of `kernels/common.cuh`: up to [`MAX_TENSORS`] tensors (address,
//! extents, byte strides, dtype code), then float, int and 64-bit scalars.
//! One block of plain data per launch, passed by value (1,056 bytes, under
//! the 4 KiB kernel-parameter limit).

use crate::device::cpu::RawTensor;
use ir::DType;

/// Tensors an argument block holds (`GG_MAXT` in common.cuh).
pub const MAX_TENSORS: usize = 12;

/// One tensor as a kernel sees it (`struct T`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KTensor {
    /// Device address of element [0, 0, 0, 0].
    pub data: u64,
    /// Extents.
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [i64; 4],
    /// [`dtype_code`].
    pub dtype: i64,
}

/// The argument block (`struct Args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KArgs {
    /// `t[0]` is the output, then the sources in the kernel's order.
    pub t: [KTensor; MAX_TENSORS],
    /// Float scalars.
    pub f: [f32; 8],
    /// Int scalars.
    pub i: [i32; 8],
    /// 64-bit scalars (element counts).
    pub l: [i64; 4],
}

/// The code common.cuh and blocks.cuh give `dtype` (`DT_*`).
pub fn dtype_code(dtype: DType) -> i64 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I32 => 3,
        DType::Q8_0 => 4,
        DType::Q4_0 => 5,
        DType::Q4_1 => 6,
        DType::Q5_0 => 7,
        DType::Q5_1 => 8,
        DType::Q4_K => 9,
        DType::Q5_K => 10,
        DType::Q6_K => 11,
    }
}

impl KTensor {
    /// `t` as a kernel sees it (its address is a device address).
    pub fn of(t: &RawTensor) -> KTensor {
        KTensor {
            data: t.data as u64,
            ne: t.ne,
            nb: t.nb.map(|b| b as i64),
            dtype: dtype_code(t.dtype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_has_the_layout_of_common_cuh() {
        // struct T: char* + 4 + 4 + 1 long longs; Args: 12 T, 8 floats,
        // 8 ints, 4 long longs (common.cuh).
        assert_eq!(std::mem::size_of::<KTensor>(), 80);
        assert_eq!(std::mem::size_of::<KArgs>(), 12 * 80 + 32 + 32 + 32);
        assert_eq!(std::mem::align_of::<KArgs>(), 8);
        let a = KArgs::default();
        let base = &a as *const KArgs as usize;
        assert_eq!(&a.f as *const _ as usize - base, 960);
        assert_eq!(&a.i as *const _ as usize - base, 992);
        assert_eq!(&a.l as *const _ as usize - base, 1024);
        let src = include_str!("kernels/common.cuh");
        assert!(src.contains("#define GG_MAXT 12"));
        let blocks = include_str!("kernels/blocks.cuh");
        for dtype in DType::ALL {
            let name = format!(
                "#define DT_{} {}\n",
                dtype.name().to_uppercase(),
                dtype_code(dtype)
            );
            assert!(
                src.contains(&name) || blocks.contains(&name),
                "{name:?} in common.cuh or blocks.cuh"
            );
        }
    }
}
