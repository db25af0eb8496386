#!/usr/bin/env python3
"""Check k3ckpt's --experts fp8 outputs under W (see run.sh) with PyTorch.

For every MXFP4 routed expert of W/rel (weight_packed U8 [N, K/2], element 2i
in the low nibble; weight_scale E8M0 U8 [N, K/32]) the script decodes the
values itself (E2M1 value x 2^(byte-127), in float32, then BF16), casts them
with DeepGEMM's per_block_cast_to_fp8 (check_converted.py's, on CUDA) and
requires the output's X.weight and its scale tensor to hold exactly those
bytes; it counts the 128x128 blocks whose torch dequantization (fp8.float() *
scale) equals the MXFP4 values and requires convert's --json counts to match.
Exit status 0 when everything holds, 1 otherwise.
"""

import argparse
import json
import os
import sys

import torch
from safetensors import safe_open

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), os.path.join("convert", "testdata")]
from check_converted import BLOCK, expand, per_block_cast_to_fp8, raw_bytes  # noqa: E402

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float32)
SCALE = {"deepseek": "weight_scale_inv", "compressed-tensors": "weight_scale", "modelopt": "weight_scale"}
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def decode_mxfp4(packed, scales):
    n, half = packed.shape
    k = 2 * half
    p = packed.to(torch.int64)
    codes = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(n, k)
    mag = E2M1[codes & 7]
    val = torch.where(codes >= 8, -mag, mag)
    s = torch.pow(torch.tensor(2.0, dtype=torch.float64), scales.to(torch.float64) - 127).to(torch.float32)
    return (val * s.repeat_interleave(32, dim=1)).to(torch.bfloat16)


def shards(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    src = {}
    for path in shards(os.path.join(a.work, "rel")):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                if name.endswith(".weight_packed"):
                    base = name[: -len(".weight_packed")]
                    src[base] = (os.path.basename(path), f.get_tensor(name), f.get_tensor(base + ".weight_scale"))
    results, failures = {}, []
    for run in ("deepseek-fp32", "deepseek-ue8m0", "compressed-tensors-ue8m0", "modelopt-fp32"):
        fmt, sfmt = run.rsplit("-", 1)
        ue8m0 = sfmt == "ue8m0"
        out = os.path.join(a.work, run)
        cfg = open(os.path.join(out, "config.json")).read()
        if "mxfp4-pack-quantized" in cfg:
            failures.append(f"{run}: config.json still declares mxfp4-pack-quantized")
        blocks = lossless = tensors = 0
        handles = {}
        for base, (shard, packed, scales) in sorted(src.items()):
            f = handles.get(shard) or handles.setdefault(shard, safe_open(os.path.join(out, shard), framework="pt"))
            x = decode_mxfp4(packed, scales)
            q, sf = per_block_cast_to_fp8(x, ue8m0)
            got_q = f.get_tensor(base + ".weight")
            got_s = f.get_tensor(base + "." + SCALE[fmt]).reshape(sf.shape)
            if got_q.dtype != torch.float8_e4m3fn or not torch.equal(raw_bytes(got_q), raw_bytes(q)):
                failures.append(f"{run}: {base}.weight differs from torch's cast")
            if not torch.equal(raw_bytes(got_s.float()), raw_bytes(sf)):
                failures.append(f"{run}: {base} scales differ from torch's cast")
            m, n = x.shape
            back = (q.to(DEV).float() * expand(sf.to(DEV), m, n))
            same = back == x.to(DEV).float()
            pm, pn = -(-m // BLOCK) * BLOCK, -(-n // BLOCK) * BLOCK
            pad = torch.ones((pm, pn), dtype=torch.bool, device=DEV)
            pad[:m, :n] = same
            ok = pad.view(pm // BLOCK, BLOCK, pn // BLOCK, BLOCK).all(dim=3).all(dim=1)
            blocks += ok.numel()
            lossless += int(ok.sum())
            tensors += 1
        want = json.load(open(os.path.join(a.work, run + ".json")))["fp8_experts"]
        mine = {"tensors": tensors, "blocks": blocks, "lossless": lossless, "lossy": blocks - lossless}
        if {k: want[k] for k in mine} != mine:
            failures.append(f"{run}: convert counts {want}, torch counts {mine}")
        results[run] = {"torch": mine, "convert": want}
        print(run, mine, "convert:", want)
    results["failures"] = failures
    results["torch"] = torch.__version__
    results["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    json.dump(results, open(a.out, "w"), indent=2)
    for f in failures[:20]:
        print("FAIL:", f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
