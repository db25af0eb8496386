#!/usr/bin/env bash
# The tunings of scripts/tuning.py side by side on the device's CPUs.
#
#   python3 scripts/tuning.py build BINDIR; xz each binary into XZDIR
#   scripts/device/tuning16.sh XZDIR OUTDIR
#
# MOE_INTER=N replicates the small scale with the routed experts'
# moe_intermediate_size set to N (1536: about 5 GB), so the writes outlast
# start-up.
set -euo pipefail
in=$1 out=$2 w=/tmp/k3tune
rm -rf "$w"; mkdir -p "$w/bin" "$out"
for f in "$in"/*.xz; do
	b=$w/bin/$(basename "$f" .xz)
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$b"
	chmod +x "$b"
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
rm -rf "$w"
