#!/usr/bin/env python3
"""Checks k3ckpt's conversions in W against torch and compressed-tensors.

check.py W CT_SRC prints one JSON object: per pair (source, output) how many
tensors were compared and how many differ. A BF16 output tensor the source
holds quantized is recomputed here with torch from the source's safetensors:
FP8 codes (float8_e4m3fn) times their 128x128 block scale, MXFP4 codes
(compressed-tensors' unpack) times float8_e8m0fnu scales, NVFP4 codes times
(float32(E4M3 scale) * weight_scale_2), each product in float32, then
.to(bfloat16). MXFP4 output tensors are recomputed with compressed-tensors'
own functions (loaded as gen_bidir.py loads them) from the BF16 source.
"""
import json, os, sys

import torch
from safetensors import safe_open

W, CT = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "quant", "testdata"))


def tensors(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    files = {}
    for n, f in idx.items():
        files.setdefault(f, []).append(n)
    out = {}
    for f, names in files.items():
        with safe_open(os.path.join(d, f), "pt") as h:
            for n in names:
                out[n] = h.get_tensor(n)
    return out


kE2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def unpack(p):
    lo, hi = (p & 0xF).long(), (p >> 4).long()
    c = torch.stack([lo, hi], -1).reshape(p.shape[0], -1)
    v = kE2M1[c & 7]
    return torch.where((c & 8) != 0, -v, v)


def ref_decode(src, name):
    base = name[: -len(".weight")]
    w = src.get(base + ".weight")
    if w is not None and w.dtype == torch.float8_e4m3fn:
        s = src.get(base + ".weight_scale_inv", src.get(base + ".weight_scale")).float()
        s = s.reshape(s.shape[0], -1) if s.dim() == 4 else s
        n, k = w.shape
        full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        return (w.float() * full).to(torch.bfloat16)
    if base + ".weight_packed" in src:
        p, s = src[base + ".weight_packed"], src[base + ".weight_scale"]
        e = s.contiguous().view(torch.float8_e8m0fnu).float().repeat_interleave(32, 1)
        return (unpack(p) * e).to(torch.bfloat16)
    if w is not None and w.dtype == torch.uint8:
        s = src[base + ".weight_scale"].float() * src[base + ".weight_scale_2"].float()
        return (unpack(w) * s.repeat_interleave(16, 1)).to(torch.bfloat16)
    return None


def check_decode(s, o):
    src, out = tensors(s), tensors(o)
    r = {"tensors": len(out), "decoded": 0, "decoded_differ": 0, "copied": 0, "copied_differ": 0, "companions_left": 0}
    for n, t in out.items():
        if n.endswith((".weight_scale", ".weight_scale_inv", ".weight_scale_2", ".input_scale", ".weight_packed")):
            r["companions_left"] += 1
        if n in src and src[n].dtype == t.dtype:
            r["copied"] += 1
            r["copied_differ"] += int(not torch.equal(src[n].view(torch.uint8) if src[n].dim() else src[n], t.view(torch.uint8) if t.dim() else t))
            continue
        ref = ref_decode(src, n)
        if ref is None:
            r.setdefault("unexplained", []).append(n)
            continue
        r["decoded"] += 1
        same = torch.equal(ref.view(torch.int16), t.view(torch.int16)) or bool(((ref == t) | (ref.isnan() & t.isnan())).all())
        r["decoded_differ"] += int(not same)
    cfg = json.load(open(os.path.join(o, "config.json")))
    r["top_quantization_config"] = "quantization_config" in cfg
    r["text_quantization_config"] = (cfg.get("text_config") or {}).get("quantization_config", {}).get("format")
    r["hf_quant_config"] = os.path.exists(os.path.join(o, "hf_quant_config.json"))
    return r



def ct_functions():
    # The loader of gen_bidir.py, without running its goldens.
    import ast, math, types
    from enum import Enum
    ns = {"torch": torch, "math": math, "Tensor": torch.Tensor, "FloatTensor": torch.Tensor, "IntTensor": torch.Tensor, "Enum": Enum}

    def load(rel, names):
        tree = ast.parse(open(os.path.join(CT, "compressed_tensors", rel)).read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets):
                exec(compile(ast.Module([node], []), rel, "exec"), ns)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
                node.decorator_list = []
                if isinstance(node, ast.FunctionDef):
                    node.returns = None
                    for a in node.args.args + node.args.kwonlyargs:
                        a.annotation = None
                exec(compile(ast.Module([node], []), rel, "exec"), ns)
    load("quantization/quant_args.py", ["FloatArgs", "FP4_E2M1_DATA", "FP8_E4M3_DATA", "BFLOAT16_DATA", "FLOAT16_DATA", "FLOAT32_DATA",
                                        "FLOAT64_DATA", "QuantizationType", "round_to_quantized_type_dtype", "round_to_quantized_type_args"])
    load("quantization/utils/fp4_utils.py", ["cast_to_fp4"])
    ns["FP4_E2M1_DATA"].cast_to_fp4 = staticmethod(ns["cast_to_fp4"])
    load("quantization/utils/mxfp_utils.py", ["_MX_ELEM_OFFSET", "should_generate_mx_scales", "maybe_convert_from_mx_exp", "round_to_power_2", "generate_mx_scales"])
    load("quantization/utils/helpers.py", ["calculate_qparams", "calculate_range", "_get_dtype_eps"])
    load("quantization/lifecycle/forward_helpers.py", ["_quantize"])
    load("compressors/nvfp4/helpers.py", ["pack_fp4_to_uint8"])
    load("compressors/mx_utils.py", ["compress_mx_scale"])
    args = types.SimpleNamespace(num_bits=4, type=ns["QuantizationType"].FLOAT, group_size=32, scale_dtype=torch.uint8, symmetric=True, zp_dtype=torch.float8_e4m3fn)

    def pack(w):
        g = w.unflatten(-1, (w.shape[-1] // 32, 32))
        scale, _ = ns["calculate_qparams"](torch.amin(g, dim=-1), torch.amax(g, dim=-1), args)
        q_min, q_max = ns["calculate_range"](args, w.device)
        q = ns["_quantize"](x=g, scale=scale.unsqueeze(-1), zero_point=None, q_min=q_min, q_max=q_max, args=args)
        return ns["pack_fp4_to_uint8"](q.flatten(start_dim=-2).to(w.dtype)), ns["compress_mx_scale"](scale, torch.uint8)
    return pack


def check_pack_dirs(bf, mx, rel):
    pack = ct_functions()
    b, m, r0 = tensors(bf), tensors(mx), tensors(rel)
    res = {"packed": 0, "packed_differ": 0, "scale_differ": 0, "bytes_equal_release": 0, "tensors": len(m), "release_tensors": len(r0)}
    for n, t in m.items():
        if not n.endswith(".weight_packed"):
            continue
        base = n[: -len(".weight_packed")]
        p, s = pack(b[base + ".weight"].cuda())
        res["packed"] += 1
        res["packed_differ"] += int(not torch.equal(p.cpu(), t))
        res["scale_differ"] += int(not torch.equal(s.cpu().to(torch.uint8), m[base + ".weight_scale"]))
        res["bytes_equal_release"] += int(torch.equal(t, r0[n]) and torch.equal(m[base + ".weight_scale"], r0[base + ".weight_scale"]))
    res["config_equal_release"] = json.load(open(os.path.join(mx, "config.json"))) == json.load(open(os.path.join(rel, "config.json")))
    return res


report = {"torch": torch.__version__}
report["rel->bf16"] = check_decode(f"{W}/rel", f"{W}/bf16")
report["bf16->mxfp4 (compressed-tensors packs the BF16)"] = check_pack_dirs(f"{W}/bf16", f"{W}/mxfp4", f"{W}/rel")
for f in ["modelopt", "deepseek", "compressed-tensors", "ue8m0", "mo", "nvfp4"]:
    s = f"{W}/fp8-{f}" if f != "nvfp4" else f"{W}/nvfp4"
    report[f"{os.path.basename(s)}->back"] = check_decode(s, f"{W}/back-{f}")
print(json.dumps(report, indent=1))
