#!/usr/bin/env python3
"""Build a tiny DeepSeek-V3-shaped FP8 checkpoint and convert it with DeepSeek's own
inference/fp8_cast_bf16.py (deepseek-ai/DeepSeek-V3 @ 9b4e9788e4a3a731f7567338ed15d3ec549ce03b),
imported unmodified, into BF16. The pair is the golden for a CPU FP8 -> BF16 conversion that
claims to be bit-exact with DeepSeek's.

Needs a CUDA GPU (weight_dequant is a Triton kernel), torch, safetensors, triton.

    python3 make_golden.py --deepseek DIR_WITH_fp8_cast_bf16.py_AND_kernel.py --out OUT

Writes OUT/golden/{fp8,bf16}/ and OUT/golden/REPORT.json (versions, sha256 of every file, and
where DeepSeek's output differs from the same product computed by torch on the CPU: float32
multiply, then bfloat16 round to nearest even).

The tensor data comes from Python's random module with a fixed seed, so the FP8 checkpoint is
the same on every machine; DeepSeek's output is whatever its kernel computes.
"""
import argparse
import hashlib
import json
import os
import random
import struct
import sys

SEED = 20250101

# A scaled-down DeepSeek-V3 config.json: the keys of the released one, small values.
# Layer 0 is dense (first_k_dense_replace 1), layer 1 is MoE, layer 2 is the MTP layer
# (num_hidden_layers + 0). Ragged dims (not multiples of 128): q_b_proj N = 2*(64+32) = 192,
# kv_a_proj_with_mqa N = 128+32 = 160, experts' gate/up N and down K = moe_intermediate 192.
CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config",
        "AutoModel": "modeling_deepseek.DeepseekV3Model",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
    },
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02,
    "intermediate_size": 256,
    "kv_lora_rank": 128,
    "max_position_embeddings": 4096,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 192,
    "moe_layer_freq": 1,
    "n_group": 2,
    "n_routed_experts": 2,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 2,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 128,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.3",
    "use_cache": True,
    "v_head_dim": 64,
    "vocab_size": 128,
}

NSHARDS = 4


def shard_name(i):
    # The release spells the total with six digits: model-00001-of-000163.safetensors.
    return "model-%05d-of-%06d.safetensors" % (i, NSHARDS)


