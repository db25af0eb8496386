#!/usr/bin/env python3
"""Baseline for the inspect benchmark: Python's json.loads over the same headers.

Usage: json_loads.py DIR [REPEAT] [--index]

Reads the 8-byte length and the JSON header of every *.safetensors file in DIR
(never the data), parses each header with json.loads and sums the tensor bytes
from data_offsets, the least work any header-only audit must do. With --index
it also json.loads model.safetensors.index.json, which `k3ckpt inspect` reads
and checks against the headers (58 MB at full K3 size). Prints the best wall
time of REPEAT runs (default 3), the bytes parsed and the tensor count, so
`go test -bench` figures can be set side by side with it.
"""
import json
import os
import struct
import sys
import time


def run(paths, index):
    header_bytes = tensors = total = 0
    if index:
        with open(index, "rb") as f:
            raw = f.read()
        header_bytes += len(raw)
        json.loads(raw)
    for p in paths:
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            raw = f.read(n)
        header_bytes += 8 + n
        h = json.loads(raw)
        h.pop("__metadata__", None)
        tensors += len(h)
        for v in h.values():
            b, e = v["data_offsets"]
            total += e - b
    return header_bytes, tensors, total


def main():
    args = [a for a in sys.argv[1:] if a != "--index"]
    d = args[0]
    repeat = int(args[1]) if len(args) > 1 else 3
    index = os.path.join(d, "model.safetensors.index.json") if "--index" in sys.argv else None
    paths = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        hb, nt, tot = run(paths, index)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    print(f"files {len(paths)} bytes_parsed {hb} tensors {nt} total_bytes {tot} "
          f"best_s {best:.3f} MB/s {hb / best / 1e6:.1f}")


if __name__ == "__main__":
    main()
