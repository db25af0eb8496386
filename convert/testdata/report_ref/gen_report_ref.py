#!/usr/bin/env python3
"""Independent reference for k3ckpt's quantization_report.json.

Reads a source checkpoint and its converted output with safetensors, decodes
both with torch the way engines dequantize (FP8: float32 code × float32 block
scale; MXFP4: E2M1 × 2^(e−127); NVFP4: E2M1 × float32(E4M3 scale × scale_2)),
and writes, per quantized tensor, the figures the report sums: blocks,
lossy_blocks, zero_tiles, saturated, nan, max_abs_error, sum_sq, sum_sq_error.
x is the source value in float64, x̂ the dequantized output widened to
float64; elements whose x̂ is NaN are counted and left out of the sums.

Usage: gen_report_ref.py INPUTS OUTDIR, with INPUTS as TestWriteReportInputs
writes it (mini-src, mini-bf16, one directory per case).
"""
import json
import os
import sys

import torch
from safetensors import safe_open

CASES = {
    "fp8-deepseek": "mini-src",
    "fp8-deepseek-ue8m0": "mini-src",
    "nvfp4-modelopt-numerics": "mini-src",
    "mxfp4-pack": "mini-bf16",
}

E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


class Ckpt:
    def __init__(self, root):
        self.root = root
        with open(os.path.join(root, "model.safetensors.index.json")) as f:
            self.where = json.load(f)["weight_map"]
        self.handles = {}

    def has(self, name):
        return name in self.where

    def get(self, name):
        fn = self.where[name]
        if fn not in self.handles:
            self.handles[fn] = safe_open(os.path.join(self.root, fn), "pt")
        return self.handles[fn].get_tensor(name)


def unpack(packed):
    """U8 [N, K/2] → codes [N, K], element 2i in the low nibble."""
    p = packed.to(torch.int64)
    return torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)


def figures(name, x, y, block_rows, block_cols, top):
    """x, y: float64 [N, K]; top: bool [N, K], y has the format's largest magnitude."""
    n, k = x.shape
    nb, kb = -(-n // block_rows), -(-k // block_cols)
    nan = torch.isnan(y)
    ok = ~nan
    d = torch.where(ok, x - torch.where(ok, y, torch.zeros_like(y)), torch.zeros_like(x))
    sat = top & ok & (x.abs() > y.abs())

    def per_block(v):
        pad = torch.zeros(nb * block_rows, kb * block_cols, dtype=v.dtype)
        pad[:n, :k] = v
        return pad.reshape(nb, block_rows, kb, block_cols)

    changed = per_block(((d != 0) | nan).to(torch.int64)).sum(dim=(1, 3))
    nonzero = per_block((x != 0).to(torch.int64)).sum(dim=(1, 3))
    xs = torch.where(ok, x, torch.zeros_like(x))
    return {
        "name": name,
        "blocks": nb * kb,
        "lossy_blocks": int((changed > 0).sum()),
        "zero_tiles": int((nonzero == 0).sum()),
        "saturated": int(sat.sum()),
        "nan": int(nan.sum()),
        "max_abs_error": float(d.abs().max()) if d.numel() else 0.0,
        "sum_sq": float((xs * xs).sum()),
        "sum_sq_error": float((d * d).sum()),
    }


def fp8(src, dst, w):
    codes = dst.get(w)
    base = w[: -len(".weight")]
    sname = base + ".weight_scale_inv" if dst.has(base + ".weight_scale_inv") else base + ".weight_scale"
    s = dst.get(sname).to(torch.float32)
    n, k = codes.shape
    s = s.reshape(s.shape[0], -1) if s.dim() == 2 else s.reshape(s.shape[0], s.shape[2])
    s = s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    y = (codes.to(torch.float32) * s).to(torch.float64)  # the float32 product engines compute
    x = src.get(w).to(torch.float64)
    top = (codes.view(torch.uint8) & 0x7F) == 0x7E
    return figures(w, x, y, 128, 128, top)


def nvfp4(src, dst, w):
    base = w[: -len(".weight")]
    c = unpack(dst.get(w))
    s = dst.get(base + ".weight_scale").to(torch.float32)
    s2 = dst.get(base + ".weight_scale_2").to(torch.float32)
    g = (s * s2).repeat_interleave(16, 1)  # float32(E4M3 scale × scale_2)
    nv = E2M1.clone().to(torch.float32)
    nv[8] = 0.0  # NVIDIA's table: code 8 is +0
    y = (nv[c] * g).to(torch.float64)
    xc = unpack(src.get(base + ".weight_packed"))
    e = src.get(base + ".weight_scale").to(torch.float64)
    x = E2M1[xc] * torch.pow(2.0, (e - 127)).repeat_interleave(32, 1)
    return figures(base + ".weight_packed", x, y, 1, 32, (c & 7) == 7)


def pack(src, dst, base):
    c = unpack(dst.get(base + ".weight_packed"))
    e = dst.get(base + ".weight_scale").to(torch.float64)
    y = E2M1[c] * torch.pow(2.0, (e - 127)).repeat_interleave(32, 1)
    x = src.get(base + ".weight").to(torch.float64)
    return figures(base + ".weight", x, y, 1, 32, (c & 7) == 7)


def case(inputs, name):
    src, dst = Ckpt(os.path.join(inputs, CASES[name])), Ckpt(os.path.join(inputs, name))
    out = []
    for t in sorted(dst.where):
        if t.endswith(".weight") and dst.get(t).dtype == torch.float8_e4m3fn:
            out.append(fp8(src, dst, t))
        elif t.endswith(".weight") and dst.has(t[: -len(".weight")] + ".weight_scale_2"):
            out.append(nvfp4(src, dst, t))
        elif t.endswith(".weight_packed") and not src.has(t):
            out.append(pack(src, dst, t[: -len(".weight_packed")]))
    return out


def main():
    inputs, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    for name in CASES:
        tensors = case(inputs, name)
        with open(os.path.join(outdir, name + ".json"), "w") as f:
            json.dump({"torch": torch.__version__, "case": name, "tensors": tensors}, f, indent=0)
            f.write("\n")
        print(name, len(tensors), "tensors")


if __name__ == "__main__":
    main()