def cdiv(a, b):
    return -(-a // b)


# --- tensor data (pure Python, deterministic) ---------------------------------------------

EDGE_CODES = [0x00, 0x80, 0x01, 0x81, 0x07, 0x08, 0x38, 0x7E, 0xFE, 0x77, 0xF7]
NAN_FREE = bytes(range(256)).replace(b"\x7f", b"\x7e").replace(b"\xff", b"\xfe")


def fp8_codes(rng, n, kind):
    """n E4M3FN codes. kind "all": every code 0..255 in turn (NaN 0x7F/0xFF included);
    otherwise uniform random codes with the NaN codes mapped to +-448, edge codes first."""
    if kind == "all":
        return bytes(i & 0xFF for i in range(n))
    b = bytearray(rng.randbytes(n).translate(NAN_FREE))
    b[: len(EDGE_CODES)] = bytes(EDGE_CODES)
    return bytes(b)


def f32(x):
    return struct.pack("<f", x)


def f32bits(u):
    return struct.pack("<I", u)


# Scales of layer 0's dense MLP (2x2 blocks each, so four per tensor): zero, the smallest f32
# subnormal, a mid subnormal and the largest subnormal; the products are bfloat16 zeros and
# subnormals. (Scales whose product overflows to infinity are not covered.)
EXTREME_SCALES = [f32(0.0), f32bits(0x00000001), f32bits(0x00400000), f32bits(0x007FFFFF)]


def scales(rng, n, kind):
    """n positive float32 scales. "extreme": EXTREME_SCALES in turn; "tie": (1 + odd/256) * 2^e,
    so that code * scale often lies exactly halfway between two bfloat16 values; otherwise a
    random 23-bit mantissa and an exponent in [2^-24, 2^8) (the release's are ~2^-14..2^-6)."""
    out = bytearray()
    for i in range(n):
        if kind == "extreme":
            out += EXTREME_SCALES[i % len(EXTREME_SCALES)]
        elif kind == "tie":
            out += f32((1 + rng.randrange(1, 256, 2) / 256) * 2.0 ** rng.randrange(-20, 4))
        else:
            e = rng.randrange(127 - 24, 127 + 8)
            out += f32bits(e << 23 | rng.getrandbits(23))
    return bytes(out)


def bf16_palette(rng, n, around):
    """n bfloat16 values drawn from 16 values near `around` (few distinct values keep the
    committed files compressible; the converter only copies them)."""
    pal = []
    for _ in range(16):
        v = around + rng.gauss(0, 0.02 if around == 0 else 0.05)
        pal.append(struct.pack("<f", v)[2:4])  # truncate float32 to bfloat16 bits
    return b"".join(pal[rng.randrange(16)] for _ in range(n))


def f32_random(rng, n):
    return b"".join(struct.pack("<f", rng.gauss(0, 1)) for _ in range(n))


def build(rng):
    """The tiny checkpoint: a list of (name, dtype, shape, bytes, shard)."""
    c = CONFIG
    H, V = c["hidden_size"], c["vocab_size"]
    nh, qk_nope, qk_rope, vd = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    ql, kvl = c["q_lora_rank"], c["kv_lora_rank"]
    inter, moe_inter, E = c["intermediate_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    L, mtp = c["num_hidden_layers"], c["num_nextn_predict_layers"]
    out = []

    def bf16(name, shape, shard, around=0.0):
        n = 1
        for d in shape:
            n *= d
        out.append((name, "BF16", list(shape), bf16_palette(rng, n, around), shard))

    def fp8(name, shape, shard, codes="random", sc="random", scale_shard=None):
        N, K = shape
        out.append((name, "F8_E4M3", [N, K], fp8_codes(rng, N * K, codes), shard))
        sshape = [cdiv(N, 128), cdiv(K, 128)]
        out.append((name + "_scale_inv", "F32", sshape, scales(rng, sshape[0] * sshape[1], sc),
                    scale_shard or shard))

    def layer(i, shard, moe_shard):
        p = "model.layers.%d." % i
        bf16(p + "input_layernorm.weight", [H], shard, 1.0)
        bf16(p + "post_attention_layernorm.weight", [H], shard, 1.0)
        a = p + "self_attn."
        fp8(a + "q_a_proj.weight", [ql, H], shard, codes="all" if i == 0 else "random")
        bf16(a + "q_a_layernorm.weight", [ql], shard, 1.0)
        fp8(a + "q_b_proj.weight", [nh * (qk_nope + qk_rope), ql], shard)
        fp8(a + "kv_a_proj_with_mqa.weight", [kvl + qk_rope, H], shard)
        bf16(a + "kv_a_layernorm.weight", [kvl], shard, 1.0)
        fp8(a + "kv_b_proj.weight", [nh * (qk_nope + vd), kvl], shard)
        fp8(a + "o_proj.weight", [H, nh * vd], shard)
        m = p + "mlp."
        if i < c["first_k_dense_replace"]:
            for w in ("gate_proj", "up_proj"):
                fp8(m + w + ".weight", [inter, H], shard, sc="extreme")
            fp8(m + "down_proj.weight", [H, inter], shard, sc="extreme")
            return
        bf16(m + "gate.weight", [E, H], moe_shard)
        out.append((m + "gate.e_score_correction_bias", "F32", [E], f32_random(rng, E), moe_shard))
        for e in range(E):
            x = m + "experts.%d." % e
            fp8(x + "gate_proj.weight", [moe_inter, H], moe_shard)
            fp8(x + "up_proj.weight", [moe_inter, H], moe_shard)
            # The last expert's down_proj scale lives in the next shard: fp8_cast_bf16 must
            # find it through the index (its get_tensor path).
            last = e == E - 1 and i < L
            fp8(x + "down_proj.weight", [H, moe_inter], moe_shard,
                scale_shard=moe_shard + 1 if last else None)
        s = m + "shared_experts."
        for w in ("gate_proj", "up_proj"):
            fp8(s + w + ".weight", [moe_inter, H], moe_shard, sc="tie")
        fp8(s + "down_proj.weight", [H, moe_inter], moe_shard, sc="tie")

    bf16("model.embed_tokens.weight", [V, H], 1)
    layer(0, 1, 1)
    layer(1, 2, 2)
    bf16("model.norm.weight", [H], 3, 1.0)
    bf16("lm_head.weight", [V, H], 3)
    for j in range(mtp):
        i = L + j
        p = "model.layers.%d." % i
        bf16(p + "embed_tokens.weight", [V, H], 4)
        bf16(p + "enorm.weight", [H], 4, 1.0)
        bf16(p + "hnorm.weight", [H], 4, 1.0)
        bf16(p + "eh_proj.weight", [H, 2 * H], 4)
        bf16(p + "shared_head.norm.weight", [H], 4, 1.0)
        bf16(p + "shared_head.head.weight", [V, H], 4)
        layer(i, 4, 4)
    return out


# --- device part ------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def write_fp8(tensors, d):
    import torch
    from safetensors.torch import save_file

    dt = {"BF16": torch.bfloat16, "F32": torch.float32, "F8_E4M3": torch.float8_e4m3fn}
    raw = {"BF16": torch.int16, "F32": torch.int32, "F8_E4M3": torch.uint8}
    os.makedirs(d, exist_ok=True)
    shards, weight_map, total = {}, {}, 0
    for name, dtype, shape, data, shard in tensors:
        t = torch.frombuffer(bytearray(data), dtype=raw[dtype]).view(dt[dtype]).reshape(shape)
        shards.setdefault(shard, {})[name] = t
        weight_map[name] = shard_name(shard)
        total += len(data)
    for s, sd in sorted(shards.items()):
        save_file(sd, os.path.join(d, shard_name(s)), metadata={"format": "pt"})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")


def cpu_bf16(w, s):
    """What weight_dequant computes, done by torch on the CPU: the float32 product of the
    widened code and its block's scale (one rounding), then float32 -> bfloat16 round to
    nearest even."""
    N, K = w.shape
    se = s.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
    return (w.float() * se).bfloat16()


def report(fp8_dir, bf16_dir):
    import torch
    from safetensors.torch import load_file

    rep = {"tensors": {}}
    idx = json.load(open(os.path.join(fp8_dir, "model.safetensors.index.json")))["weight_map"]
    files = sorted(set(idx.values()))
    src = {}
    for f in files:
        src.update(load_file(os.path.join(fp8_dir, f)))
    dst = {}
    for f in files:
        dst.update(load_file(os.path.join(bf16_dir, f)))
    for name in sorted(dst):
        a = dst[name]
        if name.endswith("_scale_inv"):
            rep["tensors"][name] = "unexpected in output"
            continue
        if src[name].dtype != torch.float8_e4m3fn:
            same = torch.equal(a.view(torch.uint8) if a.dtype != torch.uint8 else a,
                               src[name].view(torch.uint8))
            rep["tensors"][name] = {"copied_bytes_equal": bool(same)}
            continue
        ref = cpu_bf16(src[name], src[name + "_scale_inv"])
        got, want = a.view(torch.int16), ref.view(torch.int16)
        nan_got, nan_ref = torch.isnan(a), torch.isnan(ref)
        diff = (got != want) & ~(nan_got & nan_ref)
        e = {"shape": list(a.shape), "dtype": str(a.dtype), "differs_from_cpu": int(diff.sum())}
        if nan_got.any():
            e["nan_bits_deepseek"] = sorted({"0x%04x" % (int(v) & 0xFFFF) for v in got[nan_got].tolist()})
            e["nan_bits_cpu"] = sorted({"0x%04x" % (int(v) & 0xFFFF) for v in want[nan_ref].tolist()})
        if diff.any():
            ii = diff.nonzero()[:8].tolist()
            e["first_diffs"] = [{"at": p, "code": "0x%02x" % int(src[name].view(torch.uint8)[p[0], p[1]]),
                                 "scale_bits": "0x%08x" % (int(src[name + "_scale_inv"].view(torch.int32)[p[0] // 128, p[1] // 128]) & 0xFFFFFFFF),
                                 "deepseek": "0x%04x" % (int(got[p[0], p[1]]) & 0xFFFF),
                                 "cpu": "0x%04x" % (int(want[p[0], p[1]]) & 0xFFFF)} for p in ii]
        rep["tensors"][name] = e
    return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepseek", required=True, help="dir holding fp8_cast_bf16.py and kernel.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plan", action="store_true", help="print the tensor list and sizes; no torch")
    args = ap.parse_args()
    tensors = build(random.Random(SEED))
    if args.plan:
        for name, dtype, shape, data, shard in tensors:
            print(shard, name, dtype, shape, len(data))
        print("tensors", len(tensors), "bytes", sum(len(t[3]) for t in tensors))
        return

    import torch
    import safetensors
    import triton

    g = os.path.join(args.out, "golden")
    fp8_dir, bf16_dir = os.path.join(g, "fp8"), os.path.join(g, "bf16")
    write_fp8(tensors, fp8_dir)

    sys.path.insert(0, args.deepseek)
    try:
        import tqdm  # noqa: F401  (fp8_cast_bf16 imports it)
    except ImportError:
        import types
        m = types.ModuleType("tqdm")
        m.tqdm = lambda it, *a, **k: it
        sys.modules["tqdm"] = m
    import fp8_cast_bf16

    fp8_cast_bf16.main(fp8_dir, bf16_dir)

    rep = report(fp8_dir, bf16_dir)
    rep["source"] = "deepseek-ai/DeepSeek-V3@9b4e9788e4a3a731f7567338ed15d3ec549ce03b inference/fp8_cast_bf16.py main(), kernel.py weight_dequant"
    rep["sha256_deepseek_sources"] = {f: sha256(os.path.join(args.deepseek, f)) for f in ("fp8_cast_bf16.py", "kernel.py")}
    rep["versions"] = {"torch": torch.__version__, "triton": triton.__version__,
                       "safetensors": safetensors.__version__, "cuda": torch.version.cuda,
                       "gpu": torch.cuda.get_device_name(0), "python": sys.version.split()[0]}
    rep["files"] = {}
    for sub in ("fp8", "bf16"):
        for f in sorted(os.listdir(os.path.join(g, sub))):
            p = os.path.join(g, sub, f)
            rep["files"][sub + "/" + f] = {"sha256": sha256(p), "size": os.path.getsize(p)}
    with open(os.path.join(g, "REPORT.json"), "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)
        f.write("\n")
    bad = {k: v for k, v in rep["tensors"].items() if isinstance(v, dict) and v.get("differs_from_cpu")}
    print("tensors", len(rep["tensors"]), "differing from the CPU product:", {k: v["differs_from_cpu"] for k, v in bad.items()})


if __name__ == "__main__":
    main()
