"""Goldens for quant's ModelOpt numerics, made by NVIDIA's own converter functions.

Runs on the GPU machine (torch 2.11) over NVIDIA Model-Optimizer's files laid out by mo_stub.py:

    python3 gen_goldens.py --modelopt <dir with the fetched files> --out goldens.json.gz

It calls, unchanged:
- FP8_PB_WO: `_quantize_weight_fp8_pb(weight, device)` of examples/kimi/kimi_k3/quantize_to_nvfp4.py
  (FP8QTensor.quantize with 128x128 blocks; scale reshaped [nb_n, 1, nb_k, 1] and widened to
  float32) on crafted BF16 matrices, on CPU and, where a GPU is present, on CUDA;
- MXFP4 -> NVFP4: `mxfp4_kmax`, `build_w13_kmax_overrides` and
  `quantize_mxfp4_to_nvfp4_lossless(weight_packed, weight_scale, k_max, device)` of
  examples/_shard_cast_utils.py on crafted expert tensors (out-of-range blocks, -0 codes, zero
  scale bytes with and without non-zero codes, K_max at both ends, shared w1/w3 K_max);
- NVFP4QTensor.dequantize (float32) of the cast results, and the MXFP4 dequantization to BF16.

Every array is stored as hex of its little-endian bytes. Inputs are stored too, so the Go tests
need no generator; the one big FP8 case ("amax_sweep", 128 x 524288) is stored as its non-zero
elements only (every other element is +0 and its FP8 byte must be 0x00, which the script checks).
"""

import argparse
import gzip
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import traceback

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import mo_stub  # noqa: E402


def hexb(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn):
        t = t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t.view(torch.int16)
    return t.numpy().tobytes().hex()


def load_modules(src):
    root = mo_stub.build(src, os.path.join(tempfile.mkdtemp(), "mo"))
    sys.path.insert(0, root)
    import examples._shard_cast_utils as scu  # noqa: E402
    from modelopt.torch.quantization.qtensor import NVFP4QTensor  # noqa: E402

    path = os.path.join(root, "examples/kimi/kimi_k3/quantize_to_nvfp4.py")
    spec = importlib.util.spec_from_file_location("quantize_to_nvfp4", path)
    q2n = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(q2n)
    return scu, q2n, NVFP4QTensor


def i16(x):
    """A 16-bit pattern as the signed value torch.int16 stores it."""
    return x - 0x10000 if x >= 0x8000 else x


def bf16_from_bits(bits):
    return torch.tensor([i16(b) for b in bits], dtype=torch.int16).view(torch.bfloat16)


def fp8_cases(gen):
    """Crafted BF16 matrices: (name, tensor)."""
    cases = []
    cases.append(("random_300x200", (torch.randn(300, 200, generator=gen) * 0.02).to(torch.bfloat16)))
    cases.append(("tiny_1x1", torch.tensor([[0.75]], dtype=torch.bfloat16)))
    cases.append(("col_129x1", torch.randn(129, 1, generator=gen).to(torch.bfloat16)))
    # 256x256 = four tiles: all-zero (+0 and -0), zeros mixed with values, huge, subnormal.
    e = torch.zeros(256, 256, dtype=torch.float32)
    e[:128, :128] = 0.0
    e[5, 7] = -0.0
    z = torch.randn(128, 128, generator=gen)
    z[torch.rand(128, 128, generator=gen) < 0.5] = 0.0
    z[torch.rand(128, 128, generator=gen) < 0.2] = -0.0
    e[:128, 128:] = z
    e[128:, :128] = torch.randn(128, 128, generator=gen) * 1e38
    e[128:, 128:] = 0.0
    t = e.to(torch.bfloat16)
    # bottom-right tile: bf16 subnormals, largest 0x0003 (amax/448 rounds to 0 in bf16) ...
    t[128, 128] = bf16_from_bits([0x0003])[0]
    t[129, 130] = bf16_from_bits([0x8001])[0]
    cases.append(("edges_256x256", t))
    # a tile whose subnormal amax gives a non-zero bf16 scale
    s = torch.zeros(128, 130, dtype=torch.bfloat16)
    s[0, 0] = bf16_from_bits([0x007F])[0]
    s[3, 9] = bf16_from_bits([0x8040])[0]
    s[1, 129] = torch.tensor(448.0, dtype=torch.bfloat16)
    s[2, 128] = torch.tensor(-464.0, dtype=torch.bfloat16)
    s[7, 128] = torch.tensor(1.0, dtype=torch.bfloat16)
    cases.append(("subnormal_128x130", s))
    # values with many exponents in one tile (FP8 subnormals after scaling)
    w = torch.randn(192, 384, generator=gen) * torch.exp2(torch.randint(-20, 5, (192, 384), generator=gen).float())
    cases.append(("wide_192x384", w.to(torch.bfloat16)))
    return cases


