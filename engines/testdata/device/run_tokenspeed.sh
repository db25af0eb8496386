#!/bin/sh
# Runs tokenspeed's own config parsing, dispatch and merged-KDA loading
# (tokenspeed_exec.py) over tiny k3ckpt outputs; writes tokenspeed_results.json.
# usage: run_tokenspeed.sh TOKENSPEED_GIT_DIR [WORK_DIR]   (needs python3; torch optional)
set -eu
G=$1; W=${2:-/tmp/tokenspeed-exec}; R=f4d8ec6e
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W/ts" "$W/ck"
for f in layers/quantization/modelopt_mixed.py models/kimi_k3.py model_loader/loader.py layers/quantization/utils.py; do
	git --git-dir="$G" show "$R:python/tokenspeed/runtime/$f" >"$W/ts/$(basename "$f")"
done
cd "$here/../../.."
go run ./cmd/k3ckpt synth --scale tiny "$W/tiny" -q
go run ./cmd/k3ckpt convert "$W/tiny" "$W/ck/d" -q
go run ./cmd/k3ckpt convert "$W/tiny" "$W/ck/mk" --recipe modelopt-k3 --experts nvfp4 -q
python3 "$here/tokenspeed_exec.py" "$W/ts" "$W/ck" "$here/tokenspeed_results.json"
