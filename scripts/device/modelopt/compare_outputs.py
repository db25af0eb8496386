"""Compare a checkpoint NVIDIA's Kimi-K3 converter wrote with one k3ckpt wrote.

    python3 compare_outputs.py NVIDIA_DIR K3CKPT_DIR [--out report.json]

Pure Python (no torch): reads each safetensors header and compares, shard by shard,
the tensor names, dtypes, shapes and data bytes (SHA-256 of each tensor's bytes), and
whether the whole files are byte-identical. JSON side files are compared parsed:
hf_quant_config.json, config.json and model.safetensors.index.json must be equal as JSON
values; lists are also compared as multisets, since NVIDIA builds some from Python sets
(their order is then not meaningful), and every differing path is listed.
NVIDIA's conversion_report.json statistics (cast_blocks_total, cast_blocks_lossless, ...) are
copied into the report for comparison with k3ckpt's own counts. Exit status 0 only when every
tensor's bytes and every JSON value are equal (list order aside).
"""

import argparse
import hashlib
import json
import os
import struct
import sys


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h, 8 + n


def tensor_digests(path):
    h, start = header(path)
    out = {}
    with open(path, "rb") as f:
        for name, t in h.items():
            b, e = t["data_offsets"]
            f.seek(start + b)
            out[name] = (t["dtype"], tuple(t["shape"]), hashlib.sha256(f.read(e - b)).hexdigest())
    return out


def file_digest(path):
    d = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            d.update(chunk)
    return d.hexdigest()


def canon(v):
    """v with every list sorted (by its JSON text): equality modulo list order."""
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, list):
        return sorted((canon(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
    return v


def diff(a, b, path="", out=None, limit=50):
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}/{k}: only in k3ckpt")
            elif k not in b:
                out.append(f"{path}/{k}: only in NVIDIA")
            else:
                diff(a[k], b[k], f"{path}/{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out, limit)
    elif a != b:
        out.append(f"{path}: NVIDIA {json.dumps(a)[:200]} vs k3ckpt {json.dumps(b)[:200]}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nvidia")
    ap.add_argument("k3ckpt")
    ap.add_argument("--out")
    args = ap.parse_args()
    rep = {"nvidia": args.nvidia, "k3ckpt": args.k3ckpt, "shards": {}, "json": {}}
    ok = True

    def shards(d):
        return sorted(n for n in os.listdir(d) if n.endswith(".safetensors"))

    sa, sb = shards(args.nvidia), shards(args.k3ckpt)
    rep["shard_names_equal"] = sa == sb
    ok &= sa == sb
    n_tensors = n_equal = 0
    mismatches = []
    for name in sorted(set(sa) & set(sb)):
        pa, pb = os.path.join(args.nvidia, name), os.path.join(args.k3ckpt, name)
        ta, tb = tensor_digests(pa), tensor_digests(pb)
        only_a, only_b = sorted(set(ta) - set(tb)), sorted(set(tb) - set(ta))
        bad = [k for k in sorted(set(ta) & set(tb)) if ta[k] != tb[k]]
        n_tensors += len(ta)
        n_equal += len(set(ta) & set(tb)) - len(bad)
        same_file = file_digest(pa) == file_digest(pb)
        rep["shards"][name] = {"tensors": len(ta), "file_bytes_identical": same_file,
                               "only_nvidia": only_a[:20], "only_k3ckpt": only_b[:20],
                               "differing": [(k, ta[k][:2], tb[k][:2]) for k in bad[:20]]}
        if only_a or only_b or bad:
            ok = False
            mismatches.append(name)
    rep["tensors"] = n_tensors
    rep["tensors_equal"] = n_equal
    rep["shards_with_mismatches"] = mismatches
    rep["files_byte_identical"] = sum(s["file_bytes_identical"] for s in rep["shards"].values())

    for name in ("hf_quant_config.json", "config.json", "model.safetensors.index.json"):
        pa, pb = os.path.join(args.nvidia, name), os.path.join(args.k3ckpt, name)
        if not (os.path.exists(pa) and os.path.exists(pb)):
            rep["json"][name] = {"missing_in": [d for d, p in (("nvidia", pa), ("k3ckpt", pb)) if not os.path.exists(p)]}
            ok = False
            continue
        a, b = json.load(open(pa)), json.load(open(pb))
        exact, unordered = a == b, canon(a) == canon(b)
        rep["json"][name] = {"equal": exact, "equal_modulo_list_order": unordered,
                             "differences": [] if unordered else diff(canon(a), canon(b))}
        ok &= unordered
    cr = os.path.join(args.nvidia, "conversion_report.json")
    if os.path.exists(cr):
        rep["nvidia_conversion_report"] = json.load(open(cr)).get("stats")
    rep["ok"] = bool(ok)
    text = json.dumps(rep, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(json.dumps({k: rep[k] for k in ("ok", "tensors", "tensors_equal", "files_byte_identical", "shards_with_mismatches")}))
    for name, j in rep["json"].items():
        print(name, {k: v for k, v in j.items() if k != "differences"}, *j.get("differences", [])[:10], sep="\n  ")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
