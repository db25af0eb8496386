"""Run tokenspeed's own K3 config parsing, quant-method dispatch and merged-KDA
weight loading over tiny k3ckpt outputs; print one line per verdict.

Usage: python3 tokenspeed_exec.py TS_DIR CK_DIR OUT.json
  With torch installed the real one is used; without it (this machine: the
  GPU machine was not lent) a stub module stands in for it, holding only the
  dtype names the code compares against (listed in STUBS): none of the
  functions run here computes on a tensor before the checks that decide.
  TS_DIR: lightseekorg/tokenspeed @f4d8ec6e files, flat: modelopt_mixed.py,
          kimi_k3.py, loader.py, utils.py (python/tokenspeed/runtime/...)
  CK_DIR: d/ (convert default) and mk/ (--recipe modelopt-k3 --experts nvfp4),
          each config.json, hf_quant_config.json, model-00002-of-000096.safetensors

Only the smallest parts are run: modelopt_mixed.py is executed whole with its
imports stubbed (listed in STUBS); from kimi_k3.py the KimiKDAMergedProj class,
from loader.py _get_quantization_config, from utils.py should_exclude_quant_module
and modelopt_block_scale_to_2d are taken by ast and executed unchanged.
"""

import ast
import json
import re
import sys
import types

TS, CK, OUT = sys.argv[1:4]
STUBS = []
results = []

try:
    import torch
    from torch import nn
except ImportError:
    torch = types.ModuleType("torch")
    for dt in ["bfloat16", "half", "float16", "float32", "float8_e4m3fn", "float8_e4m3fnuz", "uint8"]:
        setattr(torch, dt, "torch." + dt)
    torch.Tensor = object
    torch.__version__ = "stub"
    nn = types.ModuleType("torch.nn")
    nn.Module, nn.Parameter = object, object
    torch.nn = nn
    sys.modules["torch"], sys.modules["torch.nn"] = torch, nn
    STUBS.append("torch (dtype names only: bfloat16, float16, float32, float8_e4m3fn, float8_e4m3fnuz, uint8)")

ST_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F8_E4M3": "float8_e4m3fn", "U8": "uint8"}


