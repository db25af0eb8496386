"""Expected BF16 bytes of a DeepSeek-V4 replica's quantized tensors, from torch.

usage: python3 bf16_golden.py REPLICA_DIR OUT.json

For every FP8 weight (F8_E4M3 [N, K] with an F8_E8M0 X.scale per 128x128
block) and every FP4 expert (I8 [N, K/2], two E2M1 codes a byte, with an
F8_E8M0 X.scale per 32 along K) it writes the sha256 of the little-endian
BF16 bytes of the dequantized tensor, as DeepSeek's code computes it:

- FP8: DeepSeek-V3 inference/kernel.py weight_dequant and
  inference/fp8_cast_bf16.py (deepseek-ai/DeepSeek-V3): codes to fp32,
  times the block's fp32 scale, one cast to BF16. V4-Flash inference/model.py
  (deepseek-ai/DeepSeek-V4-Flash @ 60d8d70770c6776ff598c94bb586a859a38244f1)
  Linear keeps the same [ceil(N/128), ceil(K/128)] grid, as float8_e8m0fnu.
- FP4: V4-Flash inference/kernel.py fp4_gemm_kernel (same commit) reads the
  weight as float4_e2m1fn_x2 [N, K/2] (element 2i in the low nibble, 2i+1 in
  the high one), casts each code to fp32 and applies the per-32 E8M0 scale
  in fp32; here the products are cast once to BF16.

The E8M0 scales are converted by torch (float8_e8m0fnu -> float32), the E4M3
codes by torch (float8_e4m3fn -> float32); the E2M1 values are the OCP MX
code table, -0 for code 8.
"""

import hashlib
import json
import os
import sys

import torch
from safetensors import safe_open

E2M1 = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=torch.float32,
)


def sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def fp8_bf16(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    n, k = w.shape
    sf = s.float().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return (w.float() * sf).to(torch.bfloat16)


def fp4_bf16(b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    codes = b.view(torch.uint8)
    codes = torch.stack([codes & 0x0F, codes >> 4], dim=-1).flatten(-2)
    v = E2M1[codes.long()]
    return (v * s.float().repeat_interleave(32, 1)).to(torch.bfloat16)


def main(root: str, out: str) -> None:
    got = {}
    for name in sorted(os.listdir(root)):
        if not name.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(root, name), "pt") as f:
            keys = set(f.keys())
            for key in sorted(keys):
                if not key.endswith(".weight") or key[: -len("weight")] + "scale" not in keys:
                    continue
                w, s = f.get_tensor(key), f.get_tensor(key[: -len("weight")] + "scale")
                assert s.dtype == torch.float8_e8m0fnu, (key, s.dtype)
                if w.dtype == torch.float8_e4m3fn:
                    got[key] = {"kind": "fp8", "sha256": sha(fp8_bf16(w, s))}
                elif w.dtype == torch.int8:
                    got[key] = {"kind": "fp4", "sha256": sha(fp4_bf16(w, s))}
                else:
                    raise SystemExit(f"{name}: {key}: {w.dtype} beside an E8M0 scale")
    doc = {"torch": torch.__version__, "tensors": got}
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"{len(got)} tensors ({sum(v['kind'] == 'fp4' for v in got.values())} fp4)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