def amax_sweep(gen, tiles):
    """One row band of `tiles` 128x128 tiles; tile t holds amax pattern a_t and one value b_t."""
    pats = list(range(0x0001, 0x7F80, max(1, 0x7F7F // (tiles - 64))))[: tiles - 64]
    pats += [0x0001, 0x0002, 0x0003, 0x0004, 0x007F, 0x0080, 0x0081, 0x3F80, 0x43E0, 0x43E8, 0x7F7F]
    pats += [0x3F80 + i for i in range(1, 64 - 11 + 1)]
    pats = pats[:tiles]
    n = len(pats)
    m = torch.zeros(128, 128 * n, dtype=torch.int16)
    elems = []
    for t, a in enumerate(pats):
        sign_a = 0x8000 if (t % 3 == 1) else 0
        b = int(torch.randint(0, a + 1, (1,), generator=gen).item())
        sign_b = 0x8000 if (t % 2 == 1) else 0
        ra, ca = t % 128, t * 128 + (t * 7) % 128
        rb, cb = (t + 64) % 128, t * 128 + (t * 13 + 5) % 128
        m[ra, ca] = i16(a | sign_a)
        m[rb, cb] = i16(b | sign_b)
        elems.append((ra, ca, a | sign_a))
        elems.append((rb, cb, b | sign_b))
    return m.view(torch.bfloat16), elems


def run_fp8(q2n, devices, gen, out):
    for name, w in fp8_cases(gen):
        rec = {"name": name, "shape": list(w.shape), "input": hexb(w)}
        for dev in devices:
          try:
            q, s = q2n._quantize_weight_fp8_pb(w, dev)
            assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32, (q.dtype, s.dtype)
            rec[dev] = dedupe({"q": hexb(q), "scale": hexb(s), "scale_shape": list(s.shape)}, rec.get("cpu"))
          except Exception:
            out["errors"].append({"part": f"fp8_pb {name} {dev}", "trace": traceback.format_exc()})
            traceback.print_exc()
        out["fp8_pb"].append(rec)
    w, elems = amax_sweep(gen, 4096)
    rec = {"name": "amax_sweep", "shape": list(w.shape), "elements": elems}
    for dev in devices:
        q, s = q2n._quantize_weight_fp8_pb(w, dev)
        qb = q.view(torch.uint8).cpu()
        vals = [int(qb[r, c].item()) for r, c, _ in elems]
        mask = torch.ones_like(qb, dtype=torch.bool)
        for r, c, _ in elems:
            mask[r, c] = False
        others = qb[mask]
        rec[dev] = dedupe({
            "q_at_elements": vals,
            "other_bytes_nonzero": int((others != 0).sum().item()),
            "scale": hexb(s),
            "scale_shape": list(s.shape),
        }, rec.get("cpu"))
    out["fp8_pb"].append(rec)


def dedupe(rec, cpu):
    """A CUDA result identical to the CPU one is stored as {"same_as_cpu": true}."""
    if cpu is not None and rec == cpu:
        return {"same_as_cpu": True}
    return rec


def mx_tensor(gen, rows, k, lo, hi, zero_frac=0.0, code_zero_for_byte0=False, neg_zero_frac=0.05):
    """Random MXFP4 weight_packed [rows, k/2] and weight_scale [rows, k/32] with bytes in [lo, hi]."""
    codes = torch.randint(0, 16, (rows, k), generator=gen, dtype=torch.int32)
    codes[torch.rand(rows, k, generator=gen) < neg_zero_frac] = 8
    scales = torch.randint(lo, hi + 1, (rows, k // 32), generator=gen, dtype=torch.int32)
    if zero_frac:
        scales[torch.rand(rows, k // 32, generator=gen) < zero_frac] = 0
    if code_zero_for_byte0:
        codes.view(rows, k // 32, 32)[scales == 0] = 0
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return packed, scales.to(torch.uint8)


def nvfp4_cases(gen):
    """(name, {proj: (packed, scale)}, extra k_max overrides or None)."""
    c = []
    w1 = mx_tensor(gen, 64, 256, 110, 124)
    w3 = mx_tensor(gen, 64, 256, 112, 127)
    w2 = mx_tensor(gen, 32, 512, 100, 122, zero_frac=0.05, code_zero_for_byte0=True)
    c.append(("typical", {"w1": w1, "w3": w3, "w2": w2}))
    # out-of-range blocks (k < K-17), zero scale bytes with non-zero codes
    w1 = mx_tensor(gen, 48, 384, 60, 130, zero_frac=0.1)
    w3 = mx_tensor(gen, 48, 384, 90, 140, zero_frac=0.1, code_zero_for_byte0=True)
    w2 = mx_tensor(gen, 24, 768, 1, 127, zero_frac=0.1)
    c.append(("oor", {"w1": w1, "w3": w3, "w2": w2}))
    # all scale bytes 0: K_max is 0 by NVIDIA's rule; w1 has zero codes, w3 non-zero codes
    z1 = mx_tensor(gen, 16, 64, 0, 0, code_zero_for_byte0=True)
    z3 = mx_tensor(gen, 16, 64, 0, 0)
    z2 = mx_tensor(gen, 16, 64, 0, 0, neg_zero_frac=0.5)
    c.append(("allzero", {"w1": z1, "w3": z3, "w2": z2}))
    # one projection all-zero scales, its partner tiny: shared K_max = max(0, K3)
    a1 = mx_tensor(gen, 16, 64, 0, 0)
    a3 = mx_tensor(gen, 16, 64, 80, 100)
    c.append(("w1_zero_w3_small", {"w1": a1, "w3": a3}))
    # K_max at the low end: bytes 0..17 (K = -110, subnormal float32 scales)
    l1 = mx_tensor(gen, 16, 128, 0, 17)
    l3 = mx_tensor(gen, 16, 128, 0, 9)
    l2 = mx_tensor(gen, 16, 128, 1, 1)
    c.append(("kmax_low", {"w1": l1, "w3": l3, "w2": l2}))
    # K_max at the high end: bytes up to 254 (K = 127; 2.0*2^127 overflows float32)
    h1 = mx_tensor(gen, 16, 128, 200, 254)
    h3 = mx_tensor(gen, 16, 128, 230, 250)
    h2 = mx_tensor(gen, 8, 1024, 1, 254)
    c.append(("kmax_high", {"w1": h1, "w3": h3, "w2": h2}))
    # every scale byte 0..top, each block holding every code twice; top sets K_max
    codes = torch.arange(16, dtype=torch.int32).repeat(2)
    block = (codes[0::2] | (codes[1::2] << 4)).to(torch.uint8)
    for top in (254, 200, 127, 60, 18, 17, 1):
        packed = block.repeat(top + 1).reshape(1, 16 * (top + 1))
        scale = torch.arange(top + 1, dtype=torch.int32).to(torch.uint8).reshape(1, top + 1)
        c.append((f"every_byte_{top}", {"w2": (packed, scale)}))
    return c


def run_nvfp4(scu, NVFP4QTensor, devices, gen, out):
    for name, projs in nvfp4_cases(gen):
      try:
        rec = {"name": name, "inputs": {}, "results": {}}
        for p, (packed, scale) in projs.items():
            rec["inputs"][p] = {"packed": hexb(packed), "scale": hexb(scale), "shape": list(packed.shape)}
        base = {p: f"layers.1.block_sparse_moe.experts.0.{p}" for p in projs}
        for dev in devices:
            own = {p: scu.mxfp4_kmax(s, dev) for p, (_, s) in projs.items()}
            shared = scu.build_w13_kmax_overrides(
                [base[p] for p in projs], lambda b: projs[b.rsplit(".", 1)[1]][1], dev
            )
            r = {"kmax_own": own, "kmax_shared": {b.rsplit(".", 1)[1]: k for b, k in shared.items()}, "proj": {}}
            for p, (packed, scale) in projs.items():
                kmaxes = {shared.get(base[p], own[p])}
                if name.startswith("every_byte") and own[p] < 127:
                    kmaxes |= {own[p] + 1, own[p] + 9, min(127, own[p] + 17), min(127, own[p] + 18)}
                for km in sorted(kmaxes):
                    wq, ws, ws2, nb, nl = scu.quantize_mxfp4_to_nvfp4_lossless(packed, scale, km, dev)
                    assert wq.dtype == torch.uint8 and ws.dtype == torch.float8_e4m3fn, (wq.dtype, ws.dtype)
                    assert ws2.dtype == torch.float32 and ws2.shape == (), (ws2.dtype, ws2.shape)
                    deq = NVFP4QTensor(torch.Size((wq.shape[0], wq.shape[1] * 2)), torch.float32, wq).dequantize(
                        dtype=torch.float32, scale=ws, double_scale=ws2, block_sizes={-1: 16}
                    )
                    mx = scu.dequantize_mxfp4_to_bf16(packed, scale, dev)
                    r["proj"][f"{p}@{km}"] = {
                        "kmax": km,
                        "weight": hexb(wq),
                        "weight_scale": hexb(ws),
                        "weight_scale_2": hexb(ws2.reshape(1)),
                        "n_blocks": nb,
                        "n_lossless": nl,
                        "dequant_f32": hexb(deq),
                        "mxfp4_bf16": hexb(mx),
                    }
            rec["results"][dev] = dedupe(r, rec["results"].get("cpu"))
        out["nvfp4"].append(rec)
      except Exception:
        out["errors"].append({"part": f"nvfp4 {name}", "trace": traceback.format_exc()})
        traceback.print_exc()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modelopt", required=True, help="folder holding the fetched Model-Optimizer files")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t0 = time.time()
    scu, q2n, NVFP4QTensor = load_modules(args.modelopt)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    commit = open(os.path.join(args.modelopt, "COMMIT")).read().strip() if os.path.exists(
        os.path.join(args.modelopt, "COMMIT")) else "unknown"
    out = {
        "made_by": "scripts/device/modelopt/gen_goldens.py",
        "modelopt_commit": commit,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "devices": devices,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "fp8_pb": [],
        "nvfp4": [],
        "errors": [],
    }
    for part, fn in (("fp8_pb", lambda: run_fp8(q2n, devices, torch.Generator().manual_seed(1), out)),
                     ("nvfp4", lambda: run_nvfp4(scu, NVFP4QTensor, devices, torch.Generator().manual_seed(2), out))):
        try:
            fn()
        except Exception:
            out["errors"].append({"part": part, "trace": traceback.format_exc()})
            traceback.print_exc()
    out["seconds"] = round(time.time() - t0, 1)
    with gzip.open(args.out, "wt") as f:
        json.dump(out, f)
    print("wrote", args.out, "errors:", len(out["errors"]), "seconds:", out["seconds"])


if __name__ == "__main__":
    main()