def header(path):
    """A safetensors file's header (the tensors' dtypes and shapes)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def record(rule, outcome, detail, ok):
    results.append({"rule": rule, "outcome": outcome, "detail": detail, "agrees": ok})


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__path__ = []
    sys.modules[name] = m
    STUBS.append(name + ("" if not attrs else " (" + ", ".join(sorted(attrs)) + ")"))
    return m


def source_of(path, names):
    """The source of the top-level defs/assignments called names in path."""
    text = open(path).read()
    tree = ast.parse(text)
    out = []
    for node in tree.body:
        n = getattr(node, "name", None)
        if n is None and isinstance(node, ast.Assign):
            n = getattr(node.targets[0], "id", None)
        if n in names:
            out.append(ast.get_source_segment(text, node))
    # Annotations name types this script does not load: leave them unevaluated.
    return "from __future__ import annotations\n\n" + "\n\n".join(out)


class Recorder:
    """Stands for a single-algorithm config or linear method: keeps its arguments."""

    def __init__(self, *args, **kw):
        self.args = args
        self.__dict__.update(kw)


for pkg in ["tokenspeed", "tokenspeed.runtime", "tokenspeed.runtime.layers", "tokenspeed.runtime.layers.quantization"]:
    stub(pkg)


class QuantizationConfig:
    def __init__(self, exclude_modules=None):
        self.exclude_modules = exclude_modules or []


stub("tokenspeed.runtime.layers.quantization.base_config", QuantizationConfig=QuantizationConfig, QuantizeMethodBase=object)
stub("tokenspeed.runtime.layers.quantization.fp8",
     Fp8Config=type("Fp8Config", (Recorder,), {}), Mxfp8Config=type("Mxfp8Config", (Recorder,), {}))
stub("tokenspeed.runtime.layers.quantization.nvfp4", Nvfp4Config=type("Nvfp4Config", (Recorder,), {}))
utils_ns = {"re": re, "torch": torch}
exec(source_of(TS + "/utils.py", {"should_exclude_quant_module", "modelopt_block_scale_to_2d"}), utils_ns)
stub("tokenspeed.runtime.layers.quantization.utils",
     should_exclude_quant_module=utils_ns["should_exclude_quant_module"],
     modelopt_block_scale_to_2d=utils_ns["modelopt_block_scale_to_2d"])
dense = stub("tokenspeed.runtime.layers.dense",
             Fp8LinearMethod=type("Fp8LinearMethod", (Recorder,), {}),
             Nvfp4LinearMethod=type("Nvfp4LinearMethod", (Recorder,), {}),
             UnquantizedLinearMethod=type("UnquantizedLinearMethod", (Recorder,), {}))
mm = types.ModuleType("tokenspeed.runtime.layers.quantization.modelopt_mixed")
mm.__file__ = TS + "/modelopt_mixed.py"
sys.modules[mm.__name__] = mm
exec(compile(open(mm.__file__).read(), mm.__file__, "exec"), mm.__dict__)
MixedConfig = mm.ModelOptMixedConfig


def hfq(kind):
    return json.load(open(f"{CK}/{kind}/hf_quant_config.json"))


def prefix(kind, layer, leaf):
    """The checkpoint-spelled module name our manifest lists (language_model.model.…)."""
    return f"language_model.model.layers.{layer}.self_attn.{leaf}"


# 1. Config parsing and the capability check (loader._get_quantization_config).
for kind in ["d", "mk"]:
    cfg = MixedConfig.from_config(hfq(kind))
    cap = MixedConfig.get_min_capability()
    loader_ns = {}
    exec(source_of(TS + "/loader.py", {"_get_quantization_config"}), loader_ns)
    for major, minor in [(9, 0), (10, 0)]:
        loader_ns["get_quant_config"] = lambda mc, lc: cfg
        loader_ns["current_platform"] = lambda: types.SimpleNamespace(arch_version=types.SimpleNamespace(major=major, minor=minor))
        mc = types.SimpleNamespace(quantization="modelopt_mixed", dtype=torch.bfloat16)
        try:
            loader_ns["_get_quantization_config"](mc, None)
            out, detail = "loads", f"{kind}: capability {major}{minor} passes (min {cap})"
        except ValueError as e:
            out, detail = "refused", f"{kind}: {e}"
        want = "refused" if major == 9 else "loads"
        record("tokenspeed.modelopt.capability", out, detail, out == want)

# 2. FP8_PB_WO routes (dispatch) of every KDA/MLA projection of layer 1 (KDA) and 3 (MLA).
for kind in ["d", "mk"]:
    cfg = MixedConfig.from_config(hfq(kind))
    routes = {}
    for layer, leaves in [(1, ["q_proj", "k_proj", "v_proj", "g_proj", "f_a_proj", "b_proj", "f_b_proj", "o_proj"]),
                          (3, ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "g_proj"])]:
        for leaf in leaves:
            p = prefix(kind, layer, leaf)
            m = cfg.get_quant_method(None, p)
            routes[f"{layer}.{leaf}"] = [cfg.fp8_pb_wo_route(p), type(m).__name__]
    merged = cfg.fp8_pb_wo_route(prefix(kind, 1, "q_proj")) == "w8a8"
    record("tokenspeed.modelopt.kda-merged", "resident" if merged else "bf16", f"{kind}: routes {routes}", merged)
    if kind == "mk":
        fb = routes["1.f_b_proj"]
        record("tokenspeed.modelopt.fb", "dequantized" if fb == ["dequant", "UnquantizedLinearMethod"] else str(fb), f"{kind}: f_b_proj {fb}", fb == ["dequant", "UnquantizedLinearMethod"])

# 3. Experts: moe_weight_dtype for MXFP4 kept (undeclared), NVFP4, and ModelOpt's W4A8_MXFP4_FP8.
for kind, want in [("d", "refused"), ("mk", "nvfp4")]:
    cfg = MixedConfig.from_config(hfq(kind))
    try:
        got = cfg.moe_weight_dtype("language_model.model.layers.1.block_sparse_moe")
        detail = f"{kind}: experts dtype {got}"
    except ValueError as e:
        got, detail = "refused", f"{kind}: {e}"
    rule = "tokenspeed.modelopt.mxfp4-undeclared" if kind == "d" else "tokenspeed.modelopt.nvfp4"
    record(rule, "resident" if got == "nvfp4" else got, detail, got == want)
w4a8 = hfq("d")
w4a8["quantization"]["quantized_layers"]["language_model.model.layers.1.block_sparse_moe.experts"] = {"quant_algo": "W4A8_MXFP4_FP8"}
try:
    MixedConfig.from_config(w4a8)
    record("tokenspeed.modelopt.w4a8-mxfp4", "loads", "from_config accepted W4A8_MXFP4_FP8", False)
except ValueError as e:
    record("tokenspeed.modelopt.w4a8-mxfp4", "refused", str(e), True)

# 4. Weight loading: KimiKDAMergedProj._load_weight, FP8-resident as tokenspeed builds it
#    for the default recipe (fp8_block_quant from q_proj's FP8_PB_WO route), fed the
#    shards the default output holds (their dtypes from the file's header). The
#    dtype check comes first; past it the tiny shapes do not fit K3's buffer.
k3_ns = {"torch": torch, "nn": nn, "ceil_div": lambda a, b: -(-a // b)}
exec(source_of(TS + "/kimi_k3.py", {"_FP8_WEIGHT_DTYPES", "KimiKDAMergedProj"}), k3_ns)
cfg = MixedConfig.from_config(hfq("d"))
fp8 = cfg.fp8_pb_wo_route(prefix("d", 1, "q_proj")) == "w8a8"
me = types.SimpleNamespace(fp8_block_quant=fp8, tp_rank=0, _rows={"q": 1536, "f_a": 128, "b": 12}, _offsets={"q": 0, "f_a": 6144, "b": 6272},
                           _loaded_weight_shards=set())
hd = header(f"{CK}/d/model-00002-of-000096.safetensors")
for leaf, shard in [("f_a_proj", "f_a"), ("b_proj", "b"), ("q_proj", "q")]:
    e = hd[f"language_model.model.layers.1.self_attn.{leaf}.weight"]
    w = types.SimpleNamespace(dtype=getattr(torch, ST_DTYPES[e["dtype"]]), shape=e["shape"])
    try:
        k3_ns["KimiKDAMergedProj"]._load_weight(me, None, w, shard)
        out, detail = "loads", f"{leaf} {e['dtype']} loaded"
    except TypeError as err:
        if "FP8-resident" not in str(err):
            raise
        out, detail = "refused", f"{leaf} {e['dtype']}: TypeError: {err}"
    except Exception as err:  # past the dtype check: the stand-in shard has no data
        out, detail = "loads", f"{leaf} {e['dtype']} passes the dtype check ({type(err).__name__} on the stand-in shard)"
    want = "loads" if leaf == "q_proj" else "refused"
    record("tokenspeed.modelopt.kda-split", out, detail, out == want)

json.dump({"engine": "tokenspeed", "commit": "f4d8ec6e", "torch": getattr(torch, "__version__", "?"), "stubs": STUBS, "results": results},
          open(OUT, "w"), indent=1)
print(json.dumps({"agree": sum(r["agrees"] for r in results), "of": len(results)}))
for r in results:
    print(("ok  " if r["agrees"] else "DIFF"), r["rule"], r["outcome"], r["detail"][:200])
