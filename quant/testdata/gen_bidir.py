#!/usr/bin/env python3
"""Goldens for k3ckpt's two directions, made by torch and compressed-tensors.

Run on a machine with torch (CPU, and CUDA when present):
    python3 gen_bidir.py CT_SRC OUTDIR
CT_SRC is compressed-tensors' src/ directory (github.com/vllm-project/compressed-tensors).
Writes OUTDIR/bidir_goldens.json (facts and section index) and
OUTDIR/bidir_goldens.bin.gz (the sections, raw little-endian bytes).

Sections:
  pack/<case>/input   BF16 [N, K] weights (random and edge rows)
  pack/<case>/packed  weight_packed U8 [N, K/2] as compressed-tensors compresses them
  pack/<case>/scale   weight_scale U8 [N, K/32]
  mxdeq/...           every (packed byte, E8M0 byte) pair decoded to BF16 by torch
  fp8deq/...          every E4M3 code times edge scales, float32 product, to BF16
  nvdeq/...           NVFP4 codes x (E4M3 scale . float32 scale_2) to BF16
"""
import ast, gzip, hashlib, json, math, os, sys, types

import numpy as np
import torch

CT_SRC, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
facts = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
sections, blob = [], bytearray()


def section(name, data):
    data = bytes(data)
    sections.append({"name": name, "offset": len(blob), "length": len(data),
                     "sha256": hashlib.sha256(data).hexdigest()})
    blob.extend(data)


def u8(t):
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.uint8 else t.numpy().tobytes()


