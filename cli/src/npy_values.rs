//! Conversions between `.npy` arrays and the evaluator's values.
//!
//! NumPy shapes are outermost-first; ggml extents are innermost-first, so an
//! npy array of shape [128, 8000] is the tensor ne = [8000, 128, 1, 1].

use anyhow::{Result, bail};
use ir::files::npy::{NpyArray, NpyData, read_npy, write_npy_f32, write_npy_i32};
use ir::{DType, Layout};
use kernels::reference::Dense;
use std::path::Path;

/// Reads `path` as values for tensor `name` with `layout`, checking shape and kind.
pub fn read_values(path: &Path, name: &str, layout: &Layout) -> Result<Dense> {
    let arr: NpyArray = read_npy(path)?;
    let ne = ne_from_shape(&arr.shape).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: shape {:?} has more than 4 dims",
            path.display(),
            arr.shape
        )
    })?;
    if ne != layout.ne {
        bail!(
            "{}: shape {:?} does not fit input '{}' (expects numpy shape {:?}, ggml ne {:?})",
            path.display(),
            arr.shape,
            name,
            shape_from_ne(&layout.ne),
            layout.ne
        );
    }
    let int_tensor = layout.dtype == DType::I32;
    let data: Vec<f64> = match (&arr.data, int_tensor) {
        (NpyData::F32(v), false) => v.iter().map(|&x| f64::from(x)).collect(),
        (NpyData::F64(v), false) => v.clone(),
        (NpyData::F16(v), false) => v.iter().map(|&x| f64::from(x.to_f32())).collect(),
        (NpyData::I32(v), true) => v.iter().map(|&x| f64::from(x)).collect(),
        (NpyData::I64(v), true) => v.iter().map(|&x| x as f64).collect(),
        _ => bail!(
            "{}: element type does not fit input '{}' of dtype {} (use {} arrays)",
            path.display(),
            name,
            layout.dtype,
            if int_tensor {
                "int32 or int64"
            } else {
                "float16, float32 or float64"
            }
        ),
    };
    Ok(Dense { ne, data })
}

/// Writes values as float32 (or int32 for I32 tensors) with the NumPy shape of `ne`.
pub fn write_values(path: &Path, values: &Dense, dtype: DType) -> Result<()> {
    let shape = shape_from_ne(&values.ne);
    if dtype == DType::I32 {
        let data: Vec<i32> = values.data.iter().map(|&v| v as i32).collect();
        write_npy_i32(path, &shape, &data)?;
    } else {
        let data: Vec<f32> = values.data.iter().map(|&v| v as f32).collect();
        write_npy_f32(path, &shape, &data)?;
    }
    Ok(())
}

/// ggml extents for a NumPy shape (reversed, padded with 1s).
pub fn ne_from_shape(shape: &[u64]) -> Option<[i64; 4]> {
    if shape.len() > 4 {
        return None;
    }
    let mut ne = [1i64; 4];
    for (i, &d) in shape.iter().rev().enumerate() {
        ne[i] = d as i64;
    }
    Some(ne)
}

/// The NumPy shape of ggml extents: reversed, trailing unit dims dropped
/// (at least one dim is kept).
pub fn shape_from_ne(ne: &[i64; 4]) -> Vec<u64> {
    let used = ne.iter().rposition(|&n| n != 1).map_or(1, |i| i + 1);
    ne[..used].iter().rev().map(|&n| n as u64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_reverse_and_trim() {
        assert_eq!(shape_from_ne(&[8000, 128, 1, 1]), vec![128, 8000]);
        assert_eq!(shape_from_ne(&[1, 1, 1, 1]), vec![1]);
        assert_eq!(shape_from_ne(&[3, 1, 5, 1]), vec![5, 1, 3]);
        assert_eq!(ne_from_shape(&[5, 1, 3]), Some([3, 1, 5, 1]));
        assert_eq!(ne_from_shape(&[1, 2, 3, 4, 5]), None);
    }
}
