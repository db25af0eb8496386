#!/usr/bin/env bash
# NVIDIA's Kimi-K3 converter next to k3ckpt, on the GPU machine's CPUs (python3 with torch 2.11
# and safetensors; nothing else installed):
#
#   K3CKPT=./k3ckpt MODELOPT=scripts/device/modelopt/nvidia \
#     bash scripts/device/modelopt/run_compare.sh OUTDIR [tiny small]
#
# MODELOPT is a folder with NVIDIA Model-Optimizer's files at commit 575c27ae (see README.md:
# they are fetched, never committed). For each replica scale: synth a replica (seed 1); run
# NVIDIA's examples/kimi/kimi_k3/quantize_to_nvfp4.py --cast_mxfp4_to_nvfp4 --attn_fp8_pb on
# CPU with --jobs 8 --threads_per_job 2 (its timing configuration), then
# `k3ckpt convert --recipe modelopt-k3 --experts nvfp4 --numerics modelopt` on the same
# replica with --jobs 16, both timed (wall, peak RSS); then compare_outputs.py: tensor bytes
# equal, hf_quant_config.json / config.json / index equal as JSON. Everything lands in OUTDIR.
set -euo pipefail
B=${K3CKPT:-./k3ckpt}
MO=${MODELOPT:?set MODELOPT to the folder of fetched Model-Optimizer files}
R=$1; shift; mkdir -p "$R"
scales=${*:-tiny small}
here=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
export PYTHONUNBUFFERED=1
# The one intended difference: k3ckpt's producer.version names k3ckpt (hf_quant_config.json and
# config.json); NVIDIA's stubbed modelopt.__version__ is set to the same so the JSON compares equal.
export MODELOPT_VERSION=${MODELOPT_VERSION:-k3ckpt}
python3 -c 'import torch, safetensors, os; print("torch", torch.__version__, "safetensors", safetensors.__version__, "cpus", os.cpu_count())' | tee "$R/versions.txt"
cat "$MO/COMMIT" >> "$R/versions.txt" 2>/dev/null || true
python3 "$here/mo_stub.py" "$MO" "$T/mo" > /dev/null
conv="$T/mo/examples/kimi/kimi_k3/quantize_to_nvfp4.py"
status=0
for s in $scales; do
  $B synth "$T/src-$s" --scale "$s" --seed 1 > "$R/synth-$s.txt"
  python3 "$here/timed.py" "$R/time-nvidia-$s.json" -- \
    python3 "$conv" --source_ckpt "$T/src-$s" --output_ckpt "$T/nvidia-$s" \
      --cast_mxfp4_to_nvfp4 --attn_fp8_pb --device cpu --jobs 8 --threads_per_job 2 \
    > "$R/nvidia-$s.log" 2>&1 || { echo "NVIDIA's converter failed on $s (see nvidia-$s.log)"; status=1; continue; }
  cp "$T/nvidia-$s/conversion_report.json" "$R/nvidia-$s-conversion_report.json"
  python3 "$here/timed.py" "$R/time-k3ckpt-$s.json" -- \
    $B convert "$T/src-$s" "$T/k3ckpt-$s" --recipe modelopt-k3 --experts nvfp4 --numerics modelopt \
      --jobs 16 --json > "$R/k3ckpt-$s.json" 2> "$R/k3ckpt-$s.err" || { echo "k3ckpt failed on $s"; status=1; continue; }
  python3 "$here/compare_outputs.py" "$T/nvidia-$s" "$T/k3ckpt-$s" --out "$R/compare-$s.json" \
    | tee "$R/compare-$s.txt" || status=1
  python3 - "$R" "$s" <<'PY' | tee -a "$R/speed.txt"
import json, sys
r, s = sys.argv[1], sys.argv[2]
nv, k3 = (json.load(open(f"{r}/time-{w}-{s}.json")) for w in ("nvidia", "k3ckpt"))
print(f"{s}: NVIDIA {nv['wall_s']:.2f} s ({nv['peak_rss_mb']:.0f} MB peak), "
      f"k3ckpt {k3['wall_s']:.2f} s ({k3['peak_rss_mb']:.0f} MB peak): {nv['wall_s'] / k3['wall_s']:.1f}x")
PY
  rm -rf "$T/src-$s" "$T/nvidia-$s" "$T/k3ckpt-$s"
done
[ $status = 0 ] && echo ALL-EQUAL | tee -a "$R/versions.txt"
exit $status
