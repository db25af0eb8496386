#!/usr/bin/env python3
"""Check a k3ckpt conversion independently, with PyTorch and safetensors.

    check_converted.py SRC DST [--verify-json VERIFY.json] [--out SUMMARY.json]

SRC is the BF16/MXFP4 source checkpoint, DST what `k3ckpt convert` wrote from
it. The script reads both with `safetensors.safe_open(..., framework="pt")` and
checks, without any k3ckpt code:

  * every shard loads; shard names, index (weight_map, total_size) and the
    manifest's sizes and sha256 match the files;
  * every tensor the ATTN-MOE-DENSE-FP8 recipe (SPEC section 2) keeps is
    bit-identical to the source (the MXFP4 experts among them);
  * every tensor it quantizes is F8_E4M3 with a float32 scale of the name and
    shape of the convention recorded in the manifest, and its bytes and scales
    are bit-identical to PyTorch's own block quantization (DeepGEMM's
    per_block_cast_to_fp8, SPEC section 3, with ceil_to_ue8m0 for UE8M0);
  * torch's dequantization (fp8.float() * scale per 128x128 block) against the
    source gives, per tensor, the same max abs error, max relative error per
    block and SNR as `k3ckpt verify --json` (when --verify-json is given);
  * config.json (and hf_quant_config.json) describe the formats as the engines
    read them.

Exit status 0 when everything holds, 1 otherwise. Needs torch >= 2.1 (float8)
and safetensors >= 0.4; runs on CPU.
"""

import argparse
import hashlib
import json
import math
import os
import re
import sys

import torch
from safetensors import safe_open

BLOCK = 128
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
QUANT_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SCALE_SUFFIX = {"deepseek": "weight_scale_inv", "compressed-tensors": "weight_scale", "modelopt": "weight_scale"}

# The recipe, written out again from SPEC section 2 (not read from k3ckpt).
LAYER = r"^(?:.*\.)?layers\.\d+\."
QUANTIZED = [
    re.compile(LAYER + r"self_attn\.(?:q_proj|k_proj|v_proj|g_proj|o_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\.weight$"),
    re.compile(LAYER + r"block_sparse_moe\.shared_experts\.(?:gate_proj|up_proj|down_proj)\.weight$"),
    re.compile(LAYER + r"block_sparse_moe\.routed_expert_(?:down_proj|up_proj)\.weight$"),
    re.compile(LAYER + r"mlp\.(?:gate_proj|up_proj|down_proj)\.weight$"),
]

failures = []


def fail(msg):
    failures.append(msg)
    if len(failures) <= 50:
        print("FAIL:", msg, file=sys.stderr)


def quantized(name):
    return any(p.match(name) for p in QUANTIZED)


