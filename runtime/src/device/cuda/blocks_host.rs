//! `kernels/blocks.cuh` compiled for the host with the system C++ compiler
//! and run on rows of every block format, against the Rust dequantizers
//! (`kernels::quant`): the CUDA kernels' block decoding checked without a
//! GPU. A GPU run (`scripts/gpu-check.sh`, `tests/data/cuda_ops.ron`) checks
//! the kernels around it.
//!
//! The harness defines what NVRTC's CUDA provides (`__device__`,
//! `__forceinline__`, `h2f` as an exact half-to-float conversion) and takes
//! the `DT_*` codes from `common.cuh` itself. It is compiled with
//! `-ffp-contract=off`, so each value is the same product in the same order
//! as the Rust dequantizer's, and the comparison is bit for bit. (NVRTC
//! contracts `a * b - c` into one FMA, which moves a value by at most an
//! ulp; the GPU check compares within the NMSE thresholds.)
//!
//! Where no C++ compiler runs (`CXX`, else `c++`), the test says why and
//! returns, unless `GGPLAN_REQUIRE_NVRTC=1` (CI), where it fails.

use super::args::dtype_code;
use ir::DType;
use kernels::testing::Rng;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The harness's `main`: reads `n` values' worth of blocks of code `dt` from
/// argv[1], writes to argv[2] each value twice as f32 bytes: decoded by
/// chunks (`block_chunk8`, the matrix products' path) and one at a time
/// (`block_value`, get_rows' path).
const MAIN: &str = r#"
template <int DT>
static void chunks(const char *row, long long n, float *out) {
  for (long long ch = 0; ch < n / 32; ch++)
    for (int part = 0; part < 32; part += 8) block_chunk8<DT>(row, ch, part, out + ch * 32 + part);
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  const long long dt = atoll(argv[3]), n = atoll(argv[4]);
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 3;
  static char row[1 << 20];
  const size_t got = fread(row, 1, sizeof row, f);
  fclose(f);
  if (got == 0) return 4;
  float *out = (float *)calloc((size_t)(2 * n), sizeof(float));
  switch (dt) {
    case DT_Q8_0: chunks<DT_Q8_0>(row, n, out); break;
    case DT_Q4_0: chunks<DT_Q4_0>(row, n, out); break;
    case DT_Q4_1: chunks<DT_Q4_1>(row, n, out); break;
    case DT_Q5_0: chunks<DT_Q5_0>(row, n, out); break;
    case DT_Q5_1: chunks<DT_Q5_1>(row, n, out); break;
    case DT_Q4_K: chunks<DT_Q4_K>(row, n, out); break;
    case DT_Q5_K: chunks<DT_Q5_K>(row, n, out); break;
    case DT_Q6_K: chunks<DT_Q6_K>(row, n, out); break;
    default: return 5;
  }
  for (long long k = 0; k < n; k++) out[n + k] = block_value(row, dt, k);
  FILE *o = fopen(argv[2], "wb");
  if (!o || fwrite(out, sizeof(float), (size_t)(2 * n), o) != (size_t)(2 * n)) return 6;
  fclose(o);
  return 0;
}
"#;

/// What the CUDA compiler gives the kernels, for the host.
const SHIM: &str = r#"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#define __device__
#define __forceinline__ inline
static float h2f(unsigned short h) {
  const int exp = (h >> 10) & 31, man = h & 1023;
  float v = exp == 0 ? ldexpf((float)man, -24)
          : exp == 31 ? (man ? NAN : INFINITY)
          : ldexpf((float)(man | 1024), exp - 25);
  return (h >> 15) ? -v : v;
}
"#;

/// The harness source: the shim, common.cuh's dtype codes, blocks.cuh, main.
fn harness_source() -> String {
    let codes: String = include_str!("kernels/common.cuh")
        .lines()
        .filter(|l| l.starts_with("#define DT_"))
        .map(|l| format!("{l}\n"))
        .collect();
    format!("{SHIM}{codes}{}{MAIN}", include_str!("kernels/blocks.cuh"))
}

/// A scratch folder of this test process.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ggplan-blocks-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles the harness into `dir`; `None` (with the reason) where no C++
/// compiler runs.
fn compile(dir: &Path) -> Result<PathBuf, String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let src = dir.join("blocks_host.cpp");
    std::fs::write(&src, harness_source()).unwrap();
    let exe = dir.join("blocks_host");
    let out = Command::new(&cxx)
        .args(["-O1", "-ffp-contract=off", "-Wno-unknown-pragmas", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| format!("no C++ compiler ({cxx}: {e})"))?;
    assert!(
        out.status.success(),
        "blocks.cuh does not compile for the host:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(exe)
}

#[test]
fn blocks_cuh_decodes_every_format_as_the_rust_dequantizers_do() {
    let dir = scratch();
    let exe = match compile(&dir) {
        Ok(exe) => exe,
        Err(why) => {
            let required = std::env::var("GGPLAN_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "{why}; GGPLAN_REQUIRE_NVRTC=1 requires this check"
            );
            eprintln!("skipped: {why}: the CUDA block decoding is not checked on this host");
            return;
        }
    };
    let mut rng = Rng::new(31);
    let mut checked = 0;
    for dtype in DType::ALL.into_iter().filter(|d| d.is_quantized()) {
        // Three super-blocks' worth (24 chunks), in a row of whole blocks;
        // one row of large magnitudes, one of tiny ones.
        for scale in [1e-3, 1.0, 1e3] {
            let n = 768;
            let values: Vec<f32> = rng
                .vec(n, -scale, scale)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let mut bytes = vec![0u8; dtype.row_bytes(n as u64).unwrap() as usize];
            kernels::quant::quantize_row(dtype, &values, &mut bytes);
            let mut want = vec![0f32; n];
            kernels::quant::dequantize_row(dtype, &bytes, &mut want);
            let (input, output) = (dir.join("row.bin"), dir.join("out.bin"));
            std::fs::write(&input, &bytes).unwrap();
            let status = Command::new(&exe)
                .arg(&input)
                .arg(&output)
                .arg(dtype_code(dtype).to_string())
                .arg(n.to_string())
                .status()
                .unwrap();
            assert!(status.success(), "{dtype}: the harness failed ({status})");
            let got: Vec<u32> = std::fs::read(&output)
                .unwrap()
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
            for (path, got) in ["block_chunk8", "block_value"].iter().zip(got.chunks(n)) {
                if let Some(k) = (0..n).find(|&k| got[k] != want[k]) {
                    panic!(
                        "{dtype} (scale {scale}) {path}: value {k} is {} where the Rust dequantizer gives {}",
                        f32::from_bits(got[k]),
                        f32::from_bits(want[k])
                    );
                }
            }
            checked += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(checked, 24, "8 block formats x 3 scales");
}
