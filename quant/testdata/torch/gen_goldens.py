#!/usr/bin/env python3
"""Golden vectors for k3ckpt's quant package, made with PyTorch (the authority).

Usage: python3 gen_goldens.py OUTDIR     (needs torch >= 2.7 and, for the CUDA
cross-checks, a GPU; writes OUTDIR/manifest.json and OUTDIR/goldens.bin.gz)

What it computes, each the way the reference does it:
  * torch casts: every BF16 -> FP8 E4M3FN, every FP8 -> F32, every F16 -> F32,
    every E8M0 -> F32; every one of the 2^32 F32 bit patterns -> FP8 E4M3FN and
    -> BF16 (hashed: 256 chunks of 2^24 inputs, sha256 per chunk, the digest of
    the concatenated chunk digests is the golden).
  * DeepGEMM's per_block_cast_to_fp8 (deep_gemm/utils/math.py), restated below
    line for line: zero-pad to multiples of 128, amax per 128x128 block in fp32,
    clamp(1e-4), sf = amax / 448, optional ceil_to_ue8m0, x * (1 / sf) in fp32,
    cast to float8_e4m3fn. Run on CPU and on CUDA; both results are recorded.
  * DeepGEMM's SM100 scale layout (transform_sf_into_required_layout: broadcast
    the block scale to one row per output row; the torch path of
    get_mn_major_tma_aligned_packed_ue8m0_tensor: exponent bytes, zero padded to
    [align(N, 4), align(sf_k, 4)], viewed as int32, stored MN-major). The golden
    is the physical int32 buffer [ceil(sf_k / 4), align(N, 4)].
  * MXFP4 (compressed-tensors mxfp4-pack-quantized): decode with the E2M1 table
    times torch's float8_e8m0fnu scale; encode with SPEC section 3's scale rule
    (exponent = ceil(log2(amax / 6)), clamped to [-127, 127]) and round to
    nearest even on the E2M1 grid (compressed-tensors' cast_to_fp4 thresholds).

Inputs are not stored: both sides regenerate them from a counter-based
generator (splitmix64 of seed + (i + 1) * 0x9E3779B97F4A7C15 for element i of a
region, row-major within the region): sign = bit 63, biased exponent =
ELo + (low 32 bits mod (EHi - ELo + 1)), mantissa = the low mantissa bits of the
high 32 bits; "const" regions hold one bit pattern; patches set single elements.
"""
import gzip
import hashlib
import json
import os
import sys
import time
import traceback

import numpy as np
import torch

GAMMA = np.uint64(0x9E3779B97F4A7C15)
BLOCK = 128
HAS_CUDA = torch.cuda.is_available()
DEV = "cuda" if HAS_CUDA else "cpu"

sections = []  # (name, bytes)


def section(name, data):
    sections.append((name, bytes(data)))


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


# ---------------------------------------------------------------- generator
def splitmix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


ELEM = {  # name: (numpy bits dtype, mantissa bits, torch dtype)
    "BF16": (np.uint16, 7, torch.bfloat16),
    "F16": (np.uint16, 10, torch.float16),
    "F32": (np.uint32, 23, torch.float32),
}


def build(case):
    bits_t, mbits, _ = ELEM[case["elem"]]
    a = np.zeros((case["n"], case["k"]), dtype=np.uint64)
    for g in case["regions"]:
        h, w = g["R1"] - g["R0"], g["C1"] - g["C0"]
        if g.get("Kind") == "const":
            a[g["R0"]:g["R1"], g["C0"]:g["C1"]] = g["Bits"]
            continue
        i = np.arange(h * w, dtype=np.uint64).reshape(h, w)
        with np.errstate(over="ignore"):
            u = splitmix(np.uint64(g["Seed"]) + (i + np.uint64(1)) * GAMMA)
        span = np.uint64(g["EHi"] - g["ELo"] + 1)
        sign = u >> np.uint64(63)
        exp = np.uint64(g["ELo"]) + (u & np.uint64(0xFFFFFFFF)) % span
        man = (u >> np.uint64(32)) & np.uint64((1 << mbits) - 1)
        nbits = 16 if bits_t is np.uint16 else 32
        a[g["R0"]:g["R1"], g["C0"]:g["C1"]] = (sign << np.uint64(nbits - 1)) | (exp << np.uint64(mbits)) | man
    for r, c, b in case.get("Patches", []):
        a[r, c] = b
    return a.astype(bits_t)


