"""Times Python's json.loads on safetensors headers, for comparison with the Go
reader's benchmarks (BenchmarkParseLayerHeader, BenchmarkOpenFullCheckpoint).

    python3 json_loads_bench.py FILE.safetensors|HEADER.json [...]
"""
import json
import struct
import sys
import time

blobs = []
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        if p.endswith(".safetensors"):
            (n,) = struct.unpack("<Q", f.read(8))
            blobs.append(f.read(n))
        else:
            blobs.append(f.read())
total = sum(len(b) for b in blobs)
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    for b in blobs:
        json.loads(b)
    best = min(best, time.perf_counter() - t)
print(f"{len(blobs)} headers, {total} bytes: best {best*1e3:.1f} ms, {total/best/1e6:.0f} MB/s")
