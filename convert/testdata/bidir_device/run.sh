#!/bin/sh
# Device check of both directions (run from the repository root on the GPU
# machine, with the static k3ckpt and compressed-tensors' src/ under $B):
#   B=.dev/bidir sh convert/testdata/bidir_device/run.sh
# Converts a tiny replica there and back with k3ckpt, then check.py compares
# every BF16 tensor with torch dequantizing the source (safetensors) and
# every MXFP4 tensor with compressed-tensors' functions packing the BF16.
set -e
B=${B:-.dev/bidir}
K=$B/k3ckpt
W=${W:-/tmp/bidir-check}
rm -rf "$W" && mkdir -p "$W"
$K synth "$W/rel" -q
$K convert "$W/rel" "$W/bf16" --recipe bf16 --experts bf16 -q
$K convert "$W/bf16" "$W/mxfp4" --recipe bf16 --experts mxfp4 -q
for f in modelopt deepseek compressed-tensors; do
  $K convert "$W/rel" "$W/fp8-$f" --format $f -q
  $K convert "$W/fp8-$f" "$W/back-$f" --recipe bf16 --experts bf16 -q
done
$K convert "$W/rel" "$W/fp8-ue8m0" --format deepseek --scale-fmt ue8m0 -q
$K convert "$W/fp8-ue8m0" "$W/back-ue8m0" --recipe bf16 -q
$K convert "$W/rel" "$W/fp8-mo" --numerics modelopt -q
$K convert "$W/fp8-mo" "$W/back-mo" --recipe bf16 -q
$K convert "$W/rel" "$W/nvfp4" --recipe modelopt-k3 --experts nvfp4 -q
$K convert "$W/nvfp4" "$W/back-nvfp4" --recipe bf16 --experts bf16 -q
python3 "$(dirname "$0")/check.py" "$W" "$B/ct/src"