def raw_bytes(t):
    """The tensor's bytes as a flat uint8 tensor (NaN-safe comparisons)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def ceil_to_ue8m0(sf):
    """SPEC section 3: the float32 exponent, plus one if any mantissa bit is set, clamped to [1, 254]."""
    bits = sf.contiguous().view(torch.int32)
    exp = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exp.clamp(1, 254) << 23).view(torch.float32)


def per_block_cast_to_fp8(x, ue8m0):
    """DeepGEMM's per_block_cast_to_fp8: zero-pad to 128 multiples, amax per
    128x128 block (fp32, floored at 1e-4), sf = amax/448 (UE8M0: rounded up to
    a power of two), q = fp8(x * (1/sf)) with the product in fp32."""
    # DeepGEMM runs on the GPU, and torch's CUDA division by a scalar
    # multiplies by its fp32 reciprocal where the CPU divides exactly: the two
    # can differ in the last bit of a fp32 scale. The GPU is the reference.
    m, n = x.shape
    pm, pn = -(-m // BLOCK) * BLOCK, -(-n // BLOCK) * BLOCK
    xp = torch.zeros((pm, pn), dtype=x.dtype, device=QUANT_DEVICE)
    xp[:m, :n] = x.to(QUANT_DEVICE)
    xv = xp.view(pm // BLOCK, BLOCK, pn // BLOCK, BLOCK)
    amax = xv.abs().float().amax(dim=(1, 3), keepdim=True).clamp(min=AMAX_FLOOR)
    sf = amax / FP8_MAX
    if ue8m0:
        sf = ceil_to_ue8m0(sf)
    q = (xv.float() * (1.0 / sf)).to(torch.float8_e4m3fn)
    return q.view(pm, pn)[:m, :n].contiguous().cpu(), sf.view(pm // BLOCK, pn // BLOCK).cpu()


def expand(sf, m, n):
    return sf.repeat_interleave(BLOCK, 0)[:m].repeat_interleave(BLOCK, 1)[:, :n]


def dequant_stats(x, q, sf):
    """The statistics `k3ckpt verify` reports, computed with torch."""
    m, n = x.shape
    deq = q.float() * expand(sf, m, n)  # fp32 product, as any engine does
    x64 = x.double()
    err = (x64 - deq.double()).abs()
    nan = int(torch.isnan(deq).sum())
    err = torch.nan_to_num(err, nan=0.0)
    pm, pn = -(-m // BLOCK) * BLOCK, -(-n // BLOCK) * BLOCK
    ep = torch.zeros((pm, pn), dtype=torch.float64)
    ep[:m, :n] = err
    xp = torch.zeros((pm, pn), dtype=torch.float64)
    xp[:m, :n] = x64.abs()
    be = ep.view(pm // BLOCK, BLOCK, pn // BLOCK, BLOCK).amax(dim=(1, 3))
    bx = xp.view(pm // BLOCK, BLOCK, pn // BLOCK, BLOCK).amax(dim=(1, 3))
    rel = torch.where(bx > 0, be / torch.where(bx > 0, bx, torch.ones_like(bx)), torch.zeros_like(bx))
    s = expand(sf.double(), m, n)
    bound = (x64.abs() / 16 + s / 1024) * (1 + 1.0 / 1024)
    e2 = float((err * err).sum())
    snr = 10 * math.log10(float((x64 * x64).sum()) / e2) if e2 > 0 else None
    return {
        "max_abs": float(err.max()),
        "max_rel_block": float(rel.max()),
        "snr_db": snr,
        "over_bound": int((err > bound).sum()),
        "nan": nan,
    }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_json(path):
    with open(path) as f:
        return json.load(f)


def check_config(dst, fmt, scale_fmt):
    cfg = load_json(os.path.join(dst, "config.json"))
    qc = cfg.get("quantization_config") or {}
    ue8m0 = scale_fmt == "ue8m0"
    if fmt == "deepseek":
        ok = (qc.get("quant_method") == "fp8" and qc.get("fmt") == "e4m3" and qc.get("activation_scheme") == "dynamic"
              and qc.get("weight_block_size") == [128, 128] and (qc.get("scale_fmt") == "ue8m0") == ue8m0
              and isinstance(qc.get("ignored_layers"), list) and qc.get("modules_to_not_convert") == qc.get("ignored_layers"))
        if not ok:
            fail("config.json: deepseek quantization_config fields wrong: %s" % {k: v for k, v in qc.items() if not isinstance(v, (list, dict))})
    elif fmt == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        fp8 = [g for g in groups.values() if g.get("format") == "float-quantized"]
        if qc.get("quant_method") != "compressed-tensors" or len(fp8) != 1:
            fail("config.json: compressed-tensors config without one float-quantized group")
        else:
            w = fp8[0].get("weights", {})
            if not (w.get("num_bits") == 8 and w.get("type") == "float" and w.get("strategy") == "block" and w.get("block_structure") == [128, 128]):
                fail("config.json: FP8 group weights %s" % w)
    elif fmt == "modelopt":
        hf = load_json(os.path.join(dst, "hf_quant_config.json"))
        sec = hf.get("quantization", {})
        if hf.get("producer", {}).get("name") != "modelopt" or sec.get("quant_algo") != "MIXED_PRECISION":
            fail("hf_quant_config.json: producer/quant_algo wrong")
        algos = {v.get("quant_algo") for v in sec.get("quantized_layers", {}).values()}
        if "FP8_PB_WO" not in algos:
            fail("hf_quant_config.json: no FP8_PB_WO layer")
        # NVIDIA's Kimi-K3 exporter writes quant_method "modelopt_mixed" at the
        # top level and removes text_config.quantization_config.
        if qc.get("quant_method") != "modelopt_mixed":
            fail("config.json: quant_method %r, want modelopt_mixed" % qc.get("quant_method"))
        if "quantization_config" in cfg.get("text_config", {}):
            fail("config.json: text_config.quantization_config still present")
    return qc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--verify-json", help="`k3ckpt verify --json` output to compare statistics with")
    ap.add_argument("--out", help="write a JSON summary here")
    args = ap.parse_args()
    src, dst = args.src, args.dst

    manifest = load_json(os.path.join(dst, "k3ckpt-manifest.json"))
    fmt, scale_fmt = manifest["format"], manifest["scale_fmt"]
    suffix = SCALE_SUFFIX[fmt]
    print("DST %s: recipe %s, format %s, scales %s, %d files in the manifest" % (dst, manifest["recipe"], fmt, scale_fmt, len(manifest["files"])))

    # Manifest: size and sha256 of every file.
    for rec in manifest["files"]:
        p = os.path.join(dst, rec["name"])
        if not os.path.exists(p):
            fail("manifest lists missing file %s" % rec["name"])
        elif os.path.getsize(p) != rec["size"] or sha256(p) != rec["sha256"]:
            fail("%s: size or sha256 differs from the manifest" % rec["name"])

    src_index = load_json(os.path.join(src, "model.safetensors.index.json"))
    dst_index = load_json(os.path.join(dst, "model.safetensors.index.json"))
    src_shards = sorted(set(src_index["weight_map"].values()))
    dst_shards = sorted(set(dst_index["weight_map"].values()))
    if src_shards != dst_shards:
        fail("output shards differ from the source's")
    check_config(dst, fmt, scale_fmt)

    verify = {}
    if args.verify_json:
        rep = load_json(args.verify_json)
        verify = {t["name"]: t for t in rep.get("tensors", [])}
        if not rep.get("ok"):
            fail("verify report says not ok: %s" % rep.get("violations"))

    n_kept = n_fp8 = n_stats = 0
    worst_rel, min_snr = 0.0, None
    expected = set()
    for shard in src_shards:
        with safe_open(os.path.join(src, shard), framework="pt") as fs, safe_open(os.path.join(dst, shard), framework="pt") as fd:
            dnames = set(fd.keys())
            for name in fs.keys():
                x = fs.get_tensor(name)
                if not quantized(name):
                    expected.add(name)
                    if name not in dnames:
                        fail("%s: kept tensor missing" % name)
                        continue
                    y = fd.get_tensor(name)
                    if y.dtype != x.dtype or y.shape != x.shape or not torch.equal(raw_bytes(x), raw_bytes(y)):
                        fail("%s: kept tensor differs from the source" % name)
                    n_kept += 1
                    continue
                scale_name = name[: -len("weight")] + suffix
                expected.update((name, scale_name))
                if name not in dnames or scale_name not in dnames:
                    fail("%s: FP8 weight or its scale %s missing" % (name, scale_name))
                    continue
                q, s = fd.get_tensor(name), fd.get_tensor(scale_name)
                m, n = x.shape
                nb, kb = -(-m // BLOCK), -(-n // BLOCK)
                want_shape = (nb, 1, kb, 1) if fmt == "modelopt" else (nb, kb)
                if q.dtype != torch.float8_e4m3fn or tuple(q.shape) != (m, n):
                    fail("%s: %s %s, want float8_e4m3fn %s" % (name, q.dtype, tuple(q.shape), (m, n)))
                    continue
                if s.dtype != torch.float32 or tuple(s.shape) != want_shape:
                    fail("%s: %s %s, want float32 %s" % (scale_name, s.dtype, tuple(s.shape), want_shape))
                    continue
                s = s.reshape(nb, kb)
                ref_q, ref_s = per_block_cast_to_fp8(x, scale_fmt == "ue8m0")
                if not torch.equal(raw_bytes(q), raw_bytes(ref_q)):
                    bad = int((raw_bytes(q) != raw_bytes(ref_q)).sum())
                    fail("%s: %d FP8 bytes differ from torch's per_block_cast_to_fp8" % (name, bad))
                if not torch.equal(raw_bytes(s), raw_bytes(ref_s)):
                    fail("%s: scales differ from torch's per_block_cast_to_fp8" % scale_name)
                st = dequant_stats(x, q, s)
                n_fp8 += 1
                worst_rel = max(worst_rel, st["max_rel_block"])
                if st["snr_db"] is not None:
                    min_snr = st["snr_db"] if min_snr is None else min(min_snr, st["snr_db"])
                if st["over_bound"] or st["nan"]:
                    fail("%s: %d values beyond the FP8 rounding bound, %d NaN" % (name, st["over_bound"], st["nan"]))
                if verify:
                    v = verify.get(name)
                    if v is None:
                        fail("%s: not in the verify report" % name)
                    else:
                        n_stats += 1
                        for key in ("max_abs", "max_rel_block"):
                            if v[key] != st[key]:
                                fail("%s: %s torch %r, verify %r" % (name, key, st[key], v[key]))
                        a, b = st["snr_db"], v["snr_db"]
                        if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-9 * max(1.0, abs(a))):
                            fail("%s: snr_db torch %r, verify %r" % (name, a, b))
            extra = dnames - expected
            for e in sorted(extra):
                if e not in fs.keys():
                    fail("%s: %s is not an output of the recipe" % (shard, e))
    # Index: every tensor mapped to the shard that holds it, total_size the sum.
    size = 0
    for shard in dst_shards:
        with safe_open(os.path.join(dst, shard), framework="pt") as fd:
            for name in fd.keys():
                t = fd.get_slice(name)
                numel = 1
                for d in t.get_shape():
                    numel *= d
                size += numel * {"F8_E4M3": 1, "U8": 1, "I8": 1, "BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F64": 8, "I64": 8}[t.get_dtype()]
                if dst_index["weight_map"].get(name) != shard:
                    fail("index maps %s to %s, it is in %s" % (name, dst_index["weight_map"].get(name), shard))
    if dst_index["metadata"]["total_size"] != size:
        fail("index total_size %d, shards hold %d" % (dst_index["metadata"]["total_size"], size))
    if len(dst_index["weight_map"]) != len(expected):
        fail("index lists %d tensors, the recipe gives %d" % (len(dst_index["weight_map"]), len(expected)))

    summary = {
        "ok": not failures, "format": fmt, "scale_fmt": scale_fmt, "kept_identical": n_kept, "fp8_tensors": n_fp8,
        "stats_matched_verify": n_stats, "worst_block_rel_error": worst_rel, "min_snr_db": min_snr,
        "torch": torch.__version__, "failures": failures[:100], "failure_count": len(failures),
    }
    print("kept tensors bit-identical: %d; FP8 tensors bit-identical to torch: %d; statistics equal to verify's: %d; worst block rel error %.5f; min SNR %s dB"
          % (n_kept, n_fp8, n_stats, worst_rel, "%.2f" % min_snr if min_snr is not None else "inf"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
    print("OK" if not failures else "FAILED: %d problems" % len(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
