#!/usr/bin/env bash
# The tunings of scripts/tuning.py, and inspect of the full-size header-only
# replica by two builds, side by side on the device's CPUs.
#
#   python3 scripts/tuning.py build BINDIR; xz each binary into XZDIR, and
#   the build to compare inspect against as XZDIR/old-REV.xz
#   scripts/device/tuning16.sh XZDIR OUTDIR
#
# MOE_INTER=N replicates the small scale with the routed experts'
# moe_intermediate_size set to N (1536: about 5 GB), so the writes outlast
# start-up.
set -euo pipefail
in=$1 out=$2 w=/tmp/k3tune
rm -rf "$w"; mkdir -p "$w/bin" "$w/old" "$out"
for f in "$in"/*.xz; do
	b=$(basename "$f" .xz); d=$w/bin; [[ $b == old-* ]] && d=$w/old
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$d/$b"
	chmod +x "$d/$b"
done
K=$w/bin/k3ckpt
{ echo "cpus $(nproc)"; uname -sr; stat -f -c 'fs %T' /tmp; uptime; } | tee "$out/machine.txt"
"$K" synth "$w/src" --scale small > /dev/null
if [[ -n ${MOE_INTER:-} ]]; then
	python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["text_config"]["moe_intermediate_size"] = int(sys.argv[2]); json.dump(c, open(sys.argv[3], "w"))' "$w/src/config.json" "$MOE_INTER" "$w/config.json"
	rm -rf "$w/src"; "$K" synth "$w/src" --config "$w/config.json" > /dev/null
fi
du -sh "$w/src" | tee -a "$out/machine.txt"
python3 scripts/tuning.py run "$w/bin" "$w/src" 7 | tee "$out/tuning-default.txt"
python3 scripts/tuning.py run "$w/bin" "$w/src" 7 --jobs 2 | tee "$out/tuning-jobs2.txt"
rm -rf "$w/src"
[[ -n ${MOE_INTER:-} ]] && { rm -rf "$w"; exit; }
"$K" synth "$w/full" --scale full --header-only > /dev/null
python3 - "$w/full" "$K" "$w"/old/* <<'PY' | tee "$out/inspect-full.txt"
import os, random, statistics, subprocess, sys, time
src, bins = sys.argv[1], sys.argv[2:]
wall = {b: [] for b in bins}; cpu = {b: [] for b in bins}; rss = {b: 0 for b in bins}
for _ in range(9):
    for b in random.sample(bins, len(bins)):
        t0 = time.monotonic()
        p = subprocess.Popen([b, "inspect", src], stdout=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        assert st == 0, b
        wall[b].append(time.monotonic() - t0); cpu[b].append(ru.ru_utime + ru.ru_stime); rss[b] = max(rss[b], ru.ru_maxrss)
print(f"inspect {src}: 9 rounds, {os.cpu_count()} CPUs")
for b in bins:
    r = statistics.median(x / y for x, y in zip(wall[b], wall[bins[0]]))
    print(f"  {os.path.basename(b):18s} wall/this {r:.3f}x  median wall {statistics.median(wall[b]):.3f} s  cpu {statistics.median(cpu[b]):.3f} s  peak {rss[b] // 1024} MiB")
PY
rm -rf "$w"