# ---- compressed-tensors: the package itself when it imports, else its functions ----
sys.path.insert(0, CT_SRC)
ct = None
try:
    import importlib.abc, importlib.machinery

    class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Stubs third-party modules the checkout imports but this host lacks."""
        names = ("loguru", "psutil", "frozendict", "accelerate")

        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if name == "compressed_tensors.version":
                if os.path.exists(os.path.join(CT_SRC, "compressed_tensors", "version.py")):
                    return None
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            if top in self.names and importlib.machinery.PathFinder.find_spec(top) is None:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            m = types.ModuleType(spec.name)
            m.__path__ = []

            class Any_:
                def __init__(self, *a, **k): pass
                def __call__(self, *a, **k): return Any_()
                def __getattr__(self, n): return Any_()
            m.__getattr__ = lambda n: (Any_() if n not in ("__version__", "version") else "0.0.0")
            m.__version__ = m.version = "0.0.0"
            m.logger = Any_()
            return m

        def exec_module(self, m): pass

    sys.meta_path.append(_Stub())
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    ct = "package"
except Exception as e:  # noqa: BLE001
    facts["package_import_error"] = repr(e)

WEIGHTS = {"actorder": None, "block_structure": None, "dynamic": False, "group_size": 32, "num_bits": 4,
           "observer": "minmax", "observer_kwargs": {}, "scale_dtype": "torch.uint8", "strategy": "group",
           "symmetric": True, "type": "float", "zp_dtype": None}  # the release's config group


def ct_pack_package(w):
    args = QuantizationArgs(**WEIGHTS)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    g = w.unflatten(-1, (w.shape[-1] // 32, 32))  # the minmax observer's reduction for group strategy
    scale, _ = calculate_qparams(torch.amin(g, dim=-1), torch.amax(g, dim=-1), args)
    sd = MXFP4PackedCompressor.compress({"weight": w, "weight_scale": scale}, scheme)
    return sd["weight_packed"], sd["weight_scale"]


def load_funcs(rel, names, ns):
    src = open(os.path.join(CT_SRC, "compressed_tensors", rel)).read()
    tree = ast.parse(src)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets):
            exec(compile(ast.Module([node], []), rel, "exec"), ns)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            node.decorator_list = []
            if isinstance(node, ast.FunctionDef):  # annotations name pydantic models this host may lack
                node.returns = None
                for a in node.args.args + node.args.kwonlyargs:
                    a.annotation = None
            exec(compile(ast.Module([node], []), rel, "exec"), ns)


def ct_funcs():
    ns = {"torch": torch, "math": math, "Tensor": torch.Tensor, "FloatTensor": torch.Tensor, "IntTensor": torch.Tensor}
    from enum import Enum
    ns["Enum"] = Enum
    load_funcs("quantization/quant_args.py", ["FloatArgs", "FP4_E2M1_DATA", "FP8_E4M3_DATA", "BFLOAT16_DATA", "FLOAT16_DATA",
                                              "FLOAT32_DATA", "FLOAT64_DATA", "QuantizationType", "round_to_quantized_type_dtype",
                                              "round_to_quantized_type_args"], ns)
    load_funcs("quantization/utils/fp4_utils.py", ["cast_to_fp4"], ns)
    ns["FP4_E2M1_DATA"].cast_to_fp4 = staticmethod(ns["cast_to_fp4"])
    load_funcs("quantization/utils/mxfp_utils.py", ["_MX_ELEM_OFFSET", "should_generate_mx_scales", "maybe_convert_from_mx_exp",
                                                    "round_to_power_2", "generate_mx_scales"], ns)
    load_funcs("quantization/utils/helpers.py", ["calculate_qparams", "calculate_range", "_get_dtype_eps"], ns)
    load_funcs("quantization/lifecycle/forward_helpers.py", ["_quantize"], ns)
    load_funcs("compressors/nvfp4/helpers.py", ["pack_fp4_to_uint8"], ns)
    load_funcs("compressors/mx_utils.py", ["compress_mx_scale"], ns)
    return ns


def ct_pack_funcs(w, ns):
    QT = ns["QuantizationType"]
    args = types.SimpleNamespace(num_bits=4, type=QT.FLOAT, group_size=32, scale_dtype=torch.uint8, symmetric=True, zp_dtype=torch.float8_e4m3fn)  # validate_model_after: FP4 zp_dtype
    g = w.unflatten(-1, (w.shape[-1] // 32, 32))
    scale, _ = ns["calculate_qparams"](torch.amin(g, dim=-1), torch.amax(g, dim=-1), args)
    q_min, q_max = ns["calculate_range"](args, w.device)
    q = ns["_quantize"](x=g, scale=scale.unsqueeze(-1), zero_point=None, q_min=q_min, q_max=q_max, args=args)
    q = q.flatten(start_dim=-2).to(w.dtype)
    return ns["pack_fp4_to_uint8"](q), ns["compress_mx_scale"](scale, torch.uint8)


if ct is None:
    ns = ct_funcs()
    ct = "functions"
facts["compressed_tensors"] = ct


def ct_pack(w):
    if ct == "package":
        return ct_pack_package(w)
    return ct_pack_funcs(w, NS)


NS = ct_funcs()  # the function path too, to compare with the package's


# ---- inputs ----
rng = np.random.default_rng(20261201)


def bf16_from_f32(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)


def bits_to_bf16(b):
    return torch.from_numpy(np.ascontiguousarray(b, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


cases = {}
# random weights at several magnitudes
for name, scale in [("normal", 0.02), ("wide", 1.0), ("tiny", 1e-30), ("huge", 1e30)]:
    a = rng.standard_normal((64, 256)).astype(np.float32) * scale
    a *= np.exp2(rng.integers(-6, 7, size=(64, 256 // 32, 1))).repeat(32, axis=2).reshape(64, 256)
    cases[name] = bf16_from_f32(a)
# every BF16 bit pattern that is finite, in groups of 32 (sorted so groups span neighbours)
allb = np.arange(0, 1 << 16, dtype=np.uint32)
fin = allb[(allb & 0x7FFF) < 0x7F80].astype(np.uint16)
fin = np.concatenate([fin, np.zeros((-len(fin)) % 256, np.uint16)])
cases["allbits"] = bits_to_bf16(fin.reshape(-1, 256))
# edge groups: amax mantissas around the 0.75 round-up, exact ties of every threshold, -0, zeros, saturation
edge = []
for e in range(-133, 128, 7):
    for m in (0x00, 0x3F, 0x40, 0x5F, 0x60, 0x7F):
        amax = ((e + 127) << 7 | m) if e >= -126 else (1 << (e + 133))  # normal or subnormal bits
        amax = min(amax, 0x7F7F)
        g = rng.integers(0, amax + 1, size=32).astype(np.uint16)
        g[rng.integers(0, 32)] = amax
        g |= (rng.integers(0, 2, size=32).astype(np.uint16) << 15)
        edge.append(g)
for sb in (1, 60, 127, 200, 252):
    s = 2.0 ** (sb - 127)
    for mult in ([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], [0.2, 0.3, 0.7, 0.8, 5.5, 6.5, 6.9, 7.0]):
        v = np.array((mult * 4)[:32], np.float32) * np.float32(s)
        v[1::2] *= -1
        edge.append(bf16_from_f32(v).view(torch.int16).numpy().view(np.uint16))
edge.append(np.zeros(32, np.uint16))
edge.append(np.full(32, 0x8000, np.uint16))                     # all -0
edge.append(np.array([0x8000, 0x3F80] * 16, np.uint16))          # -0 beside 1.0
edge.append(np.array([0x8001, 0x4000] + [0] * 30, np.uint16))    # tiny negative beside 2
while len(edge) % 8:
    edge.append(np.zeros(32, np.uint16))
edge = np.stack(edge).reshape(-1, 256)
cases["edge"] = bits_to_bf16(edge)

pack_facts = {}
for name, w in cases.items():
    p_cpu, s_cpu = ct_pack(w.clone())
    p_fn, s_fn = ct_pack_funcs(w.clone(), NS)
    f = {"n": w.shape[0], "k": w.shape[1],
         "package_equals_functions": bool(torch.equal(p_cpu, p_fn) and torch.equal(s_cpu.to(torch.uint8), s_fn.to(torch.uint8)))}
    if torch.cuda.is_available():
        try:
            p_gpu, s_gpu = ct_pack(w.clone().cuda())
            f["cpu_equals_cuda"] = bool(torch.equal(p_cpu, p_gpu.cpu()) and torch.equal(s_cpu, s_gpu.cpu()))
            if not f["cpu_equals_cuda"]:
                section(f"pack/{name}/packed_cuda", u8(p_gpu))
                section(f"pack/{name}/scale_cuda", u8(s_gpu.to(torch.uint8)))
        except Exception as e:  # noqa: BLE001
            f["cuda_error"] = repr(e)
    section(f"pack/{name}/input", u8(w))
    section(f"pack/{name}/packed", u8(p_cpu))
    section(f"pack/{name}/scale", u8(s_cpu.to(torch.uint8)))
    pack_facts[name] = f
facts["pack"] = pack_facts
facts["torch_sign_neg_zero"] = float(torch.sign(torch.tensor([-0.0]))[0])

# ---- MXFP4 -> BF16: all (packed byte, scale byte) pairs, torch's E8M0 ----
pk = torch.arange(256, dtype=torch.uint8).repeat(256).reshape(256, 256)       # row r: all bytes
sc = torch.arange(256, dtype=torch.uint8).reshape(256, 1).repeat(1, 256 // 16)  # row r: scale byte r
lo, hi = (pk & 0xF).long(), (pk >> 4).long()
kE2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float32)


def e2m1(c):
    v = kE2M1[c & 7]
    return torch.where((c & 8) != 0, -v, v)


codes = torch.stack([e2m1(lo), e2m1(hi)], dim=-1).reshape(256, 512)
e8 = sc.contiguous().view(torch.float8_e8m0fnu).to(torch.float32)               # 0xFF -> NaN
mx = (codes.reshape(256, 16, 32) * e8.unsqueeze(-1)).reshape(256, 512).to(torch.bfloat16)
section("mxdeq/packed", u8(pk)); section("mxdeq/scale", u8(sc)); section("mxdeq/bf16", u8(mx))
facts["e8m0_ff_is_nan"] = bool(torch.isnan(torch.tensor([255], dtype=torch.uint8).view(torch.float8_e8m0fnu).float())[0])

# ---- FP8 E4M3 -> BF16: every code times edge scales (float32 product, one BF16 rounding) ----
f8 = torch.arange(256, dtype=torch.uint8)
scales = torch.tensor([1.0, 0.0, 2.0 ** -126, 2.0 ** -149, 2.0 ** 127, 3.4e38, 1 / 448, 1.2345e-3, 7.77e-8,
                       float("inf"), float("nan"), 0.1, 2.0 ** -10, 2.0 ** 20], dtype=torch.float32)
fp8 = (f8.view(torch.float8_e4m3fn).to(torch.float32).reshape(1, 256) * scales.reshape(-1, 1)).to(torch.bfloat16)
section("fp8deq/scales", u8(scales)); section("fp8deq/bf16", u8(fp8))
if torch.cuda.is_available():
    g = (f8.cuda().view(torch.float8_e4m3fn).to(torch.float32).reshape(1, 256) * scales.cuda().reshape(-1, 1)).to(torch.bfloat16)
    facts["fp8deq_cpu_equals_cuda"] = bool(torch.equal(g.cpu().view(torch.int16), fp8.view(torch.int16)))

# ---- NVFP4 -> BF16: codes x (float32(E4M3 scale) * scale_2) ----
nv_pk = torch.from_numpy(rng.integers(0, 256, size=(256, 64), dtype=np.uint8))     # K = 128
nv_sc = torch.arange(256, dtype=torch.uint8).reshape(256, 1).repeat(1, 8)          # row r: E4M3 byte r
nv_sc[:, 1::2] = torch.from_numpy(rng.integers(0, 256, size=(256, 4), dtype=np.uint8))
nv_lo, nv_hi = (nv_pk & 0xF).long(), (nv_pk >> 4).long()
nv_codes = torch.stack([e2m1(nv_lo), e2m1(nv_hi)], dim=-1).reshape(256, 128)
nv_s2 = torch.tensor([2.0 ** -8, 1.0, 0.0123, 2.0 ** 100, 3.0e-39], dtype=torch.float32)
for i, s2 in enumerate(nv_s2):
    blk = nv_sc.contiguous().view(torch.float8_e4m3fn).to(torch.float32) * s2
    out = (nv_codes.reshape(256, 8, 16) * blk.unsqueeze(-1)).reshape(256, 128).to(torch.bfloat16)
    section(f"nvdeq/bf16_{i}", u8(out))
section("nvdeq/packed", u8(nv_pk)); section("nvdeq/scale", u8(nv_sc)); section("nvdeq/scale2", u8(nv_s2))

facts["sections"] = sections
with open(os.path.join(OUT, "bidir_goldens.json"), "w") as f:
    json.dump(facts, f, indent=1, sort_keys=True)
with gzip.open(os.path.join(OUT, "bidir_goldens.bin.gz"), "wb", compresslevel=9) as f:
    f.write(blob)
print(json.dumps({k: v for k, v in facts.items() if k != "sections"}, indent=1))