def to_torch(bits, elem):
    _, _, tdt = ELEM[elem]
    if bits.dtype == np.uint16:
        return torch.from_numpy(bits.view(np.int16).copy()).view(tdt)
    return torch.from_numpy(bits.view(np.int32).copy()).view(tdt)


def u8(t):
    return t.contiguous().view(torch.uint8).cpu().numpy().tobytes()


# ------------------------------------------------- DeepGEMM reference, restated
def ceil_div(x, y):
    return (x + y - 1) // y


def align(x, y):
    return ceil_div(x, y) * y


def ceil_to_ue8m0(x):
    bits = x.abs().float().view(torch.int)
    exp = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
    return (exp.clamp(1, 254) << 23).view(torch.float)


def per_block_cast_to_fp8(x, use_ue8m0, gran_k=128):
    m, n = x.shape
    x_padded = torch.zeros((align(m, gran_k), align(n, gran_k)), dtype=x.dtype, device=x.device)
    x_padded[:m, :n] = x
    x_view = x_padded.view(-1, gran_k, x_padded.size(1) // gran_k, gran_k)
    x_amax = x_view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    sf = x_amax / 448.0
    sf = ceil_to_ue8m0(sf) if use_ue8m0 else sf
    x_scaled = (x_view * (1.0 / sf)).to(torch.float8_e4m3fn)
    return x_scaled.view_as(x_padded)[:m, :n].contiguous(), sf.view(x_view.size(0), x_view.size(2))


def packed_ue8m0_physical(sf_block, mn):
    """transform_sf_into_required_layout (SM100, gran (128,128)) then the torch
    path of get_mn_major_tma_aligned_packed_ue8m0_tensor; returns the storage."""
    sf = sf_block.index_select(-2, torch.arange(mn, device=sf_block.device).floor_divide_(128))
    ue8m0 = (sf.contiguous().view(torch.int32) >> 23).to(torch.uint8)
    k = sf.shape[-1]
    amn, ak = align(mn, 4), align(k, 4)  # get_tma_aligned_size(mn, 4): 16 bytes of int32
    padded = torch.zeros((amn, ak), dtype=torch.uint8, device=sf.device)
    padded[:mn, :k] = ue8m0
    padded = padded.view(-1).view(torch.int32).view(amn, ak // 4)
    # MN-major: logical [mn, ak/4] with strides (1, amn); the storage is its transpose.
    return padded.t().contiguous()


# ------------------------------------------------------------------ the cases
def R(r0, r1, c0, c1, seed, elo, ehi):
    return dict(R0=r0, R1=r1, C0=c0, C1=c1, Seed=seed, ELo=elo, EHi=ehi)


def C(r0, r1, c0, c1, bits):
    return dict(R0=r0, R1=r1, C0=c0, C1=c1, Kind="const", Bits=bits)


# Block (1,1) of "special": amax exactly 448 so sf = 1 in both formats and the
# cast sees x itself: round-half-even ties in the normal and subnormal ranges.
TIES = [0x43D8, 0x43DC, 0x43D4, 0x43C8, 0x3A80, 0x3AC0, 0x3B40, 0x3B20, 0x3C70, 0x3C78,
        0x3C7F, 0x3C80, 0x3A00, 0x0001, 0x8001, 0x3F88, 0x3F98, 0x4388, 0x4398]
special_patches = [[128, 128, 0x43E0]]  # 448
for j, b in enumerate(TIES):
    special_patches.append([129 + j % 60, 130 + j, b])
    special_patches.append([200 + j % 50, 131 + j, b | 0x8000])
special_patches += [
    [130, 200, 0x8000], [131, 201, 0x0000],        # -0 and +0 among finite values
    [140, 260, 0x43E8],                            # amax 464 (block (1,2))
    [3, 400, 0xC3F0],                              # amax -480 (block (0,3))
    [180, 40, 0x4700],                             # outlier 32768 (block (1,0))
    [5, 3, 0x8000], [6, 200, 0x8000],              # scattered -0
]
CASES = [
    dict(name="m576x7168", elem="BF16", n=576, k=7168, regions=[R(0, 576, 0, 7168, 1, 112, 124)]),
    dict(name="m96x7168", elem="BF16", n=96, k=7168, regions=[R(0, 96, 0, 7168, 2, 100, 127)]),
    dict(name="m300x200", elem="BF16", n=300, k=200, regions=[R(0, 300, 0, 200, 3, 118, 126)],
         Patches=[[0, 0, 0x8000], [299, 199, 0xC2F6], [150, 127, 0x8000], [151, 128, 0x3F80]]),
    dict(name="m1x130", elem="BF16", n=1, k=130, regions=[R(0, 1, 0, 130, 4, 120, 130)]),
    dict(name="special", elem="BF16", n=256, k=500, regions=[
        R(0, 256, 0, 500, 11, 100, 134),
        C(0, 128, 0, 128, 0x0000),             # all-zero block: amax clamps to 1e-4
        R(0, 128, 128, 256, 12, 90, 112),      # tiny block: amax < 1e-4
        C(0, 128, 256, 384, 0x8000),           # all negative zero
        R(128, 256, 0, 128, 13, 118, 124),     # rest of the outlier block
    ], Patches=special_patches),
    dict(name="f16_300x200", elem="F16", n=300, k=200, regions=[R(0, 300, 0, 200, 5, 0, 24)],
         Patches=[[0, 1, 0x8000], [10, 10, 0x7BFF], [11, 11, 0x0001]]),
    dict(name="f32_130x260", elem="F32", n=130, k=260, regions=[R(0, 130, 0, 260, 6, 90, 140)],
         Patches=[[1, 1, 0x7E967699], [1, 2, 0x0DA24260], [2, 3, 0x3A83126F], [3, 4, 0x00000001],
                  [129, 259, 0x80000000]]),
]
FULL_LIMIT = 120_000  # store the FP8 bytes of cases up to this many elements


def run_cases(manifest):
    out = []
    for case in CASES:
        n, k = case["n"], case["k"]
        bits = build(case)
        x = to_torch(bits, case["elem"])
        ent = {key: case[key] for key in ("name", "elem", "n", "k", "regions")}
        ent["patches"] = case.get("Patches", [])
        ent["input_sha256"] = sha(bits.tobytes())
        for fmt, ue in (("fp32", False), ("ue8m0", True)):
            q_cpu, s_cpu = per_block_cast_to_fp8(x, ue)
            if HAS_CUDA:
                q_dev, s_dev = per_block_cast_to_fp8(x.cuda(), ue)
                q_dev, s_dev = q_dev.cpu(), s_dev.cpu()
            else:
                q_dev, s_dev = q_cpu, s_cpu
            qb = u8(q_dev)
            ent[f"cpu_equals_cuda_{fmt}"] = u8(q_cpu) == qb and u8(s_cpu) == u8(s_dev)
            ent[f"cpu_fp8_sha256_{fmt}"] = sha(u8(q_cpu))
            ent[f"band_sha256_{fmt}"] = [sha(qb[b * BLOCK * k:min((b + 1) * BLOCK, n) * k])
                                         for b in range(ceil_div(n, BLOCK))]
            section(f"{case['name']}/scales_{fmt}", u8(s_dev.float()))
            if n * k <= FULL_LIMIT:
                section(f"{case['name']}/fp8_{fmt}", qb)
            # dequant = fp8 value x its block's scale, in fp32; then rounded to BF16
            sf_full = s_dev.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
            deq = q_dev.float() * sf_full
            ent[f"dequant_f32_sha256_{fmt}"] = sha(u8(deq))
            ent[f"dequant_bf16_sha256_{fmt}"] = sha(u8(deq.to(torch.bfloat16)))
            if ue:
                section(f"{case['name']}/packed_ue8m0", u8(packed_ue8m0_physical(s_dev.to(DEV), n)))
        out.append(ent)
    manifest["cases"] = out


def run_dcp(manifest):
    """luno-5242: q_b_proj [18432, 1536] with UE8M0 block scales; 8 ranks each
    hold 12 heads x 192 rows; the replicated-Q weight needs the full packing."""
    n, k, ranks = 18432, 1536, 8
    g = torch.Generator().manual_seed(5242)
    exps = torch.randint(1, 255, (ceil_div(n, BLOCK), ceil_div(k, BLOCK)), generator=g, dtype=torch.int32)
    sf = (exps << 23).view(torch.float32)
    section("dcp/exponents", exps.to(torch.uint8).numpy().tobytes())
    full = u8(packed_ue8m0_physical(sf.to(DEV), n))
    rows = n // ranks
    parts = [sha(u8(packed_ue8m0_physical(sf[r * rows // BLOCK:(r + 1) * rows // BLOCK].to(DEV), rows)))
             for r in range(ranks)]
    manifest["dcp"] = dict(n=n, k=k, ranks=ranks, full_sha256=sha(full), part_sha256=parts)


# ------------------------------------------------------------------ casts
def run_small_casts(manifest):
    allbits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    allbits = torch.cat([allbits[32768:], allbits[:32768]])  # bit patterns 0x0000..0xFFFF in order
    bf = allbits.view(torch.bfloat16)
    fp8_cpu = u8(bf.to(torch.float8_e4m3fn))
    fp8_dev = u8(bf.to(DEV).to(torch.float8_e4m3fn))
    manifest["bf16_to_e4m3_cpu_equals_cuda"] = fp8_cpu == fp8_dev
    section("casts/bf16_to_e4m3", fp8_dev)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    section("casts/e4m3_to_f32", u8(codes.view(torch.float8_e4m3fn).to(DEV).float()))
    section("casts/f16_to_f32", u8(allbits.view(torch.float16).to(DEV).float()))
    e8_cpu = u8(codes.view(torch.float8_e8m0fnu).float())
    e8_dev = u8(codes.view(torch.float8_e8m0fnu).to(DEV).float())
    manifest["e8m0_to_f32_cpu_equals_cuda"] = e8_cpu == e8_dev
    section("casts/e8m0_to_f32", e8_dev)


def run_exhaustive(manifest):
    """All 2^32 float32 bit patterns, in 256 chunks of 2^24 (ascending bits)."""
    fp8_dig, bf_dig = [], []
    fp8_mismatch = bf_mismatch_finite = 0
    nan_outputs_cpu, nan_outputs_dev = set(), set()
    for c in range(256):
        bits = torch.arange(c << 24, (c + 1) << 24, dtype=torch.int64).to(torch.int32)  # wraps to the bit patterns
        f = bits.view(torch.float32)
        fd = f.to(DEV)
        e_dev = fd.to(torch.float8_e4m3fn).view(torch.uint8).cpu()
        e_cpu = f.to(torch.float8_e4m3fn).view(torch.uint8)
        fp8_mismatch += int((e_dev != e_cpu).sum())
        fp8_dig.append(hashlib.sha256(e_dev.numpy().tobytes()).digest())
        b_cpu = f.to(torch.bfloat16).view(torch.int16)
        b_dev = fd.to(torch.bfloat16).view(torch.int16).cpu()
        nan = torch.isnan(f)
        bf_mismatch_finite += int(((b_cpu != b_dev) & ~nan).sum())
        if bool(nan.any()):
            nan_outputs_cpu |= set(int(v) & 0xFFFF for v in torch.unique(b_cpu[nan]).tolist())
            nan_outputs_dev |= set(int(v) & 0xFFFF for v in torch.unique(b_dev[nan]).tolist())
        canon = torch.where(nan, torch.tensor(0x7FC0, dtype=torch.int16), b_cpu)
        bf_dig.append(hashlib.sha256(canon.numpy().tobytes()).digest())
    section("exhaustive/f32_to_e4m3_chunks", b"".join(fp8_dig))
    section("exhaustive/f32_to_bf16_chunks", b"".join(bf_dig))
    manifest["f32_to_e4m3_sha256"] = sha(b"".join(fp8_dig))
    manifest["f32_to_e4m3_cpu_cuda_mismatches"] = fp8_mismatch
    manifest["f32_to_bf16_nan_canonical_sha256"] = sha(b"".join(bf_dig))
    manifest["f32_to_bf16_finite_cpu_cuda_mismatches"] = bf_mismatch_finite
    manifest["f32_to_bf16_nan_outputs_cpu"] = sorted(hex(v) for v in nan_outputs_cpu)
    manifest["f32_to_bf16_nan_outputs_cuda"] = sorted(hex(v) for v in nan_outputs_dev)


# ------------------------------------------------------------------ MXFP4
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def cast_to_fp4_code(v):
    """Round |v| <= 6 to the E2M1 grid, ties to even (compressed-tensors'
    cast_to_fp4 thresholds), and return 4-bit codes (no negative zero)."""
    a = np.abs(v)
    mag = np.select(
        [a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0],
        [0, 1, 2, 3, 4, 5, 6], default=7).astype(np.uint8)
    sign = ((v < 0) & (mag != 0)).astype(np.uint8) << 3
    return mag | sign


def run_mxfp4(manifest):
    rng = np.random.default_rng(4)
    rows, k = 64, 256
    packed = rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8)
    scales = (np.arange(rows * k // 32) % 255).astype(np.uint8).reshape(rows, k // 32)  # 0..254, no NaN
    pt = torch.from_numpy(packed.astype(np.int64))
    codes = torch.stack([pt & 0xF, pt >> 4], dim=-1).reshape(rows, k)  # element 2i = low nibble
    lut = torch.tensor(E2M1 + [-v for v in E2M1], dtype=torch.float32)
    sf = torch.from_numpy(scales.copy()).view(torch.float8_e8m0fnu).float().repeat_interleave(32, 1)
    dec = lut[codes] * sf
    section("mxfp4/decode_packed", packed.tobytes())
    section("mxfp4/decode_scales", scales.tobytes())
    section("mxfp4/decode_f32", u8(dec))
    manifest["mxfp4_decode"] = dict(rows=rows, k=k)

    # encode: groups with chosen amax, ties and extremes
    groups = []
    for amax_bits in (0x40C00000, 0x40C00001, 0x40BFFFFF, 0x3F800000, 0x42F00000, 0x7F7FFFFF, 0x00000001, 0x0DA24260):
        g = rng.standard_normal(32).astype(np.float32)
        g = (g / np.abs(g).max() * np.frombuffer(np.uint32(amax_bits).tobytes(), np.float32)[0]).astype(np.float32)
        groups.append(g)
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.2, 0.3, 0.7, 0.8, 1.2, 1.3, 1.7, 1.8,
                     2.4, 2.6, 3.4, 3.6, 4.9, 5.1, -0.25, -0.75, -1.75, -3.5, -5.0, -0.1, 0.0, -0.0, 2.0, -6.0],
                    dtype=np.float32)
    groups += [ties, ties * np.float32(2.0 ** -20), np.zeros(32, np.float32), -np.zeros(32, np.float32)]
    for _ in range(8):
        groups.append((rng.standard_normal(32) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32))
    x = np.concatenate(groups).reshape(1, -1)
    xg = x.reshape(-1, 32).astype(np.float64)
    amax = np.abs(xg).max(axis=1)
    e = np.full(amax.shape, -127, dtype=np.int64)
    nz = amax > 0
    m, p = np.frexp(amax[nz] / 6.0)  # amax/6 = m * 2^p, m in [0.5, 1): ceil(log2) = p, or p-1 when m == 0.5
    e[nz] = np.where(m == 0.5, p - 1, p)
    e = np.clip(e, -127, 127)
    v = xg / np.ldexp(1.0, e)[:, None]
    c = cast_to_fp4_code(v).reshape(-1)
    enc = (c[0::2] | (c[1::2] << 4)).astype(np.uint8)
    section("mxfp4/encode_input", x.astype(np.float32).tobytes())
    section("mxfp4/encode_packed", enc.tobytes())
    section("mxfp4/encode_scales", (e + 127).astype(np.uint8).tobytes())
    manifest["mxfp4_encode"] = dict(k=x.shape[1])


def run_timing(manifest):
    """Throughput of torch's own CPU run of the reference on a [12288, 7168] BF16
    matrix (the issue quotes ~0.2 GB/s per core), for comparison only."""
    x = torch.randn(12288, 7168, dtype=torch.bfloat16)
    res = {}
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        per_block_cast_to_fp8(x, True)
        res[f"threads_{threads}_GBps"] = round(x.numel() * 2 / (time.perf_counter() - t0) / 1e9, 3)
    manifest["torch_cpu_per_block_cast_bf16_12288x7168"] = res


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    manifest = dict(torch=torch.__version__, numpy=np.__version__,
                    device=torch.cuda.get_device_name(0) if HAS_CUDA else "cpu", errors={})
    steps = [run_small_casts, run_cases, run_dcp, run_mxfp4, run_timing]
    if "--quick" not in sys.argv:
        steps.append(run_exhaustive)
    for step in steps:
        t0 = time.perf_counter()
        try:
            step(manifest)
        except Exception:  # record and go on: one device run must bring back all it can
            manifest["errors"][step.__name__] = traceback.format_exc()
        print(f"{step.__name__}: {time.perf_counter() - t0:.1f} s", flush=True)
    blob, index, off = bytearray(), [], 0
    for name, data in sections:
        index.append(dict(name=name, offset=off, length=len(data)))
        blob += data
        off += len(data)
    manifest["sections"] = index
    with open(os.path.join(outdir, "goldens.bin.gz"), "wb") as f:
        f.write(gzip.compress(bytes(blob), mtime=0))
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: v for k, v in manifest.items() if k not in ("cases", "sections")}, indent=1))
    for c in manifest.get("cases", []):
        print(c["name"], {k: v for k, v in c.items() if k.startswith("cpu_equals")})


if __name__ == "__main__":
    main()
