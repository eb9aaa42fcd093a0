"""Dequantizes every quantized tensor of a GGUF file with the PyPI `gguf`
package's numpy code (an implementation independent of ggplan's), writing one
float32 .npy per tensor: OUT_DIR/<tensor name>.npy, flattened in file order.

Usage: gguf_py_dequantize.py FILE.gguf OUT_DIR
Prints one line per tensor written: name, ggml type name, value count.
Used by tests/quantize.rs; needs `gguf` and `numpy` (scripts/setup.sh installs
them into .models/venv).
"""

import pathlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as Q
from gguf.quants import dequantize

QUANTIZED = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K}


def main() -> None:
    path, out_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    for tensor in GGUFReader(path).tensors:
        if tensor.tensor_type not in QUANTIZED:
            continue
        values = dequantize(tensor.data, tensor.tensor_type)
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        np.save(out_dir / f"{tensor.name}.npy", values)
        print(tensor.name, tensor.tensor_type.name, values.size)


if __name__ == "__main__":
    main()
