#!/usr/bin/env bash
# inspect of the full-size header-only replica by several builds, side by
# side: the first .xz (sorted) is the build the others are compared to.
#
#   scripts/device/inspect16.sh XZDIR OUTDIR ROUNDS
set -euo pipefail
in=$1 out=$2 rounds=${3:-9} w=/tmp/k3inspect
rm -rf "$w"; mkdir -p "$w/bin" "$out"
for f in "$in"/*.xz; do
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$w/bin/$(basename "$f" .xz)"
	chmod +x "$w/bin/$(basename "$f" .xz)"
done
bins=("$w"/bin/*)
"${bins[0]}" synth "$w/full" --scale full --header-only > /dev/null
python3 - "$w/full" "$rounds" "${bins[@]}" <<'PY' | tee "$out/inspect-full.txt"
import os, random, statistics, subprocess, sys, time
src, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
wall = {b: [] for b in bins}; cpu = {b: [] for b in bins}; rss = {b: 0 for b in bins}
for _ in range(rounds):
    for b in random.sample(bins, len(bins)):
        t0 = time.monotonic()
        p = subprocess.Popen([b, "inspect", src], stdout=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        assert st == 0, b
        wall[b].append(time.monotonic() - t0); cpu[b].append(ru.ru_utime + ru.ru_stime); rss[b] = max(rss[b], ru.ru_maxrss)
print(f"inspect {src}: {rounds} rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
for b in bins:
    r = statistics.median(x / y for x, y in zip(wall[b], wall[bins[0]]))
    print(f"  {os.path.basename(b):14s} wall/{os.path.basename(bins[0])} {r:.3f}x  median wall {statistics.median(wall[b]):.3f} s"
          f"  cpu {statistics.median(cpu[b]):.3f} s  peak {rss[b] // 1024} MiB")
PY
rm -rf "$w"
