#!/usr/bin/env bash
# Device-side checks (needs python3 with torch 2.11 and safetensors 0.8):
#   K3CKPT=path/to/static/k3ckpt bash scripts/device/run_checks.sh OUTDIR
# 1. synth a tiny replica; convert it in every convention; verify; check with
#    torch that each conversion loads, requantizes to the same bytes and
#    dequantizes to verify's statistics (convert/testdata/check_converted.py);
# 2. export dp16 / dp2-dcp8 ranks and pp16 stages of a conversion;
# 3. check every manifest's sha256 and sizes with hashlib (check_manifests.py);
# 4. re-serialize every file written above with safetensors.torch.save_file and
#    require identical bytes (check_reserialize.py).
set -euo pipefail
B=${K3CKPT:-./k3ckpt}
R=$1; mkdir -p "$R"
T=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
python3 -c 'import torch, safetensors; print("torch", torch.__version__, "safetensors", safetensors.__version__)' | tee "$R/versions.txt"
$B synth "$T/src" --scale tiny --seed 1 > "$R/synth.txt"
for f in deepseek:fp32 deepseek:ue8m0 compressed-tensors:fp32 compressed-tensors:ue8m0 modelopt:fp32 modelopt:ue8m0; do
  fmt=${f%%:*}; sf=${f##*:}; d="$T/$fmt-$sf"
  $B convert "$T/src" "$d" --format "$fmt" --scale-fmt "$sf" --jobs 4 --json > "$R/convert-$fmt-$sf.json"
  $B verify "$T/src" "$d" --json > "$R/verify-$fmt-$sf.json"
  python3 "$here/../../convert/testdata/check_converted.py" "$T/src" "$d" --verify-json "$R/verify-$fmt-$sf.json" --out "$R/check-$fmt-$sf.json" | tail -3
done
# NVIDIA's layout (ModelOpt FP8_PB_WO numerics, NVFP4 experts): verify, then re-serialize below.
$B convert "$T/src" "$T/modelopt-nvfp4" --recipe modelopt-k3 --experts nvfp4 --numerics modelopt --jobs 4 --json > "$R/convert-modelopt-nvfp4.json"
$B verify "$T/src" "$T/modelopt-nvfp4" --json > "$R/verify-modelopt-nvfp4.json"
# Every manifest digest (taken as written, two files hashed at once) against hashlib.
$B convert "$T/src" "$T/bf16" --recipe bf16 --experts bf16 --jobs 4 --json > "$R/convert-bf16.json"
$B verify "$T/src" "$T/bf16" --json > "$R/verify-bf16.json"
$B convert "$T/bf16" "$T/mxfp4" --recipe bf16 --experts mxfp4 --jobs 4 --json > "$R/convert-mxfp4.json"
$B verify "$T/bf16" "$T/mxfp4" --json > "$R/verify-mxfp4.json"
python3 "$here/check_manifests.py" "$T"/deepseek-* "$T"/compressed-tensors-* "$T"/modelopt-* "$T/bf16" "$T/mxfp4" | sed "s|$T/||" | tee "$R/manifests.txt"
$B shard "$T/deepseek-ue8m0" "$T/pp16" > "$R/shard.txt"
$B export "$T/deepseek-ue8m0" "$T/dp16" --layout dp16 > "$R/export-dp16.txt"
$B export "$T/deepseek-ue8m0" "$T/dcp8" --layout dp2-dcp8 --pack-scales ue8m0 > "$R/export-dcp8.txt"
python3 "$here/check_reserialize.py" "$T/src" "$T/deepseek-fp32" "$T/compressed-tensors-fp32" "$T/modelopt-ue8m0" "$T/modelopt-nvfp4" "$T/bf16" "$T/mxfp4" "$T/pp16" "$T/dp16" "$T/dcp8" | tee "$R/reserialize.txt"
echo ALL-CHECKS-PASSED | tee -a "$R/versions.txt"
