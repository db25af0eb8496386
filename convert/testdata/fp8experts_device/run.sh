#!/bin/sh
# Device check of --experts fp8 (run from the repository root on the GPU
# machine, with the static k3ckpt under $B):
#   B=.dev/fp8x sh convert/testdata/fp8experts_device/run.sh
# Synthesizes a tiny replica, casts its MXFP4 experts to block FP8 with
# k3ckpt in each convention and scale format, then check.py compares every
# expert's FP8 codes and scales with torch's own decode of the MXFP4 bytes
# and DeepGEMM's per_block_cast_to_fp8 (on CUDA), and recounts the lossless
# blocks with torch's dequantization.
set -e
B=${B:-.dev/fp8x}
K=$B/k3ckpt
W=${W:-/tmp/fp8x-check}
O=${OUT:-$W}
rm -rf "$W" && mkdir -p "$W"
$K synth "$W/rel" -q
for c in deepseek:fp32 deepseek:ue8m0 compressed-tensors:ue8m0 modelopt:fp32; do
  f=${c%%:*} s=${c##*:}
  $K convert "$W/rel" "$W/$f-$s" --experts fp8 --format $f --scale-fmt $s --json > "$W/$f-$s.json"
done
python3 "$(dirname "$0")/check.py" "$W" --out "$O/results.json"
