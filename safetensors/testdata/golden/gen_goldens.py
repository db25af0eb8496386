"""Writes the safetensors writer goldens with the reference serializer.

Run where torch and safetensors (0.8) are installed:
    python3 gen_goldens.py OUTDIR
For each case it writes CASE.safetensors with safetensors.torch.save_file and
records in cases.json, per case, the tensors (name, dtype, shape, raw bytes in
hex) and metadata, so the Go test can rebuild the same file from the same
tensors and compare every byte. The Go writer never sees these files' headers
before comparing: the bytes here are the independent reference.
"""
import json
import os
import sys

import safetensors
import torch
from safetensors.torch import save_file

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(1234)


def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


cases = {
    "f32": ({"w": rnd(3, 5)}, None),
    "i32": ({"ids": torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4)}, None),
    "bf16": ({"w": rnd(4, 7, dtype=torch.bfloat16)}, None),
    "f8_e4m3": ({"w": rnd(8, 16).to(torch.float8_e4m3fn)}, None),
    "f8_e8m0": ({"s": (torch.rand(2, 9, generator=g) * 4 + 0.01).to(torch.float8_e8m0fnu)}, None),
    "u8": ({"packed": torch.randint(0, 256, (6, 10), generator=g, dtype=torch.uint8)}, None),
    "scalar": ({"t": torch.tensor(3.25, dtype=torch.float32)}, None),
    "empty": ({"e": torch.zeros(0, 4, dtype=torch.float32), "x": rnd(2, 2)}, None),
    "metadata": ({"w": rnd(2, 3)}, {"format": "pt"}),
    "metadata_escape": ({"w": rnd(1, 3)}, {"note": 'quote " backslash \\ tab \t nl \n ctl \x01 é'}),
    # A K3-like mix: the serializer orders by dtype (descending) then by name,
    # so experts.10 comes before experts.2 and F32 before BF16 before U8.
    "mixed": (
        {
            "layers.1.mlp.experts.2.w1.weight_packed": torch.randint(0, 256, (4, 8), generator=g, dtype=torch.uint8),
            "layers.1.mlp.experts.10.w1.weight_packed": torch.randint(0, 256, (4, 8), generator=g, dtype=torch.uint8),
            "layers.1.mlp.experts.2.w1.weight_scale": torch.randint(0, 256, (4, 1), generator=g, dtype=torch.uint8),
            "layers.1.self_attn.q_proj.weight": rnd(8, 8, dtype=torch.bfloat16),
            "layers.1.self_attn.A_log": rnd(16),
            "layers.1.self_attn.dt_bias": rnd(16),
            "layers.1.fp8.weight": rnd(4, 4).to(torch.float8_e4m3fn),
            "layers.1.fp8.weight_scale_inv": rnd(1, 1),
            "layers.1.ids": torch.arange(3, dtype=torch.int64),
            "layers.1.half": rnd(3, dtype=torch.float16),
            "layers.1.flag": torch.tensor([True, False, True]),
            "layers.1.i8": torch.tensor([-1, 2], dtype=torch.int8),
            "layers.1.d": torch.tensor([1.5], dtype=torch.float64),
            "layers.1.e5m2": rnd(2).to(torch.float8_e5m2),
        },
        None,
    ),
    "unicode_names": ({"ünï\"cödé\\name\t1": rnd(2), "a/b.c": rnd(1)}, None),
}

dtype_names = {
    torch.float32: "F32", torch.int32: "I32", torch.bfloat16: "BF16", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e8m0fnu: "F8_E8M0", torch.uint8: "U8", torch.int64: "I64", torch.float16: "F16",
    torch.bool: "BOOL", torch.int8: "I8", torch.float64: "F64", torch.float8_e5m2: "F8_E5M2",
}

manifest = {"safetensors_version": safetensors.__version__, "torch_version": torch.__version__, "cases": {}}
for name, (tensors, meta) in cases.items():
    path = os.path.join(out, name + ".safetensors")
    save_file(tensors, path, metadata=meta)
    entries = []
    for tname, t in tensors.items():
        raw = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        entries.append({"name": tname, "dtype": dtype_names[t.dtype], "shape": list(t.shape), "data": raw.hex()})
    manifest["cases"][name] = {"tensors": entries, "metadata": meta}

with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
print("wrote", len(cases), "cases with safetensors", safetensors.__version__, "torch", torch.__version__)
